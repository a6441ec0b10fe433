//! The cache at steady state: full, with a hot read set, under sustained overwrites many
//! times the flash size. `cached_blocks` never exceeds `capacity_blocks` and stays near it,
//! the hot read set stays cached (reclaim moves it), every read matches a byte model.
//! For measurements: STEADY_STATS=1 prints every stat, STEADY_POLICY sets flash.reclaim_policy,
//! STEADY_FILL_MOVES sets reclaim_fill_moves.
mod common;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use common::{stat, Rng};
use flashtier_backend::{BlockBackend, MemoryBackend};
use flashtier_blockcache::{BlockCache, BlockCacheConfig};
use flashtier_flash::{Device, MemoryDevice};

const BS: u64 = 4096;

fn block(lba: u64, gen: u64) -> Bytes {
    let mut b = vec![0u8; BS as usize];
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b[8..16].copy_from_slice(&gen.to_le_bytes());
    Bytes::from(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_cache_keeps_hot_reads_under_sustained_overwrites() {
    const BACKING: u64 = 128 << 20;
    let dev = Arc::new(MemoryDevice::new("flash", 32 << 20));
    let backing = Arc::new(MemoryBackend::new(BACKING as usize));
    let devs: Vec<Arc<dyn Device>> = vec![Arc::clone(&dev) as Arc<dyn Device>];
    let cfg = BlockCacheConfig {
        tunables: vec![("flush_period_s".into(), "1".into())],
        ..Default::default()
    };
    let cache = BlockCache::open_devices(devs, Arc::clone(&backing) as Arc<dyn BlockBackend>, cfg)
        .expect("open");
    let wb = cache.start();
    if let Ok(n) = std::env::var("STEADY_FILL_MOVES") {
        cache
            .set_tunable("reclaim_fill_moves", &n)
            .expect("fill moves");
    }
    if let Ok(p) = std::env::var("STEADY_POLICY") {
        cache
            .set_tunable("flash.reclaim_policy", &p)
            .expect("policy");
    }
    let cap = cache.capacity_blocks();
    let nblocks = BACKING / BS;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    // Hot read set: 40 % of the capacity, in the first half; writes go to the second half.
    let hot: Vec<u64> = (0..cap * 2 / 5).map(|_| rng.below(nblocks / 2)).collect();
    let mut model: HashMap<u64, u64> = HashMap::new();
    let check = |lba: u64, got: &[u8], model: &HashMap<u64, u64>| {
        let want = model
            .get(&lba)
            .map_or_else(|| vec![0u8; BS as usize], |g| block(lba, *g).to_vec());
        assert!(got == &want[..], "block {lba} differs from the model");
    };
    // Fill: the hot set, then cold reads until flash is full.
    for lba in hot
        .iter()
        .copied()
        .chain((0..cap * 2).map(|_| rng.below(nblocks)))
    {
        let got = cache.read(lba * BS, BS as u32).await.expect("read");
        check(lba, &got, &model);
    }
    assert!(stat(&cache, "cached_blocks") <= cap);
    let (mut hits0, mut reads0) = (0, 0);
    // Sustained overwrites: ~10× the flash size, with hot reads interleaved.
    let writes = (32 << 20) * 10 / BS;
    let mut min_cached = u64::MAX;
    for i in 0..writes {
        let lba = nblocks / 2 + rng.below(cap);
        let gen = i + 1;
        cache
            .write(lba * BS, block(lba, gen), false)
            .await
            .expect("write");
        model.insert(lba, gen);
        let h = hot[rng.below(hot.len() as u64) as usize];
        let got = cache.read(h * BS, BS as u32).await.expect("read");
        check(h, &got, &model);
        if i == writes / 2 {
            // Hits are measured over the second half (past the hot set's first misses).
            hits0 = stat(&cache, "read_hits");
            reads0 = stat(&cache, "reads");
        }
        if i % 512 == 0 {
            let cached = stat(&cache, "cached_blocks");
            assert!(
                cached <= cap,
                "cached_blocks {cached} > capacity_blocks {cap}"
            );
            if i > writes / 4 {
                min_cached = min_cached.min(cached);
            }
        }
    }
    let hit = (stat(&cache, "read_hits") - hits0) as f64 / (stat(&cache, "reads") - reads0) as f64;
    let moved = stat(&cache, "moved_clean_blocks");
    if std::env::var_os("STEADY_STATS").is_some() {
        for (k, v) in cache.stats_pairs() {
            eprintln!("  {k} = {v}");
        }
    }
    eprintln!(
        "capacity {cap}, min cached after warm-up {min_cached}, hot read hit {hit:.3}, \
         moved clean {moved}, evictions {}, replacements {}",
        stat(&cache, "capacity_evictions"),
        stat(&cache, "replacements")
    );
    assert!(
        min_cached as f64 >= cap as f64 * 0.8,
        "cached fell to {min_cached} of {cap}"
    );
    // Whether the writers outpace writeback (idle machine) or not (loaded one), the hot set
    // stays: reclaim ages read counts with the cache's appends, not per pass (numbers in
    // docs/benchmarks.md, "Block face in real use"). Measured 0.97-0.99 either way; the
    // bound leaves room for slower machines and still catches the per-pass ageing (0.82).
    assert!(hit >= 0.92, "hot read set hit ratio {hit:.3}");
    assert!(moved > 0, "reclaim moved no clean block");
    // Overwrites leave dead versions until reclaim takes them: the cache file's stats say so.
    let snap: std::collections::HashMap<String, String> = cache.stats_pairs().into_iter().collect();
    assert_ne!(snap["dead_bytes"], "0", "{snap:?}");
    assert_ne!(snap["live_bytes"], "0", "{snap:?}");
    // Everything reads back as the model says, through the cache.
    for lba in model.keys().copied().take(2000) {
        let got = cache.read(lba * BS, BS as u32).await.expect("read");
        check(lba, &got, &model);
    }
    cache.stop();
    wb.abort();
}

fn open_small(tun: &[(&str, &str)]) -> (Arc<BlockCache>, Arc<MemoryBackend>) {
    let dev = Arc::new(MemoryDevice::new("flash", 32 << 20));
    let backing = Arc::new(MemoryBackend::new(128 << 20));
    let devs: Vec<Arc<dyn Device>> = vec![Arc::clone(&dev) as Arc<dyn Device>];
    let cfg = BlockCacheConfig {
        tunables: tun
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let cache = BlockCache::open_devices(devs, Arc::clone(&backing) as Arc<dyn BlockBackend>, cfg)
        .expect("open");
    (cache, backing)
}

/// The block face picks reclaim victims by dead bytes (`greedy`) unless told otherwise: the
/// full-cache test above copied ~16 % fewer blocks per block written than with `fifo`
/// (docs/benchmarks.md "Victims by dead bytes"). The knob still switches it at run time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_victims_are_chosen_by_dead_bytes_by_default() {
    let (cache, _backing) = open_small(&[]);
    assert_eq!(
        cache.get_tunable("flash.reclaim_policy").as_deref(),
        Some("greedy")
    );
    cache
        .set_tunable("flash.reclaim_policy", "fifo")
        .expect("fifo");
    assert_eq!(
        cache.get_tunable("flash.reclaim_policy").as_deref(),
        Some("fifo")
    );
    cache.stop();
}

/// An explicit choice at open is kept: `flash.*` tunables in the config reach the engine
/// (a `FlashConfig` saying fifo cannot be told from the engine's default, so the face reads
/// the policy from its tunables), and the face's fixed keep limit is refused there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_reclaim_policy_at_open_is_kept() {
    let (cache, _backing) = open_small(&[("flash.reclaim_policy", "fifo")]);
    assert_eq!(
        cache.get_tunable("flash.reclaim_policy").as_deref(),
        Some("fifo")
    );
    cache.stop();
    let dev = Arc::new(MemoryDevice::new("flash", 32 << 20));
    let backing = Arc::new(MemoryBackend::new(128 << 20));
    for (k, v) in [("flash.keep_limit", "0.5"), ("flash.reclaim_policy", "lru")] {
        let cfg = BlockCacheConfig {
            tunables: vec![(k.to_string(), v.to_string())],
            ..Default::default()
        };
        let opened = BlockCache::open_devices(
            vec![Arc::clone(&dev) as Arc<dyn Device>],
            Arc::clone(&backing) as Arc<dyn BlockBackend>,
            cfg,
        );
        assert!(opened.is_err(), "{k}={v} was accepted at open");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_coalesces_adjacent_dirty_blocks_into_large_backing_writes() {
    let (cache, backing) = open_small(&[("flush_period_s", "0"), ("seq_threshold_kb", "0")]);
    let wb = cache.start();
    let mut rng = Rng(7);
    // 1024 adjacent blocks written in random order, one 4 KiB write each, plus 64 scattered.
    let mut lbas: Vec<u64> = (1000..2024).collect();
    for i in (1..lbas.len()).rev() {
        lbas.swap(i, rng.below(i as u64 + 1) as usize);
    }
    lbas.extend((0..64).map(|i| 10_000 + i * 97));
    for &lba in &lbas {
        cache
            .write(lba * BS, block(lba, 1), false)
            .await
            .expect("write");
    }
    cache.flush_wait().await.expect("flush");
    let writes = stat(&cache, "writeback_writes");
    let bytes = stat(&cache, "writeback_bytes");
    assert_eq!(bytes, lbas.len() as u64 * BS);
    // 1024 adjacent blocks fit in 4 writes of 1 MiB; batches may split a run a few times.
    assert!(
        writes <= 64 + 16,
        "{writes} backing writes for {} blocks",
        lbas.len()
    );
    assert!(stat(&cache, "coalesced_writes") >= 4);
    for &lba in &lbas {
        let got = backing
            .read(lba * BS, BS as u32)
            .await
            .expect("backing read");
        assert!(got == block(lba, 1), "block {lba} not on the backing");
    }
    cache.stop();
    wb.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threshold_cleaning_starts_at_high_water_and_stops_near_low_water() {
    let (cache, _backing) = open_small(&[
        ("flush_period_s", "0"),
        ("dirty_high_pct", "30"),
        ("dirty_low_pct", "10"),
        ("dirty_max_pct", "90"),
        ("seq_threshold_kb", "0"),
    ]);
    let wb = cache.start();
    let cap = cache.capacity_blocks();
    // Up to just under high water: no threshold cleaning (no flush period either).
    let below = cap * 30 / 100 - 8;
    for lba in 0..below {
        cache
            .write(lba * 2 * BS, block(lba * 2, 1), false)
            .await
            .expect("write");
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(stat(&cache, "threshold_cleanings"), 0);
    assert_eq!(stat(&cache, "cleanings"), 0);
    // Cross it: the controller drains to the low mark, counted as threshold cleanings.
    for lba in below..below + 64 {
        cache
            .write(lba * 2 * BS, block(lba * 2, 1), false)
            .await
            .expect("write");
    }
    let low = cap * 10 / 100;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while stat(&cache, "dirty_blocks") > low && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let dirty = stat(&cache, "dirty_blocks");
    assert!(dirty <= low, "dirty {dirty} never reached low water {low}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let after = stat(&cache, "dirty_blocks");
    assert!(
        after as f64 >= low as f64 * 0.8,
        "drained far past low water: {after}"
    );
    assert_eq!(
        stat(&cache, "threshold_cleanings"),
        stat(&cache, "cleanings")
    );
    assert!(stat(&cache, "threshold_cleanings") > 0);
    cache.stop();
    wb.abort();
}

/// An LRU cache of `cap` blocks over the same trace, counting read hits after `warm`.
fn lru_read_hits(trace: &[(u64, bool)], cap: usize, warm: usize) -> f64 {
    let mut last: HashMap<u64, usize> = HashMap::new();
    let mut order: std::collections::BTreeMap<usize, u64> = Default::default();
    let (mut hits, mut reads) = (0u64, 0u64);
    for (i, &(lba, write)) in trace.iter().enumerate() {
        let hit = match last.insert(lba, i) {
            Some(old) => {
                order.remove(&old);
                true
            }
            None => false,
        };
        order.insert(i, lba);
        if order.len() > cap {
            if let Some((_, l)) = order.pop_first() {
                last.remove(&l);
            }
        }
        if i >= warm && !write {
            reads += 1;
            hits += u64::from(hit);
        }
    }
    hits as f64 / reads as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zipf_read_hits_come_close_to_lru() {
    let (cache, _backing) = open_small(&[("flush_period_s", "1"), ("seq_threshold_kb", "0")]);
    let wb = cache.start();
    if let Ok(n) = std::env::var("STEADY_FILL_MOVES") {
        cache
            .set_tunable("reclaim_fill_moves", &n)
            .expect("fill moves");
    }
    if let Ok(p) = std::env::var("STEADY_POLICY") {
        cache
            .set_tunable("flash.reclaim_policy", &p)
            .expect("policy");
    }
    let cap = cache.capacity_blocks() as usize;
    let nblocks = 32768u64; // 128 MiB backing, cache ~21 %
                            // Zipf 0.8 over the blocks (ranks scattered over the device), 30 % writes.
    let cdf: Vec<f64> = (1..=nblocks)
        .scan(0.0, |acc, r| {
            *acc += (r as f64).powf(-0.8);
            Some(*acc)
        })
        .collect();
    let total = *cdf.last().expect("cdf");
    let mut rng = Rng(99);
    let n = 300_000;
    let trace: Vec<(u64, bool)> = (0..n)
        .map(|_| {
            let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * total;
            let rank = cdf.partition_point(|c| *c < u) as u64;
            let lba = rank.wrapping_mul(0x9e37_79b9_7f4a_7c15) % nblocks;
            (lba, rng.below(10) < 3)
        })
        .collect();
    let mut model: HashMap<u64, u64> = HashMap::new();
    for (i, &(lba, write)) in trace.iter().enumerate() {
        if write {
            let g = i as u64 + 1;
            cache
                .write(lba * BS, block(lba, g), false)
                .await
                .expect("write");
            model.insert(lba, g);
        } else {
            let got = cache.read(lba * BS, BS as u32).await.expect("read");
            let want = model
                .get(&lba)
                .map_or_else(|| vec![0u8; BS as usize], |g| block(lba, *g).to_vec());
            assert!(got[..] == want[..], "block {lba}");
        }
    }
    let hit = stat(&cache, "read_hits") as f64 / stat(&cache, "reads") as f64;
    let lru = lru_read_hits(&trace, cap, 0);
    eprintln!(
        "zipf 0.8, cache {cap} blocks of {nblocks}: flashtier read hits {hit:.3}, LRU {lru:.3}"
    );
    assert!(
        hit >= lru - 0.05,
        "read hits {hit:.3} fall short of LRU's {lru:.3}"
    );
    cache.stop();
    wb.abort();
}
