//! Snapshots of the server's own `stats` counters at the start and end of a measured window,
//! so each report row carries what the server counted during exactly that window (for
//! memcached with extstore, `get_extstore` = GETs served from flash; flashtier's flash
//! counters likewise).
//!
//! Uses its own short-lived blocking connection, never a load connection, so it cannot
//! disturb the pipelines. Called from the phase runner: one snapshot from a helper thread at
//! the end of the warm-up, one after the workers join.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::error::Error;

/// Numeric `STAT name value` lines of one `stats` reply.
pub type Snapshot = BTreeMap<String, f64>;

/// Sends `stats`, then `stats extstore`, and parses the numeric values of both (flashtier
/// keeps its flash counters in the `extstore` section; memcached has most of its own in the
/// general one, which wins on a name present in both). Non-numeric values are skipped; a
/// server that answers `stats extstore` with an error contributes only the general section.
pub fn fetch(addr: &str, timeout: Duration) -> Result<Snapshot, Error> {
    let connect_err = |source| Error::Connect {
        addr: addr.to_string(),
        source,
    };
    let mut s = TcpStream::connect(addr).map_err(connect_err)?;
    s.set_read_timeout(Some(timeout)).map_err(connect_err)?;
    s.set_write_timeout(Some(timeout)).map_err(connect_err)?;
    let mut out = parse(&request(&mut s, b"stats\r\n")?);
    for (k, v) in parse(&request(&mut s, b"stats extstore\r\n")?) {
        out.entry(k).or_insert(v);
    }
    Ok(out)
}

/// Sends one stats command and reads its reply up to `END` or an error line.
fn request(s: &mut TcpStream, cmd: &[u8]) -> Result<String, Error> {
    s.write_all(cmd)?;
    let mut buf = Vec::with_capacity(8192);
    let mut chunk = [0u8; 8192];
    while !(buf.ends_with(b"END\r\n") || buf.ends_with(b"ERROR\r\n")) {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(Error::Protocol("stats reply cut short".into()));
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or(&[]));
        if buf.len() > 1 << 20 {
            return Err(Error::Protocol("stats reply larger than 1 MiB".into()));
        }
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Parses `STAT name value` lines.
pub fn parse(text: &str) -> Snapshot {
    let mut out = Snapshot::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        if w.next() != Some("STAT") {
            continue;
        }
        if let (Some(name), Some(value)) = (w.next(), w.next()) {
            if let Ok(v) = value.parse::<f64>() {
                out.insert(name.to_string(), v);
            }
        }
    }
    out
}

/// `after - before` for every stat present in both.
pub fn delta(before: &Snapshot, after: &Snapshot) -> Snapshot {
    after
        .iter()
        .filter_map(|(k, a)| before.get(k).map(|b| (k.clone(), a - b)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_subtracts() {
        let a = parse("STAT pid 10\r\nSTAT version 1.6.18\r\nSTAT get_hits 5\r\nEND\r\n");
        let b = parse("STAT pid 10\r\nSTAT get_hits 12\r\nSTAT new 1\r\nEND\r\n");
        assert_eq!(a.get("get_hits"), Some(&5.0));
        assert!(!a.contains_key("version"));
        let d = delta(&a, &b);
        assert_eq!(d.get("get_hits"), Some(&7.0));
        assert_eq!(d.get("pid"), Some(&0.0));
        assert!(!d.contains_key("new"));
    }
}
