//! [`NbdClientBackend`]: a [`BlockBackend`] served by a remote NBD export.
//!
//! Requests go round-robin over up to `connections` pipelined connections (more than one
//! only when the remote advertises `CAN_MULTI_CONN`); a flush through this backend covers
//! every write it has completed, so the backend itself allows multi-conn. Invariant: after
//! any reconnect the first FLUSH returns `EIO` (after flushing), because writes acknowledged
//! on the lost connection may not be durable; a write-back cache above then keeps its dirty
//! data and writes it again. Splitting, emulated features, reconnection: [`NbdClientBackend`].
//!
//! Threads: any runtime task may call in; slots are behind `RwLock`s held only to clone an
//! `Arc`, reconnects are serialised by an async mutex.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::addr::NbdUri;
use crate::client::connection::NbdClient;
use crate::client::handshake::ExportInfo;
use crate::codec::transmission::Command;
use crate::error::{BackendError, Errno, Error};
use crate::proto;
use flashtier_backend::{check_range, BackendFuture, BlockBackend, BlockSizes, ZeroFlags};

/// Largest zero buffer written when the remote lacks WRITE_ZEROES. Default: 1 MiB.
const ZERO_CHUNK: u32 = 1 << 20;
/// How long one reconnection attempt may take. Default: 5 s.
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type ReplyResult = Result<Option<Bytes>, BackendError>;

/// A remote NBD export used as a block backend.
///
/// READ and WRITE longer than the remote's maximum payload are split. Features the remote
/// lacks are emulated where the semantics allow: FUA becomes write + FLUSH, WRITE_ZEROES
/// becomes writes of zero buffers, TRIM becomes a no-op, FLUSH without `SEND_FLUSH` is a
/// no-op (the remote then has no volatile cache to flush). Requests not aligned to the
/// remote's minimum block size are refused with `EINVAL` (no read-modify-write).
///
/// Reconnection: a request that finds its connection dead (or gets `ESHUTDOWN`) reconnects
/// that slot once and is retried once; if that fails the caller gets `EIO`. Because writes
/// acknowledged on the lost connection may not have reached stable storage, the first FLUSH
/// after any reconnect returns `EIO` (after flushing), so a write-back cache above keeps its
/// dirty data and writes it again.
#[derive(Debug)]
pub struct NbdClientBackend {
    uri: NbdUri,
    /// Connection slots; a slot's client is replaced when it is found dead.
    conns: Vec<RwLock<Arc<NbdClient>>>,
    next: AtomicUsize,
    info: ExportInfo,
    /// Largest READ/WRITE sent as one request.
    chunk: u32,
    /// Serialises reconnection attempts.
    reconnecting: tokio::sync::Mutex<()>,
    /// Set when a connection was replaced: writes it acknowledged but the remote had not yet
    /// flushed may be lost, so the next flush reports `EIO` once.
    lost_writes: AtomicBool,
    /// Successful reconnections since start.
    reconnects: AtomicU64,
}

impl NbdClientBackend {
    /// Connects to `uri` with up to `connections` connections (at least one; more only if
    /// the remote allows multi-conn).
    pub async fn connect(uri: &NbdUri, connections: usize) -> Result<Self, Error> {
        let first = NbdClient::connect(uri).await?;
        let info = first.info().clone();
        let mut conns = vec![RwLock::new(Arc::new(first))];
        if info.has(proto::FLAG_CAN_MULTI_CONN) {
            for _ in 1..connections.max(1) {
                let c = NbdClient::connect(uri).await?;
                if c.info().size != info.size || c.info().flags != info.flags {
                    return Err(Error::Handshake(
                        "export changed between connections".into(),
                    ));
                }
                conns.push(RwLock::new(Arc::new(c)));
            }
        }
        let chunk = info
            .block_sizes
            .max_payload
            .clamp(4096, proto::DEFAULT_MAX_PAYLOAD);
        let chunk = chunk - chunk % info.block_sizes.min.max(1);
        Ok(NbdClientBackend {
            uri: uri.clone(),
            conns,
            next: AtomicUsize::new(0),
            info,
            chunk,
            reconnecting: tokio::sync::Mutex::new(()),
            lost_writes: AtomicBool::new(false),
            reconnects: AtomicU64::new(0),
        })
    }

    /// Parses `uri` and connects (see [`NbdClientBackend::connect`]).
    pub async fn connect_str(uri: &str, connections: usize) -> Result<Self, Error> {
        Self::connect(&uri.parse()?, connections).await
    }

