//! One connection: handshake, then the transmission phase as three kinds of task: the
//! **reader** (this task: header, WRITE payload, validation, spawns a request task; holds one
//! in-flight permit per request and a byte budget for payloads, so a client can neither queue
//! unbounded work nor make the server buffer unbounded data), one **request task** per
//! request (calls the backend), and the **writer** (owns the write half, writes replies in
//! completion order, flushes when idle).
//!
//! Invariants: a reply is written only after the backend call completed (a FUA write or FLUSH
//! is acknowledged only once durable); READ data goes only with a zero error, a short read or
//! a panicking backend call becomes `EIO`; permits are released only after the reply is
//! written. On `DISC`, EOF, shutdown, a bad magic or an undiscardable WRITE payload the reader
//! stops, in-flight requests finish and are answered, then the socket is closed.

use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use crate::codec::transmission::{parse_request_header, Command, RequestHeader, SimpleReply};
use crate::error::{Errno, Error, ParseError};
use crate::proto;
use crate::server::handshake::{max_payload, negotiate, Outcome};
use crate::server::stats::ConnectionStats;
use crate::server::{is_disconnect, Export, Shared};
use crate::wire_io::read_payload;
use flashtier_backend::{check_range, BlockBackend, ZeroFlags};

/// Read buffer size; large enough to take a header and a small WRITE in one syscall.
const READ_BUFFER: usize = 256 * 1024;
/// Write buffer size for batching reply headers and small READ payloads.
const WRITE_BUFFER: usize = 256 * 1024;

/// Decrements the in-flight gauge when a request's reply is written or dropped.
struct InFlight(Arc<ConnectionStats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// A reply on its way to the writer, carrying the permits it releases once written.
struct Reply {
    handle: u64,
    result: Result<Option<Bytes>, Errno>,
    _slot: OwnedSemaphorePermit,
    _bytes: Option<OwnedSemaphorePermit>,
    _in_flight: InFlight,
}

/// Owns a request's reply while the backend works on it. If the backend panics, the task
/// unwinds and the guard's drop still answers `EIO`, so the client is not left waiting and
/// the request's permits are released.
struct ReplyGuard {
    tx: mpsc::Sender<Reply>,
    reply: Option<Reply>,
}

impl ReplyGuard {
    async fn send(&mut self, result: Result<Option<Bytes>, Errno>) {
        if let Some(mut reply) = self.reply.take() {
            reply.result = result;
            // The writer is gone only if the socket failed; the reply is then moot.
            let _ = self.tx.send(reply).await;
        }
    }
}

impl Drop for ReplyGuard {
    fn drop(&mut self) {
        if let Some(mut reply) = self.reply.take() {
            reply.result = Err(Errno::Io);
            // The channel has room for every in-flight request, so this cannot be full.
            let _ = self.tx.try_send(reply);
        }
    }
}

/// Runs a connection to completion.
pub(crate) async fn run<S>(
    shared: Arc<Shared>,
    stream: S,
    stats: Arc<ConnectionStats>,
) -> Result<(), Error>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(stream);
    let mut rd = BufReader::with_capacity(READ_BUFFER, rd);
    let mut wr = BufWriter::with_capacity(WRITE_BUFFER, wr);
    let timeout = shared.config.handshake_timeout;
    let mut shutdown = shared.shutdown.clone();
    let negotiated = tokio::select! {
        r = tokio::time::timeout(timeout, negotiate(&shared, &mut rd, &mut wr)) => {
            r.unwrap_or_else(|_| Err(Error::Handshake(format!("not finished within {timeout:?}"))))
        }
        // A client idling in the handshake must not hold up a graceful shutdown.
        _ = shutdown_requested(&mut shutdown) => Ok(Outcome::Closed),
    };
    let outcome = match negotiated {
        Ok(o) => o,
        Err(e) => {
            count_failure(&stats, &e);
            return Err(e);
        }
    };
    match outcome {
        Outcome::Transmission(export) => {
            stats.set_export(&export.name);
            transmit(shared, export, rd, wr, stats).await
        }
        Outcome::Closed => {
            let _ = wr.shutdown().await;
            Ok(())
        }
    }
}

/// Counts a connection-ending error unless it is just the client hanging up.
fn count_failure(stats: &ConnectionStats, err: &Error) {
    if !matches!(err, Error::Io(e) if is_disconnect(e)) {
        stats.error();
    }
}

