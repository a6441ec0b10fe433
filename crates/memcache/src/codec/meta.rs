//! Meta commands (`mg ms md ma me`; `mn` needs no parsing) and their flags.
//!
//! Follows memcached 1.6.18's `proto_text.c`: the same order of checks (arity, key length,
//! flag count, the flag pre-parse, then per-command checks) so the same malformed line gets
//! the same error string. Each flag letter may appear once; numeric tokens are validated
//! here so the command layer only sees well-formed options.
use bytes::Bytes;

use super::number::{strtol32, strtoul32, strtoull};
use super::tokens::Tokens;
use super::{DataHeader, Limits, LineOutcome, KEY_MAX_LENGTH};
use crate::request::{Meta, MetaFlag, MetaOpts, Request, StoreMode};

const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
/// memcached's `MFLAG_MAX_OPT_LENGTH`: at most this many tokens (incl. its terminal token).
const MAX_META_TOKENS: usize = 20;
/// Longest opaque (`O`) token, letter included.
pub const MAX_OPAQUE_LENGTH: usize = 32;

fn err(line: &'static str) -> LineOutcome {
    LineOutcome::Done(Request::Reply {
        line,
        noreply: false,
    })
}

/// memcached's pre-parse of the flags starting at token `start`. On error returns the reply.
fn preparse(t: &Tokens<'_>, start: usize) -> Result<Meta, &'static str> {
    let mut key = Bytes::copy_from_slice(t.get(1));
    let mut opts = MetaOpts {
        delta: 1,
        ..MetaOpts::default()
    };
    let mut seen = [false; 128];
    let mut errstr: Option<&'static str> = None;
    let mut failed = false;
    for i in start..t.count() {
        let tok = t.get(i);
        let Some(&letter) = tok.first() else { continue };
        let arg = tok.get(1..).unwrap_or_default();
        match seen.get_mut(usize::from(letter)) {
            Some(s) if letter < 127 && !*s => *s = true,
            _ => return Err("CLIENT_ERROR duplicate flag"),
        }
        let mut bad = |msg: Option<&'static str>| {
            failed = true;
            if msg.is_some() {
                errstr = msg;
            }
        };
        match letter {
            b'b' => match base64_decode(t.get(1)) {
                Some(k) => {
                    key = Bytes::from(k);
                    opts.key_binary = true;
                }
                None => {
                    key = Bytes::new();
                    opts.key_binary = true;
                    bad(Some("CLIENT_ERROR error decoding key"));
                }
            },
            b'N' | b'T' | b'R' => match strtol32(arg) {
                Some(v) => match letter {
                    b'N' => opts.vivify = Some(v),
                    b'T' => opts.ttl = Some(v),
                    _ => opts.recache = Some(v),
                },
                None => bad(Some("CLIENT_ERROR bad token in command line format")),
            },
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'h' | b'l' => {}
            b'v' => opts.value = true,
            b'u' => opts.no_update = true,
            b'q' => opts.quiet = true,
            b'I' => opts.invalidate = true,
            b'F' => match strtoul32(arg) {
                Some(f) => opts.client_flags = f,
                None => bad(None),
            },
            b'C' => match strtoull(arg) {
                Some(c) => opts.compare_cas = Some(c),
                None => bad(Some("CLIENT_ERROR bad token in command line format")),
            },
            b'M' => match arg {
                [m] => opts.mode = Some(*m),
                _ => bad(Some("CLIENT_ERROR incorrect length for M token")),
            },
            b'J' => match strtoull(arg) {
                Some(j) => opts.initial = j,
                None => bad(Some("CLIENT_ERROR invalid numeric initial value")),
            },
            b'D' => match strtoull(arg) {
                Some(d) => opts.delta = d,
                None => bad(Some("CLIENT_ERROR invalid numeric delta value")),
            },
            _ => return Err("CLIENT_ERROR invalid flag"),
        }
        opts.flags.push(MetaFlag {
            letter,
            token: Bytes::copy_from_slice(arg),
        });
    }
    if failed {
        return Err(errstr.unwrap_or(BAD_FORMAT));
    }
    Ok(Meta { key, opts })
}

