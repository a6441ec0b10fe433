//! The accept loop: every listener (TCP, TLS, unix socket), the connection limit, one task
//! per connection, graceful shutdown.
//!
//! The accept loop runs on the runtime that calls [`serve_on`]; each accepted socket becomes
//! a task running [`crate::connection::serve_connection`] on the least busy of the [`Workers`]
//! (thread-per-core, see [`crate::workers`]), or on the calling runtime when there are none
//! ([`serve`]). A TLS connection first completes its handshake there, within
//! [`TLS_HANDSHAKE_TIMEOUT`]. Above
//! `max_connections` a new client gets memcached's `ERROR Too many open connections` and is
//! closed (counted in `rejected_connections`). When the shutdown future completes — or a
//! client sends `shutdown` where that is enabled — the listeners are closed at once, every
//! connection finishes the requests it has already read, flushes its replies and closes;
//! connections still busy after [`SHUTDOWN_GRACE`] are abandoned.
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use flashtier_cache::KvStore;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::connection::serve_connection;
use crate::context::{ConnEntry, Context};
use crate::error::Error;
use crate::stats::Stats;
use crate::stream::{Listener, Stream};
use crate::workers::{reap_flash, Workers};

/// How long in-flight connections get to finish after shutdown starts.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long a TLS client gets to complete its handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
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

/// An accepted socket before any TLS handshake.
enum Accepted {
    Tcp(
        tokio::net::TcpStream,
        std::net::SocketAddr,
        Option<tokio_rustls::TlsAcceptor>,
    ),
    Unix(tokio::net::UnixStream),
}

impl Accepted {
    /// Take the socket off the accepting runtime's reactor, so the runtime that serves it
    /// registers it with its own (a worker's events then never pass through this thread).
    fn detach(self) -> std::io::Result<Detached> {
        Ok(match self {
            Accepted::Tcp(s, a, tls) => Detached::Tcp(s.into_std()?, a, tls),
            Accepted::Unix(s) => Detached::Unix(s.into_std()?),
        })
    }
}

/// An accepted socket registered with no runtime yet (see [`Accepted::detach`]).
enum Detached {
    Tcp(
        std::net::TcpStream,
        std::net::SocketAddr,
        Option<tokio_rustls::TlsAcceptor>,
    ),
    Unix(std::os::unix::net::UnixStream),
}

impl Detached {
    /// Register the socket with the current runtime.
    fn adopt(self) -> std::io::Result<Accepted> {
        Ok(match self {
            Detached::Tcp(s, a, tls) => Accepted::Tcp(tokio::net::TcpStream::from_std(s)?, a, tls),
            Detached::Unix(s) => Accepted::Unix(tokio::net::UnixStream::from_std(s)?),
        })
    }
}

/// Accept from whichever listener is ready first: (socket, listener index).
async fn accept_any(listeners: &[Listener]) -> (std::io::Result<Accepted>, usize) {
    std::future::poll_fn(|cx| {
        for (i, l) in listeners.iter().enumerate() {
            let r = match l {
                Listener::Tcp(t, tls) => match t.poll_accept(cx) {
                    Poll::Ready(r) => r.map(|(s, a)| Accepted::Tcp(s, a, tls.clone())),
                    Poll::Pending => continue,
                },
                Listener::Unix(u, _) => match u.poll_accept(cx) {
                    Poll::Ready(r) => r.map(|(s, _)| Accepted::Unix(s)),
                    Poll::Pending => continue,
                },
            };
            return Poll::Ready((r, i));
        }
        Poll::Pending
    })
    .await
}

/// Serve every listener until `shutdown` completes (or `shutdown` is sent by a client where
/// enabled), then drain connections and return. Connections run on the calling runtime.
pub async fn serve<S: KvStore>(
    listeners: Vec<Listener>,
    ctx: Arc<Context<S>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    serve_on(listeners, ctx, shutdown, None).await
}

