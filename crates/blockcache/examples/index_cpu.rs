//! CPU per index operation at a real device's shape: fills an index to `capacity_blocks`
//! clean blocks at random LBAs of the backing, then times
//! lookups that hit, lookups that miss, hits one at a time (each LBA depends on the
//! previous answer, so no two lookups overlap in memory), and steady-state replacements (evict the CLOCK
//! victim, put a new block; `CHURN=` of them, default 4 million), lookups over at least 4
//! million operations. CPU time is the thread's run time (`/proc/thread-self/schedstat`). The same file, with only
//! [`make`] changed, is built against the commit before the compact table for a
//! before/after comparison (docs/block-cache.md "The LBA table").
//!
//! Run: `cargo run --release -p flashtier-blockcache --example index_cpu [CACHE_MIB [BACKING_GIB]]`
//! (default 65536 MiB in front of 1024 GiB).
use flashtier_blockcache::index::Index;

/// The index `open` builds for this device (this commit: sized by `planned_index_shape`).
fn make(cap_mib: u64, backing_gib: u64) -> (Index, u64, u64) {
    let cfg = flashtier_blockcache::BlockCacheConfig::default();
    let (shape, capacity) =
        flashtier_blockcache::planned_index_shape(cap_mib << 20, backing_gib << 30, &cfg)
            .expect("a geometry");
    (Index::for_device(0, shape), capacity, shape.lba_limit)
}

/// CPU seconds this thread ran so far (`/proc/thread-self/schedstat`, nanoseconds).
fn cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    s.split_whitespace()
        .next()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1e9
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn loc(i: u64) -> u64 {
    let record = 4096 + 40;
    flashtier_flash::Location::new((i * record).div_ceil(16) * 16, record)
        .map(|l| l.pack())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let cap_mib = args.first().copied().unwrap_or(65536);
    let backing_gib = args.get(1).copied().unwrap_or(1024);
    let (mut ix, n, limit) = make(cap_mib, backing_gib);
    let t = cpu();
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut i = 0u64;
    while (ix.len() as u64) < n {
        let v = ix.take_version();
        ix.put(r.next() % limit, loc(i % n), v, false);
        i += 1;
    }
    let fill = cpu() - t;
    // At least 4 million lookups of each kind.
    let rounds = 4_000_000u64.div_ceil(n).max(1);
    let t = cpu();
    let mut found = 0u64;
    for _ in 0..rounds {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..n {
            found += u64::from(ix.get(r.next() % limit).is_some());
        }
    }
    let hit = cpu() - t;
    let t = cpu();
    for _ in 0..rounds {
        let mut r = Rng(0x1234_5678);
        for _ in 0..n {
            found += u64::from(ix.get(r.next() % limit).is_some());
        }
    }
    let miss = cpu() - t;
    // Hits again, each lookup's LBA depending on the previous answer: no two lookups'
    // memory accesses overlap (a request does one lookup among much other work).
    let t = cpu();
    for _ in 0..rounds {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        let mut dep = 0u64;
        for _ in 0..n {
            let l = r.next() % limit;
            let e = ix.get(l ^ (dep & 1 << 63));
            dep = e.map_or(1, |e| e.loc);
            found += u64::from(e.is_some());
        }
    }
    let chained = cpu() - t;
    let t = cpu();
    let churn: u64 = std::env::var("CHURN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4_000_000);
    for _ in 0..churn {
        let lba = r.next() % limit;
        if ix.contains(lba) {
            continue;
        }
        if ix.evict_clean().is_none() {
            break;
        }
        let v = ix.take_version();
        ix.put(lba, loc(i % n), v, false);
        i += 1;
    }
    let replace = cpu() - t;
    let ops = (rounds * n) as f64;
    println!(
        "cache {cap_mib} MiB, backing {backing_gib} GiB: {n} blocks, index_bytes/block {:.2}; CPU ns: fill {:.0}/insert, {:.0}/hit, {:.0}/miss, {:.0}/hit one at a time, {:.0}/replacement (found {found}, {churn} replacements)",
        ix.ram_bytes() as f64 / n as f64,
        fill * 1e9 / n as f64,
        hit * 1e9 / ops,
        miss * 1e9 / ops,
        chained * 1e9 / ops,
        replace * 1e9 / churn as f64,
    );
}
