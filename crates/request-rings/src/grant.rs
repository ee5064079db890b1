//! The grant: what the server tells a client it admitted, through the caller's out-of-band
//! channel (the service's socket), as bytes.

use crate::config::{ConfigError, Geometry};
use mu_fabric::{NodeId, RegionId};
use thiserror::Error;

/// Bytes of an encoded grant.
pub const GRANT_BYTES: usize = 56;
const GRANT_MAGIC: u32 = u32::from_le_bytes(*b"MuGr");
const GRANT_VERSION: u8 = 1;
const GRANT_SEED: u64 = 0x6d75_7269_6e67_6772; // "muringgr"

/// A client slot as the server names it: its index and the generation of the admission, so
/// that a slot released and given to another client is never mistaken for the old one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ClientSlot {
    pub index: u16,
    pub generation: u64,
}

/// What a client needs to use the ring the server gave it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Grant {
    /// The server's identity ([`crate::ServerConfig::instance`]).
    pub instance: u64,
    /// The slot and the generation every frame of this admission carries.
    pub slot: ClientSlot,
    /// The server's fabric node for clients.
    pub server_node: NodeId,
    /// The client's fabric node the grant is for.
    pub client_node: NodeId,
    /// The channel of the connection between them.
    pub channel: u8,
    /// The client's request ring on the server's node.
    pub request_region: RegionId,
    /// The region id the client registers its response ring under.
    pub response_region: RegionId,
    /// The region id the client registers its staging area under (not remotely accessible).
    pub client_staging_region: RegionId,
    pub geometry: Geometry,
}

/// What a client registers on its node before it asks to be admitted: the region ids and sizes
/// of its response ring and staging area ([`crate::ServerConfig::client_layout`], sent as bytes
/// through the caller's out-of-band channel). Registering first matters on backends that read a
/// peer's regions when they bind (ofi, verbs): the server binds when it admits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ClientLayout {
    pub response_region: RegionId,
    pub staging_region: RegionId,
    pub geometry: Geometry,
}

/// Bytes of an encoded layout.
pub const LAYOUT_BYTES: usize = 32;
const LAYOUT_MAGIC: u32 = u32::from_le_bytes(*b"MuLy");

impl ClientLayout {
    /// The layout as bytes, with a check over them.
    pub fn to_bytes(&self) -> [u8; LAYOUT_BYTES] {
        let mut b = [0u8; LAYOUT_BYTES];
        b[0..4].copy_from_slice(&LAYOUT_MAGIC.to_le_bytes());
        b[4] = GRANT_VERSION;
        b[6..8].copy_from_slice(&self.response_region.0.to_le_bytes());
        b[8..10].copy_from_slice(&self.staging_region.0.to_le_bytes());
        b[12..16].copy_from_slice(&self.geometry.slots_per_client.to_le_bytes());
        b[16..20].copy_from_slice(&self.geometry.request_slot_bytes.to_le_bytes());
        b[20..24].copy_from_slice(&self.geometry.response_slot_bytes.to_le_bytes());
        let check = mu_log::digest(GRANT_SEED, &b[..24]);
        b[24..32].copy_from_slice(&check.to_le_bytes());
        b
    }

    /// Reads a layout; never panics, whatever the bytes.
    pub fn from_bytes(b: &[u8]) -> Result<ClientLayout, GrantError> {
        if b.len() != LAYOUT_BYTES {
            return Err(GrantError::Length { expected: LAYOUT_BYTES, found: b.len() });
        }
        if u32_at(b, 0) != LAYOUT_MAGIC {
            return Err(GrantError::Magic(u32_at(b, 0)));
        }
        if b[4] != GRANT_VERSION {
            return Err(GrantError::Version(b[4]));
        }
        if mu_log::digest(GRANT_SEED, &b[..24]) != u64_at(b, 24) {
            return Err(GrantError::Check);
        }
        let geometry = Geometry {
            slots_per_client: u32_at(b, 12),
            request_slot_bytes: u32_at(b, 16),
            response_slot_bytes: u32_at(b, 20),
        };
        geometry.check().map_err(GrantError::Geometry)?;
        Ok(ClientLayout {
            response_region: RegionId(u16_at(b, 6)),
            staging_region: RegionId(u16_at(b, 8)),
            geometry,
        })
    }
}

