//! Shared by the blockcache integration tests: a seeded xorshift generator (the same
//! sequence on every run, so a failure replays) and a stat lookup.
#![allow(dead_code)]
pub mod flash_dump;
use flashtier_blockcache::BlockCache;

/// xorshift64: reproducible random offsets, lengths and data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A numeric stat of the cache by name; panics naming a stat that does not exist.
pub fn stat(cache: &BlockCache, name: &str) -> u64 {
    cache
        .stats_pairs()
        .into_iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no stat {name}"))
}

/// A block cache on `dev` in front of `backing`, sequential bypass off (every write cached).
pub fn open_on(
    dev: &std::sync::Arc<flashtier_flash::MemoryDevice>,
    backing: &std::sync::Arc<flashtier_backend::MemoryBackend>,
) -> std::sync::Arc<BlockCache> {
    use flashtier_backend::BlockBackend;
    use flashtier_flash::Device;
    use std::sync::Arc;
    let cfg = flashtier_blockcache::BlockCacheConfig {
        tunables: vec![("seq_threshold_kb".into(), "0".into())],
        ..Default::default()
    };
    BlockCache::open_devices(
        vec![Arc::clone(dev) as Arc<dyn Device>],
        Arc::clone(backing) as Arc<dyn BlockBackend>,
        cfg,
    )
    .expect("open cache")
}
