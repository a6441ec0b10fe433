//! `ModelStore`: the simplest store that is obviously right, used as the test oracle.
//!
//! One `Mutex<HashMap>`, no memory limit, no eviction, no flash. Model-based tests run the
//! same random operations against a real store and against this one and compare; the
//! protocol crate's unit tests use it to exercise command semantics in isolation. The server
//! binary never runs it.
use std::collections::HashMap;

use parking_lot::Mutex;

use crate::{CasMode, Clock, Error, Item, ItemMeta, ItemWrite, KvStore, StoreStats, Update};

#[derive(Debug)]
struct Entry {
    item: Item,
    /// Unix seconds of the last write, for delayed `flush_all`.
    stored_at: u32,
}

#[derive(Debug, Default)]
struct State {
    map: HashMap<Vec<u8>, Entry>,
    next_cas: u64,
    total_items: u64,
    /// Pending or past `flush_all` time: items stored at or before it are dead once it passes.
    flush_at: Option<u32>,
}

/// A `HashMap`-backed [`KvStore`] with no limits. See the module docs.
#[derive(Debug)]
pub struct ModelStore {
    state: Mutex<State>,
    clock: Clock,
    max_item_size: usize,
}

impl ModelStore {
    /// A model store on `clock` accepting values up to `max_item_size` bytes.
    /// Continue CAS values above `cas` (a restarted real store does so above the largest
    /// version it recovered; tests align the oracle with it).
    pub fn continue_cas_above(&self, cas: u64) {
        let mut state = self.state.lock();
        state.next_cas = state.next_cas.max(cas);
    }

    pub fn new(clock: Clock, max_item_size: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
            max_item_size,
        }
    }

    fn live<'a>(state: &'a mut State, key: &[u8], now: u32) -> Option<&'a mut Entry> {
        let dead = match state.map.get(key) {
            None => return None,
            Some(e) => {
                let expired = e.item.exptime != 0 && e.item.exptime <= now;
                let flushed = matches!(state.flush_at, Some(t) if t <= now && e.stored_at <= t);
                expired || flushed
            }
        };
        if dead {
            state.map.remove(key);
            return None;
        }
        state.map.get_mut(key)
    }

    fn write(&self, state: &mut State, key: &[u8], w: ItemWrite, now: u32) -> Result<u64, Error> {
        if w.value.len() > self.max_item_size {
            return Err(Error::TooLarge {
                size: w.value.len(),
                max: self.max_item_size,
            });
        }
        let old_cas = state.map.get(key).map(|e| e.item.cas);
        let cas = match w.cas {
            CasMode::Explicit(c) => c,
            CasMode::Keep if old_cas.is_some() => old_cas.unwrap_or_default(),
            CasMode::Keep | CasMode::New => {
                state.next_cas += 1;
                state.next_cas
            }
        };
        if w.exptime != 0 && w.exptime <= now {
            state.map.remove(key);
            return Ok(cas);
        }
        let meta = ItemMeta {
            stale: w.meta.stale,
            win_token_sent: w.meta.win_token_sent,
            fetched: false,
            last_access: now,
        };
        let item = Item {
            value: w.value,
            flags: w.flags,
            exptime: w.exptime,
            cas,
            meta,
        };
        state.total_items += 1;
        state.map.insert(
            key.to_vec(),
            Entry {
                item,
                stored_at: now,
            },
        );
        Ok(cas)
    }
}

impl ModelStore {
    /// A `get`: the live item as it was before this access, which is recorded.
    fn get_sync(&self, key: &[u8]) -> Option<Item> {
        let now = self.clock.now();
        let mut state = self.state.lock();
        Self::live(&mut state, key, now).map(|e| {
            let before = e.item.clone();
            e.item.meta.fetched = true;
            e.item.meta.last_access = now;
            before
        })
    }
}

impl KvStore for ModelStore {
    /// Every item is in memory: a `get` is always answered at once.
    fn get_if_ready(&self, key: &[u8]) -> crate::GetNow {
        crate::GetNow::Done(self.get_sync(key))
    }