/// [`serve`], with every connection on the least busy of `workers` (when given).
pub async fn serve_on<S: KvStore>(
    listeners: Vec<Listener>,
    ctx: Arc<Context<S>>,
    shutdown: impl Future<Output = ()>,
    workers: Option<&Workers>,
) -> Result<(), Error> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    // Flash completions are reaped by the workers (each its own lane), else by this
    // runtime's threads while it serves.
    if let Some(w) = workers {
        ctx.set_worker_loads(w.load_counters());
        ctx.set_worker_threads(w.thread_ids());
    }
    let reaper = match workers {
        Some(_) => None,
        None => ctx
            .store
            .flash_reaper(0)
            .map(|h| tokio::spawn(reap_flash(h))),
    };
    let mut next_id: u64 = 0;
    let names: Vec<String> = listeners.iter().map(Listener::describe).collect();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = ctx.shutdown.notified() => {
                log::info!("shutdown command received: stopping");
                break;
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            (accepted, which) = accept_any(&listeners) => {
                let accepted = match accepted {
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
                        let write = async {
                            match accepted {
                                Accepted::Tcp(mut s, _, _) => s.write_all(TOO_MANY_CONNECTIONS).await,
                                Accepted::Unix(mut s) => s.write_all(TOO_MANY_CONNECTIONS).await,
                            }
                        };
                        let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
                    });
                    continue;
                }
                Stats::incr(&ctx.stats.curr_connections);
                next_id += 1;
                let id = next_id;
                let listen = names[which].clone();
                let peer = match &accepted {
                    Accepted::Tcp(_, a, _) => format!("tcp:{a}"),
                    Accepted::Unix(_) => format!("unix:{}", listen.trim_start_matches("unix:")),
                };
                log::trace!("<{id} new client connection from {peer} on {listen}");
                ctx.register(id, ConnEntry { peer, listen });
                let guard = ConnGuard { ctx: Arc::clone(&ctx), id };
                let rx = stop_rx.clone();
                let detached = accepted.detach();
                let conn = async move {
                    let ctx = Arc::clone(&guard.ctx);
                    let accepted = match detached.and_then(Detached::adopt) {
                        Ok(a) => a,
                        Err(e) => {
                            log::warn!("<{id} cannot hand the connection to a worker: {e}");
                            return;
                        }
                    };
                    let stream = match accepted {
                        Accepted::Tcp(s, _, None) => Some(Stream::Tcp(s)),
                        Accepted::Unix(s) => Some(Stream::Unix(s)),
                        Accepted::Tcp(s, _, Some(tls)) => {
                            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.accept(s)).await {
                                Ok(Ok(t)) => Some(Stream::Tls(Box::new(t))),
                                Ok(Err(e)) => {
                                    Stats::incr(&ctx.stats.ssl_handshake_errors);
                                    log::debug!("<{id} TLS handshake failed: {e}");
                                    None
                                }
                                Err(_) => {
                                    Stats::incr(&ctx.stats.ssl_handshake_errors);
                                    log::debug!("<{id} TLS handshake timed out");
                                    None
                                }
                            }
                        }
                    };
                    if let Some(stream) = stream {
                        if matches!(stream, Stream::Tls(_)) {
                            Stats::incr(&ctx.stats.ssl_new_sessions);
                        }
                        // A connection ending in a socket error is a normal event for a server.
                        let _ = serve_connection(&ctx, stream, id, rx).await;
                    }
                    log::trace!("<{id} connection closed");
                    drop(guard);
                };
                match workers {
                    Some(w) => {
                        let (worker, conn) = w.place(conn);
                        tasks.spawn_on(conn, worker)
                    }
                    None => tasks.spawn(conn),
                };
            }
        }
    }
    drop(listeners);
    let _ = stop_tx.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        tasks.abort_all();
    }
    if let Some(r) = reaper {
        r.abort();
    }
    Ok(())
}
