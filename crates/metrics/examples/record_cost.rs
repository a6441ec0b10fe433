//! What one latency record costs on the hot path: `Instant::now()` at the start, then
//! `elapsed()` + `Histogram::record` at the end (what `memcache::command::execute` and the
//! NBD server do per request), single-threaded and with two threads sharing one histogram.
//! Prints wall nanoseconds per request (inflated on a busy machine: divide the process's user
//! CPU seconds by the 20M requests of `--one` for the CPU cost); the figure is in
//! docs/operations.md.
//! Run: cargo run --release -p flashtier-metrics --example record_cost [-- --one]
use std::sync::Arc;
use std::time::Instant;

use flashtier_metrics::Histogram;

const N: u64 = 20_000_000;

fn per_record(h: &Histogram) -> f64 {
    let t = Instant::now();
    for _ in 0..N {
        let started = Instant::now();
        h.record(started.elapsed());
    }
    t.elapsed().as_nanos() as f64 / N as f64
}

fn main() {
    let h = Arc::new(Histogram::default());
    println!("1 thread: {:.1} ns per timed request", per_record(&h));
    if std::env::args().any(|a| a == "--one") {
        return;
    }
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let h = Arc::clone(&h);
            std::thread::spawn(move || per_record(&h))
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        let ns = t.join().unwrap_or(f64::NAN);
        println!("2 threads, one histogram: thread {i}: {ns:.1} ns per timed request");
    }
    let s = h.snapshot();
    println!("recorded {} (sum {:.3} s)", s.count(), s.sum_seconds());
}
