//! The documented, intended differences between two correct servers, normalized away.
//!
//! Invariant: each rule here is listed in `docs/compat.md` ("Normalized") with its reason, and
//! nothing else is forgiven. The rules themselves: [`normalize`].
//!
//! Touched only by the runner thread.

use crate::casmap::CasMap;
use crate::reply::{End, Frame, Reply};
use crate::report::escape;
use base64::Engine;

/// Seconds by which `t`/`l` values may differ between servers.
pub const CLOCK_SLACK: i64 = 2;

/// A reply with the intended differences taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    /// The reply bytes after rules 1, 2 and 4, with rule-3 numbers replaced by `~`.
    pub text: Vec<u8>,
    /// The rule-3 numbers, in order of appearance.
    pub clock_values: Vec<i64>,
    /// How the reply ended.
    pub end: End,
    /// Versions seen, with the key they belong to when the reply or request tells.
    pub versions: Vec<(u32, Option<Vec<u8>>)>,
}

impl Normalized {
    /// True when two normalized replies count as equal.
    pub fn matches(&self, other: &Normalized) -> bool {
        self.text == other.text
            && self.end == other.end
            && self.clock_values.len() == other.clock_values.len()
            && self
                .clock_values
                .iter()
                .zip(&other.clock_values)
                .all(|(a, b)| (a - b).abs() <= CLOCK_SLACK)
    }
}

const META_CODES: [&[u8]; 6] = [b"HD", b"VA", b"EN", b"NF", b"NS", b"EX"];

fn parse_u64(t: &[u8]) -> Option<u64> {
    if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

fn parse_i64(t: &[u8]) -> Option<i64> {
    let digits = t.strip_prefix(b"-").unwrap_or(t);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// Strips the space padding of rule 4; returns the digits if `data` (without `\r\n`) is
/// digits followed by at least one space.
fn unpadded(data: &[u8]) -> Option<&[u8]> {
    let body = data.strip_suffix(b"\r\n")?;
    let digits_end = body.iter().position(|&b| b == b' ')?;
    let (digits, pad) = body.split_at(digits_end);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) || pad.iter().any(|&b| b != b' ')
    {
        return None;
    }
    Some(digits)
}

struct Normalizer<'a> {
    map: &'a mut CasMap,
    request_key: Option<&'a [u8]>,
    out: Normalized,
}

