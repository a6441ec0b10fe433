//! The byte streams a connection runs on: TCP, a unix socket (memcached -s) or TLS over
//! TCP (memcached -Z), behind one small read/write interface.
//!
//! Plain sockets are read with readiness + `try_read`, so an idle connection holds no read
//! buffer (space is reserved only once bytes are there); TLS reads through rustls, which
//! needs the buffer before it can decrypt, so an idle TLS connection keeps one reserved.
//! TLS output is flushed after every batch of replies (rustls buffers records).
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Bytes reserved per read.
pub const READ_CHUNK: usize = 16 * 1024;
/// Most segments handed to one vectored write.
pub const IOV_MAX: usize = 64;

/// One read of the socket into `buf` (which has room reserved). A read that did not fill the
/// room left the socket drained, so the socket's readiness is cleared as `WouldBlock` would
/// clear it: the next wait goes straight to the poller instead of costing a `recv` that
/// returns `EAGAIN` (one system call per request at pipeline depth 1). `try_io` takes the
/// readiness tick before the read, so an edge that arrives after the read is never cleared
/// (tokio's own `poll_read` does the same after a short read).
fn read_clearing_when_short(
    buf: &mut BytesMut,
    try_io: impl FnOnce(&mut dyn FnMut() -> std::io::Result<usize>) -> std::io::Result<usize>,
    mut read: impl FnMut(&mut BytesMut) -> std::io::Result<usize>,
) -> std::io::Result<usize> {
    let room = buf.capacity() - buf.len();
    let mut short = None;
    let r = try_io(&mut || match read(buf) {
        Ok(n) if n > 0 && n < room => {
            short = Some(n);
            Err(std::io::ErrorKind::WouldBlock.into())
        }
        other => other,
    });
    match short {
        Some(n) => Ok(n),
        None => r,
    }
}

/// A place clients connect to.
pub enum Listener {
    /// TCP, with TLS when an acceptor is given.
    Tcp(TcpListener, Option<TlsAcceptor>),
    /// A unix socket; the path is shown in `stats conns`.
    Unix(UnixListener, String),
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Listener {
    /// `tcp:ADDR:PORT`, `tls:ADDR:PORT` or `unix:PATH`.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l, tls) => {
                let addr = l
                    .local_addr()
                    .map_or_else(|_| "?".to_string(), |a| a.to_string());
                format!("{}:{addr}", if tls.is_some() { "tls" } else { "tcp" })
            }
            Listener::Unix(_, path) => format!("unix:{path}"),
        }
    }
}

