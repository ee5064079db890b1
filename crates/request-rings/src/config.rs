//! Sizes of the rings and the server's settings, with their checks.

use crate::frame::{Checks, HEADER_BYTES};
use mu_fabric::RegionId;
use thiserror::Error;

/// The most slots a client's ring may have.
pub const SLOTS_PER_CLIENT_MAX: u32 = 4096;
/// The largest slot.
pub const SLOT_BYTES_MAX: u32 = 1 << 20;
/// The smallest slot: a header and eight bytes of payload.
pub const SLOT_BYTES_MIN: u32 = HEADER_BYTES as u32 + 8;

/// A setting that does not hold, by the key that names it.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{key}: {why}")]
pub struct ConfigError {
    pub key: &'static str,
    pub why: String,
}

fn refuse(key: &'static str, why: impl Into<String>) -> Result<(), ConfigError> {
    Err(ConfigError { key, why: why.into() })
}

/// The shape of one client's rings: both sides agree on it through the grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Requests a client may have outstanding; slots in each of its rings.
    pub slots_per_client: u32,
    /// Bytes of a request slot (header and payload); a multiple of 8.
    pub request_slot_bytes: u32,
    /// Bytes of a response slot (header and payload); a multiple of 8.
    pub response_slot_bytes: u32,
}

impl Default for Geometry {
    /// 8 outstanding requests of up to 216 bytes, responses of up to 472: inline on shm (whose
    /// limit is 512 bytes) and requests inline in the simulator (256).
    fn default() -> Geometry {
        Geometry { slots_per_client: 8, request_slot_bytes: 256, response_slot_bytes: 512 }
    }
}

impl Geometry {
    /// Checks the sizes; the error names the key.
    pub fn check(&self) -> Result<(), ConfigError> {
        if !(1..=SLOTS_PER_CLIENT_MAX).contains(&self.slots_per_client) {
            return refuse(
                "slots_per_client",
                format!("{} is not within 1..={SLOTS_PER_CLIENT_MAX}", self.slots_per_client),
            );
        }
        for (key, bytes) in [
            ("request_slot_bytes", self.request_slot_bytes),
            ("response_slot_bytes", self.response_slot_bytes),
        ] {
            if !(SLOT_BYTES_MIN..=SLOT_BYTES_MAX).contains(&bytes) || bytes % 8 != 0 {
                return refuse(
                    key,
                    format!(
                        "{bytes} is not a multiple of 8 within {SLOT_BYTES_MIN}..={SLOT_BYTES_MAX}"
                    ),
                );
            }
        }
        Ok(())
    }

    /// The largest request payload.
    pub fn request_payload_bytes_max(&self) -> usize {
        self.request_slot_bytes as usize - HEADER_BYTES
    }

    /// The largest response payload.
    pub fn response_payload_bytes_max(&self) -> usize {
        self.response_slot_bytes as usize - HEADER_BYTES
    }

    /// Bytes of one client's request ring (one region on the server).
    pub fn request_ring_bytes(&self) -> usize {
        self.slots_per_client as usize * self.request_slot_bytes as usize
    }

    /// Bytes of one client's response ring (one region on the client).
    pub fn response_ring_bytes(&self) -> usize {
        self.slots_per_client as usize * self.response_slot_bytes as usize
    }

    /// The ring slot of transport sequence number `seq`.
    pub fn slot_of(&self, seq: u64) -> usize {
        (seq % u64::from(self.slots_per_client)) as usize
    }

    /// Where request `seq` lies in its request ring.
    pub fn request_offset(&self, seq: u64) -> u64 {
        self.slot_of(seq) as u64 * u64::from(self.request_slot_bytes)
    }

    /// Where the response to `seq` lies in the client's response ring.
    pub fn response_offset(&self, seq: u64) -> u64 {
        self.slot_of(seq) as u64 * u64::from(self.response_slot_bytes)
    }
}

