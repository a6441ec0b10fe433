//! Writing reply bytes into a connection's output buffer.
//!
//! Replies are appended to one `BytesMut` per connection and written when the pipeline has no
//! more complete requests, so these helpers never touch the socket. Numbers are formatted
//! without allocation.
use bytes::{BufMut, BytesMut};

/// Append `s` and `\r\n`.
pub fn line(out: &mut BytesMut, s: &[u8]) {
    out.reserve(s.len() + 2);
    out.put_slice(s);
    out.put_slice(b"\r\n");
}

/// Append the decimal form of `v`.
pub fn u64(out: &mut BytesMut, v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        if let Some(slot) = buf.get_mut(i) {
            *slot = b'0' + (v % 10) as u8;
        }
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.put_slice(buf.get(i..).unwrap_or_default());
}

/// Append the decimal form of a signed `v`.
pub fn i64(out: &mut BytesMut, v: i64) {
    if v < 0 {
        out.put_u8(b'-');
    }
    u64(out, v.unsigned_abs());
}

/// Append `" <letter><v>"` (a meta return flag with a number).
pub fn flag_u64(out: &mut BytesMut, letter: u8, v: u64) {
    out.put_u8(b' ');
    out.put_u8(letter);
    u64(out, v);
}

/// Append `" <letter><bytes>"`.
pub fn flag_bytes(out: &mut BytesMut, letter: u8, bytes: &[u8]) {
    out.put_u8(b' ');
    out.put_u8(letter);
    out.put_slice(bytes);
}

/// Append `"STAT <name> <value>\r\n"`.
pub fn stat(out: &mut BytesMut, name: &str, value: impl std::fmt::Display) {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(name.len() + 24);
    let _ = write!(s, "STAT {name} {value}\r\n");
    out.put_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        let mut out = BytesMut::new();
        u64(&mut out, 0);
        out.put_u8(b' ');
        u64(&mut out, u64::MAX);
        out.put_u8(b' ');
        i64(&mut out, -42);
        flag_u64(&mut out, b't', 7);
        assert_eq!(&out[..], b"0 18446744073709551615 -42 t7");
    }
}
