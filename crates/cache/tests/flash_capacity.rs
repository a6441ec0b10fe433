//! Acceptance: with 8 MiB of RAM over a 256 MiB flash file, 40k items of 4 KiB (160 MiB, 20×
//! the RAM) all stay retrievable byte-exact with zero evictions: RAM evictions become flash
//! slots (with `evict_when_busy` off, the library's default; on, as `flashtier kv` runs, a
//! never-read item evicted while the write buffers are all in flight is dropped instead). Reports the RAM spent per flash-resident item (index bytes / items, and RSS growth).
//!
//! The full-size run (64 MiB RAM, 2 GiB flash, 300k × 4 KiB) is the same test with
//! `FLASH_CAPACITY_FULL=1` (run it with `--release`; it needs ~2 GiB free under
//! `FLASH_TEST_DIR`, default `/var/tmp`, which must not be tmpfs).
mod common;

use std::path::PathBuf;
use std::time::Instant;

use flashtier_cache::flash::DeviceSpec;
use flashtier_cache::{Cache, CacheConfig, FlashSettings, ItemWrite, KvStore};

fn value(id: u64, len: usize) -> Vec<u8> {
    let mut v = common::value(id, len).to_vec();
    v[..8].copy_from_slice(&id.to_le_bytes());
    v
}

#[test]
fn no_evictions_while_flash_has_room() {
    let full = std::env::var_os("FLASH_CAPACITY_FULL").is_some();
    let (ram, flash, n): (usize, u64, u64) = if full {
        (64 << 20, 2 << 30, 300_000)
    } else {
        (8 << 20, 256 << 20, 40_000)
    };
    let dir = std::env::var_os("FLASH_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/tmp".into());
    let path = dir.join(format!("flashtier-capacity-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let spec = DeviceSpec {
        path: path.clone(),
        size: flash,
        tier: 0,
        create: true,
    };
    let cfg = CacheConfig::builder()
        .memory_limit(ram)
        .flash(FlashSettings::specs(vec![spec]))
        .build()
        .unwrap();
    let rss0 = common::rss_bytes();
    let cache = Cache::new(cfg).unwrap();
    // The rule under test is "no eviction while flash has room": `evict_when_busy` stays
    // off (the library's default; the server turns it on: docs/eviction.md, "Refill over a
    // full flash").
    let t = Instant::now();
    let mut rss_half = 0;
    for id in 0..n {
        if id == n / 2 {
            rss_half = common::rss_bytes();
        }
        let key = format!("item:{id}");
        let w = ItemWrite::new(value(id, 4096).into(), id as u32, 0);
        cache.set_now(key.as_bytes(), w).unwrap();
    }
    let load = t.elapsed();
    let rss1 = common::rss_bytes();
    let t = Instant::now();
    let mut exact = 0u64;
    for id in 0..n {
        let key = format!("item:{id}");
        if let Ok(Some(it)) = cache.get_now(key.as_bytes()) {
            if it.value[..] == value(id, 4096)[..] && it.flags == id as u32 {
                exact += 1;
            }
        }
    }
    let read = t.elapsed();
    let st = cache.stats();
    let ext: std::collections::HashMap<String, String> = cache
        .stats_section("extstore")
        .unwrap()
        .into_iter()
        .collect();
    let flash_items = cache.flash_items();
    let index_per_item = cache.index_bytes() as f64 / st.curr_items.max(1) as f64;
    let rss_growth = rss1.saturating_sub(rss0) as f64;
    println!(
        "capacity: {n} x 4 KiB, RAM {} MiB, flash {} MiB: load {load:.2?}, read {read:.2?}",
        ram >> 20,
        flash >> 20
    );
    println!(
        "capacity: {exact}/{n} byte-exact, evictions {}, flash-resident {flash_items}, \
         index {:.2} B/item, RSS growth {:.1} MiB = {:.1} B/item (RAM limit included), \
         (RSS - RAM limit)/flash item {:.1} B",
        st.evictions,
        index_per_item,
        rss_growth / 1048576.0,
        rss_growth / n as f64,
        (rss_growth - ram as f64).max(0.0) / flash_items.max(1) as f64,
    );
    // RAM is full long before half the load, so the second half adds only flash items:
    // its RSS growth per item is the marginal RAM cost of a flash item, all in.
    println!(
        "capacity: marginal RSS per flash item (second half of the load) {:.1} B",
        rss1.saturating_sub(rss_half) as f64 / (n - n / 2) as f64
    );
    println!(
        "capacity: written {} skipped {} demoted {} read {} checksum failures {}",
        ext["extstore_objects_written"],
        ext["extstore_write_skipped"],
        ext["extstore_objects_demoted"],
        ext["extstore_objects_read"],
        ext["extstore_checksum_failures"],
    );
    drop(cache);
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        st.evictions, 0,
        "no item may be evicted while flash has room"
    );
    assert!(
        exact * 1000 >= n * 999,
        "only {exact} of {n} items readable byte-exact"
    );
    assert!(flash_items > n / 2, "most items must live on flash only");
}
