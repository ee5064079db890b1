//! Registration keys, and the identity every node publishes.
//!
//! A target registers a region once per (peer, channel, kind of access) it allows, under a key
//! that the peer can compute by itself: the region, the kind, the initiator's node and channel,
//! and the initiator's incarnation. So no keys are exchanged, revoking one peer's access closes
//! only that peer's registrations, and a peer that restarts (a new incarnation) holds no valid
//! key until the target binds the connection again — as a restarted RDMA peer has new queue
//! pairs.

use mu_fabric::{NodeId, RegionId};

/// The key of every node's identity registration (read only, open to all).
pub const IDENTITY_KEY: u64 = 1;

/// The key of every node's hello board (written by every peer, read by no one remote): where a
/// lower node shows a higher one that the stream it opened is in use (see `Node::hello`).
pub const HELLO_KEY: u64 = 2;

/// The hello board: one word per (channel, node that may write there).
pub const HELLO_BYTES: usize = crate::config::CHANNELS as usize * HELLO_SLOTS_PER_CHANNEL * 8;
const HELLO_SLOTS_PER_CHANNEL: usize = crate::config::MAX_NODE_ID as usize + 1;

/// Where `from`'s hello on `channel` goes on a board.
pub fn hello_offset(channel: u8, from: NodeId) -> usize {
    debug_assert!(channel < crate::config::CHANNELS);
    (channel as usize * HELLO_SLOTS_PER_CHANNEL + from.0 as usize) * 8
}

/// The identity's bytes: magic, cluster, node, incarnation, region count, then one (id, length)
/// pair per region.
pub const IDENTITY_BYTES: usize = 4096;
/// `/2`: the identity carries a check word (`CHECK_AT`), which a `/1` node leaves 0.
pub const IDENTITY_MAGIC: u64 = u64::from_le_bytes(*b"mu-ofi/2");
pub const IDENTITY_HEADER_BYTES: usize = 64;
pub const MAX_REGIONS: usize = (IDENTITY_BYTES - IDENTITY_HEADER_BYTES) / 16;

/// What a registration allows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Read = 0,
    Write = 1,
    Atomic = 2,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Read, Kind::Write, Kind::Atomic];
}

/// The key under which a target registers `region` for `initiator`'s `kind` operations on
/// `channel`, while bound to the initiator's `incarnation`.
pub fn data_key(
    region: RegionId,
    kind: Kind,
    initiator: NodeId,
    channel: u8,
    incarnation: u32,
) -> u64 {
    debug_assert!(region.0 <= crate::config::MAX_REGION_ID);
    debug_assert!(initiator.0 <= crate::config::MAX_NODE_ID);
    1 << 63
        | (region.0 as u64 & 0xff) << 47
        | (kind as u64) << 45
        | (initiator.0 as u64 & 0x3ff) << 35
        | (channel as u64 & 0x7) << 32
        | incarnation as u64
}

/// A node's identity as read from its registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub cluster_id: u64,
    pub node: NodeId,
    pub incarnation: u32,
    pub regions: Vec<(RegionId, usize)>,
}

