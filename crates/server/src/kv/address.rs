//! memcached's `-l` address lists: `HOST`, `HOST:PORT`, `[V6]:PORT`, comma lists and
//! `notls:` prefixes, resolved to the TCP addresses `flashtier kv` binds. Refusals are
//! [`Usage`] errors, found before any socket is opened.
use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::Context as _;

use crate::cli::Usage;
use crate::usage;

/// The host `flashtier kv` binds when `-l` names none (memcached binds every address).
pub(super) const DEFAULT_HOST: &str = "127.0.0.1";
/// memcached's port.
pub(super) const DEFAULT_PORT: u16 = 11211;

/// One TCP address to serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    pub addr: SocketAddr,
    /// Served with TLS (under -Z, unless the `-l` entry had a `notls:` prefix).
    pub tls: bool,
}

/// memcached's `-l` entries (each a comma-separated list, `notls:` prefixed or not) with
/// `-p` as the port of entries that name none.
pub(super) fn listen_addrs(
    entries: &[String],
    port: Option<u16>,
    memcached: bool,
    tls: bool,
) -> anyhow::Result<Vec<Listen>> {
    let default_port = port.unwrap_or(DEFAULT_PORT);
    let mut items: Vec<String> = entries
        .iter()
        .flat_map(|e| e.split(','))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() {
        if memcached && port == Some(0) {
            return Ok(Vec::new());
        }
        items = if memcached {
            vec!["0.0.0.0".into()]
        } else {
            vec![DEFAULT_HOST.into()]
        };
    }
    let mut out: Vec<Listen> = Vec::new();
    for item in items {
        let (notls, rest) = match item.strip_prefix("notls:") {
            Some(r) => (true, r.to_string()),
            None => (false, item.clone()),
        };
        let (host, p) = split_host_port(&rest, Some(default_port))
            .with_context(|| Usage(format!("-l {item}: expected ADDR or ADDR:PORT")))?;
        let p = p.unwrap_or(default_port);
        for addr in resolve(&host, p)? {
            if !out.iter().any(|l| l.addr == addr) {
                out.push(Listen {
                    addr,
                    tls: tls && !notls,
                });
            }
        }
    }
    Ok(out)
}

/// `HOST`, `HOST:PORT`, `[V6]`, `[V6]:PORT` or a bare IPv6 address.
pub(super) fn split_host_port(
    s: &str,
    default: Option<u16>,
) -> anyhow::Result<(String, Option<u16>)> {
    let port = |p: &str| -> anyhow::Result<u16> {
        p.parse()
            .map_err(|_| anyhow::Error::new(Usage(format!("{s:?}: bad port {p:?}"))))
    };
    if let Some(rest) = s.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            usage!("{s:?}: unclosed [");
        };
        let p = match after.strip_prefix(':') {
            Some(p) => Some(port(p)?),
            None if after.is_empty() => default,
            None => usage!("{s:?}: expected [ADDR]:PORT"),
        };
        return Ok((host.to_string(), p));
    }
    match s.matches(':').count() {
        0 => Ok((s.to_string(), default)),
        1 => {
            let (h, p) = s.split_once(':').unwrap_or((s, ""));
            Ok((h.to_string(), Some(port(p)?)))
        }
        // A bare IPv6 address.
        _ => Ok((s.to_string(), default)),
    }
}

pub(super) fn resolve(host: &str, port: u16) -> anyhow::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = match (host, port).to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => usage!("cannot resolve listen address {host}:{port}: {e}"),
    };
    if addrs.is_empty() {
        usage!("listen address {host}:{port} resolves to nothing");
    }
    Ok(addrs)
}