    async fn get(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        Ok(self.get_sync(key))
    }

    async fn set(&self, key: &[u8], item: ItemWrite) -> Result<u64, Error> {
        let now = self.clock.now();
        let mut state = self.state.lock();
        self.write(&mut state, key, item, now)
    }

    async fn update<R, F>(&self, key: &[u8], mut f: F) -> Result<(R, Option<u64>), Error>
    where
        R: Send,
        F: FnMut(Option<&Item>) -> (Update, R) + Send,
    {
        let now = self.clock.now();
        let mut state = self.state.lock();
        let current = Self::live(&mut state, key, now).map(|e| e.item.clone());
        let (decision, r) = f(current.as_ref());
        match decision {
            Update::Keep => Ok((r, None)),
            Update::Delete => {
                state.map.remove(key);
                Ok((r, None))
            }
            Update::Put(w) => {
                let cas = self.write(&mut state, key, w, now)?;
                Ok((r, Some(cas)))
            }
        }
    }

    fn flush_all(&self, at: u32) {
        let now = self.clock.now();
        let mut state = self.state.lock();
        if at <= now {
            state.map.clear();
            state.flush_at = None;
        } else {
            state.flush_at = Some(at);
        }
    }

    fn max_item_size(&self) -> usize {
        self.max_item_size
    }

    fn clock(&self) -> &Clock {
        &self.clock
    }

    fn stats(&self) -> StoreStats {
        let state = self.state.lock();
        StoreStats {
            curr_items: state.map.len() as u64,
            total_items: state.total_items,
            bytes: state
                .map
                .iter()
                .map(|(k, e)| (k.len() + e.item.value.len()) as u64)
                .sum(),
            ..StoreStats::default()
        }
    }

    fn stats_section(&self, _section: &str) -> Option<Vec<(String, String)>> {
        None
    }

    fn dump_parts(&self) -> usize {
        1
    }

    async fn dump_part(&self, part: usize) -> Vec<crate::store::ItemInfo> {
        let now = self.clock.now();
        let state = self.state.lock();
        let mut v: Vec<crate::store::ItemInfo> = state
            .map
            .iter()
            .filter(|_| part == 0)
            .filter(|(_, e)| {
                let expired = e.item.exptime != 0 && e.item.exptime <= now;
                let flushed = matches!(state.flush_at, Some(t) if t <= now && e.stored_at <= t);
                !expired && !flushed
            })
            .map(|(k, e)| crate::store::ItemInfo {
                key: bytes::Bytes::copy_from_slice(k),
                exptime: e.item.exptime,
                last_access: e.item.meta.last_access,
                cas: e.item.cas,
                fetched: e.item.meta.fetched,
                value_len: e.item.value.len() as u32,
                size: (k.len() + e.item.value.len()) as u32,
                flash_only: false,
            })
            .collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[tokio::test]
    async fn set_get_expire_flush() {
        let clock = Clock::system();
        let s = ModelStore::new(clock.clone(), 1024);
        let now = clock.now();
        s.set(b"a", ItemWrite::new(Bytes::from_static(b"1"), 5, now + 10))
            .await
            .unwrap();
        let it = s.get(b"a").await.unwrap().unwrap();
        assert_eq!(it.value, Bytes::from_static(b"1"));
        assert_eq!(it.flags, 5);
        assert!(!it.meta.fetched);
        assert!(s.get(b"a").await.unwrap().unwrap().meta.fetched);
        clock.advance(10);
        assert!(s.get(b"a").await.unwrap().is_none());
        s.set(b"b", ItemWrite::new(Bytes::from_static(b"2"), 0, 0))
            .await
            .unwrap();
        s.flush_all(0);
        assert!(s.get(b"b").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn too_large_is_refused() {
        let s = ModelStore::new(Clock::system(), 4);
        let err = s
            .set(b"k", ItemWrite::new(Bytes::from_static(b"12345"), 0, 0))
            .await;
        assert!(matches!(err, Err(Error::TooLarge { .. })));
    }
}