impl Normalizer<'_> {
    fn version(&mut self, value: u64, key: Option<Vec<u8>>) -> String {
        match self.map.version_of(value) {
            Some(v) => {
                self.out.versions.push((v, key));
                format!("#{v}")
            }
            None => "0".to_string(),
        }
    }

    /// Normalizes one line (without data). `new_len` replaces a data header's length.
    fn line(&mut self, line: &[u8], new_len: Option<usize>) {
        let (body, eol) = match line.strip_suffix(b"\r\n") {
            Some(b) => (b, &b"\r\n"[..]),
            None => (line, &b""[..]),
        };
        if body.starts_with(b"VERSION ") {
            self.out.text.extend_from_slice(b"VERSION <version>");
            self.out.text.extend_from_slice(eol);
            return;
        }
        let tokens: Vec<&[u8]> = body.split(|&b| b == b' ').collect();
        let mut rendered: Vec<Vec<u8>> = tokens.iter().map(|t| t.to_vec()).collect();
        if tokens.first() == Some(&&b"VALUE"[..]) && tokens.len() >= 4 {
            if let Some(n) = new_len {
                rendered[3] = n.to_string().into_bytes();
            }
            if tokens.len() == 5 {
                if let Some(cas) = parse_u64(tokens[4]) {
                    rendered[4] = self.version(cas, Some(tokens[1].to_vec())).into_bytes();
                }
            }
        } else if tokens.first().is_some_and(|t| META_CODES.contains(t)) {
            let mut first_flag = 1;
            if tokens[0] == b"VA" && tokens.len() >= 2 {
                if let Some(n) = new_len {
                    rendered[1] = n.to_string().into_bytes();
                }
                first_flag = 2;
            }
            let flags = &tokens[first_flag.min(tokens.len())..];
            let key = self.meta_key(flags);
            let has_k = flags.iter().any(|f| f.first() == Some(&b'k'));
            let b64 = flags.contains(&&b"b"[..]);
            for (i, t) in tokens.iter().enumerate().skip(first_flag) {
                let (flag, arg) = match t.split_first() {
                    Some((f, a)) => (*f, a),
                    None => continue,
                };
                match flag {
                    // Rule 5: a returned key compares decoded (and escaped, either way).
                    b'k' if b64 => {
                        if let Some(k) = &key {
                            rendered[i] = format!("k{}", escape(k, usize::MAX)).into_bytes();
                        }
                    }
                    b'k' => rendered[i] = format!("k{}", escape(arg, usize::MAX)).into_bytes(),
                    b'b' if has_k && arg.is_empty() => rendered[i].clear(),
                    b'c' => {
                        if let Some(cas) = parse_u64(arg) {
                            rendered[i] =
                                format!("c{}", self.version(cas, key.clone())).into_bytes();
                        }
                    }
                    b't' | b'l' => match parse_i64(arg) {
                        Some(v) if v >= 0 => {
                            self.out.clock_values.push(v);
                            rendered[i] = vec![flag, b'~'];
                        }
                        _ => {}
                    },
                    _ => {}
                }
            }
        }
        rendered.retain(|t| !t.is_empty() || tokens.len() == 1);
        self.out.text.extend_from_slice(&rendered.join(&b' '));
        self.out.text.extend_from_slice(eol);
    }

    /// The key a meta reply line belongs to: its `k` flag (base64-decoded when the `b` flag is
    /// present), else the request's single key.
    fn meta_key(&self, flags: &[&[u8]]) -> Option<Vec<u8>> {
        let b64 = flags.contains(&&b"b"[..]);
        for f in flags {
            if let Some(k) = f.strip_prefix(b"k") {
                if b64 {
                    return base64::engine::general_purpose::STANDARD.decode(k).ok();
                }
                return Some(k.to_vec());
            }
        }
        self.request_key.map(<[u8]>::to_vec)
    }
}

