//! Meta-protocol commands of the stream (`mg ms md ma mn`), valid and malformed.
//!
//! Flags are the ones memcached 1.6.18's `doc/protocol.txt` lists, in random order, with
//! opaque tokens, quiet mode, base64 keys, CAS, TTL and modes; malformed variants add unknown
//! or duplicate flags, bad tokens and missing arguments. `impl Generator` block; see
//! [`crate::generator`] for the rules every command follows.

use crate::generator::{Generator, KEY_MAX};
use crate::request::{CasRef, Command};
use base64::Engine;

/// Flag characters no memcached version defines for `mg ms md ma` (newer versions added
/// letters such as `E`, `s`, `x`, so letters are avoided apart from `y`, `z`).
const NOT_MG_FLAGS: &[u8] = b"!%&*@#_~^=yz";
const NOT_MS_FLAGS: &[u8] = NOT_MG_FLAGS;

/// A flag in construction: literal text or a CAS placeholder after a prefix.
enum Flag {
    Text(Vec<u8>),
    Cas(u8, CasRef),
}

impl Generator {
    /// With a 15% chance, an opaque token (`O` and 1 to 31 characters).
    fn maybe_opaque(&mut self, flags: &mut Vec<Flag>) {
        if self.rng.chance(15) {
            let n = self.rng.range(1, 32);
            let mut o = b"O".to_vec();
            for _ in 0..n {
                o.push(*self.rng.pick(b"abcdefghijklmnopqrstuvwxyz0123456789"));
            }
            flags.push(Flag::Text(o));
        }
    }

    /// Each single-letter flag of `list` with its percent chance, in order.
    fn letter_flags(&mut self, flags: &mut Vec<Flag>, list: &[(u8, u64)]) {
        for &(flag, pct) in list {
            if self.rng.chance(pct) {
                flags.push(Flag::Text(vec![flag]));
            }
        }
    }

    fn ttl_token(&mut self) -> Vec<u8> {
        self.exptime_token(true).into_bytes()
    }

    /// A TTL that is not already past. For flags whose item can be returned in the same
    /// reply (mg/ma `N`, `T`): memcached prints the TTL left of an item that expired on
    /// arrival as a wrapped 32-bit number that depends on its uptime.
    fn future_ttl_token(&mut self) -> Vec<u8> {
        let t = *self
            .rng
            .pick(&["0", "0", "10000", "1000", "2592000", "2000000000"]);
        t.as_bytes().to_vec()
    }

    fn shuffle(&mut self, flags: &mut [Flag]) {
        for i in (1..flags.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            flags.swap(i, j);
        }
    }

    /// Assembles `<cmd> <key> [<extra>] <flags...><eol>` into a command.
    fn meta_command(
        &mut self,
        kind: &'static str,
        head: &[&[u8]],
        flags: Vec<Flag>,
        key: Vec<u8>,
    ) -> Command {
        let b64 = flags
            .iter()
            .any(|f| matches!(f, Flag::Text(t) if t.as_slice() == b"b"));
        let printable = key.iter().all(|&b| b > 0x20 && b < 0x7f);
        let mut flags = flags;
        if b64 && !printable {
            // memcached 1.6.18 returns the key of an item created by `N` raw (not base64, no
            // `b`) ever after; for a binary key that puts spaces or CR/LF into the reply line.
            // So binary keys are never asked back (see docs/compat.md).
            flags.retain(|f| !matches!(f, Flag::Text(t) if t.as_slice() == b"k"));
        }
        let mut c = Command::literal(kind, Vec::new());
        for (i, h) in head.iter().enumerate() {
            if i > 0 {
                c.push(b" ");
            }
            c.push(h);
        }
        for f in flags {
            c.push(b" ");
            match f {
                Flag::Text(t) => c.push(&t),
                Flag::Cas(prefix, r) => {
                    c.push(&[prefix]);
                    c.push_cas(r);
                }
            }
        }
        let eol = self.eol();
        c.push(eol);
        c.key = Some(key);
        c
    }

    /// Adds one malformation to a flag list; returns a label.
    fn spoil(&mut self, flags: &mut Vec<Flag>, not_flags: &[u8]) {
        match self.rng.below(5) {
            0 | 1 => {
                let f = *self.rng.pick(not_flags);
                flags.push(Flag::Text(vec![f]));
            }
            2 => flags.push(Flag::Text(b"v".to_vec())),
            3 => {
                let mut o = b"O".to_vec();
                o.extend(std::iter::repeat_n(b'o', 33));
                flags.push(Flag::Text(o));
            }
            _ => {
                let f = *self
                    .rng
                    .pick(&[&b"Tabc"[..], b"N", b"F-1", b"Rx", b"T", b"Cabc"]);
                flags.push(Flag::Text(f.to_vec()));
            }
        }
    }