/// True when an `O` token is longer than memcached accepts.
pub fn opaque_too_long(opts: &MetaOpts) -> bool {
    opts.flags.iter().any(is_long_opaque)
}

/// True for an `O` flag longer than memcached accepts.
pub fn is_long_opaque(f: &MetaFlag) -> bool {
    f.letter == b'O' && f.token.len() + 1 > MAX_OPAQUE_LENGTH
}

/// `mg <key> <flags>*`
pub(crate) fn parse_get(t: &Tokens<'_>) -> LineOutcome {
    if t.count() < 2 {
        return err("ERROR");
    }
    if t.get(1).len() > KEY_MAX_LENGTH {
        return err(BAD_FORMAT);
    }
    if t.count() + 1 > MAX_META_TOKENS {
        return err("CLIENT_ERROR options flags are too long");
    }
    match preparse(t, 2) {
        Err(e) => err(e),
        // An over-long opaque is reported by the command layer: memcached finds it while
        // writing the reply, after vivify/touch have changed the item.
        Ok(meta) => LineOutcome::Done(Request::MetaGet(meta)),
    }
}

/// `ms <key> <datalen> <flags>*` followed by a data block.
pub(crate) fn parse_set(t: &Tokens<'_>, limits: &Limits) -> LineOutcome {
    let n = t.count();
    if n < 2 {
        return err("ERROR");
    }
    if t.get(1).len() > KEY_MAX_LENGTH || n == 2 {
        return err(BAD_FORMAT);
    }
    if n + 1 > MAX_META_TOKENS {
        return err("CLIENT_ERROR options flags too long");
    }
    let Some(vlen) = strtol32(t.get(2)) else {
        return err(BAD_FORMAT);
    };
    let Ok(len) = usize::try_from(vlen) else {
        return err(BAD_FORMAT);
    };
    if vlen > i32::MAX - 2 {
        return err(BAD_FORMAT);
    }
    let swallow = |line: &'static str| LineOutcome::Swallow {
        request: Request::Reply {
            line,
            noreply: false,
        },
        swallow: len + 2,
    };
    let meta = match preparse(t, 3) {
        Ok(m) => m,
        Err(e) => return swallow(e),
    };
    let mut mode = match meta.opts.mode {
        None | Some(b'S') => StoreMode::Set,
        Some(b'E') => StoreMode::Add,
        Some(b'A') => StoreMode::Append,
        Some(b'P') => StoreMode::Prepend,
        Some(b'R') => StoreMode::Replace,
        Some(_) => return swallow("CLIENT_ERROR invalid mode for ms M token"),
    };
    if opaque_too_long(&meta.opts) {
        return swallow("CLIENT_ERROR opaque token too long");
    }
    // As memcached: a compare CAS turns set and replace into cas.
    if meta.opts.compare_cas.is_some() && matches!(mode, StoreMode::Set | StoreMode::Replace) {
        mode = StoreMode::Cas;
    }
    if len > limits.max_item_size {
        return LineOutcome::Swallow {
            request: Request::TooLarge {
                key: meta.key,
                noreply: false,
                drop_existing: true,
            },
            swallow: len + 2,
        };
    }
    LineOutcome::Data {
        len,
        header: DataHeader::Meta { meta, mode },
    }
}

