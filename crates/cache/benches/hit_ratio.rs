//! Hit-ratio benchmark: which eviction policy the RAM tier should run.
//!
//! `cargo bench -p flashtier-cache --bench hit_ratio` prints a table of miss ratios (lower is
//! better) for item-level simulations of FIFO, LRU, CLOCK, SIEVE and S3-FIFO, and for the real
//! `Cache` (segment-level S3-FIFO, and segment-level FIFO for reference), on zipf workloads
//! (θ = 0.8, 0.99, 1.2) and a scan-mixed one, at three cache sizes. Cache-aside: every miss is
//! followed by a set. Numbers are recorded in `docs/eviction.md`.
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use flashtier_cache::{Cache, CacheConfig, EvictionPolicy, ItemWrite};

const KEYS: usize = 100_000;
const REQUESTS: usize = 1_000_000;
const VALUE: usize = 1000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, theta: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for i in 1..=n {
            sum += 1.0 / (i as f64).powf(theta);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Self { cdf }
    }
    fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u) as u64
    }
}

fn zipf_trace(theta: f64) -> Vec<u64> {
    let z = Zipf::new(KEYS, theta);
    let mut rng = Rng(0x1234_5678);
    // Scatter ranks over the key space so hot keys are not neighbours.
    (0..REQUESTS)
        .map(|_| z.sample(&mut rng).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect()
}

/// 70% zipf(0.99) requests; 30% a sequential scan over a range 10× the key space (one-hit
/// wonders, as a batch job or a crawler would produce).
fn scan_trace() -> Vec<u64> {
    let z = Zipf::new(KEYS, 0.99);
    let mut rng = Rng(0x8765_4321);
    let mut cursor = 0u64;
    (0..REQUESTS)
        .map(|_| {
            if rng.next() % 10 < 3 {
                cursor = (cursor + 1) % (10 * KEYS as u64);
                (1 << 60) | cursor
            } else {
                z.sample(&mut rng).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            }
        })
        .collect()
}

trait Policy {
    /// Access `k`; true on hit. On a miss the key is inserted.
    fn access(&mut self, k: u64) -> bool;
}

struct Fifo {
    cap: usize,
    q: VecDeque<u64>,
    set: HashSet<u64>,
}

impl Policy for Fifo {
    fn access(&mut self, k: u64) -> bool {
        if self.set.contains(&k) {
            return true;
        }
        if self.q.len() == self.cap {
            if let Some(v) = self.q.pop_front() {
                self.set.remove(&v);
            }
        }
        self.q.push_back(k);
        self.set.insert(k);
        false
    }
}

/// Doubly linked list over a slab, shared by LRU and SIEVE.
struct List {
    key: Vec<u64>,
    prev: Vec<usize>,
    next: Vec<usize>,
    visited: Vec<bool>,
    head: usize,
    tail: usize,
    free: Vec<usize>,
}

const NIL: usize = usize::MAX;

impl List {
    fn new() -> Self {
        Self {
            key: vec![],
            prev: vec![],
            next: vec![],
            visited: vec![],
            head: NIL,
            tail: NIL,
            free: vec![],
        }
    }
    fn push_head(&mut self, k: u64) -> usize {
        let i = match self.free.pop() {
            Some(i) => {
                self.key[i] = k;
                self.visited[i] = false;
                i
            }
            None => {
                self.key.push(k);
                self.prev.push(NIL);
                self.next.push(NIL);
                self.visited.push(false);
                self.key.len() - 1
            }
        };
        self.prev[i] = NIL;
        self.next[i] = self.head;
        if self.head != NIL {
            self.prev[self.head] = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
        i
    }
    fn unlink(&mut self, i: usize) {
        let (p, n) = (self.prev[i], self.next[i]);
        if p != NIL {
            self.next[p] = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.prev[n] = p;
        } else {
            self.tail = p;
        }
        self.free.push(i);
    }
}

struct Lru {
    cap: usize,
    list: List,
    map: HashMap<u64, usize>,
}

impl Policy for Lru {
    fn access(&mut self, k: u64) -> bool {
        if let Some(&i) = self.map.get(&k) {
            self.list.unlink(i);
            let j = self.list.push_head(k);
            self.map.insert(k, j);
            return true;
        }
        if self.map.len() == self.cap {
            let t = self.list.tail;
            self.map.remove(&self.list.key[t]);
            self.list.unlink(t);
        }
        let j = self.list.push_head(k);
        self.map.insert(k, j);
        false
    }
}

struct Clock {
    cap: usize,
    keys: Vec<u64>,
    refb: Vec<bool>,
    hand: usize,
    map: HashMap<u64, usize>,
}

impl Policy for Clock {
    fn access(&mut self, k: u64) -> bool {
        if let Some(&i) = self.map.get(&k) {
            self.refb[i] = true;
            return true;
        }
        if self.keys.len() < self.cap {
            self.map.insert(k, self.keys.len());
            self.keys.push(k);
            self.refb.push(false);
            return false;
        }
        loop {
            let h = self.hand;
            self.hand = (self.hand + 1) % self.cap;
            if self.refb[h] {
                self.refb[h] = false;
            } else {
                self.map.remove(&self.keys[h]);
                self.keys[h] = k;
                self.map.insert(k, h);
                return false;
            }
        }
    }
}

struct Sieve {
    cap: usize,
    list: List,
    map: HashMap<u64, usize>,
    hand: usize,
}

impl Policy for Sieve {
    fn access(&mut self, k: u64) -> bool {
        if let Some(&i) = self.map.get(&k) {
            self.list.visited[i] = true;
            return true;
        }
        if self.map.len() == self.cap {
            let mut h = if self.hand == NIL {
                self.list.tail
            } else {
                self.hand
            };
            while self.list.visited[h] {
                self.list.visited[h] = false;
                h = if self.list.prev[h] == NIL {
                    self.list.tail
                } else {
                    self.list.prev[h]
                };
            }
            self.hand = self.list.prev[h];
            self.map.remove(&self.list.key[h]);
            self.list.unlink(h);
        }
        let j = self.list.push_head(k);
        self.map.insert(k, j);
        false
    }
}

struct S3Fifo {
    small_cap: usize,
    main_cap: usize,
    small: VecDeque<u64>,
    main: VecDeque<u64>,
    freq: HashMap<u64, u8>,
    ghost: VecDeque<u64>,
    ghost_set: HashSet<u64>,
}

impl S3Fifo {
    fn new(cap: usize) -> Self {
        let small_cap = (cap / 10).max(1);
        Self {
            small_cap,
            main_cap: cap - small_cap,
            small: VecDeque::new(),
            main: VecDeque::new(),
            freq: HashMap::new(),
            ghost: VecDeque::new(),
            ghost_set: HashSet::new(),
        }
    }
    fn evict_main(&mut self) {
        while let Some(k) = self.main.pop_front() {
            let f = self.freq[&k];
            if f > 0 {
                self.freq.insert(k, f - 1);
                self.main.push_back(k);
            } else {
                self.freq.remove(&k);
                return;
            }
        }
    }
    fn evict_small(&mut self) {
        while let Some(k) = self.small.pop_front() {
            if self.freq[&k] > 0 {
                self.freq.insert(k, 0);
                if self.main.len() >= self.main_cap {
                    self.evict_main();
                }
                self.main.push_back(k);
            } else {
                self.freq.remove(&k);
                if self.ghost.len() >= self.main_cap {
                    if let Some(g) = self.ghost.pop_front() {
                        self.ghost_set.remove(&g);
                    }
                }
                self.ghost.push_back(k);
                self.ghost_set.insert(k);
                return;
            }
        }
    }
}

impl Policy for S3Fifo {
    fn access(&mut self, k: u64) -> bool {
        if let Some(f) = self.freq.get_mut(&k) {
            *f = (*f + 1).min(3);
            return true;
        }
        if self.ghost_set.remove(&k) {
            if self.main.len() >= self.main_cap {
                self.evict_main();
            }
            self.main.push_back(k);
        } else {
            if self.small.len() >= self.small_cap {
                self.evict_small();
            }
            self.small.push_back(k);
        }
        self.freq.insert(k, 0);
        false
    }
}

/// The real store, sized so that `cap` records of this benchmark's size fit.
struct Real {
    cache: Cache,
    value: Bytes,
}

impl Real {
    fn new(cap: usize, policy: EvictionPolicy) -> Self {
        let rec = 32 + 24 + VALUE.div_ceil(8) * 8; // header + padded key + value
        let seg = 64 << 10;
        let mem = (cap * rec).div_ceil(seg).max(4) * seg;
        let cfg = CacheConfig::builder()
            .memory_limit(mem)
            .segment_size(seg)
            .eviction(policy)
            .sweep_interval(None)
            .build()
            .expect("valid bench config");
        let cache = Cache::new(cfg).expect("cache");
        Self {
            cache,
            value: Bytes::from(vec![7u8; VALUE]),
        }
    }
}

impl Policy for Real {
    fn access(&mut self, k: u64) -> bool {
        let key = format!("{k:020}");
        if matches!(self.cache.get_now(key.as_bytes()), Ok(Some(_))) {
            return true;
        }
        let _ = self
            .cache
            .set_now(key.as_bytes(), ItemWrite::new(self.value.clone(), 0, 0));
        false
    }
}

fn miss_ratio(p: &mut dyn Policy, trace: &[u64]) -> f64 {
    let misses = trace.iter().filter(|&&k| !p.access(k)).count();
    misses as f64 / trace.len() as f64
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let workloads: Vec<(&str, Vec<u64>)> = vec![
        ("zipf 0.8", zipf_trace(0.8)),
        ("zipf 0.99", zipf_trace(0.99)),
        ("zipf 1.2", zipf_trace(1.2)),
        ("scan-mixed", scan_trace()),
    ];
    let sizes = [1_000usize, 5_000, 20_000];
    println!(
        "miss ratio (lower is better); {KEYS} keys, {REQUESTS} requests, cache size in objects"
    );
    println!(
        "| workload   | size   | FIFO   | LRU    | CLOCK  | SIEVE  | S3-FIFO | Cache seg-FIFO | Cache seg-S3-FIFO |"
    );
    println!(
        "|------------|--------|--------|--------|--------|--------|---------|----------------|-------------------|"
    );
    let start = Instant::now();
    for (name, trace) in &workloads {
        for &cap in &sizes {
            let trace = if quick {
                &trace[..REQUESTS / 10]
            } else {
                &trace[..]
            };
            let fifo = miss_ratio(
                &mut Fifo {
                    cap,
                    q: VecDeque::new(),
                    set: HashSet::new(),
                },
                trace,
            );
            let lru = miss_ratio(
                &mut Lru {
                    cap,
                    list: List::new(),
                    map: HashMap::new(),
                },
                trace,
            );
            let clock = miss_ratio(
                &mut Clock {
                    cap,
                    keys: vec![],
                    refb: vec![],
                    hand: 0,
                    map: HashMap::new(),
                },
                trace,
            );
            let sieve = miss_ratio(
                &mut Sieve {
                    cap,
                    list: List::new(),
                    map: HashMap::new(),
                    hand: NIL,
                },
                trace,
            );
            let s3 = miss_ratio(&mut S3Fifo::new(cap), trace);
            let seg_fifo = miss_ratio(&mut Real::new(cap, EvictionPolicy::Fifo), trace);
            let seg_s3 = miss_ratio(&mut Real::new(cap, EvictionPolicy::S3Fifo), trace);
            println!(
                "| {name:<10} | {cap:>6} | {fifo:.4} | {lru:.4} | {clock:.4} | {sieve:.4} | {s3:.4}  | {seg_fifo:.4}         | {seg_s3:.4}            |"
            );
        }
    }
    println!("({:.1} s)", start.elapsed().as_secs_f64());
}
