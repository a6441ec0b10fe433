//! RAM per cached block of the block cache's index: builds an index of clean and/or dirty
//! blocks at random LBAs and reports the resident-set growth per block (Linux
//! `/proc/self/statm`, each case in a fresh process) next to the index's own accounting.
//! `empty` is a table sized for the blocks with none inserted (its zeroed pages are not
//! committed until written). The `hashmap` rows are the previous layout for comparison: a `HashMap<u64, Entry>` with a
//! 32-byte entry (location, version, dirty order, access clock).
//!
//! Run: `cargo run --release -p flashtier-blockcache --example index_ram [BLOCKS]`.
use std::collections::HashMap;

use flashtier_blockcache::index::Index;

fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn lbas(n: u64) -> impl Iterator<Item = u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % (1 << 36)
    })
}

/// One case in this process: prints one line.
fn case(n: u64, kind: &str) {
    let before = rss();
    let (accounted, len, after) = if kind == "hashmap" {
        let mut m: HashMap<u64, [u64; 4]> = HashMap::new();
        for (i, lba) in lbas(n).enumerate() {
            m.insert(lba, [i as u64; 4]);
        }
        (m.capacity() * 41, m.len(), rss())
    } else {
        if kind == "empty" {
            // Sized for n, nothing inserted: the zeroed table is not committed yet.
            let ix = Index::with_capacity(0, n);
            let after = rss();
            println!(
                "{kind:>8}: sized for {n} blocks  RSS growth {:6.1} B/block  allocated {:6.1} B/block",
                after.saturating_sub(before) as f64 / n as f64,
                ix.ram_bytes() as f64 / n as f64
            );
            return;
        }
        let every = match kind {
            "clean" => 0,
            "dirty10" => 10,
            _ => 1,
        };
        let mut ix = Index::with_capacity(0, n);
        for (i, lba) in lbas(n).enumerate() {
            let v = ix.take_version();
            ix.put(
                lba,
                (i as u64) << 4,
                v,
                every != 0 && (i as u64).is_multiple_of(every),
            );
        }
        (ix.ram_bytes(), ix.len(), rss())
    };
    let grown = after.saturating_sub(before) as f64;
    println!(
        "{kind:>8}: {len:>8} blocks  RSS growth {:6.1} B/block  accounted {:6.1} B/block",
        grown / n as f64,
        accounted as f64 / n as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "case" {
        case(args[2].parse().unwrap_or(1 << 20), &args[3]);
        return;
    }
    let n: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1 << 20);
    let Ok(me) = std::env::current_exe() else {
        eprintln!("cannot find this executable");
        return;
    };
    for n in [n, n * 7 / 10] {
        for kind in ["empty", "hashmap", "clean", "dirty10", "dirty"] {
            let ok = std::process::Command::new(&me)
                .args(["case", &n.to_string(), kind])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                eprintln!("case {kind} {n} failed");
            }
        }
    }
}
