//! The seeded command stream: state, key and value pools, tokens, and the top-level mix.
//!
//! The text commands live in `text_commands`, the meta commands in `meta_commands`; both are
//! `impl Generator` blocks over the state kept here.
//!
//! Invariant: the stream holds no command whose outcome depends on timing or memory layout, so
//! two correct servers must agree byte for byte (after [`crate::normalize`]). Each corner it
//! avoids, and why (expiry, sizes near the limit, malformed headers, 2^63, the bits
//! arithmetic resets, `k` on binary keys, delayed `flush_all`, ...), is listed in
//! `docs/compat.md` ("Not generated"); keep that list and this code in step.
//!
//! Touched only by the runner thread.

use crate::request::{CasRef, Command, Request};
use crate::rng::Rng;
use base64::Engine;
use std::collections::{HashMap, HashSet, VecDeque};

/// The top-level command kinds and their weights in the mix.
pub const KINDS: [(u32, &str); 26] = [
    (90, "set"),
    (20, "add"),
    (20, "replace"),
    (20, "append"),
    (20, "prepend"),
    (25, "cas"),
    (90, "get"),
    (35, "gets"),
    (12, "gat"),
    (12, "gats"),
    (40, "delete"),
    (30, "incr"),
    (20, "decr"),
    (15, "touch"),
    (1, "flush_all"),
    (3, "version"),
    (3, "verbosity"),
    (110, "mg"),
    (90, "ms"),
    (35, "md"),
    (45, "ma"),
    (6, "mn"),
    (25, "garbage"),
    (1, "quit"),
    (1, "long-line"),
    (4, "odd-spacing"),
];

/// Keys that may receive values larger than 4 KiB.
pub const BIG_KEYS: usize = 6;
/// Safety margin below the item size limit that generated valid values stay out of.
pub const LIMIT_MARGIN: usize = 4096;

/// Settings of the stream.
#[derive(Debug, Clone)]
pub struct GenConfig {
    /// Seed; the same seed against the same reference server gives the same stream.
    pub seed: u64,
    /// Parallel connections the requests are spread over. Default: 4.
    pub conns: usize,
    /// The servers' item size limit in bytes (memcached `-I`). Default: 1 MiB.
    pub max_item_size: usize,
    /// Size of the ordinary key pool. Default: 32.
    pub keys: usize,
    /// Top-level command kinds left out of the mix (names as in [`KINDS`]), for triage:
    /// e.g. `long-line` while a known difference there is being worked on. Default: none.
    pub skip: Vec<String>,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            seed: 1,
            conns: 4,
            max_item_size: 1024 * 1024,
            keys: 32,
            skip: Vec::new(),
        }
    }
}

/// The generator's state.
#[derive(Debug)]
pub struct Generator {
    pub(crate) rng: Rng,
    pub(crate) cfg: GenConfig,
    /// Ordinary keys, addressable by text and meta commands.
    pub(crate) keys: Vec<Vec<u8>>,
    /// Unusual but valid-for-memcached text keys (250 bytes, control characters, UTF-8).
    pub(crate) odd_keys: Vec<Vec<u8>>,
    /// Keys only reachable through base64 (`b` flag): spaces, CR/LF, NUL, high bytes.
    pub(crate) binary_keys: Vec<Vec<u8>>,
    /// Keys whose item incr/decr may have rewritten (space padding, fetched bit).
    pub(crate) arith: HashSet<Vec<u8>>,
    /// Keys that may carry a win token or the stale mark (mg `N`/`R`, md/ms `I`); they get
    /// no incr/decr/ma, whose in-place-or-copy choice decides whether those marks survive.
    pub(crate) flagged: HashSet<Vec<u8>>,
    /// Recently seen item versions per key, newest last.
    pub(crate) versions: HashMap<Vec<u8>, VecDeque<u32>>,
    /// Recently seen item versions, any key.
    pub(crate) recent: VecDeque<u32>,
}

/// Bytes a value may contain: no lowercase letters (see the module docs).
const VALUE_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&*+-./:;<=>?@[]^_|~ ";

/// The key length limit of the protocol.
pub const KEY_MAX: usize = 250;

