//! Region scopes on verbs: which remote key peers are given for a region under each scope, what a
//! change of scope does to the region's registrations and memory window, and how window keys are
//! tagged. Pure bookkeeping, tested without a device; the device calls are in `window`.
//!
//! A region has a *local* registration for its whole life: local write, memory-window binding,
//! no remote access. Its local key serves this node's own requests; its remote key reaches
//! nothing. Under each scope peers are given:
//!
//! | scope | key published | why nobody else gets in |
//! | --- | --- | --- |
//! | `Every` | the remote key of a *shared* registration whose remote flags are the region's access | (everyone may) |
//! | `Only(conn)` | the remote key of a type 2 memory window bound on this node's side of `conn` | a type 2 window admits only requests that arrive on the queue pair it is bound to, and the shared registration is deregistered, so its key is dead |
//! | `Nobody` | the local registration's remote key | that registration has no remote access: any use is a remote access error |
//!
//! So the key a peer holds stops working when the scope leaves it out (a deregistered
//! registration, a deallocated window); a peer that the new scope lets in reads the new key when
//! it binds (moves its side to ready-to-receive), which is what the fabric API asks of callers.

use mu_fabric::{ConnId, RegionScope};
use sideway::ibverbs::device_context::DeviceCapabilityFlags;

/// Where the key published for a region comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeySource {
    /// The shared registration (remote flags = the region's access).
    Shared,
    /// The memory window bound on the one side the region is scoped to.
    Window,
    /// The local registration, which grants peers nothing.
    Local,
}

/// The key peers are told to use under `scope`.
pub(crate) fn key_source(scope: RegionScope) -> KeySource {
    match scope {
        RegionScope::Every => KeySource::Shared,
        RegionScope::Only(_) => KeySource::Window,
        RegionScope::Nobody => KeySource::Local,
    }
}

/// What a change of scope does to a region, decided before any device call. The region keeps
/// a shared registration exactly while its scope is `Every`, and a window exactly while it is
/// `Only`: this is what makes the published key the only live one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ScopeChange {
    /// Register the region again with its remote access (a new key).
    pub(crate) register_shared: bool,
    /// Allocate a window for this side (bound now if the side is ready to send, else when it
    /// next gets there).
    pub(crate) window_for: Option<ConnId>,
    /// Deallocate the window of the previous scope: its key dies with it.
    pub(crate) drop_window: bool,
    /// Deregister the shared registration: its key dies with it.
    pub(crate) drop_shared: bool,
}

/// The change from scope `from` to scope `to`. Scoping a region again to the scope it has
/// changes nothing, so peers bound with its key need not bind again.
pub(crate) fn plan(from: RegionScope, to: RegionScope) -> ScopeChange {
    if from == to {
        return ScopeChange::default();
    }
    ScopeChange {
        register_shared: to == RegionScope::Every,
        window_for: match to {
            RegionScope::Only(conn) => Some(conn),
            _ => None,
        },
        drop_window: matches!(from, RegionScope::Only(_)),
        drop_shared: from == RegionScope::Every,
    }
}

/// The key a window has once bound with `tag`: the key it was allocated with, its low 8 bits
/// (the consumer's part of a key, as `ibv_inc_rkey` changes it) replaced.
pub(crate) fn window_key(allocated: u32, tag: u8) -> u32 {
    (allocated & !0xff) | u32::from(tag)
}

/// The tag for the next bind after `previous` (a node-wide counter): never the allocated key's
/// own tag, so that a bound window's key differs from the one it had unbound, and successive
/// windows that reuse a device index do not repeat a key a peer may still hold.
pub(crate) fn next_tag(previous: u8, allocated: u32) -> u8 {
    let tag = previous.wrapping_add(1);
    if tag == allocated as u8 {
        tag.wrapping_add(1)
    } else {
        tag
    }
}