    /// `mg`.
    pub(crate) fn meta_get(&mut self) -> Command {
        let (sent, key, b64) = self.meta_key();
        let mut flags = Vec::new();
        if b64 {
            flags.push(Flag::Text(b"b".to_vec()));
        }
        let arith = self.is_arith(&key);
        self.letter_flags(
            &mut flags,
            &[
                (b'v', 60),
                (b'c', 30),
                (b'f', 25),
                (b'k', 20),
                (b't', 25),
                (b'h', if arith { 0 } else { 10 }),
                (b'l', 10),
                (b'u', 10),
                (b'q', 15),
            ],
        );
        if !arith && self.rng.chance(15) {
            flags.push(Flag::Text(b"s".to_vec()));
        }
        self.maybe_opaque(&mut flags);
        let vivify = self.rng.chance(8);
        let recache = self.rng.chance(8);
        if !arith && (vivify || recache) {
            self.mark_flagged(&key);
            if vivify {
                let mut t = b"N".to_vec();
                t.extend(self.future_ttl_token());
                flags.push(Flag::Text(t));
            }
            if recache {
                let r = *self.rng.pick(&[&b"R50"[..], b"R500", b"R5000"]);
                flags.push(Flag::Text(r.to_vec()));
            }
        }
        if self.rng.chance(8) {
            let mut t = b"T".to_vec();
            t.extend(self.future_ttl_token());
            flags.push(Flag::Text(t));
        }
        self.shuffle(&mut flags);
        let mut kind = "mg";
        if self.rng.chance(6) {
            kind = "bad-mg";
            self.spoil(&mut flags, NOT_MG_FLAGS);
        }
        if self.rng.chance(1) {
            return Command::literal("bad-mg", b"mg\r\n".to_vec());
        }
        self.meta_command(kind, &[b"mg", &sent], flags, key)
    }

    /// `ms`, including its data block.
    pub(crate) fn meta_set(&mut self) -> Command {
        let variant = self.rng.below(100);
        let (mut sent, mut key, mut b64) = self.meta_key();
        let decodes = !b64
            || base64::engine::general_purpose::STANDARD
                .decode(&sent)
                .is_ok_and(|k| k == key);
        // memcached limits the key token as sent (base64 included) to 250 bytes too.
        let too_long = key.len() > KEY_MAX || sent.len() > KEY_MAX;
        if (84..87).contains(&variant) && (too_long || !decodes) {
            // Oversized values always get a valid key: after rejecting the header memcached
            // would read the big value as command lines (see the generator's notes).
            let i = self.pool_index();
            key = self.keys[i].clone();
            sent = key.clone();
            b64 = false;
        }
        let arith = self.is_arith(&key);
        let mut flags = Vec::new();
        if b64 {
            flags.push(Flag::Text(b"b".to_vec()));
        }
        let mut mode = b'S';
        if self.rng.chance(30) {
            mode = *self.rng.pick(b"EAPRSEARSeaprsX");
            if arith && matches!(mode, b'A' | b'P' | b'a' | b'p') {
                mode = b'S';
            }
            flags.push(Flag::Text(vec![b'M', mode]));
        }
        let mut with_cas = false;
        if self.rng.chance(15) {
            with_cas = true;
            let r = self.cas_ref(&key);
            flags.push(Flag::Cas(b'C', r));
            if !arith && self.rng.chance(25) {
                self.mark_flagged(&key);
                flags.push(Flag::Text(b"I".to_vec()));
            }
        }
        self.letter_flags(&mut flags, &[(b'c', 25), (b'k', 15), (b'q', 15)]);
        if self.rng.chance(30) {
            let mut f = b"F".to_vec();
            f.extend(self.flags_token(true).into_bytes());
            flags.push(Flag::Text(f));
        }
        if self.rng.chance(25) {
            let mut t = b"T".to_vec();
            t.extend(self.ttl_token());
            flags.push(Flag::Text(t));
        }
        self.maybe_opaque(&mut flags);
        self.shuffle(&mut flags);

        let (kind, len_token, data): (&'static str, Vec<u8>, Vec<u8>) = if variant < 84 {
            let mut data = if matches!(mode, b'A' | b'P' | b'a' | b'p') {
                let n = self.rng.range(0, 64);
                self.bytes(n)
            } else {
                self.value_for(&key, !too_long && decodes)
            };
            let len = data.len().to_string().into_bytes();
            data.extend_from_slice(b"\r\n");
            if !with_cas && mode == b'S' {
                self.redefined(&key);
            }
            ("ms", len, data)
        } else if variant < 87 {
            let n = self.oversized_len();
            let mut data = self.bytes(n);
            data.extend_from_slice(b"\r\n");
            ("too-large", n.to_string().into_bytes(), data)
        } else if variant < 91 {
            let n = self.rng.range(1, 100);
            let data = self.bad_chunk(n);
            ("bad-chunk", n.to_string().into_bytes(), data)
        } else {
            let n = self.rng.range(0, 60);
            let mut data = self.bytes(n);
            data.extend_from_slice(b"\r\n");
            let len = match self.rng.below(4) {
                0 => b"abc".to_vec(),
                1 => b"-1".to_vec(),
                2 => b"2147483647".to_vec(),
                _ => {
                    self.spoil(&mut flags, NOT_MS_FLAGS);
                    n.to_string().into_bytes()
                }
            };
            ("bad-ms", len, data)
        };
        let mut c = if kind == "bad-ms" && self.rng.chance(10) {
            // No length at all.
            let mut c = Command::literal(kind, b"ms ".to_vec());
            c.push(&sent);
            c.push(b"\r\n");
            c.key = Some(key);
            c
        } else if kind == "bad-ms" && self.rng.chance(10) {
            let long = vec![b'L'; KEY_MAX + 1];
            self.meta_command(kind, &[b"ms", &long, &len_token], flags, key)
        } else {
            self.meta_command(kind, &[b"ms", &sent, &len_token], flags, key)
        };
        c.push(&data);
        c
    }