/// Normalizes a reply. `request_key` is the key of the request's only command, if it has
/// exactly one keyed command; it attributes meta CAS values that carry no `k` flag.
///
/// 1. `VERSION <anything>` → `VERSION <version>`.
/// 2. CAS values (`VALUE` lines' fifth token, meta `c<value>` return flags) → the item-version
///    number from the server's [`CasMap`], so equal/different relations are still compared.
/// 3. Meta `t<secs>` (TTL remaining) and `l<secs>` (seconds since last access) are compared
///    with a tolerance of [`CLOCK_SLACK`] seconds: the two servers' one-second clocks tick at
///    different instants. `t-1` (no expiry) is exact.
/// 4. A data block of decimal digits followed by spaces compares as the digits alone (with its
///    length adjusted): memcached's `decr` may shorten a number in place and pad it with
///    spaces, which `doc/protocol.txt` calls an implementation detail clients must not rely
///    on. The generator keeps such keys away from `append`/`prepend` and size flags, where the
///    padding would leak into other bytes.
/// 5. A key returned by a meta `k` flag compares decoded: `k<base64> b` equals `k<raw>`.
///    memcached 1.6.18 base64-encodes the returned key (and adds `b`) when the *item* was
///    stored through a base64 key, whatever the request said, and forgets that when
///    `incr`/`decr` copies the item; a server that follows the request's `b` flag returns the
///    same key.
pub fn normalize(reply: &Reply, map: &mut CasMap, request_key: Option<&[u8]>) -> Normalized {
    let mut n = Normalizer {
        map,
        request_key,
        out: Normalized {
            text: Vec::new(),
            clock_values: Vec::new(),
            end: reply.end,
            versions: Vec::new(),
        },
    };
    for frame in &reply.frames {
        match frame {
            Frame::Line(l) => n.line(l, None),
            Frame::Data { header, data } => match unpadded(data) {
                Some(digits) => {
                    n.line(header, Some(digits.len()));
                    n.out.text.extend_from_slice(digits);
                    n.out.text.extend_from_slice(b"\r\n");
                }
                None => {
                    n.line(header, None);
                    n.out.text.extend_from_slice(data);
                }
            },
        }
    }
    n.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::read_reply;
    use std::io::BufReader;

    fn norm(bytes: &[u8], map: &mut CasMap) -> Normalized {
        let reply = read_reply(&mut BufReader::new(bytes), 1);
        normalize(&reply, map, Some(b"k"))
    }

    #[test]
    fn cas_values_compare_structurally() {
        let (mut a, mut b) = (CasMap::new(), CasMap::new());
        let na = norm(
            b"VALUE k 0 1 5\r\nA\r\nEND\r\nHD c5 t100\r\nHD c6\r\nMN\r\n",
            &mut a,
        );
        let nb = norm(
            b"VALUE k 0 1 77\r\nA\r\nEND\r\nHD c77 t99\r\nHD c78\r\nMN\r\n",
            &mut b,
        );
        assert!(na.matches(&nb));
        let nc = norm(
            b"VALUE k 0 1 77\r\nA\r\nEND\r\nHD c77 t99\r\nHD c77\r\nMN\r\n",
            &mut CasMap::new(),
        );
        assert!(!na.matches(&nc));
        assert_eq!(na.versions[0], (0, Some(b"k".to_vec())));
    }

    #[test]
    fn clock_slack_is_bounded() {
        let (mut a, mut b) = (CasMap::new(), CasMap::new());
        let na = norm(b"VA 1 t100 l0\r\nA\r\nMN\r\n", &mut a);
        assert!(na.matches(&norm(b"VA 1 t98 l1\r\nA\r\nMN\r\n", &mut b)));
        assert!(!na.matches(&norm(b"VA 1 t90 l0\r\nA\r\nMN\r\n", &mut b)));
        assert!(!na.matches(&norm(b"VA 1 t-1 l0\r\nA\r\nMN\r\n", &mut b)));
    }

    #[test]
    fn version_and_padding() {
        let (mut a, mut b) = (CasMap::new(), CasMap::new());
        let na = norm(
            b"VERSION 1.6.18\r\nVALUE n 0 3\r\n9  \r\nEND\r\nMN\r\n",
            &mut a,
        );
        let nb = norm(
            b"VERSION flashtier 0.1\r\nVALUE n 0 1\r\n9\r\nEND\r\nMN\r\n",
            &mut b,
        );
        assert!(na.matches(&nb));
        let nc = norm(b"VERSION x\r\nVALUE n 0 3\r\n9 A\r\nEND\r\nMN\r\n", &mut b);
        assert!(!na.matches(&nc));
    }

    #[test]
    fn returned_keys_compare_decoded() {
        let (mut a, mut b) = (CasMap::new(), CasMap::new());
        let na = norm(b"VA 1 t-1 ka2V5OjU= b f0\r\nA\r\nMN\r\n", &mut a);
        let nb = norm(b"VA 1 t-1 kkey:5 f0\r\nA\r\nMN\r\n", &mut b);
        assert!(na.matches(&nb));
        let nc = norm(b"VA 1 t-1 kkey:6 f0\r\nA\r\nMN\r\n", &mut b);
        assert!(!na.matches(&nc));
    }

    #[test]
    fn base64_k_flag_names_the_key() {
        let mut a = CasMap::new();
        let reply = read_reply(&mut BufReader::new(&b"HD c9 kazE= b\r\nMN\r\n"[..]), 1);
        let n = normalize(&reply, &mut a, None);
        assert_eq!(n.versions, vec![(0, Some(b"k1".to_vec()))]);
        assert_eq!(n.text, b"HD c#0 kk1\r\n".to_vec());
    }
}
