//! Text-protocol commands of the stream, valid and malformed.
//!
//! `impl Generator` block; see [`crate::generator`] for the rules every command follows.

use crate::generator::{join, Generator, KEY_MAX};
use crate::request::Command;

impl Generator {
    /// `set add replace append prepend`.
    // Longer than clippy.toml's 120 lines: one generator whose random draws must stay in this
    // order (a seed names a stream across versions), so it is left whole (a test tool).
    #[allow(clippy::too_many_lines)]
    pub(crate) fn text_storage(&mut self, cmd: &'static str) -> Command {
        let mut key = self.text_key();
        let cmd: &'static str = if (cmd == "append" || cmd == "prepend") && self.is_arith(&key) {
            "set"
        } else {
            cmd
        };
        let noreply = self.rng.chance(10);
        let eol = self.eol();
        let variant = self.rng.below(100);
        let flags = self.flags_token(true);
        let exptime = self.exptime_token(true);
        let mut line: Vec<u8>;
        let kind: &'static str;
        let mut data: Vec<u8>;
        if variant < 84 {
            kind = cmd;
            data = if cmd == "append" || cmd == "prepend" {
                let n = self.rng.range(0, 64);
                self.bytes(n)
            } else {
                self.value_for(&key, true)
            };
            let len = data.len().to_string();
            line = join(&[
                cmd.as_bytes(),
                &key,
                flags.as_bytes(),
                exptime.as_bytes(),
                len.as_bytes(),
            ]);
            data.extend_from_slice(b"\r\n");
            if cmd == "set" || cmd == "replace" {
                self.redefined(&key);
            }
        } else if variant < 87 {
            kind = "too-large";
            if key.len() > KEY_MAX {
                // A rejected header would make memcached read the big value as command lines
                // (see the generator's notes): oversized values always get a valid key.
                key = self.keys[0].clone();
            }
            let n = self.oversized_len();
            data = self.bytes(n);
            data.extend_from_slice(b"\r\n");
            line = join(&[
                cmd.as_bytes(),
                &key,
                flags.as_bytes(),
                exptime.as_bytes(),
                n.to_string().as_bytes(),
            ]);
            if cmd == "set" {
                self.redefined(&key);
            }
        } else if variant < 92 {
            kind = "bad-chunk";
            let n = self.rng.range(1, 100);
            line = join(&[
                cmd.as_bytes(),
                &key,
                flags.as_bytes(),
                exptime.as_bytes(),
                n.to_string().as_bytes(),
            ]);
            data = self.bad_chunk(n);
        } else {
            kind = "bad-storage";
            let n = self.rng.range(0, 60);
            let len = n.to_string();
            let bad_flags = self.flags_token(false);
            let bad_exp = self.exptime_token(false);
            let long_key = vec![b'L'; KEY_MAX + 1];
            let bad_len = *self.rng.pick(&[
                "-1",
                "abc",
                "4294967296",
                "2147483647",
                "2147483646",
                "1x",
                "",
            ]);
            line = match self.rng.below(8) {
                0 => join(&[cmd.as_bytes(), &key, flags.as_bytes(), len.as_bytes()]),
                1 => join(&[
                    cmd.as_bytes(),
                    &key,
                    bad_flags.as_bytes(),
                    exptime.as_bytes(),
                    len.as_bytes(),
                ]),
                2 => join(&[
                    cmd.as_bytes(),
                    &key,
                    flags.as_bytes(),
                    bad_exp.as_bytes(),
                    len.as_bytes(),
                ]),
                3 => join(&[
                    cmd.as_bytes(),
                    &key,
                    flags.as_bytes(),
                    exptime.as_bytes(),
                    bad_len.as_bytes(),
                ]),
                4 => join(&[
                    cmd.as_bytes(),
                    &long_key,
                    flags.as_bytes(),
                    exptime.as_bytes(),
                    len.as_bytes(),
                ]),
                5 => join(&[
                    cmd.as_bytes(),
                    &key,
                    flags.as_bytes(),
                    exptime.as_bytes(),
                    len.as_bytes(),
                    b"noreply",
                    b"extra",
                ]),
                6 => cmd.as_bytes().to_vec(),
                _ => join(&[
                    cmd.as_bytes(),
                    &key,
                    flags.as_bytes(),
                    exptime.as_bytes(),
                    len.as_bytes(),
                    b"norepl",
                ]),
            };
            data = self.bytes(n);
            data.extend_from_slice(b"\r\n");
        }
        if noreply && kind != "bad-storage" {
            line.extend_from_slice(b" noreply");
        }
        line.extend_from_slice(eol);
        line.extend_from_slice(&data);
        let mut c = Command::literal(kind, line);
        c.key = Some(key);
        c
    }

    /// A data block that does not match its declared length `n` (or its terminator), shaped
    /// so the server consumes exactly what was sent (see the module docs of the generator):
    /// every variant ends in CRLF, so whatever the server reads as a command line after
    /// rejecting the block (or the header) is a complete line and the sentinel stays intact.
    pub(crate) fn bad_chunk(&mut self, n: usize) -> Vec<u8> {
        match self.rng.below(3) {
            0 => {
                // Right length, wrong terminator; the CRLF after it ends the line the
                // server reads when it rejected the header instead.
                let mut d = self.bytes(n);
                d.extend_from_slice(b"XY\r\n");
                d
            }
            1 => {
                // Too long: the tail is read as a command line (an unknown one).
                let extra = self.rng.range(1, 20);
                let mut d = self.bytes(n + extra);
                d.extend_from_slice(b"\r\n");
                d
            }
            _ => {
                // Too short, then filler up to the declared length.
                let m = self.rng.range(0, n - 1);
                let mut d = self.bytes(m);
                d.extend_from_slice(b"\r\n");
                d.extend(std::iter::repeat_n(b'F', n - m));
                d.extend_from_slice(b"\r\n");
                d
            }
        }
    }

    /// `cas`.
    pub(crate) fn text_cas(&mut self) -> Command {
        let key = self.text_key();
        // Decide the variant first: a rejected header means the data is read as commands.
        let variant = self.rng.below(20);
        let mut data = self.value_for(&key, variant > 1);
        let flags = self.flags_token(true);
        let exptime = self.exptime_token(true);
        let len = data.len().to_string();
        data.extend_from_slice(b"\r\n");
        let mut c = Command::literal(
            "cas",
            join(&[
                b"cas",
                &key,
                flags.as_bytes(),
                exptime.as_bytes(),
                len.as_bytes(),
                b"",
            ]),
        );
        match variant {
            0 => {
                c.kind = "bad-cas";
                c.pieces = vec![crate::request::Piece::Bytes(join(&[
                    b"cas",
                    &key,
                    flags.as_bytes(),
                    exptime.as_bytes(),
                    len.as_bytes(),
                ]))];
            }
            1 => {
                c.kind = "bad-cas";
                const BAD: [&[u8]; 3] = [b"abc", b"-1", b"18446744073709551616"];
                let bad = *self.rng.pick(&BAD);
                c.push(bad);
            }
            _ => {
                let r = self.cas_ref(&key);
                c.push_cas(r);
            }
        }
        if self.rng.chance(10) {
            c.push(b" noreply");
        }
        let eol = self.eol();
        c.push(eol);
        c.push(&data);
        c.key = Some(key);
        c
    }

    /// `get gets`.
    pub(crate) fn text_get(&mut self, cmd: &'static str) -> Command {
        let n = match self.rng.below(100) {
            0 | 1 => 0,
            2 => 60,
            3..=59 => 1,
            _ => self.rng.range(2, 6),
        };
        let tokens: Vec<Vec<u8>> = vec![cmd.as_bytes().to_vec()];
        self.with_keys(cmd, tokens, n)
    }

    /// `gat gats`.
    pub(crate) fn text_gat(&mut self, cmd: &'static str) -> Command {
        let valid = self.rng.chance(92);
        let exptime = self.exptime_token(valid);
        let n = if self.rng.chance(3) {
            0
        } else {
            self.rng.range(1, 4)
        };
        let tokens: Vec<Vec<u8>> = vec![cmd.as_bytes().to_vec(), exptime.into_bytes()];
        self.with_keys(cmd, tokens, n)
    }

    /// `tokens` followed by `n` random keys, as one command line (a single key is the
    /// command's key).
    fn with_keys(&mut self, cmd: &'static str, mut tokens: Vec<Vec<u8>>, n: usize) -> Command {
        let mut single = None;
        for _ in 0..n {
            let k = self.text_key();
            single = Some(k.clone());
            tokens.push(k);
        }
        let refs: Vec<&[u8]> = tokens.iter().map(Vec::as_slice).collect();
        let mut line = join(&refs);
        line.extend_from_slice(self.eol());
        let mut c = flushed_if_long_key(cmd, &tokens, line);
        if n == 1 {
            c.key = single;
        }
        c
    }

    /// `delete`.
    pub(crate) fn text_delete(&mut self) -> Command {
        let key = self.text_key();
        let (mut line, valid) = match self.rng.below(20) {
            0 => (join(&[b"delete", &key, b"0"]), true),
            1 => (join(&[b"delete", &key, b"0", b"noreply"]), true),
            2 => (join(&[b"delete", &key, b"5"]), false),
            3 => (b"delete".to_vec(), false),
            4 => (join(&[b"delete", &key, b"noreply", b"x"]), false),
            5 | 6 => (join(&[b"delete", &key, b"noreply"]), true),
            _ => (join(&[b"delete", &key]), true),
        };
        if valid {
            self.redefined(&key);
        }
        line.extend_from_slice(self.eol());
        let mut c = Command::literal("delete", line);
        c.key = Some(key);
        c
    }

    /// `incr decr`.
    pub(crate) fn text_incr(&mut self, cmd: &'static str) -> Command {
        let key = self.arith_key();
        self.mark_arith(&key);
        let huge = if cmd == "decr" {
            *self
                .rng
                .pick(&["18446744073709551615", "9223372036854775808"])
        } else {
            "4294967296"
        };
        let delta: String = match self.rng.below(20) {
            0..=7 => "1".into(),
            8..=12 => self.rng.below(1000).to_string(),
            13 | 14 => huge.into(),
            15 => "0".into(),
            16 => "abc".into(),
            17 => "-1".into(),
            18 => "18446744073709551616".into(),
            _ => String::new(),
        };
        let mut line = if delta.is_empty() {
            join(&[cmd.as_bytes(), &key])
        } else {
            join(&[cmd.as_bytes(), &key, delta.as_bytes()])
        };
        if self.rng.chance(10) {
            line.extend_from_slice(b" noreply");
        }
        line.extend_from_slice(self.eol());
        let mut c = Command::literal(cmd, line);
        c.key = Some(key);
        c
    }

    /// `touch`.
    pub(crate) fn text_touch(&mut self) -> Command {
        let key = self.text_key();
        let valid = self.rng.chance(90);
        let exptime = self.exptime_token(valid);
        let mut line = if self.rng.chance(3) {
            join(&[b"touch", &key])
        } else {
            join(&[b"touch", &key, exptime.as_bytes()])
        };
        if self.rng.chance(10) {
            line.extend_from_slice(b" noreply");
        }
        line.extend_from_slice(self.eol());
        let mut c = Command::literal("touch", line);
        c.key = Some(key);
        c
    }

    /// `flush_all`, without a delay (see the generator's notes).
    pub(crate) fn text_flush_all(&mut self) -> Command {
        let line: &[u8] = match self.rng.below(8) {
            0 | 1 => b"flush_all",
            2 => b"flush_all 0",
            3 => b"flush_all noreply",
            4 => b"flush_all 0 noreply",
            5 => b"flush_all noreply extra",
            6 => b"flush_all abc",
            _ => b"flush_all 0 0 0",
        };
        if matches!(
            line,
            b"flush_all" | b"flush_all 0" | b"flush_all noreply" | b"flush_all 0 noreply"
        ) {
            self.arith.clear();
            self.flagged.clear();
        }
        let mut line = line.to_vec();
        line.extend_from_slice(self.eol());
        Command::literal("flush_all", line)
    }

    /// `version`.
    pub(crate) fn text_version(&mut self) -> Command {
        let line: &[u8] = if self.rng.chance(80) {
            b"version\r\n"
        } else {
            b"version extra\r\n"
        };
        Command::literal("version", line.to_vec())
    }

    /// `verbosity`.
    pub(crate) fn text_verbosity(&mut self) -> Command {
        let line: &[u8] = match self.rng.below(7) {
            0 | 1 => b"verbosity 1\r\n",
            2 => b"verbosity 0 noreply\r\n",
            3 => b"verbosity\r\n",
            4 => b"verbosity abc\r\n",
            5 => b"verbosity 1 2 3\r\n",
            _ => b"verbosity 0\r\n",
        };
        Command::literal("verbosity", line.to_vec())
    }

    /// `quit`: the server closes the connection.
    pub(crate) fn text_quit(&mut self) -> Command {
        let mut c = Command::literal("quit", b"quit\r\n".to_vec());
        c.closes = true;
        c
    }

    /// A command line longer than any read buffer: memcached closes the connection.
    pub(crate) fn text_long_line(&mut self) -> Command {
        let mut line = vec![b'X'; 20_000];
        line.extend_from_slice(b"\r\n");
        let mut c = Command::literal("long-line", line);
        c.closes = true;
        c
    }

    /// Unusual but legal spacing.
    pub(crate) fn text_odd_spacing(&mut self) -> Command {
        let i = self.pool_index();
        let key = self.keys[i].clone();
        let mut line = match self.rng.below(5) {
            0 => join(&[b"get", b"", &key]),
            1 => join(&[b"get", &key, b""]),
            2 => join(&[b"", b"get", &key]),
            3 => join(&[b"delete", b"", &key, b"", b"noreply"]),
            _ => join(&[b"touch", &key, b"", b"0"]),
        };
        line.extend_from_slice(b"\r\n");
        Command::literal("odd-spacing", line)
    }
}

/// A get-family command; when one of its keys is too long it is preceded by `mn`.
///
/// memcached 1.6.18 answers a get with a key over 250 bytes by discarding every reply still
/// queued on the connection, including those of earlier pipelined commands, and which replies
/// are still queued depends on how its reads split the pipeline. `mn` flushes that queue, so
/// the outcome no longer depends on it (see docs/compat.md).
fn flushed_if_long_key(kind: &'static str, tokens: &[Vec<u8>], line: Vec<u8>) -> Command {
    if tokens.iter().skip(1).any(|t| t.len() > KEY_MAX) {
        let mut bytes = b"mn\r\n".to_vec();
        bytes.extend_from_slice(&line);
        let mut c = Command::literal(kind, bytes);
        c.mn_lines = 1;
        c
    } else {
        Command::literal(kind, line)
    }
}