    /// What the remote said about its export.
    pub fn info(&self) -> &ExportInfo {
        &self.info
    }

    /// Number of connection slots.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Successful reconnections since the backend was created.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }

    /// Sends `NBD_CMD_DISC` on every connection.
    pub async fn disconnect(&self) -> Result<(), Error> {
        for slot in 0..self.conns.len() {
            if let Some(c) = self.client(slot) {
                c.disconnect().await?;
            }
        }
        Ok(())
    }

    fn client(&self, slot: usize) -> Option<Arc<NbdClient>> {
        let lock = self.conns.get(slot)?;
        let guard = match lock.read() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        Some(Arc::clone(&guard))
    }

    /// Picks the next live connection round-robin, or the next slot if none is alive.
    fn pick(&self) -> (usize, Option<Arc<NbdClient>>) {
        let n = self.conns.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..n {
            let slot = (start + i) % n;
            if let Some(c) = self.client(slot) {
                if c.is_alive() {
                    return (slot, Some(c));
                }
            }
        }
        (start % n, self.client(start % n))
    }

    /// Replaces the client in `slot` if it is still `dead` (another task may have done it).
    async fn reconnect(
        &self,
        slot: usize,
        dead: &Arc<NbdClient>,
    ) -> Result<Arc<NbdClient>, BackendError> {
        let _guard = self.reconnecting.lock().await;
        if let Some(current) = self.client(slot) {
            if !Arc::ptr_eq(&current, dead) && current.is_alive() {
                return Ok(current);
            }
        }
        let fresh = tokio::time::timeout(RECONNECT_TIMEOUT, NbdClient::connect(&self.uri))
            .await
            .map_err(|_| BackendError::Disconnected)?
            .map_err(|_| BackendError::Disconnected)?;
        if fresh.info().size != self.info.size {
            return Err(BackendError::Invalid(
                "remote export changed size across a reconnect",
            ));
        }
        let fresh = Arc::new(fresh);
        if let Some(lock) = self.conns.get(slot) {
            let mut guard = match lock.write() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            *guard = Arc::clone(&fresh);
        }
        self.lost_writes.store(true, Ordering::SeqCst);
        self.reconnects.fetch_add(1, Ordering::Relaxed);
        Ok(fresh)
    }

    /// Sends one request, reconnecting and retrying once if the connection is gone (or the
    /// server said it is shutting down).
    async fn send(
        &self,
        cmd: Command,
        flags: u16,
        offset: u64,
        len: u32,
        payload: Option<Bytes>,
    ) -> ReplyResult {
        let (slot, client) = self.pick();
        let client = client.ok_or(BackendError::Disconnected)?;
        let result = if client.is_alive() {
            client
                .request(cmd, flags, offset, len, payload.clone())
                .await
        } else {
            Err(BackendError::Disconnected)
        };
        match result {
            Err(BackendError::Disconnected) | Err(BackendError::Remote(Errno::Shutdown)) => {
                if client.is_alive() {
                    let _ = client.disconnect().await;
                }
                let fresh = self.reconnect(slot, &client).await?;
                fresh.request(cmd, flags, offset, len, payload).await
            }
            other => other,
        }
    }

    fn check(&self, offset: u64, len: u64) -> Result<(), BackendError> {
        check_range(offset, len, self.info.size)?;
        let min = u64::from(self.info.block_sizes.min.max(1));
        if !offset.is_multiple_of(min) || !len.is_multiple_of(min) {
            return Err(BackendError::Invalid(
                "request not aligned to the remote's block size",
            ));
        }
        Ok(())
    }

    fn has(&self, flag: u16) -> bool {
        self.info.has(flag)
    }

    async fn simple(
        &self,
        cmd: Command,
        flags: u16,
        offset: u64,
        len: u32,
    ) -> Result<(), BackendError> {
        self.send(cmd, flags, offset, len, None).await.map(|_| ())
    }

    async fn write_chunks(
        &self,
        offset: u64,
        data: &Bytes,
        flags: u16,
    ) -> Result<(), BackendError> {
        let chunk = self.chunk as usize;
        let parts = (0..data.len()).step_by(chunk).map(|start| {
            let part = data.slice(start..(start + chunk).min(data.len()));
            async move {
                let len = part.len() as u32;
                self.send(
                    Command::Write,
                    flags,
                    offset + start as u64,
                    len,
                    Some(part),
                )
                .await
            }
        });
        for r in join_all(parts).await {
            r?;
        }
        Ok(())
    }