/// Whether a device can keep a region to one connection: it needs type 2 memory windows (bound
/// to a queue pair by a work request). `Err` says why not, for `FabricError::Incompatible`.
pub(crate) fn window_support(
    device: &str,
    flags: DeviceCapabilityFlags,
    max_windows: i32,
) -> Result<(), String> {
    let type_2 =
        DeviceCapabilityFlags::MemoryWindowType2A | DeviceCapabilityFlags::MemoryWindowType2B;
    if !flags.intersects(type_2) {
        return Err(format!(
            "device {device} has no type 2 memory windows (its capability flags have neither \
             MEM_WINDOW_TYPE_2A nor MEM_WINDOW_TYPE_2B)"
        ));
    }
    if max_windows <= 0 {
        return Err(format!("device {device} allows no memory windows (max_mw is {max_windows})"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mu_fabric::NodeId;

    fn scopes() -> [RegionScope; 4] {
        let (a, c) = (ConnId::new(NodeId(0), 0), ConnId::new(NodeId(1), 0));
        [RegionScope::Every, RegionScope::Only(a), RegionScope::Only(c), RegionScope::Nobody]
    }

    /// What a region holds: a shared registration, and the side its window is for.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Held {
        shared: bool,
        window: Option<ConnId>,
    }

    fn apply(held: Held, change: ScopeChange) -> Held {
        assert!(!(change.register_shared && held.shared), "registered twice: {change:?}");
        assert!(!change.drop_shared || held.shared, "dropped what is not there: {change:?}");
        assert!(!change.drop_window || held.window.is_some(), "no window to drop: {change:?}");
        Held {
            shared: (held.shared && !change.drop_shared) || change.register_shared,
            window: change.window_for.or(if change.drop_window { None } else { held.window }),
        }
    }

    fn held_under(scope: RegionScope) -> Held {
        Held {
            shared: scope == RegionScope::Every,
            window: match scope {
                RegionScope::Only(conn) => Some(conn),
                _ => None,
            },
        }
    }

    #[test]
    fn every_change_of_scope_leaves_exactly_the_published_key_alive() {
        for from in scopes() {
            for to in scopes() {
                let after = apply(held_under(from), plan(from, to));
                assert_eq!(after, held_under(to), "{from} -> {to}");
                // The key published is backed by what the region holds.
                match key_source(to) {
                    KeySource::Shared => assert!(after.shared && after.window.is_none()),
                    KeySource::Window => assert!(!after.shared && after.window.is_some()),
                    KeySource::Local => assert_eq!(after, Held { shared: false, window: None }),
                }
            }
        }
    }

    #[test]
    fn scoping_again_to_the_same_scope_changes_no_key() {
        for scope in scopes() {
            assert_eq!(plan(scope, scope), ScopeChange::default(), "{scope}");
        }
        let (a, c) = (ConnId::new(NodeId(0), 0), ConnId::new(NodeId(1), 0));
        let moved = plan(RegionScope::Only(a), RegionScope::Only(c));
        assert!(moved.drop_window && moved.window_for == Some(c), "a new window for c: {moved:?}");
        assert!(!moved.register_shared && !moved.drop_shared);
    }

    #[test]
    fn keys_by_scope() {
        let a = ConnId::new(NodeId(3), 1);
        assert_eq!(key_source(RegionScope::Every), KeySource::Shared);
        assert_eq!(key_source(RegionScope::Only(a)), KeySource::Window);
        assert_eq!(key_source(RegionScope::Nobody), KeySource::Local);
    }

    #[test]
    fn window_keys_change_only_their_tag_and_never_repeat_the_allocated_one() {
        let allocated = 0x1234_5607;
        assert_eq!(window_key(allocated, 0x99), 0x1234_5699);
        assert_eq!(window_key(allocated, 0x07), allocated);
        let mut tag = 0u8;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..255 {
            tag = next_tag(tag, allocated);
            assert_ne!(window_key(allocated, tag), allocated, "tag {tag:#x}");
            seen.insert(tag);
        }
        assert_eq!(seen.len(), 255, "every other tag comes before one repeats");
        assert_eq!(next_tag(0x06, allocated), 0x08, "the allocated tag is skipped");
        assert_eq!(next_tag(0xff, 0x0000_0100), 0x01, "wraps, skipping 0x00");
    }

    #[test]
    fn a_device_without_type_2_windows_is_told_apart() {
        let none = DeviceCapabilityFlags::MemoryWindow;
        let why = window_support("dev0", none, 16).unwrap_err();
        assert!(why.contains("dev0 has no type 2 memory windows"), "{why}");
        let two_b = DeviceCapabilityFlags::MemoryWindow | DeviceCapabilityFlags::MemoryWindowType2B;
        assert_eq!(window_support("dev0", two_b, 16), Ok(()));
        assert_eq!(window_support("dev0", DeviceCapabilityFlags::MemoryWindowType2A, 1), Ok(()));
        let why = window_support("dev0", two_b, 0).unwrap_err();
        assert!(why.contains("max_mw is 0"), "{why}");
    }
}
