//! The invariant checkers, one per file. Each says what it found wrong as `Err(description)`,
//! naming the replicas and indexes involved, so that the seed runner can report it with the
//! seed and the trace.

pub mod agreement;
pub mod decided_prefix;
pub mod durability;
pub mod linearizability;
pub mod single_writer;
pub mod validity;

/// What each replica applied, entry by entry in order: (index, the entry's requests).
pub type Applied = [Vec<(u64, Vec<Vec<u8>>)>];

/// Requests as text for a report: key-value requests decoded, anything else as (lossy) text.
pub(crate) fn readable(requests: &[Vec<u8>]) -> Vec<String> {
    requests.iter().map(|r| crate::describe::describe_request(r)).collect()
}