/// One accepted connection's byte stream.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// Wait for bytes and append some to `buf` (reserving [`READ_CHUNK`] once they are
    /// there). `Ok(0)` is end of stream. On TCP, also how long ago the kernel received the
    /// newest of them ([`crate::rxstamp`]), else `None`.
    pub async fn read_some(
        &mut self,
        buf: &mut BytesMut,
    ) -> std::io::Result<(usize, Option<std::time::Duration>)> {
        loop {
            let r = match self {
                Stream::Tcp(s) => {
                    s.readable().await?;
                    buf.reserve(READ_CHUNK);
                    let fd = std::os::fd::AsRawFd::as_raw_fd(&*s);
                    let mut age = None;
                    let r = read_clearing_when_short(
                        buf,
                        |f| s.try_io(Interest::READABLE, f),
                        |b| {
                            crate::rxstamp::recv(fd, b).map(|(n, a)| {
                                age = a;
                                n
                            })
                        },
                    );
                    match r {
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        other => return other.map(|n| (n, age)),
                    }
                }
                Stream::Unix(s) => {
                    s.readable().await?;
                    buf.reserve(READ_CHUNK);
                    read_clearing_when_short(
                        buf,
                        |f| s.try_io(Interest::READABLE, f),
                        |b| s.try_read_buf(b),
                    )
                }
                Stream::Tls(s) => {
                    buf.reserve(READ_CHUNK);
                    return s.read_buf(buf).await.map(|n| (n, None));
                }
            };
            match r {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                other => return other.map(|n| (n, None)),
            }
        }
    }

    /// Read more without waiting, if bytes are already there (plain sockets only): lets a
    /// pipeline sent in one burst be answered with one write, and a shutting-down connection
    /// answer what the client already sent. `None`: nothing more now. Reads the socket
    /// itself (`MSG_DONTWAIT`), not through tokio's readiness, which a short read cleared: a
    /// readiness-gated read would see nothing although bytes arrived since, and a closing
    /// connection would then reset its client with requests unanswered.
    pub fn read_ready(&mut self, buf: &mut BytesMut) -> Option<usize> {
        buf.reserve(READ_CHUNK);
        let fd = match self {
            Stream::Tcp(s) => std::os::fd::AsRawFd::as_raw_fd(s),
            Stream::Unix(s) => std::os::fd::AsRawFd::as_raw_fd(s),
            Stream::Tls(_) => return None,
        };
        crate::rxstamp::recv(fd, buf)
            .ok()
            .map(|(n, _)| n)
            .filter(|&n| n > 0)
    }

    /// Write all of `bytes`.
    pub async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes).await,
            Stream::Unix(s) => s.write_all(bytes).await,
            Stream::Tls(s) => s.write_all(bytes).await,
        }
    }

    /// Write all of `segs`, in order, with vectored writes: one system call for a whole
    /// batch of replies when the socket takes it (at most [`IOV_MAX`] segments per call).
    pub async fn write_segments(&mut self, segs: &[bytes::Bytes]) -> std::io::Result<()> {
        if let [one] = segs {
            return self.write_all(one).await;
        }
        let (mut i, mut off) = (0, 0);
        while i < segs.len() {
            let mut iov = [std::io::IoSlice::new(&[]); IOV_MAX];
            let mut k = 0;
            for (j, seg) in segs[i..].iter().take(IOV_MAX).enumerate() {
                let part = if j == 0 { &seg[off..] } else { &seg[..] };
                iov[k] = std::io::IoSlice::new(part);
                k += 1;
            }
            let iov = &iov[..k];
            let mut n = match self {
                Stream::Tcp(s) => s.write_vectored(iov).await?,
                Stream::Unix(s) => s.write_vectored(iov).await?,
                Stream::Tls(s) => s.write_vectored(iov).await?,
            };
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            while n > 0 && i < segs.len() {
                let left = segs[i].len() - off;
                if n >= left {
                    n -= left;
                    i += 1;
                    off = 0;
                } else {
                    off += n;
                    n = 0;
                }
            }
        }
        Ok(())
    }

    /// Push buffered output to the socket (TLS records).
    pub async fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush().await,
            _ => Ok(()),
        }
    }

    /// Close the write side cleanly (a TLS close_notify).
    pub async fn shutdown(&mut self) {
        if let Stream::Tls(s) = self {
            let _ = s.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Short reads clear the socket's readiness without an `EAGAIN` read; no later bytes may
    /// be missed for it: small messages sent one at a time, each only after the previous one
    /// was read, are all read (on both runtime flavours: on the multi-thread one the IO
    /// driver runs on another thread, so an edge can come in between the read and the clear).
    #[test]
    fn short_reads_never_miss_later_bytes() {
        for multi in [false, true] {
            let rt = if multi {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
            } else {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
            }
            .expect("runtime");
            rt.block_on(async {
                let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                let addr = l.local_addr().expect("addr");
                let client = tokio::spawn(async move {
                    let mut c = TcpStream::connect(addr).await.expect("connect");
                    let mut ack = [0u8; 1];
                    for i in 0..2000u32 {
                        c.write_all(format!("m{i}\n").as_bytes())
                            .await
                            .expect("send");
                        c.read_exact(&mut ack).await.expect("ack");
                    }
                });
                let (s, _) = l.accept().await.expect("accept");
                let mut s = Stream::Tcp(s);
                let mut buf = BytesMut::new();
                for i in 0..2000u32 {
                    let want = format!("m{i}\n");
                    while buf.len() < want.len() {
                        let n = tokio::time::timeout(Duration::from_secs(5), s.read_some(&mut buf))
                            .await
                            .unwrap_or_else(|_| panic!("message {i} never read: a lost wake-up"))
                            .expect("read")
                            .0;
                        assert!(n > 0, "early end of stream");
                    }
                    assert_eq!(&buf.split_to(want.len())[..], want.as_bytes());
                    s.write_all(b"k").await.expect("ack");
                }
                client.await.expect("client");
            });
        }
    }
}