    async fn do_flush(&self) -> Result<(), BackendError> {
        // Read the flag before flushing: a reconnect during this flush sets it again.
        let lost = self.lost_writes.swap(false, Ordering::SeqCst);
        if self.has(proto::FLAG_SEND_FLUSH) {
            if let Err(e) = self.simple(Command::Flush, 0, 0, 0).await {
                if lost {
                    self.lost_writes.store(true, Ordering::SeqCst);
                }
                return Err(e);
            }
        }
        if lost {
            return Err(BackendError::Io(std::io::Error::other(
                "connection to the remote NBD server was re-established; \
                 writes acknowledged before the reconnect may not be durable",
            )));
        }
        Ok(())
    }
}

/// Awaits all futures concurrently and returns their outputs in order. Each request is
/// queued to its connection on first poll, so the pieces of a split request are pipelined.
async fn join_all<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (f, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => done = false,
                }
            }
        }
        if done {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

impl BlockBackend for NbdClientBackend {
    fn size(&self) -> u64 {
        self.info.size
    }

    fn block_sizes(&self) -> BlockSizes {
        let bs = self.info.block_sizes;
        BlockSizes {
            min: bs.min.max(1),
            preferred: bs.preferred.max(512),
            max_payload: proto::DEFAULT_MAX_PAYLOAD,
        }
    }

    fn can_multi_conn(&self) -> bool {
        true
    }

    fn is_read_only(&self) -> bool {
        self.has(proto::FLAG_READ_ONLY)
    }

    fn is_rotational(&self) -> bool {
        self.has(proto::FLAG_ROTATIONAL)
    }

    fn read(&self, offset: u64, len: u32) -> BackendFuture<'_, Bytes> {
        Box::pin(async move {
            self.check(offset, u64::from(len))?;
            if len <= self.chunk {
                let data = self.send(Command::Read, 0, offset, len, None).await?;
                return Ok(data.unwrap_or_default());
            }
            let parts = (0..len).step_by(self.chunk as usize).map(|start| {
                let n = (len - start).min(self.chunk);
                async move {
                    self.send(Command::Read, 0, offset + u64::from(start), n, None)
                        .await
                }
            });
            let mut out = BytesMut::with_capacity(len as usize);
            for part in join_all(parts).await {
                out.extend_from_slice(&part?.unwrap_or_default());
            }
            Ok(out.freeze())
        })
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            self.check(offset, data.len() as u64)?;
            let native_fua = fua && self.has(proto::FLAG_SEND_FUA);
            let flags = if native_fua { proto::CMD_FLAG_FUA } else { 0 };
            self.write_chunks(offset, &data, flags).await?;
            if fua && !native_fua {
                self.do_flush().await?;
            }
            Ok(())
        })
    }

    fn flush(&self) -> BackendFuture<'_, ()> {
        Box::pin(self.do_flush())
    }

    fn trim(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            check_range(offset, u64::from(len), self.info.size)?;
            if !self.has(proto::FLAG_SEND_TRIM) || len == 0 {
                return Ok(());
            }
            self.simple(Command::Trim, 0, offset, len).await
        })
    }

    fn write_zeroes(&self, offset: u64, len: u32, flags: ZeroFlags) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            self.check(offset, u64::from(len))?;
            if len == 0 {
                return Ok(());
            }
            let native_fua = flags.fua && self.has(proto::FLAG_SEND_FUA);
            if self.has(proto::FLAG_SEND_WRITE_ZEROES) {
                let mut wire = if native_fua { proto::CMD_FLAG_FUA } else { 0 };
                if flags.no_hole {
                    wire |= proto::CMD_FLAG_NO_HOLE;
                }
                self.simple(Command::WriteZeroes, wire, offset, len).await?;
            } else {
                let zeroes = Bytes::from(vec![0u8; len.min(ZERO_CHUNK) as usize]);
                let mut done = 0u32;
                while done < len {
                    let n = (len - done).min(ZERO_CHUNK);
                    let part = zeroes.slice(..n as usize);
                    let wire = if native_fua { proto::CMD_FLAG_FUA } else { 0 };
                    self.write_chunks(offset + u64::from(done), &part, wire)
                        .await?;
                    done += n;
                }
            }
            if flags.fua && !native_fua {
                self.do_flush().await?;
            }
            Ok(())
        })
    }

    fn cache(&self, offset: u64, len: u32) -> BackendFuture<'_, ()> {
        Box::pin(async move {
            if !self.has(proto::FLAG_SEND_CACHE) || len == 0 {
                return Ok(());
            }
            self.check(offset, u64::from(len))?;
            self.simple(Command::Cache, 0, offset, len).await
        })
    }
}
