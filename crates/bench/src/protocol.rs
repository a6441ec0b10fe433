//! Request encoding and incremental reply parsing for the memcached text and meta protocols.
//!
//! Only what the generator sends: `get`/`set`/`delete` (text) or `mg <key> v`/`ms <key> <len>`/
//! `md <key>` (meta).
//! Replies arrive in request order on a connection, so the parser is told which operation the
//! next reply answers. It reads bytes from a server under test and never trusts them: no
//! indexing or unwrapping, and a reply that does not fit the request is an error, not a panic.
//! Used by the worker thread that owns the connection.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// Which protocol dialect requests use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Classic text commands: `get`, `set`, `delete`.
    Text,
    /// Meta commands: `mg <key> v`, `ms <key> <len>`, `md <key>`.
    Meta,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Text => "text",
            Protocol::Meta => "meta",
        })
    }
}

impl FromStr for Protocol {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "text" => Ok(Protocol::Text),
            "meta" => Ok(Protocol::Meta),
            _ => Err(Error::Config(format!("unknown protocol {s:?} (text|meta)"))),
        }
    }
}

/// The kind of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A read.
    Get,
    /// A write.
    Set,
    /// A removal.
    Delete,
}

/// Appends a read request for `key`.
pub fn encode_get(out: &mut Vec<u8>, proto: Protocol, key: &[u8]) {
    match proto {
        Protocol::Text => out.extend_from_slice(b"get "),
        Protocol::Meta => out.extend_from_slice(b"mg "),
    }
    out.extend_from_slice(key);
    match proto {
        Protocol::Text => out.extend_from_slice(b"\r\n"),
        Protocol::Meta => out.extend_from_slice(b" v\r\n"),
    }
}

