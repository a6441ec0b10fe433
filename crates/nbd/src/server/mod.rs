//! The NBD server: exports, configuration, listener and accept loop, graceful shutdown.
//! [`config`] ([`Export`], [`ServerConfig`]), [`listener`] (TCP or Unix), [`handshake`]
//! (fixed newstyle, server side), [`connection`] (transmission: a reader, one task per
//! request, one writer), [`stats`] (per connection and server-wide).
//!
//! Threads: the accept loop runs in the task that calls [`Server::serve`]; each connection
//! runs in its own task and spawns one task per request plus one writer task. Shutdown is a
//! `watch` flag: the accept loop stops, each connection stops reading new requests, finishes
//! the ones in flight, sends their replies and closes; `serve` returns when all are done.

pub mod config;
pub mod connection;
pub mod handshake;
pub mod listener;
pub mod stats;

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::addr::ListenAddr;
use crate::error::Error;

pub use config::{Export, ServerConfig};
pub use listener::Listener;
pub use stats::{ConnectionInfo, OpLatency, ServerStats, StatsSnapshot};

/// State shared by the accept loop and all connections.
pub(crate) struct Shared {
    pub(crate) exports: Vec<Export>,
    pub(crate) config: ServerConfig,
    pub(crate) stats: Arc<ServerStats>,
    pub(crate) shutdown: watch::Receiver<bool>,
}

impl Shared {
    /// Finds an export by name; the empty name selects the first export.
    pub(crate) fn export(&self, name: &str) -> Option<&Export> {
        if name.is_empty() {
            return self.exports.first();
        }
        self.exports.iter().find(|e| e.name == name)
    }

    pub(crate) fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}

/// An NBD server. Cheap to clone; clones share exports, stats and the shutdown flag.
///
/// # Protocol coverage
/// Fixed newstyle handshake with `NO_ZEROES`; options `EXPORT_NAME`, `ABORT`, `LIST`,
/// `INFO`, `GO` (others answered `REP_ERR_UNSUP`, including `STARTTLS` and
/// `STRUCTURED_REPLY`: replies are always simple); information `EXPORT`, `NAME`,
/// `DESCRIPTION`, `BLOCK_SIZE`; commands `READ`, `WRITE` (FUA), `FLUSH`, `TRIM`,
/// `WRITE_ZEROES` (FUA, NO_HOLE), `CACHE`, `DISC`.
///
/// # Example
/// ```no_run
/// use std::sync::Arc;
/// use flashtier_nbd::{open_backend, Export, Server, ServerConfig};
///
/// # async fn run() -> Result<(), flashtier_nbd::Error> {
/// let backing = open_backend("/var/lib/disk.img").await?; // or "nbd+unix:///?socket=/run/slow.sock"
/// let server = Server::new(vec![Export::new("disk", backing)], ServerConfig::default())?;
/// let listener = Server::bind(&"unix:/run/flashtier.sock".parse()?).await?;
/// let stop = server.shutdown_handle(); // call stop.shutdown() from a signal handler
/// server.serve(listener).await?; // returns after a graceful shutdown
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
    shutdown_tx: Arc<watch::Sender<bool>>,
}

/// Asks a server to shut down gracefully; obtained from [`Server::shutdown_handle`].
#[derive(Clone)]
pub struct ShutdownHandle(Arc<watch::Sender<bool>>);

impl ShutdownHandle {
    /// Starts a graceful shutdown (idempotent).
    pub fn shutdown(&self) {
        self.0.send_replace(true);
    }
}

impl Server {
    /// A server for `exports` (the first one is the default export).
    pub fn new(exports: Vec<Export>, config: ServerConfig) -> Result<Self, Error> {
        config.validate()?;
        if exports.is_empty() {
            return Err(Error::Config("at least one export is required".into()));
        }
        for (i, e) in exports.iter().enumerate() {
            e.validate()?;
            if exports.iter().skip(i + 1).any(|o| o.name == e.name) {
                return Err(Error::Config(format!("duplicate export name {:?}", e.name)));
            }
        }
        let (tx, rx) = watch::channel(false);
        Ok(Server {
            shared: Arc::new(Shared {
                exports,
                config,
                stats: Arc::new(ServerStats::default()),
                shutdown: rx,
            }),
            shutdown_tx: Arc::new(tx),
        })
    }

    /// Server-wide and per-connection counters.
    pub fn stats(&self) -> Arc<ServerStats> {
        Arc::clone(&self.shared.stats)
    }

    /// A handle that triggers graceful shutdown.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(Arc::clone(&self.shutdown_tx))
    }

    /// Starts a graceful shutdown.
    pub fn shutdown(&self) {
        self.shutdown_tx.send_replace(true);
    }

    /// Binds `addr` (removing a stale Unix socket file first).
    pub async fn bind(addr: &ListenAddr) -> Result<Listener, Error> {
        Listener::bind(addr).await
    }

    /// Accepts connections until shutdown, then waits for open connections to finish their
    /// in-flight requests and close. To listen on several addresses, run `serve` once per
    /// listener on clones of the server; one shutdown stops them all.
    pub async fn serve(&self, listener: Listener) -> Result<(), Error> {
        let mut shutdown = self.shared.shutdown.clone();
        let mut conns = JoinSet::new();
        loop {
            if *shutdown.borrow_and_update() {
                break;
            }
            tokio::select! {
                _ = shutdown.changed() => {}
                accepted = listener.accept() => {
                    match accepted {
                        Ok((stream, peer)) => {
                            let server = self.clone();
                            conns.spawn(async move {
                                // A failed connection only ends that connection.
                                let _ = stream.serve(&server, peer).await;
                            });
                        }
                        Err(err) if is_transient_accept_error(&err) => {
                            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        }
                        Err(err) => return Err(Error::Io(err)),
                    }
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        drop(listener);
        while conns.join_next().await.is_some() {}
        Ok(())
    }

    /// Serves one already-accepted stream to completion (handshake and transmission).
    pub async fn serve_stream<S>(&self, stream: S, peer: String) -> Result<(), Error>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (id, stats) = self.shared.stats.open(peer);
        let result =
            match connection::run(Arc::clone(&self.shared), stream, Arc::clone(&stats)).await {
                // A client hanging up without DISC is a hard disconnect, not a server error.
                Err(Error::Io(e)) if is_disconnect(&e) => Ok(()),
                other => other,
            };
        self.shared.stats.close(id);
        result
    }
}

/// True for I/O errors that mean the peer hung up (a hard disconnect, not a server fault).
pub(crate) fn is_disconnect(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        err.kind(),
        ConnectionReset | BrokenPipe | UnexpectedEof | ConnectionAborted
    )
}

fn is_transient_accept_error(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        err.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || err.raw_os_error() == Some(rustix::io::Errno::MFILE.raw_os_error())
        || err.raw_os_error() == Some(rustix::io::Errno::NFILE.raw_os_error())
}
