//! `stats detail`: per-key-prefix counters (gets, hits, sets, deletes), as memcached keeps
//! them when `stats detail on` (or -D) is given. The prefix is the key up to the first
//! delimiter (memcached -D, default `:`); keys without it are not counted.
//!
//! Bounded: at most [`MAX_PREFIXES`] prefixes are tracked; keys of further prefixes are not
//! counted (`detail_prefixes_dropped`). One mutex, taken only while detail is on.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Most prefixes tracked at once.
pub const MAX_PREFIXES: usize = 65_536;

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    gets: u64,
    hits: u64,
    sets: u64,
    deletes: u64,
}

/// The prefix table and its switch.
#[derive(Debug, Default)]
pub struct Detail {
    on: AtomicBool,
    table: Mutex<HashMap<Vec<u8>, Counts>>,
    /// Counts not recorded because the table was full.
    pub dropped: AtomicU64,
}

/// What happened to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Get { hit: bool },
    Set,
    Delete,
}

impl Detail {
    /// Turn recording on or off (`stats detail on|off`).
    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    /// True while recording.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Count `event` for `key`'s prefix (up to `delim`), if recording.
    pub fn record(&self, key: &[u8], delim: u8, event: Event) {
        if !self.is_on() {
            return;
        }
        let Some(end) = key.iter().position(|&b| b == delim) else {
            return;
        };
        let prefix = &key[..end];
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if !t.contains_key(prefix) && t.len() >= MAX_PREFIXES {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let c = t.entry(prefix.to_vec()).or_default();
        match event {
            Event::Get { hit } => {
                c.gets += 1;
                c.hits += u64::from(hit);
            }
            Event::Set => c.sets += 1,
            Event::Delete => c.deletes += 1,
        }
    }

    /// `stats detail dump`: `PREFIX <p> get <n> hit <n> set <n> del <n>` lines, sorted.
    pub fn dump(&self) -> Vec<String> {
        let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let mut lines: Vec<String> = t
            .iter()
            .map(|(p, c)| {
                format!(
                    "PREFIX {} get {} hit {} set {} del {}",
                    String::from_utf8_lossy(p),
                    c.gets,
                    c.hits,
                    c.sets,
                    c.deletes
                )
            })
            .collect();
        lines.sort();
        lines
    }

    /// `stats reset`: forget every prefix.
    pub fn reset(&self) {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_prefix_only_while_on() {
        let d = Detail::default();
        d.record(b"a:1", b':', Event::Set);
        assert!(d.dump().is_empty());
        d.set_on(true);
        d.record(b"a:1", b':', Event::Get { hit: true });
        d.record(b"a:2", b':', Event::Get { hit: false });
        d.record(b"a:1", b':', Event::Set);
        d.record(b"b:x", b':', Event::Delete);
        d.record(b"nodelim", b':', Event::Set);
        assert_eq!(
            d.dump(),
            vec![
                "PREFIX a get 2 hit 1 set 1 del 0".to_string(),
                "PREFIX b get 0 hit 0 set 0 del 1".to_string()
            ]
        );
    }
}