/// Shared prelude of `md` and `ma`.
fn parse_simple(t: &Tokens<'_>) -> Result<Meta, &'static str> {
    if t.count() < 2 {
        return Err("ERROR");
    }
    if t.get(1).len() > KEY_MAX_LENGTH {
        return Err(BAD_FORMAT);
    }
    if t.count() + 1 > MAX_META_TOKENS {
        return Err("CLIENT_ERROR options flags too long");
    }
    preparse(t, 2).map_err(|_| "CLIENT_ERROR invalid or duplicate flag")
}

/// `md <key> <flags>*`
pub(crate) fn parse_delete(t: &Tokens<'_>) -> LineOutcome {
    match parse_simple(t) {
        Err(e) => err(e),
        Ok(meta) if opaque_too_long(&meta.opts) => err("CLIENT_ERROR opaque token too long"),
        Ok(meta) => LineOutcome::Done(Request::MetaDelete(meta)),
    }
}

/// `ma <key> <flags>*`
pub(crate) fn parse_arith(t: &Tokens<'_>) -> LineOutcome {
    let meta = match parse_simple(t) {
        Err(e) => return err(e),
        Ok(m) => m,
    };
    let incr = match meta.opts.mode {
        None | Some(b'I') | Some(b'+') => true,
        Some(b'D') | Some(b'-') => false,
        Some(_) => return err("CLIENT_ERROR invalid mode for ma M token"),
    };
    // An over-long opaque is reported by the command layer after the arithmetic, as
    // memcached does.
    LineOutcome::Done(Request::MetaArith { meta, incr })
}

/// `me <key> [b]`
pub(crate) fn parse_debug(t: &Tokens<'_>) -> LineOutcome {
    let k = t.get(1);
    if t.count() < 2 || k.len() > KEY_MAX_LENGTH {
        return err(BAD_FORMAT);
    }
    if t.count() >= 3 && t.get(2) == b"b" {
        return match base64_decode(k) {
            Some(key) => LineOutcome::Done(Request::MetaDebug {
                key: Bytes::from(key),
                binary: true,
            }),
            None => err(BAD_FORMAT),
        };
    }
    LineOutcome::Done(Request::MetaDebug {
        key: Bytes::copy_from_slice(k),
        binary: false,
    })
}

fn b64_value(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        b'=' => Some(0),
        _ => None,
    }
}

/// Base64 decoding with memcached's tolerance: characters outside the alphabet are skipped,
/// the alphabet characters (incl. `=`) must come in whole quads, and decoding stops after the
/// first padded quad. `None` where memcached's decoder returns 0 (failure).
pub fn base64_decode(src: &[u8]) -> Option<Vec<u8>> {
    let count = src.iter().filter(|&&c| b64_value(c).is_some()).count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(count / 4 * 3);
    let mut block = [0u8; 4];
    let mut filled = 0;
    let mut pad = 0;
    for &c in src {
        let Some(v) = b64_value(c) else { continue };
        if c == b'=' {
            pad += 1;
        }
        if let Some(slot) = block.get_mut(filled) {
            *slot = v;
        }
        filled += 1;
        if filled == 4 {
            let [a, b, c2, d] = block;
            out.push((a << 2) | (b >> 4));
            out.push((b << 4) | (c2 >> 2));
            out.push((c2 << 6) | d);
            filled = 0;
            if pad > 0 {
                match pad {
                    1 => {
                        out.pop();
                    }
                    2 => {
                        out.pop();
                        out.pop();
                    }
                    _ => return None,
                }
                break;
            }
        }
    }
    if out.is_empty() {
        return None;
    }
    Some(out)
}

/// Standard base64 with padding (how memcached returns binary keys).
pub fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_like_memcached() {
        assert_eq!(base64_decode(b"YWJj").as_deref(), Some(&b"abc"[..]));
        assert_eq!(base64_decode(b"YWI=").as_deref(), Some(&b"ab"[..]));
        assert_eq!(base64_decode(b"YQ==").as_deref(), Some(&b"a"[..]));
        assert_eq!(base64_decode(b"a"), None);
        assert_eq!(base64_decode(b"YW!Jj").as_deref(), Some(&b"abc"[..]));
        assert_eq!(base64_decode(b"===="), None);
        assert_eq!(base64_encode(b"abc"), "YWJj");
    }
}