/// Appends a write request storing `value` under `key` (flags 0, no expiry).
pub fn encode_set(out: &mut Vec<u8>, proto: Protocol, key: &[u8], value: &[u8]) {
    match proto {
        Protocol::Text => out.extend_from_slice(b"set "),
        Protocol::Meta => out.extend_from_slice(b"ms "),
    }
    out.extend_from_slice(key);
    match proto {
        Protocol::Text => out.extend_from_slice(b" 0 0 "),
        Protocol::Meta => out.push(b' '),
    }
    push_decimal(out, value.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends a delete request for `key` (no flags: the reply is `DELETED`/`NOT_FOUND` or
/// `HD`/`NF`, never suppressed).
pub fn encode_delete(out: &mut Vec<u8>, proto: Protocol, key: &[u8]) {
    match proto {
        Protocol::Text => out.extend_from_slice(b"delete "),
        Protocol::Meta => out.extend_from_slice(b"md "),
    }
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal.
pub fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        if let Some(slot) = buf.get_mut(i) {
            *slot = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(buf.get(i..).unwrap_or(&[]));
}

/// One parsed reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A read found the key; the value is `buf[start..start + len]` of the parsed buffer,
    /// and `key` (text protocol only) is where the echoed key sits.
    Hit {
        /// Offset of the value's first byte.
        start: usize,
        /// Value length.
        len: usize,
        /// Offset and length of the key echoed in a text `VALUE` line.
        key: Option<(usize, usize)>,
    },
    /// A read found nothing.
    Miss,
    /// A write was stored.
    Stored,
    /// A write was refused without an error (`NOT_STORED`, `NS`, `EXISTS`, `NOT_FOUND`).
    NotStored,
    /// A delete removed the key (`DELETED`, `HD`).
    Deleted,
    /// A delete found no key (`NOT_FOUND`, `NF`).
    NotFound,
    /// `SERVER_ERROR ...`: the server failed (out of memory, too large, ...).
    ServerError,
    /// `CLIENT_ERROR ...` or `ERROR`: the server rejected the request.
    ClientError,
}

/// Parses the reply to `kind` at the start of `buf`. `Ok(None)` means more bytes are needed;
/// `Ok(Some((reply, consumed)))` gives the reply and how many bytes it took.
pub fn parse_reply(
    buf: &[u8],
    proto: Protocol,
    kind: OpKind,
) -> Result<Option<(Reply, usize)>, Error> {
    let Some(eol) = memchr_crlf(buf) else {
        if buf.len() > 8192 {
            return Err(Error::Protocol("reply line longer than 8 KiB".into()));
        }
        return Ok(None);
    };
    let line = buf.get(..eol).unwrap_or(&[]);
    let after = eol + 2;
    if line.starts_with(b"SERVER_ERROR") {
        return Ok(Some((Reply::ServerError, after)));
    }
    if line.starts_with(b"CLIENT_ERROR") || line == b"ERROR" {
        return Ok(Some((Reply::ClientError, after)));
    }
    let bad = || {
        Error::Protocol(format!(
            "unexpected reply {:?} to {kind:?}",
            String::from_utf8_lossy(line.get(..line.len().min(80)).unwrap_or(&[]))
        ))
    };
    match (proto, kind) {
        (Protocol::Text, OpKind::Set) | (Protocol::Meta, OpKind::Set) => match line {
            b"STORED" | b"HD" => Ok(Some((Reply::Stored, after))),
            b"NOT_STORED" | b"NS" | b"EXISTS" | b"EX" | b"NOT_FOUND" | b"NF" => {
                Ok(Some((Reply::NotStored, after)))
            }
            _ if line.starts_with(b"HD ") => Ok(Some((Reply::Stored, after))),
            _ if line.starts_with(b"NS ") => Ok(Some((Reply::NotStored, after))),
            _ => Err(bad()),
        },
        // Strict per dialect: a text server answering `HD` to `delete` is a bug worth seeing.
        (Protocol::Text, OpKind::Delete) => match line {
            b"DELETED" => Ok(Some((Reply::Deleted, after))),
            b"NOT_FOUND" => Ok(Some((Reply::NotFound, after))),
            _ => Err(bad()),
        },
        (Protocol::Meta, OpKind::Delete) => match line {
            b"HD" => Ok(Some((Reply::Deleted, after))),
            b"NF" => Ok(Some((Reply::NotFound, after))),
            _ if line.starts_with(b"HD ") => Ok(Some((Reply::Deleted, after))),
            _ if line.starts_with(b"NF ") => Ok(Some((Reply::NotFound, after))),
            _ => Err(bad()),
        },
        (Protocol::Text, OpKind::Get) => {
            if line == b"END" {
                return Ok(Some((Reply::Miss, after)));
            }
            // VALUE <key> <flags> <bytes> [<cas>]
            let mut words = line.split(|&b| b == b' ');
            if words.next() != Some(b"VALUE".as_slice()) {
                return Err(bad());
            }
            let key = words.next().ok_or_else(bad)?;
            let _flags = words.next().ok_or_else(bad)?;
            let len = parse_usize(words.next().ok_or_else(bad)?).ok_or_else(bad)?;
            let key_off = 6;
            let start = after;
            let data_end = start + len;
            // value, "\r\n", "END\r\n"
            let total = data_end + 2 + 5;
            if buf.len() < total {
                return Ok(None);
            }
            if buf.get(data_end..total) != Some(b"\r\nEND\r\n".as_slice()) {
                return Err(bad());
            }
            Ok(Some((
                Reply::Hit {
                    start,
                    len,
                    key: Some((key_off, key.len())),
                },
                total,
            )))
        }
        (Protocol::Meta, OpKind::Get) => {
            if line == b"EN" {
                return Ok(Some((Reply::Miss, after)));
            }
            // VA <len> <flags>*
            let mut words = line.split(|&b| b == b' ');
            if words.next() != Some(b"VA".as_slice()) {
                return Err(bad());
            }
            let len = parse_usize(words.next().ok_or_else(bad)?).ok_or_else(bad)?;
            let start = after;
            let total = start + len + 2;
            if buf.len() < total {
                return Ok(None);
            }
            if buf.get(start + len..total) != Some(b"\r\n".as_slice()) {
                return Err(bad());
            }
            Ok(Some((
                Reply::Hit {
                    start,
                    len,
                    key: None,
                },
                total,
            )))
        }
    }
}

fn memchr_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

fn parse_usize(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 12 {
        return None;
    }
    let mut n = 0usize;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + usize::from(b - b'0');
    }
    Some(n)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn encodes_requests() {
        let mut out = Vec::new();
        encode_get(&mut out, Protocol::Text, b"k1");
        encode_set(&mut out, Protocol::Text, b"k1", b"abc");
        encode_get(&mut out, Protocol::Meta, b"k1");
        encode_set(&mut out, Protocol::Meta, b"k1", b"");
        assert_eq!(
            out,
            b"get k1\r\nset k1 0 0 3\r\nabc\r\nmg k1 v\r\nms k1 0\r\n\r\n".as_slice()
        );
        let mut d = Vec::new();
        push_decimal(&mut d, 0);
        push_decimal(&mut d, 18_446_744_073_709_551_615);
        assert_eq!(d, b"018446744073709551615".as_slice());
    }

    #[test]
    fn parses_text_get_incrementally() {
        let full = b"VALUE key:1 0 5\r\nhello\r\nEND\r\nEND\r\n";
        for cut in 0..29 {
            assert_eq!(
                parse_reply(&full[..cut], Protocol::Text, OpKind::Get).unwrap(),
                None,
                "cut {cut}"
            );
        }
        let (r, n) = parse_reply(full, Protocol::Text, OpKind::Get)
            .unwrap()
            .unwrap();
        assert_eq!(n, 29);
        let Reply::Hit { start, len, key } = r else {
            panic!("{r:?}")
        };
        assert_eq!(&full[start..start + len], b"hello");
        let (ko, kl) = key.unwrap();
        assert_eq!(&full[ko..ko + kl], b"key:1");
        let (r, n) = parse_reply(&full[29..], Protocol::Text, OpKind::Get)
            .unwrap()
            .unwrap();
        assert_eq!((r, n), (Reply::Miss, 5));
    }

    #[test]
    fn parses_meta_and_errors() {
        let (r, n) = parse_reply(b"VA 2 f0\r\nhi\r\n", Protocol::Meta, OpKind::Get)
            .unwrap()
            .unwrap();
        assert_eq!(n, 13);
        assert!(matches!(
            r,
            Reply::Hit {
                start: 9,
                len: 2,
                ..
            }
        ));
        let p = |b: &[u8], k| parse_reply(b, Protocol::Meta, k).unwrap().unwrap().0;
        assert_eq!(p(b"EN\r\n", OpKind::Get), Reply::Miss);
        assert_eq!(p(b"HD\r\n", OpKind::Set), Reply::Stored);
        assert_eq!(p(b"NS\r\n", OpKind::Set), Reply::NotStored);
        assert_eq!(
            p(b"SERVER_ERROR out of memory\r\n", OpKind::Set),
            Reply::ServerError
        );
        assert_eq!(p(b"ERROR\r\n", OpKind::Get), Reply::ClientError);
        assert!(parse_reply(b"STORED\r\n", Protocol::Text, OpKind::Get).is_err());
        assert!(parse_reply(b"VALUE k 0 1\r\nab\r\nEND\r\n", Protocol::Text, OpKind::Get).is_err());
        assert!(parse_reply(b"VALUE k 0 x\r\n", Protocol::Text, OpKind::Get).is_err());
    }

    #[test]
    fn encodes_deletes() {
        let mut out = Vec::new();
        encode_delete(&mut out, Protocol::Text, b"key:42");
        encode_delete(&mut out, Protocol::Meta, b"key:42");
        assert_eq!(out, b"delete key:42\r\nmd key:42\r\n".as_slice());
    }

    #[test]
    fn parses_text_delete_replies() {
        let p = |b: &[u8]| parse_reply(b, Protocol::Text, OpKind::Delete);
        assert_eq!(p(b"DELETED\r\n").unwrap(), Some((Reply::Deleted, 9)));
        assert_eq!(p(b"NOT_FOUND\r\n").unwrap(), Some((Reply::NotFound, 11)));
        // Pipelined: only the first reply is consumed.
        assert_eq!(
            p(b"NOT_FOUND\r\nDELETED\r\n").unwrap(),
            Some((Reply::NotFound, 11))
        );
        for cut in 0..9 {
            assert_eq!(p(&b"DELETED\r\n"[..cut]).unwrap(), None, "cut {cut}");
        }
        assert_eq!(
            p(b"SERVER_ERROR busy\r\n").unwrap(),
            Some((Reply::ServerError, 19))
        );
        assert_eq!(p(b"ERROR\r\n").unwrap(), Some((Reply::ClientError, 7)));
        // Another dialect's or another command's reply does not fit a text delete.
        for bad in [
            &b"HD\r\n"[..],
            b"NF\r\n",
            b"STORED\r\n",
            b"END\r\n",
            b"DELETED x\r\n",
        ] {
            assert!(p(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn parses_meta_delete_replies() {
        let p = |b: &[u8]| parse_reply(b, Protocol::Meta, OpKind::Delete);
        assert_eq!(p(b"HD\r\n").unwrap(), Some((Reply::Deleted, 4)));
        assert_eq!(p(b"NF\r\n").unwrap(), Some((Reply::NotFound, 4)));
        // Returned flags (`O`, `k`) may follow.
        assert_eq!(p(b"HD k:key:1\r\n").unwrap(), Some((Reply::Deleted, 12)));
        assert_eq!(p(b"NF Oabc\r\n").unwrap(), Some((Reply::NotFound, 9)));
        for cut in 0..4 {
            assert_eq!(p(&b"HD\r\n"[..cut]).unwrap(), None, "cut {cut}");
        }
        assert_eq!(
            p(b"SERVER_ERROR out of memory\r\n").unwrap(),
            Some((Reply::ServerError, 28))
        );
        assert_eq!(
            p(b"CLIENT_ERROR bad command line format\r\n")
                .unwrap()
                .unwrap()
                .0,
            Reply::ClientError
        );
        // `EX` answers a CAS the generator never sends; text replies do not fit either.
        for bad in [
            &b"EX\r\n"[..],
            b"DELETED\r\n",
            b"NOT_FOUND\r\n",
            b"EN\r\n",
            b"HDX\r\n",
        ] {
            assert!(p(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
