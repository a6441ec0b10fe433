//! Replay a block trace (`flashtier block --trace` format, FTTRACE1; `scripts/bench/
//! trace_gen.py` writes synthetic ones) through the real block face — a `BlockCache` on an
//! in-memory cache device of `--cache-mib` over an in-memory backing — one request at a
//! time, with the writeback task running, and print its read hit ratio (block level:
//! `read_hits` / `reads`, as `trace_sim.py` counts) and `capacity_blocks`, so the simulated
//! policies can be run at the same capacity (`scripts/bench/block-replay.sh`).
//!
//! Run: `cargo run --release -p flashtier-blockcache --example replay -- TRACE
//! --cache-mib 32 [--reads-only] [--phase-every N] [--set NAME=VALUE]...` (`flash.*` names
//! set the engine's knobs on the open cache; `--phase-every N` prints each N requests' read
//! hit ratio (and cumulative counters) to stderr, to compare with `trace_sim.py --phases`). Prints one line of `key=value`, with the process's CPU time over
//! the replay (`cpu_secs`, all threads: requests, writeback, reclaim; in clock ticks of
//! 10 ms) and per request.
use std::sync::Arc;

use bytes::Bytes;
use flashtier_backend::{BlockBackend, MemoryBackend};
use flashtier_blockcache::{BlockCache, BlockCacheConfig};
use flashtier_flash::{Device, MemoryDevice};

const BS: u64 = 4096;

/// (offset, length, write) of every read and write of the trace (writes zeroes count as
/// writes; trim, flush and cache requests are skipped, as trace_sim.py does).
fn load(path: &str) -> Vec<(u64, u32, bool)> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(
        data.starts_with(b"FTTRACE1"),
        "{path}: not a flashtier trace"
    );
    let body = data.get(16..).unwrap_or(&[]);
    let word = |b: &[u8], at: usize, n: usize| {
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(&b[at..at + n]);
        u64::from_le_bytes(w)
    };
    body.chunks_exact(24)
        .filter_map(|r| {
            let (off, len, op) = (word(r, 8, 8), word(r, 16, 4) as u32, r[20]);
            match op {
                _ if len == 0 => None,
                0 => Some((off, len, false)),
                1 | 3 => Some((off, len, true)),
                _ => None,
            }
        })
        .collect()
}

/// CPU seconds this process used so far, all threads (user + system, from
/// `/proc/self/stat`; 0 where that is not readable).
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// Stat `name` among `pairs` (`BlockCache::stats_pairs`), as the cache prints it.
fn stat<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Read hits per phase (`--phase-every`): the counters where the last phase ended.
#[derive(Default)]
struct Phases {
    /// (request, reads, read hits) at the start of the current phase.
    start: (usize, u64, u64),
}

