//! Opening `flashtier kv`'s sockets before anything else (and before a daemon forks): every
//! TCP address (-l/-p, with the -b backlog, `SO_REUSEADDR`, IPv6 sockets v6-only), the unix
//! socket (-s, mode from -a; a stale socket file is replaced, any other file is refused) and
//! the admin endpoint. Sockets are plain `std` listeners here; the runtime adopts them.
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use socket2::{Domain, Protocol, Socket, Type};

use super::config::KvConfig;
use crate::startup::Litter;

/// Every socket `flashtier kv` serves.
#[derive(Debug)]
pub struct Sockets {
    /// TCP listeners and whether each serves TLS.
    pub tcp: Vec<(TcpListener, bool)>,
    pub unix: Option<(UnixListener, PathBuf)>,
    pub admin: Option<TcpListener>,
}

/// Bind everything `cfg` asks for; a unix socket file created here is noted in `litter`.
pub fn bind_all(cfg: &KvConfig, litter: &mut Litter) -> anyhow::Result<Sockets> {
    let mut tcp = Vec::new();
    for l in &cfg.listen {
        let sock = bind_tcp(l.addr, cfg.backlog)
            .with_context(|| format!("cannot listen on {}", l.addr))?;
        tcp.push((sock, l.tls));
    }
    let unix = match &cfg.unix {
        Some((path, mask)) => Some((bind_unix(path, *mask, litter)?, path.clone())),
        None => None,
    };
    let admin = match cfg.admin {
        Some(addr) => Some(
            bind_tcp(addr, 128).with_context(|| format!("cannot listen on {addr} (--admin)"))?,
        ),
        None => None,
    };
    Ok(Sockets { tcp, unix, admin })
}

fn bind_tcp(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // A restart does not wait for old connections' TIME_WAIT.
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.bind(&addr.into())?;
    sock.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

fn bind_unix(path: &PathBuf, mask: u32, litter: &mut Litter) -> anyhow::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            // A stale socket of an earlier run (memcached removes it too).
            std::fs::remove_file(path)
                .with_context(|| format!("-s {}: cannot remove the old socket", path.display()))?;
        }
        Ok(_) => bail!(
            "-s {}: a file that is not a socket is in the way; refusing to replace it",
            path.display()
        ),
        Err(_) => {}
    }
    litter.note_file(path);
    let l = UnixListener::bind(path)
        .with_context(|| format!("cannot listen on unix socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mask))
        .with_context(|| format!("-a: cannot set the mode of {}", path.display()))?;
    l.set_nonblocking(true)?;
    Ok(l)
}
