//! Addresses: where a server listens ([`ListenAddr`]: `HOST:PORT` or `unix:PATH`) and which
//! server a client connects to ([`NbdUri`]: the NBD URI forms `nbd://host[:port][/export]`
//! and `nbd+unix:///export?socket=PATH`, after the NBD URI specification that qemu and
//! libnbd follow). TLS forms (`nbds://`) are refused: this crate speaks no TLS.

#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::Error;
use crate::proto;

/// Where a server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP `host:port` (anything `TcpListener::bind` accepts, e.g. `127.0.0.1:10809`).
    Tcp(String),
    /// A Unix socket path; a stale socket file there is removed at bind time.
    Unix(PathBuf),
}

impl FromStr for ListenAddr {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(Error::Address(format!("{s:?}: empty unix socket path")));
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        match s.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(ListenAddr::Tcp(s.to_string()))
            }
            _ => Err(Error::Address(format!(
                "{s:?}: expected HOST:PORT or unix:PATH"
            ))),
        }
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// Transport part of an NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NbdTarget {
    /// TCP host (IPv6 without brackets) and port (default 10809).
    Tcp { host: String, port: u16 },
    /// Unix socket path.
    Unix(PathBuf),
}

/// A parsed NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    /// How to reach the server.
    pub target: NbdTarget,
    /// Export name; empty for the default export.
    pub export: String,
}

fn percent_decode(s: &str) -> Result<String, Error> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| Error::Address(format!("{s:?}: bad percent escape")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::Address(format!("{s:?}: not UTF-8")))
}

impl FromStr for NbdUri {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::Address(format!("{s:?}: {why}"));
        let (scheme, rest) = s.split_once("://").ok_or_else(|| bad("missing scheme"))?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (rest.get(..i).unwrap_or(""), rest.get(i + 1..).unwrap_or("")),
            None => (rest, ""),
        };
        let export = percent_decode(path)?;
        let mut socket = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if k == "socket" {
                socket = Some(percent_decode(v)?);
            }
        }
        let target = match scheme {
            "nbd" => {
                if socket.is_some() {
                    return Err(bad("socket= is only valid with nbd+unix://"));
                }
                let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
                    let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
                    (host, after.strip_prefix(':'))
                } else {
                    match authority.rsplit_once(':') {
                        Some((h, p)) => (h, Some(p)),
                        None => (authority, None),
                    }
                };
                let port = match port {
                    Some(p) => p.parse::<u16>().map_err(|_| bad("bad port"))?,
                    None => proto::DEFAULT_PORT,
                };
                let host = if host.is_empty() { "localhost" } else { host };
                NbdTarget::Tcp {
                    host: host.to_string(),
                    port,
                }
            }
            "nbd+unix" => {
                if !authority.is_empty() {
                    return Err(bad("nbd+unix:// takes no host"));
                }
                let socket = socket.ok_or_else(|| bad("nbd+unix:// needs ?socket=PATH"))?;
                NbdTarget::Unix(PathBuf::from(socket))
            }
            "nbds" | "nbds+unix" => return Err(bad("TLS (nbds) is not supported")),
            _ => return Err(bad("scheme must be nbd:// or nbd+unix://")),
        };
        Ok(NbdUri { target, export })
    }
}

impl fmt::Display for NbdUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            NbdTarget::Tcp { host, port } if host.contains(':') => {
                write!(f, "nbd://[{host}]:{port}/{}", self.export)
            }
            NbdTarget::Tcp { host, port } => write!(f, "nbd://{host}:{port}/{}", self.export),
            NbdTarget::Unix(p) => write!(f, "nbd+unix:///{}?socket={}", self.export, p.display()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;

    fn uri(s: &str) -> NbdUri {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn tcp_forms() {
        assert_eq!(
            uri("nbd://example.com"),
            NbdUri {
                target: NbdTarget::Tcp {
                    host: "example.com".into(),
                    port: 10809
                },
                export: "".into()
            }
        );
        assert_eq!(
            uri("nbd://127.0.0.1:1234/disk%20a"),
            NbdUri {
                target: NbdTarget::Tcp {
                    host: "127.0.0.1".into(),
                    port: 1234
                },
                export: "disk a".into()
            }
        );
        assert_eq!(
            uri("nbd://[::1]:99/x"),
            NbdUri {
                target: NbdTarget::Tcp {
                    host: "::1".into(),
                    port: 99
                },
                export: "x".into()
            }
        );
        assert_eq!(uri("nbd://[::1]/").to_string(), "nbd://[::1]:10809/");
    }

    #[test]
    fn unix_forms() {
        assert_eq!(
            uri("nbd+unix:///exp?socket=/tmp/s.sock"),
            NbdUri {
                target: NbdTarget::Unix("/tmp/s.sock".into()),
                export: "exp".into()
            }
        );
        assert_eq!(uri("nbd+unix://?socket=/a").export, "");
        assert_eq!(
            uri("nbd+unix:///?socket=/a").to_string(),
            "nbd+unix:///?socket=/a"
        );
    }

    #[test]
    fn rejects() {
        for s in [
            "nbd+unix:///x",
            "nbds://h/x",
            "http://h",
            "nbd://h:notaport",
            "nbd://h/%zz",
            "nbd+unix://host/x?socket=/a",
            "plain",
        ] {
            assert!(s.parse::<NbdUri>().is_err(), "{s}");
        }
    }

    #[test]
    fn listen_addrs() {
        assert_eq!(
            "unix:/tmp/a".parse::<ListenAddr>().ok(),
            Some(ListenAddr::Unix("/tmp/a".into()))
        );
        assert_eq!(
            "127.0.0.1:0".parse::<ListenAddr>().ok(),
            Some(ListenAddr::Tcp("127.0.0.1:0".into()))
        );
        assert!("unix:".parse::<ListenAddr>().is_err());
        assert!("nohost".parse::<ListenAddr>().is_err());
        assert!(":80".parse::<ListenAddr>().is_err());
    }
}