fn word(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Where the identity's check word is: a digest of the header's other words and of the
/// regions listed. A node rewrites its identity in place when it registers a region, and a
/// peer's read at that moment may take part of each; the check refuses such a mix (the binding
/// is tried again) rather than taking a region table that is neither.
const CHECK_AT: usize = 40;

fn identity_check(bytes: &[u8], count: usize) -> u64 {
    let end = IDENTITY_HEADER_BYTES + 16 * count;
    (0..end).step_by(8).filter(|&at| at != CHECK_AT).fold(0xcbf2_9ce4_8422_2325u64, |h, at| {
        (h ^ word(bytes, at)).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(29)
    })
}

impl Identity {
    pub fn encode(&self, out: &mut [u8; IDENTITY_BYTES]) {
        out.fill(0);
        let put = |out: &mut [u8; IDENTITY_BYTES], at: usize, v: u64| {
            out[at..at + 8].copy_from_slice(&v.to_le_bytes())
        };
        put(out, 0, IDENTITY_MAGIC);
        put(out, 8, self.cluster_id);
        put(out, 16, self.node.0 as u64);
        put(out, 24, self.incarnation as u64);
        put(out, 32, self.regions.len() as u64);
        for (i, &(id, len)) in self.regions.iter().enumerate() {
            let at = IDENTITY_HEADER_BYTES + 16 * i;
            put(out, at, id.0 as u64);
            put(out, at + 8, len as u64);
        }
        let check = identity_check(out, self.regions.len());
        put(out, CHECK_AT, check);
    }

    /// Whether `bytes` start as an identity of this build does (else the node is another
    /// build's, or no mu node at all: incompatible, not merely unreachable).
    pub fn of_this_build(bytes: &[u8]) -> bool {
        bytes.len() >= IDENTITY_BYTES && word(bytes, 0) == IDENTITY_MAGIC
    }

    pub fn decode(bytes: &[u8]) -> Result<Identity, String> {
        if bytes.len() < IDENTITY_BYTES || word(bytes, 0) != IDENTITY_MAGIC {
            let found = bytes.get(..8).map(String::from_utf8_lossy).unwrap_or_default();
            return Err(format!(
                "not a mu ofi node of this build (its identity starts {found:?}, this build's \
                 \"mu-ofi/2\")"
            ));
        }
        let count = word(bytes, 32) as usize;
        if count > MAX_REGIONS {
            return Err(format!("identity lists {count} regions"));
        }
        if word(bytes, CHECK_AT) != identity_check(bytes, count) {
            return Err(
                "identity read while it was being rewritten (its check word differs)".into()
            );
        }
        // Fields past their types are a damaged identity, not the values they would wrap to.
        let field = |at: usize, what: &str, max: u64| {
            let v = word(bytes, at);
            (v <= max).then_some(v).ok_or_else(|| format!("identity names {what} {v}"))
        };
        let regions = (0..count)
            .map(|i| {
                let at = IDENTITY_HEADER_BYTES + 16 * i;
                let id = field(at, "region", u64::from(u16::MAX))? as u16;
                let len = usize::try_from(word(bytes, at + 8)).map_err(|_| {
                    format!("identity names a region of {} bytes", word(bytes, at + 8))
                })?;
                Ok((RegionId(id), len))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Identity {
            cluster_id: word(bytes, 8),
            node: NodeId(field(16, "node", u64::from(u16::MAX))? as u16),
            incarnation: field(24, "incarnation", u64::from(u32::MAX))? as u32,
            regions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_in_every_field_and_never_collide_with_the_identity() {
        let base = data_key(RegionId(3), Kind::Write, NodeId(2), 1, 77);
        let others = [
            data_key(RegionId(4), Kind::Write, NodeId(2), 1, 77),
            data_key(RegionId(3), Kind::Read, NodeId(2), 1, 77),
            data_key(RegionId(3), Kind::Write, NodeId(5), 1, 77),
            data_key(RegionId(3), Kind::Write, NodeId(2), 2, 77),
            data_key(RegionId(3), Kind::Write, NodeId(2), 1, 78),
        ];
        for k in others {
            assert_ne!(k, base);
            assert_ne!(k, IDENTITY_KEY);
            assert_ne!(k, HELLO_KEY);
        }
    }

    #[test]
    fn hello_slots_are_distinct_and_on_the_board() {
        use crate::config::{CHANNELS, MAX_NODE_ID};
        let last = hello_offset(CHANNELS - 1, NodeId(MAX_NODE_ID));
        assert_eq!(last + 8, HELLO_BYTES);
        assert_eq!(hello_offset(1, NodeId(0)), hello_offset(0, NodeId(MAX_NODE_ID)) + 8);
    }

    #[test]
    fn identity_round_trips() {
        let id = Identity {
            cluster_id: 9,
            node: NodeId(4),
            incarnation: 0xdead_beef,
            regions: vec![(RegionId(0), 1 << 20), (RegionId(5), 4096)],
        };
        let mut bytes = [0u8; IDENTITY_BYTES];
        id.encode(&mut bytes);
        assert_eq!(Identity::decode(&bytes).unwrap(), id);
        // A node id past 16 bits is refused, not read as the id it wraps to.
        let mut wide = bytes;
        wide[16..24].copy_from_slice(&(65_536u64 + 4).to_le_bytes());
        let check = identity_check(&wide, 2);
        wide[CHECK_AT..CHECK_AT + 8].copy_from_slice(&check.to_le_bytes());
        assert!(Identity::decode(&wide).unwrap_err().contains("node 65540"));
        // Half of a rewrite: a region's length from the new identity, the rest the old.
        let mut torn = bytes;
        torn[IDENTITY_HEADER_BYTES + 24..IDENTITY_HEADER_BYTES + 32]
            .copy_from_slice(&8192u64.to_le_bytes());
        assert!(Identity::decode(&torn).unwrap_err().contains("being rewritten"));
        // Another build's (here the first, whose magic ended in 1) is told apart from a torn one.
        assert!(Identity::of_this_build(&bytes));
        bytes[7] = b'1';
        assert!(!Identity::of_this_build(&bytes));
        assert!(Identity::decode(&bytes).unwrap_err().contains("mu-ofi/1"));
    }
}
