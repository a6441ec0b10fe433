//! [`NbdClientBackend`]: a [`BlockBackend`] served by a remote NBD export.
//!
//! Requests are spread round-robin over up to `connections` pipelined connections; more
//! than one is opened only when the remote advertises `CAN_MULTI_CONN`, so that one FLUSH on
//! any connection covers writes completed on all of them. Either way a flush through this
//! backend covers every write it has completed, so the backend itself allows multi-conn.
//!
//! READ and WRITE longer than the remote's maximum payload are split. Features the remote
//! lacks are emulated where the semantics allow: FUA becomes write + FLUSH, WRITE_ZEROES
//! becomes writes of zero buffers, TRIM becomes a no-op, FLUSH without `SEND_FLUSH` is a
//! no-op (the remote then has no volatile cache to flush). Requests not aligned to the
//! remote's minimum block size are refused with `EINVAL` (no read-modify-write).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

use bytes::{Bytes, BytesMut};

use crate::addr::NbdUri;
use crate::backend::{check_range, BackendFuture, BlockBackend, BlockSizes, ZeroFlags};
use crate::client::connection::NbdClient;
use crate::client::handshake::ExportInfo;
use crate::codec::transmission::Command;
use crate::error::{BackendError, Error};
use crate::proto;

/// Largest zero buffer written when the remote lacks WRITE_ZEROES. Default: 1 MiB.
const ZERO_CHUNK: u32 = 1 << 20;

/// A remote NBD export used as a block backend.
#[derive(Debug)]
pub struct NbdClientBackend {
    conns: Vec<NbdClient>,
    next: AtomicUsize,
    info: ExportInfo,
    /// Largest READ/WRITE sent as one request.
    chunk: u32,
}

impl NbdClientBackend {
    /// Connects to `uri` with up to `connections` connections (at least one; more only if
    /// the remote allows multi-conn).
    pub async fn connect(uri: &NbdUri, connections: usize) -> Result<Self, Error> {
        let first = NbdClient::connect(uri).await?;
        let info = first.info().clone();
        let mut conns = vec![first];
        if info.has(proto::FLAG_CAN_MULTI_CONN) {
            for _ in 1..connections.max(1) {
                let c = NbdClient::connect(uri).await?;
                if c.info().size != info.size || c.info().flags != info.flags {
                    return Err(Error::Handshake(
                        "export changed between connections".into(),
                    ));
                }
                conns.push(c);
            }
        }
        let chunk = info
            .block_sizes
            .max_payload
            .clamp(4096, proto::DEFAULT_MAX_PAYLOAD);
        let chunk = chunk - chunk % info.block_sizes.min.max(1);
        Ok(NbdClientBackend {
            conns,
            next: AtomicUsize::new(0),
            info,
            chunk,
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

    /// Number of open connections.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Sends `NBD_CMD_DISC` on every connection.
    pub async fn disconnect(&self) -> Result<(), Error> {
        for c in &self.conns {
            c.disconnect().await?;
        }
        Ok(())
    }

    fn conn(&self) -> Result<&NbdClient, BackendError> {
        let n = self.conns.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .filter_map(|i| self.conns.get((start + i) % n))
            .find(|c| c.is_alive())
            .ok_or(BackendError::Disconnected)
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
        self.conn()?
            .request(cmd, flags, offset, len, None)
            .await
            .map(|_| ())
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
                let conn = self.conn()?;
                conn.request(
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
        if self.has(proto::FLAG_SEND_FLUSH) {
            self.simple(Command::Flush, 0, 0, 0).await
        } else {
            Ok(())
        }
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
                let data = self
                    .conn()?
                    .request(Command::Read, 0, offset, len, None)
                    .await?;
                return Ok(data.unwrap_or_default());
            }
            let parts = (0..len).step_by(self.chunk as usize).map(|start| {
                let n = (len - start).min(self.chunk);
                async move {
                    let conn = self.conn()?;
                    conn.request(Command::Read, 0, offset + u64::from(start), n, None)
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