impl Phases {
    /// Print the phase that ends before request `end` to stderr and start the next.
    fn report(&mut self, cache: &BlockCache, end: usize) {
        let pairs = cache.stats_pairs();
        let stat = |name: &str| {
            stat(&pairs, name)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let (reads, hits) = (stat("reads"), stat("read_hits"));
        let (r, h) = (reads - self.start.1, hits - self.start.2);
        eprintln!(
            "phase requests={}..{end} reads={r} read_hit_percent={:.2} cached_blocks={} \
             admit_refusals={} door_refusals={} working_set_shifts={} read_admits={} \
             replacements={} capacity_evictions={} moved_clean_blocks={} moved_fill_blocks={} \
             moved_dirty_blocks={} uncached_flash_full={}",
            self.start.0,
            100.0 * h as f64 / r.max(1) as f64,
            stat("cached_blocks"),
            stat("admit_refusals"),
            stat("door_refusals"),
            stat("working_set_shifts"),
            stat("read_admits"),
            stat("replacements"),
            stat("capacity_evictions"),
            stat("moved_clean_blocks"),
            stat("moved_fill_blocks"),
            stat("moved_dirty_blocks"),
            stat("uncached_flash_full"),
        );
        self.start = (end, reads, hits);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut trace = None;
    let mut cache_mib = 32u64;
    let mut reads_only = false;
    let mut phase_every = 0usize;
    let mut tunables = vec![];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--cache-mib" => cache_mib = it.next().and_then(|v| v.parse().ok()).expect("MiB"),
            "--reads-only" => reads_only = true,
            "--phase-every" => {
                phase_every = it.next().and_then(|v| v.parse().ok()).expect("requests")
            }
            "--set" => {
                let kv = it.next().expect("NAME=VALUE");
                let (k, v) = kv.split_once('=').expect("NAME=VALUE");
                tunables.push((k.to_string(), v.to_string()));
            }
            t => trace = Some(t.to_string()),
        }
    }
    let trace = trace.expect("usage: replay TRACE --cache-mib N [--reads-only] [--set K=V]");
    let reqs: Vec<_> = load(&trace)
        .into_iter()
        .filter(|r| !(reads_only && r.2))
        .collect();
    let end = reqs
        .iter()
        .map(|r| r.0 + u64::from(r.1))
        .max()
        .unwrap_or(BS);
    let size = end.div_ceil(1 << 20) << 20;
    let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("replay", cache_mib << 20));
    let backing: Arc<dyn BlockBackend> = Arc::new(MemoryBackend::new(size as usize));
    // Flash engine knobs (`flash.*`) are set on the open cache, the others at open.
    let (knobs, tunables): (Vec<_>, Vec<_>) = tunables
        .into_iter()
        .partition(|(k, _)| k.starts_with("flash."));
    let cfg = BlockCacheConfig {
        tunables,
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let cache = BlockCache::open_devices(vec![dev], backing, cfg).expect("open cache");
        for (k, v) in &knobs {
            cache.set_tunable(k, v).expect("flash knob");
        }
        let wb = cache.start();
        let started = std::time::Instant::now();
        let cpu0 = cpu_secs();
        let mut phase = Phases::default();
        for (i, (off, len, write)) in reqs.iter().enumerate() {
            if phase_every > 0 && i > 0 && i % phase_every == 0 {
                phase.report(&cache, i);
            }
            if *write {
                let data = Bytes::from(vec![(off / BS) as u8; *len as usize]);
                cache.write(*off, data, false).await.expect("write");
            } else {
                cache.read(*off, *len).await.expect("read");
            }
        }
        if phase_every > 0 {
            phase.report(&cache, reqs.len());
        }
        let pairs = cache.stats_pairs();
        let stat = |name: &str| stat(&pairs, name).unwrap_or("-").to_string();
        println!(
            "trace={trace} cache_mib={cache_mib} capacity_blocks={} requests={} reads={} \
             read_hits={} read_hit_percent={} cached_blocks={} dirty_blocks={} \
             moved_dirty_blocks={} moved_clean_blocks={} \
             moved_fill_blocks={} fill_moves_withheld={} write_stalls={} replacements={} capacity_evictions={} history_hits={} \
             admit_refusals={} door_refusals={} working_set_shifts={} uncached_sequential_reads={} \
             flash_bytes_written={} secs={:.1} cpu_secs={:.2} cpu_us_per_request={:.1}",
            cache.capacity_blocks(),
            reqs.len(),
            stat("reads"),
            stat("read_hits"),
            stat("read_hit_percent"),
            stat("cached_blocks"),
            stat("dirty_blocks"),
            stat("moved_dirty_blocks"),
            stat("moved_clean_blocks"),
            stat("moved_fill_blocks"),
            stat("fill_moves_withheld"),
            stat("write_stalls"),
            stat("replacements"),
            stat("capacity_evictions"),
            stat("history_hits"),
            stat("admit_refusals"),
            stat("door_refusals"),
            stat("working_set_shifts"),
            stat("uncached_sequential_reads"),
            stat("flash_bytes_written"),
            started.elapsed().as_secs_f64(),
            cpu_secs() - cpu0,
            (cpu_secs() - cpu0) * 1e6 / reqs.len().max(1) as f64
        );
        cache.stop();
        wb.abort();
    });
}
