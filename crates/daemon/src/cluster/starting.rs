//! The replica processes `mu cluster up` started, while it waits for them to serve: what the
//! wait for a key-value cluster (`up`) and for an unmodified application's (`external`) share.

use super::*;

/// A replica process `up` started, until it is known to run.
pub(super) struct Started {
    pub(super) id: u16,
    pub(super) child: Child,
}

/// Fails, with the end of its log, if a replica started has exited.
pub(super) fn exited(config: &ClusterConfig, started: &mut [Started]) -> Result<(), String> {
    for s in started.iter_mut() {
        if let Ok(Some(status)) = s.child.try_wait() {
            return Err(format!(
                "replica {} exited during start-up ({status}); the end of {}:\n{}",
                s.id,
                config.log_path(s.id).display(),
                log_tail(&config.log_path(s.id))
            ));
        }
    }
    Ok(())
}

/// The replicas started whose pid file does not name them yet: a replica writes it as it
/// starts (before it serves), and `up` waits for it, so that a `down` right after finds every
/// replica.
pub(super) fn without_pid_file(config: &ClusterConfig, started: &[Started]) -> Vec<u16> {
    started
        .iter()
        .filter(|s| pid_in(&config.pid_path(s.id)) != Some(s.child.id()))
        .map(|s| s.id)
        .collect()
}

/// Why the cluster is not up after `timeout`, with the end of every replica's log.
pub(super) fn not_up(
    config: &ClusterConfig,
    started: &[Started],
    timeout: Duration,
    why: &str,
) -> String {
    let mut text = format!("the cluster did not come up within {} s: {why}", timeout.as_secs());
    for s in started {
        text.push_str(&format!(
            "\nthe end of {}:\n{}",
            config.log_path(s.id).display(),
            log_tail(&config.log_path(s.id))
        ));
    }
    text
}

/// The end of this start's part of a replica's log.
pub(super) fn log_tail(path: &Path) -> String {
    crate::node_log::log_tail(path, LOG_MARK)
}
