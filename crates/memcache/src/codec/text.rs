//! Command-line dispatch and the classic text commands.
//!
//! Mirrors memcached 1.6's `process_command_ascii`: the arity checks (`ERROR` for a wrong
//! number of tokens), where `noreply` is recognised (the last token, looked at *before* the
//! line is validated, so a malformed `noreply` command gets no error reply either), and the
//! exact error strings. Meta commands are handed to [`super::meta`].
use bytes::Bytes;

use super::meta;
use super::number::{strtol32, strtoul32, strtoull};
use super::tokens::Tokens;
use super::{CloseReason, DataHeader, Limits, LineOutcome, KEY_MAX_LENGTH};
use crate::request::{LruCrawler, Request, Retrieval, ShutdownArg, StatsArg, Storage, StoreMode};

const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";

fn reply(line: &'static str, noreply: bool) -> LineOutcome {
    LineOutcome::Done(Request::Reply { line, noreply })
}

fn error() -> LineOutcome {
    reply("ERROR", false)
}

fn key(bytes: &[u8]) -> Bytes {
    Bytes::copy_from_slice(bytes)
}

/// Parse one command line (without its `\r\n`).
pub(crate) fn parse_line(line: &[u8], limits: &Limits) -> LineOutcome {
    let t = Tokens::new(line);
    let n = t.count();
    let cmd = t.get(0);
    if n == 0 || cmd.len() < 2 {
        return error();
    }
    if cmd.len() == 2 && cmd.first() == Some(&b'm') {
        return match cmd.get(1) {
            Some(b'g') => meta::parse_get(&t),
            Some(b's') => meta::parse_set(&t, limits),
            Some(b'd') => meta::parse_delete(&t),
            Some(b'n') => LineOutcome::Done(Request::MetaNoop),
            Some(b'a') => meta::parse_arith(&t),
            Some(b'e') => meta::parse_debug(&t),
            _ => error(),
        };
    }
    match cmd {
        b"get" | b"bget" if n >= 2 => retrieval(&t, false, false),
        b"gets" if n >= 2 => retrieval(&t, true, false),
        b"gat" if n >= 2 => retrieval(&t, false, true),
        b"gats" if n >= 2 => retrieval(&t, true, true),
        b"set" if n == 5 || n == 6 => storage(&t, StoreMode::Set, limits),
        b"add" if n == 5 || n == 6 => storage(&t, StoreMode::Add, limits),
        b"replace" if n == 5 || n == 6 => storage(&t, StoreMode::Replace, limits),
        b"append" if n == 5 || n == 6 => storage(&t, StoreMode::Append, limits),
        b"prepend" if n == 5 || n == 6 => storage(&t, StoreMode::Prepend, limits),
        b"cas" if n == 6 || n == 7 => storage(&t, StoreMode::Cas, limits),
        b"incr" if n == 3 || n == 4 => arith(&t, true),
        b"decr" if n == 3 || n == 4 => arith(&t, false),
        b"touch" if n == 3 || n == 4 => touch(&t),
        b"delete" if (2..=4).contains(&n) => delete(&t),
        b"stats" => stats(&t),
        b"flush_all" if (1..=3).contains(&n) => flush_all(&t),
        b"version" => LineOutcome::Done(Request::Version),
        b"quit" => LineOutcome::Done(Request::Quit),
        b"verbosity" if n == 2 || n == 3 => verbosity(&t),
        b"cache_memlimit" if n == 2 || n == 3 => memlimit(&t),
        b"extstore" if n >= 3 => LineOutcome::Done(Request::Extstore {
            name: String::from_utf8_lossy(t.get(1)).into_owned(),
            value: String::from_utf8_lossy(t.get(2)).into_owned(),
            noreply: noreply(&t),
        }),
        b"slabs" if n >= 3 && t.get(1) == b"automove" => slabs_automove(&t),
        b"shutdown" => LineOutcome::Done(Request::Shutdown(match (n, t.get(1)) {
            (1, _) => ShutdownArg::Now,
            (2, b"graceful") => ShutdownArg::Graceful,
            _ => ShutdownArg::Invalid,
        })),
        b"lru_crawler" => lru_crawler(&t),
        _ => {
            if t.last().starts_with(b"HTTP/") {
                LineOutcome::Close(CloseReason::Http)
            } else {
                error()
            }
        }
    }
}

