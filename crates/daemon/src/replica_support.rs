//! What every replica process of the daemon shares, Mu, Velos or uKharon-KV: its metrics
//! endpoint and the private files it writes.

use tracing::info;

/// The target of the replica processes' logs.
const LOG_TARGET: &str = "mu::serve";

/// Serves Prometheus text on `port` until the endpoint is dropped, and says where.
pub(crate) fn serve_metrics(
    port: u16,
    sources: mu_service::metrics::Sources,
    id: u16,
) -> Result<mu_service::metrics::MetricsServer, String> {
    let endpoint = mu_service::metrics::serve(port, sources)?;
    let addr = endpoint.address();
    info!(target: LOG_TARGET, replica = id, url = %format_args!("http://{addr}/metrics"), "serving metrics");
    Ok(endpoint)
}

/// Writes `text` to `path`, readable and writable by the owner only, as everything else in a
/// run directory is.
pub(crate) fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}