/// Why bytes are not a grant.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum GrantError {
    #[error("expected {expected} bytes, not {found}")]
    Length { expected: usize, found: usize },
    #[error("not a grant (magic {0:#010x})")]
    Magic(u32),
    #[error("grant version {0}, this build reads {GRANT_VERSION}")]
    Version(u8),
    #[error("grant check does not match: damaged in transit")]
    Check,
    #[error("grant with a bad geometry: {0}")]
    Geometry(ConfigError),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Grant {
    /// What the client registered for this grant.
    pub fn layout(&self) -> ClientLayout {
        ClientLayout {
            response_region: self.response_region,
            staging_region: self.client_staging_region,
            geometry: self.geometry,
        }
    }

    /// The grant as bytes, with a check over them.
    pub fn to_bytes(&self) -> [u8; GRANT_BYTES] {
        let mut b = [0u8; GRANT_BYTES];
        b[0..4].copy_from_slice(&GRANT_MAGIC.to_le_bytes());
        b[4] = GRANT_VERSION;
        b[5] = self.channel;
        b[6..8].copy_from_slice(&self.slot.index.to_le_bytes());
        b[8..16].copy_from_slice(&self.instance.to_le_bytes());
        b[16..24].copy_from_slice(&self.slot.generation.to_le_bytes());
        b[24..26].copy_from_slice(&self.server_node.0.to_le_bytes());
        b[26..28].copy_from_slice(&self.client_node.0.to_le_bytes());
        b[28..30].copy_from_slice(&self.request_region.0.to_le_bytes());
        b[30..32].copy_from_slice(&self.response_region.0.to_le_bytes());
        b[32..34].copy_from_slice(&self.client_staging_region.0.to_le_bytes());
        b[36..40].copy_from_slice(&self.geometry.slots_per_client.to_le_bytes());
        b[40..44].copy_from_slice(&self.geometry.request_slot_bytes.to_le_bytes());
        b[44..48].copy_from_slice(&self.geometry.response_slot_bytes.to_le_bytes());
        let check = mu_log::digest(GRANT_SEED, &b[..48]);
        b[48..56].copy_from_slice(&check.to_le_bytes());
        b
    }

    /// Reads a grant; never panics, whatever the bytes.
    pub fn from_bytes(b: &[u8]) -> Result<Grant, GrantError> {
        if b.len() != GRANT_BYTES {
            return Err(GrantError::Length { expected: GRANT_BYTES, found: b.len() });
        }
        if u32_at(b, 0) != GRANT_MAGIC {
            return Err(GrantError::Magic(u32_at(b, 0)));
        }
        if b[4] != GRANT_VERSION {
            return Err(GrantError::Version(b[4]));
        }
        if mu_log::digest(GRANT_SEED, &b[..48]) != u64_at(b, 48) {
            return Err(GrantError::Check);
        }
        let geometry = Geometry {
            slots_per_client: u32_at(b, 36),
            request_slot_bytes: u32_at(b, 40),
            response_slot_bytes: u32_at(b, 44),
        };
        geometry.check().map_err(GrantError::Geometry)?;
        Ok(Grant {
            instance: u64_at(b, 8),
            slot: ClientSlot { index: u16_at(b, 6), generation: u64_at(b, 16) },
            server_node: NodeId(u16_at(b, 24)),
            client_node: NodeId(u16_at(b, 26)),
            channel: b[5],
            request_region: RegionId(u16_at(b, 28)),
            response_region: RegionId(u16_at(b, 30)),
            client_staging_region: RegionId(u16_at(b, 32)),
            geometry,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> Grant {
        Grant {
            instance: 0xfeed,
            slot: ClientSlot { index: 3, generation: 0x1234_5678_9abc },
            server_node: NodeId(0),
            client_node: NodeId(7),
            channel: 1,
            request_region: RegionId(19),
            response_region: RegionId(0),
            client_staging_region: RegionId(1),
            geometry: Geometry::default(),
        }
    }

    #[test]
    fn grants_round_trip_and_damage_is_refused() {
        let g = grant();
        let bytes = g.to_bytes();
        assert_eq!(Grant::from_bytes(&bytes), Ok(g));
        let short = GrantError::Length { expected: GRANT_BYTES, found: 10 };
        assert_eq!(Grant::from_bytes(&bytes[..10]), Err(short));
        for at in 0..GRANT_BYTES {
            let mut bad = bytes;
            bad[at] ^= 0x40;
            assert!(Grant::from_bytes(&bad).is_err(), "a change at byte {at} was accepted");
        }
    }

    #[test]
    fn layouts_round_trip_and_damage_is_refused() {
        let layout = grant().layout();
        let bytes = layout.to_bytes();
        assert_eq!(ClientLayout::from_bytes(&bytes), Ok(layout));
        assert!(ClientLayout::from_bytes(&grant().to_bytes()).is_err(), "a grant is no layout");
        for at in 0..LAYOUT_BYTES {
            let mut bad = bytes;
            bad[at] ^= 0x08;
            assert!(ClientLayout::from_bytes(&bad).is_err(), "a change at byte {at} was accepted");
        }
    }

    #[test]
    fn a_grant_with_a_bad_geometry_is_refused_with_its_key() {
        let mut g = grant();
        g.geometry.request_slot_bytes = 12;
        match Grant::from_bytes(&g.to_bytes()) {
            Err(GrantError::Geometry(e)) => assert_eq!(e.key, "request_slot_bytes"),
            other => panic!("{other:?}"),
        }
    }
}
