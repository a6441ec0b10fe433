//! Process signals shared by every long-running subcommand (`kv`, `block`).

/// Completes on SIGTERM or SIGINT: the caller then stops accepting, lets in-flight requests
/// finish and exits 0.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            log::warn!("cannot watch SIGTERM ({e}); only SIGINT stops the server");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
