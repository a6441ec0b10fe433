//! The dump commands: `lru_crawler metadump all|hash|<classes>` and `stats cachedump
//! <class> <limit>`, listing live items — those on flash too — part by part
//! ([`flashtier_cache::KvStore::dump_part`]), so the connection flushes its output between
//! parts and a dump of millions of items holds at most one part's lines.
//!
//! Classes are the store's tiers as `stats slabs` shows them: `1` items in RAM, `2` items
//! whose only copy is on flash. Formats are memcached 1.6.18's: metadump lines
//! `key=<uri-encoded key> exp=<abs|-1> la=<abs> cas=<n> fetch=<yes|no> cls=<1|2>
//! size=<bytes>` ending in `\n`, then `END\r\n`; cachedump lines `ITEM <key> [<value bytes>
//! b; <abs exptime|0> s]\r\n`, then `END\r\n`, at most `limit` items (0 = no limit) and
//! [`CACHEDUMP_MAX`] bytes.
use std::fmt::Write as _;

use flashtier_cache::{ItemInfo, KvStore};

use crate::context::Context;
use crate::output::Output;

/// memcached's cap on a cachedump reply.
pub const CACHEDUMP_MAX: usize = 2 << 20;

/// Which dump, and how far it got.
#[derive(Debug)]
pub struct DumpState {
    kind: Kind,
    part: usize,
}

#[derive(Debug)]
enum Kind {
    /// metadump of these classes (`None`: all).
    Meta { classes: Option<Vec<u32>> },
    Cache {
        class: u32,
        limit: u32,
        shown: u32,
        bytes: usize,
        /// The byte cap was reached.
        full: bool,
    },
}

/// The class of an item.
fn class_of(i: &ItemInfo) -> u32 {
    if i.flash_only {
        2
    } else {
        1
    }
}

impl DumpState {
    /// `lru_crawler metadump <arg>`; `Err(reply)` for an argument memcached refuses.
    pub fn metadump(arg: &[u8]) -> Result<Self, &'static str> {
        let classes = match arg {
            b"all" | b"hash" => None,
            list => {
                let mut v = Vec::new();
                for c in list.split(|&b| b == b',') {
                    match std::str::from_utf8(c)
                        .ok()
                        .and_then(|s| s.parse::<u32>().ok())
                    {
                        Some(n) if n < 64 => v.push(n),
                        _ => return Err("BADCLASS invalid class id"),
                    }
                }
                Some(v)
            }
        };
        Ok(Self {
            kind: Kind::Meta { classes },
            part: 0,
        })
    }

    /// `stats cachedump <class> <limit>`.
    pub fn cachedump(class: u32, limit: u32) -> Self {
        Self {
            kind: Kind::Cache {
                class,
                limit,
                shown: 0,
                bytes: 0,
                full: false,
            },
            part: 0,
        }
    }

    /// List the next part into `out`; true when the dump is complete (`END` appended).
    pub async fn step<S: KvStore>(&mut self, ctx: &Context<S>, out: &mut Output) -> bool {
        let parts = ctx.store.dump_parts();
        if self.part >= parts || self.limit_reached() {
            out.extend_from_slice(b"END\r\n");
            return true;
        }
        let items = ctx.store.dump_part(self.part).await;
        self.part += 1;
        let cas_on = ctx.settings.cas_enabled;
        let mut line = String::new();
        for i in &items {
            line.clear();
            match &mut self.kind {
                Kind::Meta { classes } => {
                    let cls = class_of(i);
                    if classes.as_ref().is_some_and(|c| !c.contains(&cls)) {
                        continue;
                    }
                    let exp = if i.exptime == 0 {
                        -1
                    } else {
                        i64::from(i.exptime)
                    };
                    let _ = writeln!(
                        line,
                        "key={} exp={exp} la={} cas={} fetch={} cls={cls} size={}",
                        uriencode(&i.key),
                        i.last_access,
                        if cas_on { i.cas } else { 0 },
                        if i.fetched { "yes" } else { "no" },
                        i.size
                    );
                }
                Kind::Cache {
                    class,
                    limit,
                    shown,
                    bytes,
                    full,
                } => {
                    if *full || class_of(i) != *class || (*limit != 0 && *shown >= *limit) {
                        continue;
                    }
                    // memcached skips binary keys here.
                    if i.key.iter().any(|&b| b <= b' ' || b >= 0x7f) {
                        continue;
                    }
                    let _ = write!(
                        line,
                        "ITEM {} [{} b; {} s]\r\n",
                        String::from_utf8_lossy(&i.key),
                        i.value_len,
                        i.exptime
                    );
                    if *bytes + line.len() + 5 > CACHEDUMP_MAX {
                        *full = true;
                        continue;
                    }
                    *shown += 1;
                    *bytes += line.len();
                }
            }
            out.extend_from_slice(line.as_bytes());
        }
        false
    }

    fn limit_reached(&self) -> bool {
        matches!(self.kind, Kind::Cache { limit, shown, full, .. }
            if full || (limit != 0 && shown >= limit))
    }
}

/// memcached's `uriencode`: alphanumerics and `-._~` as they are, every other byte `%XX`.
pub fn uriencode(key: &[u8]) -> String {
    let mut s = String::with_capacity(key.len());
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            s.push(char::from(b));
        } else {
            let _ = write!(s, "%{b:02X}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::uriencode;

    #[test]
    fn uri_encoding() {
        assert_eq!(uriencode(b"a:b c~1"), "a%3Ab%20c~1");
        assert_eq!(uriencode(&[0xff, b'Z']), "%FFZ");
    }
}