/// The server's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    /// Clients admitted at once: one request ring each.
    pub clients_max: u16,
    pub geometry: Geometry,
    /// Client slot `i`'s request ring is region `ring_region_base + i` of the server's node.
    pub ring_region_base: RegionId,
    /// The server's own staging area for responses too large to post inline; not remotely
    /// accessible. Must lie outside the rings' ids.
    pub staging_region: RegionId,
    /// The region id a client registers its response ring under (told in the grant).
    pub client_response_region: RegionId,
    /// The region id a client registers its own staging area under (told in the grant).
    pub client_staging_region: RegionId,
    /// The channel of every connection between the server's node and a client's.
    pub channel: u8,
    /// This server's identity for its lifetime, chosen by the caller (random at start, say):
    /// generations are drawn from it, and a grant of another server is refused by it.
    pub instance: u64,
    /// A client with no request outstanding and none accepted for this long is released;
    /// 0: never.
    pub idle_timeout_ns: u64,
    /// How often, at most, the server asks the fabric whether a quiet client crashed.
    pub crash_check_interval_ns: u64,
    /// Leave at [`Checks::Full`].
    pub checks: Checks,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            clients_max: 16,
            geometry: Geometry::default(),
            ring_region_base: RegionId(16),
            staging_region: RegionId(1),
            client_response_region: RegionId(0),
            client_staging_region: RegionId(1),
            channel: 0,
            instance: 1,
            idle_timeout_ns: 0,
            crash_check_interval_ns: 100_000,
            checks: Checks::Full,
        }
    }
}

impl ServerConfig {
    /// Checks the settings; the error names the key.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.geometry.check()?;
        if self.clients_max == 0 {
            return refuse("clients_max", "0: the server would admit nobody");
        }
        let base = u32::from(self.ring_region_base.0);
        let end = base + u32::from(self.clients_max);
        if end > u32::from(u16::MAX) + 1 {
            return refuse(
                "clients_max",
                format!("rings from region {base} would pass region id {}", u16::MAX),
            );
        }
        if (base..end).contains(&u32::from(self.staging_region.0)) {
            return refuse(
                "staging_region",
                format!("{} lies among the rings' regions {base}..{end}", self.staging_region),
            );
        }
        if self.client_response_region == self.client_staging_region {
            return refuse(
                "client_staging_region",
                format!("{} is also the client's response region", self.client_staging_region),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(config: ServerConfig) -> &'static str {
        config.check().expect_err("refused").key
    }

    #[test]
    fn bad_settings_are_refused_by_their_key() {
        let ok = ServerConfig::default();
        assert_eq!(ok.check(), Ok(()));
        let g = ok.geometry;
        let with = |geometry| ServerConfig { geometry, ..ok.clone() };
        assert_eq!(key_of(with(Geometry { slots_per_client: 0, ..g })), "slots_per_client");
        assert_eq!(key_of(with(Geometry { request_slot_bytes: 100, ..g })), "request_slot_bytes");
        assert_eq!(key_of(with(Geometry { response_slot_bytes: 8, ..g })), "response_slot_bytes");
        assert_eq!(key_of(ServerConfig { clients_max: 0, ..ok.clone() }), "clients_max");
        let past_the_ids =
            ServerConfig { ring_region_base: RegionId(u16::MAX), clients_max: 2, ..ok.clone() };
        assert_eq!(key_of(past_the_ids), "clients_max");
        assert_eq!(
            key_of(ServerConfig { staging_region: RegionId(17), ..ok.clone() }),
            "staging_region"
        );
        let same = ServerConfig { client_staging_region: ok.client_response_region, ..ok.clone() };
        assert_eq!(key_of(same), "client_staging_region");
    }

    #[test]
    fn offsets_follow_the_ring_slot_of_a_sequence_number() {
        let g = Geometry { slots_per_client: 4, request_slot_bytes: 64, response_slot_bytes: 128 };
        assert_eq!((g.request_offset(5), g.response_offset(5)), (64, 128));
        assert_eq!(g.request_ring_bytes(), 256);
        assert_eq!(g.request_payload_bytes_max(), 64 - HEADER_BYTES);
    }
}