impl Generator {
    /// A generator for `cfg`.
    pub fn new(cfg: GenConfig) -> Self {
        let keys = (0..cfg.keys.max(1))
            .map(|i| format!("key:{i}").into_bytes())
            .collect();
        let odd_keys = vec![
            vec![b'L'; KEY_MAX],
            b"ctl\x01\x7fkey".to_vec(),
            b"tab\tkey".to_vec(),
            "ключ".as_bytes().to_vec(),
        ];
        let mut long_bin = vec![0xA5u8; KEY_MAX];
        long_bin[0] = b' ';
        let binary_keys = vec![
            b"bin\x00\xff".to_vec(),
            b"sp ace".to_vec(),
            b"new\r\nline".to_vec(),
            long_bin,
        ];
        Generator {
            rng: Rng::new(cfg.seed),
            cfg,
            keys,
            odd_keys,
            binary_keys,
            arith: HashSet::new(),
            flagged: HashSet::new(),
            versions: HashMap::new(),
            recent: VecDeque::new(),
        }
    }

    /// Feeds back the item versions a reply revealed (from the reference server's side), so
    /// later `cas`/`C` tokens can name versions that exist.
    pub fn observe(&mut self, versions: &[(u32, Option<Vec<u8>>)]) {
        for (v, key) in versions {
            if self.recent.back() != Some(v) {
                self.recent.push_back(*v);
                if self.recent.len() > 32 {
                    self.recent.pop_front();
                }
            }
            if let Some(k) = key {
                let list = self.versions.entry(k.clone()).or_default();
                if list.back() != Some(v) {
                    list.push_back(*v);
                    if list.len() > 4 {
                        list.pop_front();
                    }
                }
            }
        }
    }

    /// The next request: one command, or a pipelined batch of up to six.
    pub fn next_request(&mut self) -> Request {
        let conn = self.rng.below(self.cfg.conns.max(1) as u64) as usize;
        let first = self.command();
        if first.closes {
            return Request {
                conn,
                commands: vec![first],
            };
        }
        let mut commands = vec![first];
        if self.rng.chance(25) {
            let extra = self.rng.range(1, 5);
            for _ in 0..extra {
                let c = self.command();
                if c.closes {
                    continue;
                }
                commands.push(c);
            }
        }
        Request { conn, commands }
    }

    /// One command from the overall mix.
    fn command(&mut self) -> Command {
        let weights: Vec<u32> = KINDS
            .iter()
            .map(|(w, name)| {
                if self.cfg.skip.iter().any(|s| s == name) {
                    0
                } else {
                    *w
                }
            })
            .collect();
        let kind = KINDS[self.rng.weighted(&weights)].1;
        match kind {
            "set" | "add" | "replace" | "append" | "prepend" => self.text_storage(kind),
            "cas" => self.text_cas(),
            "get" | "gets" => self.text_get(kind),
            "gat" | "gats" => self.text_gat(kind),
            "delete" => self.text_delete(),
            "incr" | "decr" => self.text_incr(kind),
            "touch" => self.text_touch(),
            "flush_all" => self.text_flush_all(),
            "version" => self.text_version(),
            "verbosity" => self.text_verbosity(),
            "mg" => self.meta_get(),
            "ms" => self.meta_set(),
            "md" => self.meta_delete(),
            "ma" => self.meta_arithmetic(),
            "mn" => self.meta_noop(),
            "quit" => self.text_quit(),
            "long-line" => self.text_long_line(),
            "odd-spacing" => self.text_odd_spacing(),
            _ => self.garbage(),
        }
    }

    // ----- keys -------------------------------------------------------------------------

    /// An index into the ordinary pool, skewed so some keys are hot.
    pub(crate) fn pool_index(&mut self) -> usize {
        let n = self.keys.len() as u64;
        if self.rng.chance(50) {
            self.rng.below(n.min(8)) as usize
        } else {
            self.rng.below(n) as usize
        }
    }

    /// A key for a text command: usually from the pool, sometimes unusual, rarely too long.
    pub(crate) fn text_key(&mut self) -> Vec<u8> {
        let r = self.rng.below(1000);
        if r < 940 {
            let i = self.pool_index();
            self.keys[i].clone()
        } else if r < 990 {
            self.rng.pick(&self.odd_keys).clone()
        } else {
            vec![b'L'; KEY_MAX + 1]
        }
    }

