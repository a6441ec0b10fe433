//! The accept loop: connection limit, one task per connection, graceful shutdown.
//!
//! Runs on the tokio runtime the binary builds (worker threads = `--threads`). Each accepted
//! socket becomes a task running [`crate::connection::serve_connection`]. Above
//! `max_connections` a new client gets memcached's `ERROR Too many open connections` and is
//! closed (counted in `rejected_connections`). When the shutdown future completes the
//! listener is closed at once, every connection finishes the requests it has already read,
//! flushes its replies and closes; connections still busy after [`SHUTDOWN_GRACE`] are
//! abandoned.
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use flashtier_cache::KvStore;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::connection::serve_connection;
use crate::context::{ConnEntry, Context};
use crate::error::Error;
use crate::stats::Stats;

/// How long in-flight connections get to finish after shutdown starts.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The line memcached sends to a client above the connection limit.
pub const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

/// Decrements `curr_connections` and forgets the connection however its task ends.
struct ConnGuard<S: KvStore> {
    ctx: Arc<Context<S>>,
    id: u64,
}

impl<S: KvStore> Drop for ConnGuard<S> {
    fn drop(&mut self) {
        self.ctx.unregister(self.id);
        self.ctx
            .stats
            .curr_connections
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Serve `listener` until `shutdown` completes, then drain connections and return.
pub async fn serve<S: KvStore>(
    listener: TcpListener,
    ctx: Arc<Context<S>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut next_id: u64 = 0;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        log::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                Stats::incr(&ctx.stats.total_connections);
                let curr = Stats::get(&ctx.stats.curr_connections);
                if curr >= ctx.settings.max_connections as u64 {
                    Stats::incr(&ctx.stats.rejected_connections);
                    tokio::spawn(async move {
                        let mut stream = stream;
                        let write = stream.write_all(TOO_MANY_CONNECTIONS);
                        let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
                    });
                    continue;
                }
                Stats::incr(&ctx.stats.curr_connections);
                next_id += 1;
                let id = next_id;
                ctx.register(id, ConnEntry { peer });
                let guard = ConnGuard { ctx: Arc::clone(&ctx), id };
                let rx = stop_rx.clone();
                tasks.spawn(async move {
                    let ctx = Arc::clone(&guard.ctx);
                    // A connection ending in a socket error is a normal event for a server.
                    let _ = serve_connection(&ctx, stream, rx).await;
                    drop(guard);
                });
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        tasks.abort_all();
    }
    Ok(())
}
