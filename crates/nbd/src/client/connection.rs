//! [`NbdClient`]: one connection to an NBD server with many requests in flight.
//!
//! A writer task owns the write half: callers hand it encoded requests over a channel and it
//! writes them in order, flushing the socket only when the channel is empty, so concurrent
//! callers share syscalls. A reader task owns the read half, matches each simple reply to its
//! pending request by handle and completes that request's oneshot; READ payload lengths come
//! from the pending entry, which is why structured replies are not negotiated. If either task
//! fails, every pending and later request fails with [`BackendError::Disconnected`]; there is
//! no automatic reconnect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::addr::{NbdTarget, NbdUri};
use crate::client::handshake::{handshake, ExportInfo};
use crate::codec::transmission::{parse_simple_reply, Command, RequestHeader};
use crate::error::{BackendError, Errno, Error};
use crate::proto;
use crate::wire_io::read_payload;

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
    /// Set once the connection is unusable (reader or writer stopped, or DISC sent); no
    /// request may be registered after that.
    dead: bool,
}

impl Pending {
    fn fail_all(&mut self) {
        self.dead = true;
        for (_, req) in self.requests.drain() {
            let _ = req.done.send(Err(BackendError::Disconnected));
        }
    }
}

fn lock(p: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    match p.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A request on its way to the writer task.
struct Outgoing {
    header: [u8; proto::REQUEST_HEADER_LEN],
    payload: Option<Bytes>,
    /// Close the write side after this one (DISC).
    last: bool,
}

/// One pipelined connection to an NBD export.
pub struct NbdClient {
    info: ExportInfo,
    outgoing: mpsc::UnboundedSender<Outgoing>,
    pending: Arc<Mutex<Pending>>,
    next_handle: AtomicU64,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
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
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_requests(wr, rx, Arc::clone(&pending)));
        Ok(NbdClient {
            info,
            outgoing: tx,
            pending,
            next_handle: AtomicU64::new(1),
            reader,
            writer,
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

    /// Sends one request and waits for its reply. `payload` is sent after the header (WRITE)
    /// and must be `length` bytes long.
    pub async fn request(
        &self,
        cmd: Command,
        flags: u16,
        offset: u64,
        length: u32,
        payload: Option<Bytes>,
    ) -> ReplyResult {
        if payload.as_ref().is_some_and(|p| p.len() != length as usize) {
            return Err(BackendError::Invalid(
                "payload length differs from request length",
            ));
        }
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
        let out = Outgoing {
            header: header.encode(),
            payload,
            last: false,
        };
        if self.outgoing.send(out).is_err() {
            lock(&self.pending).requests.remove(&handle);
            return Err(BackendError::Disconnected);
        }
        rx.await.unwrap_or(Err(BackendError::Disconnected))
    }

    /// Sends `NBD_CMD_DISC` and closes the write side. Requests already sent still get
    /// their replies; later ones fail with `Disconnected`.
    pub async fn disconnect(&self) -> Result<(), Error> {
        lock(&self.pending).dead = true;
        let header = RequestHeader {
            flags: 0,
            command: proto::CMD_DISC,
            handle: self.next_handle.fetch_add(1, Ordering::Relaxed),
            offset: 0,
            length: 0,
        };
        self.outgoing
            .send(Outgoing {
                header: header.encode(),
                payload: None,
                last: true,
            })
            .map_err(|_| Error::Closed)
    }
}

impl Drop for NbdClient {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

/// Writer task: writes requests in order, flushing when no more are queued.
async fn write_requests<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    pending: Arc<Mutex<Pending>>,
) {
    let result: std::io::Result<()> = async {
        while let Some(out) = rx.recv().await {
            wr.write_all(&out.header).await?;
            if let Some(payload) = &out.payload {
                wr.write_all(payload).await?;
            }
            if out.last {
                wr.flush().await?;
                return wr.shutdown().await;
            }
            if rx.is_empty() {
                wr.flush().await?;
            }
        }
        Ok(())
    }
    .await;
    if result.is_err() {
        lock(&pending).fail_all();
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
            match read_payload(&mut rd, req.read_len as usize).await {
                Ok(data) => Ok(Some(data)),
                Err(_) => {
                    let _ = req.done.send(Err(BackendError::Disconnected));
                    break;
                }
            }
        } else {
            Ok(None)
        };
        let _ = req.done.send(result);
    }
    lock(&pending).fail_all();
}
