//! [`NbdClient`]: one connection to an NBD server with many requests in flight.
//!
//! Senders take a lock on the write half only while writing one request (header and
//! payload), so requests are never interleaved. A reader task owns the read half, matches
//! each simple reply to its pending request by handle and completes that request's oneshot;
//! READ payload lengths come from the pending entry, which is why structured replies are not
//! negotiated. If the connection fails, every pending and later request fails with
//! [`BackendError::Disconnected`]; there is no automatic reconnect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::addr::{NbdTarget, NbdUri};
use crate::client::handshake::{handshake, ExportInfo};
use crate::codec::transmission::{parse_simple_reply, Command, RequestHeader};
use crate::error::{BackendError, Errno, Error};
use crate::proto;

type BoxRead = Box<dyn AsyncRead + Unpin + Send>;
type BoxWrite = Box<dyn AsyncWrite + Unpin + Send>;
type ReplyResult = Result<Option<Bytes>, BackendError>;

struct PendingRequest {
    /// Bytes of data that follow a successful reply (READ length, else 0).
    read_len: u32,
    done: oneshot::Sender<ReplyResult>,
}

#[derive(Default)]
struct Pending {
    requests: HashMap<u64, PendingRequest>,
    /// Set once the reader has stopped; no request may be registered after that.
    dead: bool,
}

fn lock(p: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    match p.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// One pipelined connection to an NBD export.
pub struct NbdClient {
    info: ExportInfo,
    writer: tokio::sync::Mutex<BufWriter<BoxWrite>>,
    pending: Arc<Mutex<Pending>>,
    next_handle: AtomicU64,
    reader: JoinHandle<()>,
}

impl std::fmt::Debug for NbdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdClient")
            .field("info", &self.info)
            .finish()
    }
}

impl NbdClient {
    /// Connects to `uri` and negotiates its export.
    pub async fn connect(uri: &NbdUri) -> Result<NbdClient, Error> {
        let (rd, wr): (BoxRead, BoxWrite) = match &uri.target {
            NbdTarget::Tcp { host, port } => {
                let s = TcpStream::connect((host.as_str(), *port)).await?;
                s.set_nodelay(true)?;
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            NbdTarget::Unix(path) => {
                let (r, w) = UnixStream::connect(path).await?.into_split();
                (Box::new(r), Box::new(w))
            }
        };
        Self::from_halves(rd, wr, &uri.export).await
    }

    /// Negotiates `export` over an already-connected stream's halves.
    pub async fn from_halves(rd: BoxRead, wr: BoxWrite, export: &str) -> Result<NbdClient, Error> {
        let mut rd = BufReader::with_capacity(256 * 1024, rd);
        let mut wr = BufWriter::with_capacity(256 * 1024, wr);
        let info = handshake(&mut rd, &mut wr, export).await?;
        let pending = Arc::new(Mutex::new(Pending::default()));
        let reader = tokio::spawn(read_replies(rd, Arc::clone(&pending)));
        Ok(NbdClient {
            info,
            writer: tokio::sync::Mutex::new(wr),
            pending,
            next_handle: AtomicU64::new(1),
            reader,
        })
    }

    /// What the server said about the export.
    pub fn info(&self) -> &ExportInfo {
        &self.info
    }

    /// True while the connection is usable.
    pub fn is_alive(&self) -> bool {
        !lock(&self.pending).dead
    }

    /// Sends one request and waits for its reply. `payload` is sent after the header (WRITE).
    pub async fn request(
        &self,
        cmd: Command,
        flags: u16,
        offset: u64,
        length: u32,
        payload: Option<&[u8]>,
    ) -> ReplyResult {
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = lock(&self.pending);
            if p.dead {
                return Err(BackendError::Disconnected);
            }
            let read_len = if cmd == Command::Read { length } else { 0 };
            p.requests
                .insert(handle, PendingRequest { read_len, done: tx });
        }
        let header = RequestHeader {
            flags,
            command: cmd.to_wire(),
            handle,
            offset,
            length,
        };
        let sent = async {
            let mut wr = self.writer.lock().await;
            wr.write_all(&header.encode()).await?;
            if let Some(data) = payload {
                wr.write_all(data).await?;
            }
            wr.flush().await
        }
        .await;
        if sent.is_err() {
            lock(&self.pending).requests.remove(&handle);
            return Err(BackendError::Disconnected);
        }
        rx.await.unwrap_or(Err(BackendError::Disconnected))
    }

    /// Sends `NBD_CMD_DISC` and closes the write side; pending requests still complete.
    pub async fn disconnect(&self) -> Result<(), Error> {
        let header = RequestHeader {
            flags: 0,
            command: proto::CMD_DISC,
            handle: self.next_handle.fetch_add(1, Ordering::Relaxed),
            offset: 0,
            length: 0,
        };
        let mut wr = self.writer.lock().await;
        wr.write_all(&header.encode()).await?;
        wr.flush().await?;
        wr.shutdown().await?;
        Ok(())
    }
}

impl Drop for NbdClient {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Reader task: completes pending requests until the stream ends or breaks the protocol.
async fn read_replies<R: AsyncRead + Unpin>(mut rd: R, pending: Arc<Mutex<Pending>>) {
    loop {
        let mut header = [0u8; proto::SIMPLE_REPLY_LEN];
        if rd.read_exact(&mut header).await.is_err() {
            break;
        }
        let Ok(reply) = parse_simple_reply(&header) else {
            break;
        };
        let Some(req) = lock(&pending).requests.remove(&reply.handle) else {
            break; // a reply to nothing: the stream cannot be trusted any more
        };
        let result = if reply.error != 0 {
            Err(BackendError::Remote(Errno::from_code(reply.error)))
        } else if req.read_len > 0 {
            let mut buf = BytesMut::zeroed(req.read_len as usize);
            if rd.read_exact(&mut buf).await.is_err() {
                let _ = req.done.send(Err(BackendError::Disconnected));
                break;
            }
            Ok(Some(buf.freeze()))
        } else {
            Ok(None)
        };
        let _ = req.done.send(result);
    }
    let mut p = lock(&pending);
    p.dead = true;
    for (_, req) in p.requests.drain() {
        let _ = req.done.send(Err(BackendError::Disconnected));
    }
}
