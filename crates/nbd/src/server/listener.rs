//! Listening sockets: TCP or Unix. Binding a Unix path removes a stale socket file left by
//! a killed server (but refuses to replace a live one or a non-socket file); dropping the
//! listener removes the file it created.

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::addr::ListenAddr;
use crate::error::Error;
use crate::server::Server;

/// A bound listening socket.
#[derive(Debug)]
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// Unix socket and the path to remove on drop.
    Unix(UnixListener, PathBuf),
}

/// An accepted connection.
#[derive(Debug)]
pub enum Accepted {
    /// TCP stream (Nagle disabled).
    Tcp(TcpStream),
    /// Unix stream.
    Unix(UnixStream),
}

impl Accepted {
    /// Serves this connection on `server`.
    pub async fn serve(self, server: &Server, peer: String) -> Result<(), Error> {
        match self {
            Accepted::Tcp(s) => server.serve_stream(s, peer).await,
            Accepted::Unix(s) => server.serve_stream(s, peer).await,
        }
    }
}

impl Listener {
    /// Binds `addr`.
    pub async fn bind(addr: &ListenAddr) -> Result<Listener, Error> {
        match addr {
            ListenAddr::Tcp(a) => Ok(Listener::Tcp(TcpListener::bind(a.as_str()).await?)),
            ListenAddr::Unix(path) => {
                if let Ok(meta) = std::fs::symlink_metadata(path) {
                    if !meta.file_type().is_socket() {
                        return Err(Error::Config(format!(
                            "{} exists and is not a socket",
                            path.display()
                        )));
                    }
                    if UnixStream::connect(path).await.is_ok() {
                        return Err(Error::Config(format!(
                            "{} is in use by a live server",
                            path.display()
                        )));
                    }
                    std::fs::remove_file(path)?;
                }
                Ok(Listener::Unix(UnixListener::bind(path)?, path.clone()))
            }
        }
    }

    /// The bound address in [`ListenAddr`] syntax (the real port when bound to port 0).
    pub fn local_addr(&self) -> Result<ListenAddr, Error> {
        match self {
            Listener::Tcp(l) => Ok(ListenAddr::Tcp(l.local_addr()?.to_string())),
            Listener::Unix(_, p) => Ok(ListenAddr::Unix(p.clone())),
        }
    }

    /// Accepts one connection and names its peer.
    pub async fn accept(&self) -> std::io::Result<(Accepted, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                s.set_nodelay(true)?;
                Ok((Accepted::Tcp(s), peer.to_string()))
            }
            Listener::Unix(l, _) => {
                let (s, _) = l.accept().await?;
                Ok((Accepted::Unix(s), "unix".to_string()))
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}