    /// A key for incr/decr: like [`Self::text_key`] but never one that may carry a win token
    /// or the stale mark (falls back to the first pool key that does not).
    pub(crate) fn arith_key(&mut self) -> Vec<u8> {
        for _ in 0..8 {
            let k = self.text_key();
            if !self.is_flagged(&k) {
                return k;
            }
        }
        let free = self
            .keys
            .iter()
            .find(|k| !self.flagged.contains(*k))
            .cloned();
        // Outside every pool, so never flagged.
        free.unwrap_or_else(|| b"key:arith".to_vec())
    }

    /// A key for a meta command: `(key as sent, decoded key, base64?)`.
    pub(crate) fn meta_key(&mut self) -> (Vec<u8>, Vec<u8>, bool) {
        let b64 = base64::engine::general_purpose::STANDARD;
        let r = self.rng.below(1000);
        if r < 780 {
            let k = self.text_key();
            (k.clone(), k, false)
        } else if r < 900 {
            let i = self.pool_index();
            let k = self.keys[i].clone();
            (b64.encode(&k).into_bytes(), k, true)
        } else if r < 980 {
            let k = self.rng.pick(&self.binary_keys).clone();
            (b64.encode(&k).into_bytes(), k, true)
        } else if r < 990 {
            // Decodes to 251 bytes: too long.
            let k = vec![0x11u8; KEY_MAX + 1];
            (b64.encode(&k).into_bytes(), k, true)
        } else {
            // Not base64 at all.
            let k = self.rng.pick(&[&b"!!!!"[..], b"abc", b"a=bc"]).to_vec();
            (k.clone(), k, true)
        }
    }

    /// True when `key` may receive values over 4 KiB.
    fn may_be_big(&self, key: &[u8]) -> bool {
        self.keys[..BIG_KEYS.min(self.keys.len())]
            .iter()
            .any(|k| k == key)
    }

    // ----- values -----------------------------------------------------------------------

    /// A valid value for `key`.
    pub(crate) fn value(&mut self, key: &[u8]) -> Vec<u8> {
        if self.rng.chance(25) {
            return self.number_value();
        }
        let big = self.may_be_big(key);
        let r = self.rng.below(1000);
        let len = if r < 50 {
            0
        } else if r < 500 {
            self.rng.range(1, 16)
        } else if r < 850 {
            self.rng.range(17, 256)
        } else if r < 960 || !big {
            self.rng.range(257, 4096)
        } else if r < 995 {
            self.rng.range(4097, 64 * 1024)
        } else if r < 999 {
            self.rng.range(64 * 1024 + 1, 256 * 1024)
        } else {
            let top = self
                .cfg
                .max_item_size
                .saturating_sub(LIMIT_MARGIN + KEY_MAX);
            self.rng.range(top.saturating_sub(8192).max(1), top.max(1))
        };
        self.bytes(len)
    }

    /// A value for a storage command whose header the server may reject (`header_ok` false:
    /// a key over 250 bytes, bad base64, a bad token): then memcached reads the data block as
    /// command lines, so it must be short (see the module docs).
    pub(crate) fn value_for(&mut self, key: &[u8], header_ok: bool) -> Vec<u8> {
        if header_ok && key.len() <= KEY_MAX {
            self.value(key)
        } else {
            let n = self.rng.range(0, 60);
            self.bytes(n)
        }
    }

    /// `len` value bytes: mostly the safe alphabet, sometimes CR/LF, NUL and high bytes.
    pub(crate) fn bytes(&mut self, len: usize) -> Vec<u8> {
        let binary = self.rng.chance(10);
        let mut v = Vec::with_capacity(len);
        // Long values repeat a random 64-byte block: cheap to make, still not constant.
        let block: Vec<u8> = (0..len.min(64))
            .map(|_| {
                if binary && self.rng.chance(30) {
                    *self.rng.pick(&[b'\r', b'\n', 0u8, 0x80, 0xff, 0xc3, 0x01])
                } else {
                    *self.rng.pick(VALUE_ALPHABET)
                }
            })
            .collect();
        while v.len() < len {
            let take = (len - v.len()).min(block.len());
            v.extend_from_slice(&block[..take]);
        }
        // Never whitespace only: memcached's incr parses such a value with strtoull, which
        // skips the whitespace and reads on past the end of the value into whatever memory
        // follows (see `docs/compat.md`).
        if v.iter().all(u8::is_ascii_whitespace) {
            if let Some(first) = v.first_mut() {
                *first = b'W';
            }
        }
        v
    }

