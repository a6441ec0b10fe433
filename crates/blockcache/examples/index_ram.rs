//! RAM per cached block of the block cache's index, at the shapes `open` gives real cache
//! devices (computed by `planned_index_shape`, no device allocated): for each cache size it
//! fills an index to `capacity_blocks` with blocks at random LBAs of the backing, clean or
//! with some dirty, and reports `index_bytes ÷ capacity_blocks` (the index's own accounting:
//! table plus dirty table and sets), the resident-set growth per block (Linux
//! `/proc/self/statm`, each case in a fresh process) and the sketch's bytes per block (kept
//! per block record of the device, beside the index). `hashmap` is the layout before the
//! flat tables: a `HashMap<u64, [u64; 4]>`. CPU per operation: the `index_cpu` example.
//!
//! Run: `cargo run --release -p flashtier-blockcache --example index_ram [CACHE_MIB...]`
//! (default 32 512 65536, a 1 TiB backing of 4 KiB blocks; `BACKING_GIB=` to change it).
use std::collections::HashMap;

use flashtier_blockcache::index::Index;
use flashtier_blockcache::{planned_index_shape, BlockCacheConfig};

fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn lbas(n: u64, limit: u64, seed: u64) -> impl Iterator<Item = u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ seed;
    (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % limit
    })
}

/// One case in this process: prints one line.
fn case(cap_mib: u64, backing_gib: u64, kind: &str) {
    let cfg = BlockCacheConfig::default();
    let Ok((shape, capacity)) = planned_index_shape(cap_mib << 20, backing_gib << 30, &cfg) else {
        eprintln!("no geometry for {cap_mib} MiB");
        return;
    };
    let limit = shape.lba_limit;
    let n = capacity;
    let before = rss();
    let (accounted, len, sketch, slot, after) = if kind == "hashmap" {
        let mut m: HashMap<u64, [u64; 4]> = HashMap::new();
        for (i, lba) in lbas(n, limit, 0).enumerate() {
            m.insert(lba, [i as u64; 4]);
        }
        (m.capacity() * 41, m.len(), 0, 41, rss())
    } else {
        let every = match kind {
            "clean" => 0,
            "dirty10" => 10,
            _ => 1,
        };
        let mut ix = Index::for_device(0, shape);
        // Locations as the engine hands them out: block records one after another.
        let record: u64 = 4096 + 40;
        for (i, lba) in lbas(n, limit, 0).enumerate() {
            let v = ix.take_version();
            let loc = flashtier_flash::Location::new(i as u64 * (record.div_ceil(16) * 16), record)
                .map(|l| l.pack())
                .unwrap_or(0);
            ix.put(lba, loc, v, every != 0 && (i as u64).is_multiple_of(every));
        }
        let found = lbas(n, limit, 0).filter(|l| ix.get(*l).is_some()).count();
        assert_eq!(found as u64, n, "every block inserted is found");
        (
            ix.ram_bytes(),
            ix.len(),
            ix.sketch_bytes(),
            ix.table_shape().0,
            rss(),
        )
    };
    println!(
        "| {cap_mib} MiB | {kind} | {n} | {len} | {slot} | {:.2} | {:.2} | {:.2} |",
        accounted as f64 / n as f64,
        after.saturating_sub(before) as f64 / n as f64,
        sketch as f64 / n as f64,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 5 && args[1] == "case" {
        case(
            args[2].parse().unwrap_or(32),
            args[3].parse().unwrap_or(1024),
            &args[4],
        );
        return;
    }
    let sizes: Vec<u64> = args[1..].iter().filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() {
        vec![32, 512, 65536]
    } else {
        sizes
    };
    let backing: u64 = std::env::var("BACKING_GIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let Ok(me) = std::env::current_exe() else {
        eprintln!("cannot find this executable");
        return;
    };
    println!("backing {backing} GiB of 4 KiB blocks");
    println!("| cache | case | capacity_blocks | cached | slot B | index_bytes / capacity_blocks | RSS growth B/block | sketch B/block |");
    println!("|---|---|---|---|---|---|---|---|");
    for cap in sizes {
        for kind in ["hashmap", "clean", "dirty10"] {
            let ok = std::process::Command::new(&me)
                .args(["case", &cap.to_string(), &backing.to_string(), kind])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                eprintln!("case {kind} {cap} failed");
            }
        }
    }
}