fn noreply(t: &Tokens<'_>) -> bool {
    t.last() == b"noreply"
}

fn retrieval(t: &Tokens<'_>, with_cas: bool, touch: bool) -> LineOutcome {
    let mut all = t.all().skip(1);
    let touch = if touch {
        match all.next().and_then(strtol32) {
            Some(e) => Some(e),
            None => return reply("CLIENT_ERROR invalid exptime argument", false),
        }
    } else {
        None
    };
    let mut keys = crate::request::KeyList::new();
    let mut key_too_long = false;
    for k in all {
        if k.len() > KEY_MAX_LENGTH {
            key_too_long = true;
            break;
        }
        keys.push(key(k));
    }
    LineOutcome::Done(Request::Retrieval(Retrieval {
        keys,
        with_cas,
        touch,
        key_too_long,
    }))
}

fn storage(t: &Tokens<'_>, mode: StoreMode, limits: &Limits) -> LineOutcome {
    let noreply = noreply(t);
    let k = t.get(1);
    if k.len() > KEY_MAX_LENGTH {
        return reply(BAD_FORMAT, noreply);
    }
    let (Some(flags), Some(exptime), Some(vlen)) =
        (strtoul32(t.get(2)), strtol32(t.get(3)), strtol32(t.get(4)))
    else {
        return reply(BAD_FORMAT, noreply);
    };
    let cas = if mode == StoreMode::Cas {
        match strtoull(t.get(5)) {
            Some(c) => c,
            None => return reply(BAD_FORMAT, noreply),
        }
    } else {
        0
    };
    let Ok(len) = usize::try_from(vlen) else {
        return reply(BAD_FORMAT, noreply);
    };
    if vlen > i32::MAX - 2 {
        return reply(BAD_FORMAT, noreply);
    }
    if len > limits.max_item_size {
        return LineOutcome::Swallow {
            request: Request::TooLarge {
                key: key(k),
                noreply,
                drop_existing: mode == StoreMode::Set,
            },
            swallow: len + 2,
        };
    }
    let storage = Storage {
        mode,
        key: key(k),
        flags,
        exptime,
        cas,
        noreply,
        value: Bytes::new(),
    };
    LineOutcome::Data {
        len,
        header: DataHeader::Text(storage),
    }
}

fn arith(t: &Tokens<'_>, incr: bool) -> LineOutcome {
    let noreply = noreply(t);
    let k = t.get(1);
    if k.len() > KEY_MAX_LENGTH {
        return reply(BAD_FORMAT, noreply);
    }
    match strtoull(t.get(2)) {
        Some(delta) => LineOutcome::Done(Request::Arith {
            key: key(k),
            incr,
            delta,
            noreply,
        }),
        None => reply("CLIENT_ERROR invalid numeric delta argument", noreply),
    }
}

fn touch(t: &Tokens<'_>) -> LineOutcome {
    let noreply = noreply(t);
    let k = t.get(1);
    if k.len() > KEY_MAX_LENGTH {
        return reply(BAD_FORMAT, noreply);
    }
    match strtol32(t.get(2)) {
        Some(exptime) => LineOutcome::Done(Request::Touch {
            key: key(k),
            exptime,
            noreply,
        }),
        None => reply("CLIENT_ERROR invalid exptime argument", noreply),
    }
}

fn delete(t: &Tokens<'_>) -> LineOutcome {
    let n = t.count();
    let mut noreply = false;
    if n > 2 {
        let hold_is_zero = t.get(2) == b"0";
        noreply = self::noreply(t);
        let valid = (n == 3 && (hold_is_zero || noreply)) || (n == 4 && hold_is_zero && noreply);
        if !valid {
            return reply(
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]",
                noreply,
            );
        }
    }
    let k = t.get(1);
    if k.len() > KEY_MAX_LENGTH {
        return reply(BAD_FORMAT, noreply);
    }
    LineOutcome::Done(Request::Delete {
        key: key(k),
        noreply,
    })
}