    /// A value for incr/decr tests: mostly decimal numbers, some edge cases. Never a number
    /// of 2^63 or more that parses: memcached 1.6.18 answers incr/decr on those depending on
    /// the bytes that happen to follow the value in its memory (see `docs/compat.md`).
    fn number_value(&mut self) -> Vec<u8> {
        match self.rng.below(12) {
            0 => b"4294967295".to_vec(),
            1 => b"4294967296".to_vec(),
            2 => b"0".to_vec(),
            3 => b"007".to_vec(),
            4 => b"18446744073709551616".to_vec(),
            5 => b"12AB".to_vec(),
            6 => b"-5".to_vec(),
            7 => b"99999999999999999999999".to_vec(),
            8 => b"100".to_vec(),
            _ => self.rng.below(100_000).to_string().into_bytes(),
        }
    }

    /// A length token for a value over the item size limit.
    pub(crate) fn oversized_len(&mut self) -> usize {
        let max = self.cfg.max_item_size;
        if self.rng.chance(90) {
            self.rng.range(max + 1, max + 64 * 1024)
        } else {
            self.rng.range(max + 64 * 1024, 2 * max)
        }
    }

    // ----- tokens -----------------------------------------------------------------------

    /// A client flags token, sometimes invalid.
    pub(crate) fn flags_token(&mut self, valid: bool) -> String {
        if valid {
            match self.rng.below(10) {
                0..=5 => "0".into(),
                6 => "4294967295".into(),
                _ => self.rng.below(70_000).to_string(),
            }
        } else {
            self.rng
                .pick(&["-1", "4294967296", "abc", "1.5", "99999999999999999999"])
                .to_string()
        }
    }

    /// An exptime token. Valid ones never run out during a run (see the module docs).
    pub(crate) fn exptime_token(&mut self, valid: bool) -> String {
        if valid {
            match self.rng.below(20) {
                0..=10 => "0".into(),
                11 | 12 => "10000".into(),
                13 | 14 => "1000".into(),
                15 => "2592000".into(),
                16 => "2592001".into(),
                17 => "-1".into(),
                18 => "2000000000".into(),
                _ => "-1000".into(),
            }
        } else {
            self.rng
                .pick(&["abc", "1x", "99999999999999999999", "--1"])
                .to_string()
        }
    }

    /// A CAS reference for `key`: a version it had, another version, or a stranger.
    pub(crate) fn cas_ref(&mut self, key: &[u8]) -> CasRef {
        let r = self.rng.below(10);
        if r < 6 {
            if let Some(list) = self.versions.get(key) {
                if !list.is_empty() {
                    let back = self.rng.below(list.len().min(2) as u64) as usize;
                    return CasRef::Version(list[list.len() - 1 - back]);
                }
            }
        }
        if r < 8 && !self.recent.is_empty() {
            let i = self.rng.below(self.recent.len() as u64) as usize;
            return CasRef::Version(self.recent[i]);
        }
        CasRef::Literal((1u64 << 50) + self.rng.below(1 << 20))
    }