/// Resolves once the server starts shutting down (never, if the server is gone).
async fn shutdown_requested(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` on EOF (clean or mid-message).
async fn read_full<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut [u8]) -> Result<bool, Error> {
    match rd.read_exact(buf).await {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(Error::Io(e)),
    }
}

/// Checks a request against the export; `Err` is the errno to reply with.
///
/// The spec's errors: unknown command or flag, misalignment to an advertised minimum block
/// size, or a READ/TRIM/CACHE past the end give `EINVAL`; a WRITE/WRITE_ZEROES past the end
/// gives `ENOSPC`; a write to a read-only export `EPERM`.
fn validate(
    req: &RequestHeader,
    cmd: Command,
    backend: &dyn BlockBackend,
    max: u32,
) -> Result<(), Errno> {
    if let Command::Unknown(_) = cmd {
        return Err(Errno::Inval);
    }
    if req.flags & !cmd.allowed_flags() != 0 {
        return Err(Errno::Inval);
    }
    let modifies = matches!(cmd, Command::Write | Command::Trim | Command::WriteZeroes);
    if modifies && backend.is_read_only() {
        return Err(Errno::Perm);
    }
    let in_range = check_range(req.offset, u64::from(req.length), backend.size()).is_ok();
    let min = u64::from(backend.block_sizes().min.max(1));
    let ranged = !matches!(cmd, Command::Flush);
    if ranged && (!req.offset.is_multiple_of(min) || !u64::from(req.length).is_multiple_of(min)) {
        return Err(Errno::Inval);
    }
    match cmd {
        Command::Read if req.length > max => Err(Errno::Inval),
        Command::Write if req.length > max => Err(Errno::Inval),
        Command::Write | Command::WriteZeroes if !in_range => Err(Errno::NoSpc),
        Command::Read | Command::Trim | Command::Cache if !in_range => Err(Errno::Inval),
        _ => Ok(()),
    }
}

/// Performs one validated request on the backend.
async fn execute(
    backend: &dyn BlockBackend,
    req: RequestHeader,
    cmd: Command,
    payload: Option<Bytes>,
    stats: &ConnectionStats,
) -> Result<Option<Bytes>, Errno> {
    let fua = req.flags & proto::CMD_FLAG_FUA != 0;
    let (offset, len) = (req.offset, req.length);
    let result = match cmd {
        Command::Read => match backend.read(offset, len).await {
            Ok(data) if data.len() == len as usize => {
                stats.read_bytes(data.len() as u64);
                return Ok(Some(data));
            }
            Ok(_) => return Err(Errno::Io),
            Err(e) => Err(e),
        },
        Command::Write => {
            let data = payload.unwrap_or_default();
            let n = data.len() as u64;
            let r = backend.write(offset, data, fua).await;
            if r.is_ok() {
                stats.written_bytes(n);
            }
            r
        }
        Command::Flush => backend.flush().await,
        Command::Trim => match backend.trim(offset, len).await {
            Ok(()) if fua => backend.flush().await,
            r => r,
        },
        Command::WriteZeroes => {
            let no_hole = req.flags & proto::CMD_FLAG_NO_HOLE != 0;
            backend
                .write_zeroes(offset, len, ZeroFlags { fua, no_hole })
                .await
        }
        Command::Cache => backend.cache(offset, len).await,
        _ => return Err(Errno::Inval),
    };
    result.map(|()| None).map_err(|e| e.errno())
}

/// Writes replies as they arrive; exits when every sender is gone or the socket fails.
async fn write_replies<W: AsyncWrite + Unpin>(
    mut wr: BufWriter<W>,
    mut rx: mpsc::Receiver<Reply>,
    stats: Arc<ConnectionStats>,
) -> std::io::Result<()> {
    while let Some(reply) = rx.recv().await {
        let (error, data) = match &reply.result {
            Ok(data) => (0, data.as_ref()),
            Err(errno) => {
                stats.error();
                (errno.code(), None)
            }
        };
        wr.write_all(
            &SimpleReply {
                error,
                handle: reply.handle,
            }
            .encode(),
        )
        .await?;
        if let Some(data) = data {
            wr.write_all(data).await?;
        }
        drop(reply);
        if rx.is_empty() {
            wr.flush().await?;
        }
    }
    wr.flush().await?;
    wr.shutdown().await
}

/// Reads a WRITE's payload. An oversized payload (above `max`) is read and discarded so
/// the stream stays in sync, and `None` is returned (validation then answers `EINVAL`);
/// above `max_discard` the connection is closed. `Err` carries how the reader loop ends:
/// `Ok(())` for EOF mid-payload (an abrupt disconnect; the partial write is not applied).
async fn take_payload<R: AsyncRead + Unpin>(
    rd: &mut R,
    req: &RequestHeader,
    max: u32,
    max_discard: u32,
) -> Result<Option<Bytes>, Result<(), Error>> {
    let eof_or = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Ok(())
        } else {
            Err(Error::Io(e))
        }
    };
    if req.length <= max {
        return read_payload(rd, req.length as usize)
            .await
            .map(Some)
            .map_err(eof_or);
    }
    if req.length > max_discard {
        return Err(Err(Error::Protocol(ParseError::TooLong {
            len: u64::from(req.length),
            max: u64::from(max_discard),
        })));
    }
    let want = u64::from(req.length);
    match tokio::io::copy(&mut rd.take(want), &mut tokio::io::sink()).await {
        Ok(n) if n == want => Ok(None),
        Ok(_) => Err(Ok(())),
        Err(e) => Err(eof_or(e)),
    }
}

/// The transmission phase: the reader loop (see the module docs).
async fn transmit<R, W>(
    shared: Arc<Shared>,
    export: Export,
    mut rd: BufReader<R>,
    wr: BufWriter<W>,
    stats: Arc<ConnectionStats>,
) -> Result<(), Error>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let cfg = &shared.config;
    let max = max_payload(&shared, &export);
    let slots = Arc::new(Semaphore::new(cfg.max_in_flight));
    let budget = cfg.max_in_flight_bytes;
    let bytes = Arc::new(Semaphore::new(budget as usize));
    let (tx, rx) = mpsc::channel::<Reply>(cfg.max_in_flight + 1);
    let writer = tokio::spawn(write_replies(wr, rx, Arc::clone(&stats)));
    let mut shutdown = shared.shutdown.clone();

    let result: Result<(), Error> = loop {
        let slot = tokio::select! {
            p = Arc::clone(&slots).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break Err(Error::Closed),
            },
            _ = shutdown_requested(&mut shutdown) => break Ok(()),
        };
        let mut header = [0u8; proto::REQUEST_HEADER_LEN];
        let got = tokio::select! {
            r = read_full(&mut rd, &mut header) => r,
            _ = shutdown_requested(&mut shutdown) => break Ok(()),
            _ = tx.closed() => break Ok(()),
        };
        match got {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
        let req = match parse_request_header(&header) {
            Ok(r) => r,
            Err(e) => break Err(e.into()),
        };
        let started = std::time::Instant::now();
        let cmd = req.kind();
        stats.request(cmd);
        if req.flags & proto::CMD_FLAG_FUA != 0 {
            stats.fua();
        }
        if cmd == Command::Disc {
            break Ok(());
        }
        let buffered = matches!(cmd, Command::Read | Command::Write) && req.length <= max;
        let bytes_permit = if buffered && req.length > 0 {
            match Arc::clone(&bytes)
                .acquire_many_owned(req.length.min(budget))
                .await
            {
                Ok(p) => Some(p),
                Err(_) => break Err(Error::Closed),
            }
        } else {
            None
        };
        stats.begin();
        let in_flight = InFlight(Arc::clone(&stats));
        let payload = if cmd == Command::Write {
            match take_payload(&mut rd, &req, max, cfg.max_discard).await {
                Ok(p) => p,
                Err(stop) => break stop,
            }
        } else {
            None
        };
        let mut reply = Reply {
            handle: req.handle,
            result: Ok(None),
            _slot: slot,
            _bytes: bytes_permit,
            _in_flight: in_flight,
        };
        if let Err(errno) = validate(&req, cmd, export.backend.as_ref(), max) {
            reply.result = Err(errno);
            if tx.send(reply).await.is_err() {
                break Ok(());
            }
            continue;
        }
        let backend = Arc::clone(&export.backend);
        let tx = tx.clone();
        let task_stats = Arc::clone(&stats);
        tokio::spawn(async move {
            let mut guard = ReplyGuard {
                tx,
                reply: Some(reply),
            };
            let result = execute(backend.as_ref(), req, cmd, payload, &task_stats).await;
            task_stats.latency(cmd, started.elapsed());
            guard.send(result).await;
        });
    };

    if let Err(e) = &result {
        // Counted before the socket closes, so an observer of the close sees the count.
        count_failure(&stats, e);
    }
    drop(tx);
    let written = writer.await;
    result?;
    match written {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Io(e)),
        Err(_) => Err(Error::Closed),
    }
}