    /// `md`.
    pub(crate) fn meta_delete(&mut self) -> Command {
        let (sent, key, b64) = self.meta_key();
        let mut flags = Vec::new();
        if b64 {
            flags.push(Flag::Text(b"b".to_vec()));
        }
        let mut plain = true;
        if self.rng.chance(20) {
            plain = false;
            let r = self.cas_ref(&key);
            flags.push(Flag::Cas(b'C', r));
        }
        if !self.is_arith(&key) && self.rng.chance(12) {
            plain = false;
            self.mark_flagged(&key);
            flags.push(Flag::Text(b"I".to_vec()));
            if self.rng.chance(50) {
                let mut t = b"T".to_vec();
                t.extend(self.ttl_token());
                flags.push(Flag::Text(t));
            }
        }
        self.letter_flags(&mut flags, &[(b'k', 15), (b'q', 20)]);
        self.maybe_opaque(&mut flags);
        self.shuffle(&mut flags);
        let mut kind = "md";
        if self.rng.chance(5) {
            kind = "bad-md";
            plain = false;
            self.spoil(&mut flags, NOT_MG_FLAGS);
        }
        if self.rng.chance(1) {
            return Command::literal("bad-md", b"md\r\n".to_vec());
        }
        if plain {
            self.redefined(&key);
        }
        self.meta_command(kind, &[b"md", &sent], flags, key)
    }

    /// `ma`.
    pub(crate) fn meta_arithmetic(&mut self) -> Command {
        let (mut sent, mut key, mut b64) = self.meta_key();
        if self.is_flagged(&key) {
            key = self.arith_key();
            sent = key.clone();
            b64 = false;
        }
        self.mark_arith(&key);
        let mut flags = Vec::new();
        if b64 {
            flags.push(Flag::Text(b"b".to_vec()));
        }
        if self.rng.chance(10) {
            let r = self.cas_ref(&key);
            flags.push(Flag::Cas(b'C', r));
        }
        if self.rng.chance(15) {
            let mut t = b"N".to_vec();
            t.extend(self.future_ttl_token());
            flags.push(Flag::Text(t));
            if self.rng.chance(60) {
                let j = *self.rng.pick(&[&b"J0"[..], b"J13", b"J4294967296"]);
                flags.push(Flag::Text(j.to_vec()));
            }
        }
        let mut decrement = false;
        if self.rng.chance(30) {
            let m = *self.rng.pick(b"I+D-IDid");
            decrement = matches!(m, b'D' | b'-' | b'd');
            flags.push(Flag::Text(vec![b'M', m]));
        }
        if self.rng.chance(40) {
            // Huge deltas only decrement (see the generator's notes on 2^63).
            let d = if decrement && self.rng.chance(30) {
                *self
                    .rng
                    .pick(&[&b"D18446744073709551615"[..], b"D9223372036854775808"])
            } else {
                *self
                    .rng
                    .pick(&[&b"D1"[..], b"D7", b"D1000", b"D4294967296"])
            };
            flags.push(Flag::Text(d.to_vec()));
        }
        // No `T`: memcached 1.6.18 applies it to the item or to the copy incr made of it,
        // depending on timing (see docs/compat.md).
        self.letter_flags(
            &mut flags,
            &[(b'q', 15), (b't', 15), (b'c', 20), (b'v', 50), (b'k', 10)],
        );
        self.maybe_opaque(&mut flags);
        self.shuffle(&mut flags);
        let mut kind = "ma";
        if self.rng.chance(7) {
            kind = "bad-ma";
            let bad = *self.rng.pick(&[
                &b"D-1"[..],
                b"Dabc",
                b"D18446744073709551616",
                b"J-1",
                b"MX",
                b"x",
                b"N",
            ]);
            flags.push(Flag::Text(bad.to_vec()));
        }
        if self.rng.chance(1) {
            return Command::literal("bad-ma", b"ma\r\n".to_vec());
        }
        self.meta_command(kind, &[b"ma", &sent], flags, key)
    }

    /// `mn`: answers `MN`, which the reader counts.
    pub(crate) fn meta_noop(&mut self) -> Command {
        let mut c = Command::literal("mn", b"mn\r\n".to_vec());
        c.mn_lines = 1;
        c
    }
}