    /// A line ending: almost always `\r\n`, sometimes a bare `\n` (memcached accepts both).
    pub(crate) fn eol(&mut self) -> &'static [u8] {
        if self.rng.chance(3) {
            b"\n"
        } else {
            b"\r\n"
        }
    }

    /// Marks a key as touched by incr/decr/ma.
    pub(crate) fn mark_arith(&mut self, key: &[u8]) {
        self.arith.insert(key.to_vec());
    }

    /// Forgets what incr/decr/ma or win/stale flags did to `key`: a command that replaces or
    /// removes the item whatever its state was.
    pub(crate) fn redefined(&mut self, key: &[u8]) {
        self.arith.remove(key);
        self.flagged.remove(key);
    }

    /// Marks `key` as possibly carrying a win token or the stale mark.
    pub(crate) fn mark_flagged(&mut self, key: &[u8]) {
        self.flagged.insert(key.to_vec());
    }

    /// True when `key` may carry a win token or the stale mark.
    pub(crate) fn is_flagged(&self, key: &[u8]) -> bool {
        self.flagged.contains(key)
    }

    /// True when incr/decr/ma may have rewritten `key`'s item since it was last redefined.
    pub(crate) fn is_arith(&self, key: &[u8]) -> bool {
        self.arith.contains(key)
    }

    /// A line of junk: unknown command names, wrong case, control characters, empty lines.
    fn garbage(&mut self) -> Command {
        let eol = self.eol();
        let mut line: Vec<u8> = match self.rng.below(10) {
            0 => b"".to_vec(),
            1 => b"GET key:1".to_vec(),
            2 => b"sett key:1 0 0 1".to_vec(),
            3 => b"foo bar baz".to_vec(),
            4 => b"\x01\x02\x7f".to_vec(),
            5 => b"   ".to_vec(),
            6 => b"gett key:1".to_vec(),
            7 => b"m".to_vec(),
            8 => b"mz key:1 v".to_vec(),
            _ => {
                let n = self.rng.range(1, 40);
                self.bytes(n)
                    .into_iter()
                    .filter(|&b| b != b'\n' && b != b'\r')
                    .collect()
            }
        };
        line.extend_from_slice(eol);
        Command::literal("garbage", line)
    }
}

/// Builds a command line from tokens joined by single spaces.
pub(crate) fn join(tokens: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        out.extend_from_slice(t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::casmap::CasMap;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Generator::new(GenConfig::default());
        let mut b = Generator::new(GenConfig::default());
        let map = CasMap::new();
        for _ in 0..2000 {
            let (ra, rb) = (a.next_request(), b.next_request());
            assert_eq!(ra.render(&map), rb.render(&map));
        }
    }

    #[test]
    fn every_kind_shows_up() {
        let mut g = Generator::new(GenConfig {
            seed: 3,
            ..GenConfig::default()
        });
        let mut kinds = HashSet::new();
        for _ in 0..20_000 {
            for c in g.next_request().commands {
                kinds.insert(c.kind);
            }
        }
        for k in [
            "set",
            "add",
            "replace",
            "append",
            "prepend",
            "cas",
            "get",
            "gets",
            "gat",
            "gats",
            "delete",
            "incr",
            "decr",
            "touch",
            "flush_all",
            "version",
            "verbosity",
            "mg",
            "ms",
            "md",
            "ma",
            "mn",
            "garbage",
            "quit",
            "long-line",
            "bad-chunk",
            "too-large",
        ] {
            assert!(kinds.contains(k), "kind {k} never generated");
        }
    }

    #[test]
    fn bad_chunks_are_consumed_whole_and_end_in_crlf() {
        let mut g = Generator::new(GenConfig::default());
        for n in 1..200 {
            let d = g.bad_chunk(n);
            assert!(d.ends_with(b"\r\n"), "chunk for {n} does not end in CRLF");
            // A server honouring the declared length reads n + 2 bytes: all must be there, or
            // the sentinel after the chunk would be swallowed.
            assert!(d.len() >= n + 2, "chunk for {n} is {} bytes", d.len());
        }
    }

    #[test]
    fn closing_commands_travel_alone() {
        let mut g = Generator::new(GenConfig::default());
        for _ in 0..50_000 {
            let r = g.next_request();
            if r.closes() {
                assert_eq!(r.commands.len(), 1);
            }
        }
    }

    #[test]
    fn valid_values_stay_out_of_the_limit_band() {
        let mut g = Generator::new(GenConfig::default());
        let key = g.keys[0].clone();
        for _ in 0..50_000 {
            let v = g.value(&key);
            assert!(v.len() <= g.cfg.max_item_size - LIMIT_MARGIN - KEY_MAX);
            assert!(!v.iter().any(u8::is_ascii_lowercase));
        }
    }
}