fn flush_all(t: &Tokens<'_>) -> LineOutcome {
    let noreply = noreply(t);
    let n = t.count();
    let mut delay = 0;
    if n != if noreply { 2 } else { 1 } {
        match strtol32(t.get(1)) {
            Some(d) => delay = d,
            None => return reply("CLIENT_ERROR invalid exptime argument", noreply),
        }
    }
    LineOutcome::Done(Request::FlushAll { delay, noreply })
}

fn verbosity(t: &Tokens<'_>) -> LineOutcome {
    let noreply = noreply(t);
    match strtoul32(t.get(1)) {
        Some(level) => LineOutcome::Done(Request::Verbosity { level, noreply }),
        None => reply(BAD_FORMAT, noreply),
    }
}

/// `slabs automove <0|1|2>` / `slabs automove ratio <float>`: memcached tunes its slab page
/// mover; flashtier has no slab classes, so a valid setting is accepted with no effect (like
/// the `-o slab_automove` option) and an invalid one gets memcached's answer. Other `slabs`
/// sub-commands stay unknown (`ERROR`).
fn slabs_automove(t: &Tokens<'_>) -> LineOutcome {
    let noreply = noreply(t);
    let arg = t.get(2);
    if arg == b"ratio" {
        let ratio = std::str::from_utf8(t.get(3))
            .ok()
            .and_then(|s| s.parse::<f64>().ok());
        return match ratio {
            Some(_) if t.count() >= 4 => reply("OK", noreply),
            _ => reply("ERROR", noreply),
        };
    }
    match strtoul32(arg) {
        None => reply(BAD_FORMAT, noreply),
        Some(0..=2) => reply("OK", noreply),
        Some(_) => reply("ERROR", noreply),
    }
}

/// `lru_crawler ...` with memcached 1.6.18's arity rules and answers. flashtier has no LRU
/// crawler (its sweeper reclaims expired items all the time), so the tuning sub-commands are
/// accepted when valid; `metadump` lists the items.
fn lru_crawler(t: &Tokens<'_>) -> LineOutcome {
    let done = |c| LineOutcome::Done(Request::LruCrawler(c));
    match (t.count(), t.get(1)) {
        (3, b"metadump") => done(LruCrawler::Metadump(key(t.get(2)))),
        (3, b"crawl") => done(LruCrawler::Accepted),
        (3, b"tocrawl") => match strtoul32(t.get(2)) {
            Some(_) => done(LruCrawler::Accepted),
            None => done(LruCrawler::Reply(BAD_FORMAT)),
        },
        (3, b"sleep") => match strtoul32(t.get(2)) {
            Some(us) if us <= 1_000_000 => done(LruCrawler::Accepted),
            Some(_) => done(LruCrawler::Reply(
                "CLIENT_ERROR sleep must be one second or less",
            )),
            None => done(LruCrawler::Reply(BAD_FORMAT)),
        },
        (2, b"enable" | b"disable") => done(LruCrawler::Accepted),
        _ => error(),
    }
}

fn memlimit(t: &Tokens<'_>) -> LineOutcome {
    let noreply = noreply(t);
    match strtoul32(t.get(1)) {
        None => reply("ERROR", noreply),
        Some(mb) if mb < 8 => reply(
            "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m",
            noreply,
        ),
        Some(mb) if mb > 1_000_000_000 => reply(
            "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes",
            noreply,
        ),
        Some(megabytes) => LineOutcome::Done(Request::MemLimit { megabytes, noreply }),
    }
}

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES`.
const SLAB_CLASSES: u32 = 64;

fn stats(t: &Tokens<'_>) -> LineOutcome {
    let arg = match t.get(1) {
        b"cachedump" => {
            if t.count() < 4 {
                return reply("CLIENT_ERROR bad command line", false);
            }
            match (strtoul32(t.get(2)), strtoul32(t.get(3))) {
                (Some(class), Some(limit)) if class < SLAB_CLASSES => {
                    StatsArg::CacheDump { class, limit }
                }
                (Some(_), Some(_)) => return reply("CLIENT_ERROR Illegal slab id", false),
                _ => return reply(BAD_FORMAT, false),
            }
        }
        b"" => StatsArg::General,
        b"reset" => StatsArg::Reset,
        b"detail" => StatsArg::Detail((t.count() >= 3).then(|| key(t.get(2)))),
        other => StatsArg::Section(key(other)),
    };
    LineOutcome::Done(Request::Stats(arg))
}
