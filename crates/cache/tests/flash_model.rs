//! Model-based test of the flash tier: random operation sequences against a `Cache` with a
//! tiny RAM (4 × 64 KiB segments, so items are demoted to flash all the time) over a
//! `MemoryDevice`, and `ModelStore`, must give identical observable results — across forced
//! flash flushes, forced reclaims and clean close/reopen (warm restart).
//!
//! Compared exactly: value, flags, exptime, CAS, stale/win bits, every closure's view and
//! result, `curr_items`. Not compared: `fetched` and `last_access`, which a flash-resident
//! item reports approximately (see `flash_tier` docs).
//!
//! Time: the clock only moves in 100 s steps and every exptime / flush time is 50 s past a
//! step, so a wall-clock second ticking between the two stores' calls never changes an
//! outcome; `last_access` is compared in 100 s buckets for the same reason.
mod common;

use bytes::Bytes;
use std::sync::Arc;

use flashtier_cache::flash::{Device, FlashConfig, MemoryDevice};
use flashtier_cache::{
    Cache, CacheConfig, CasMode, Clock, FlashSettings, Item, ItemMeta, ItemWrite, KvStore,
    ModelStore, Update,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Exp {
    Never,
    Past,
    Steps(u32),
}

#[derive(Clone, Debug)]
enum Cas {
    New,
    Keep,
    Explicit(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Set {
        k: u8,
        len: usize,
        flags: u32,
        exp: Exp,
        cas: Cas,
        stale: bool,
    },
    Get(u8),
    Add(u8, usize),
    Append(u8, usize),
    CasIfLast(u8, bool, usize),
    Touch(u8, Exp),
    Incr(u8),
    Delete(u8),
    Flush(Option<u32>),
    Advance(u32),
    Sweep,
    FlashFlush,
    Reclaim,
    Reopen,
}

fn exp() -> impl Strategy<Value = Exp> {
    prop_oneof![3 => Just(Exp::Never), 1 => Just(Exp::Past), 3 => (0u32..3).prop_map(Exp::Steps)]
}

fn len() -> impl Strategy<Value = usize> {
    // Mostly small; sometimes over half a 64 KiB segment (the large-record path).
    prop_oneof![8 => 0usize..300, 1 => 1000usize..5000, 1 => 33_000usize..40_000]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..12;
    prop_oneof![
        6 => (k.clone(), len(), any::<u32>(), exp(),
              prop_oneof![4 => Just(Cas::New), 1 => Just(Cas::Keep), 1 => (1u64..5).prop_map(Cas::Explicit)],
              any::<bool>())
            .prop_map(|(k, len, flags, exp, cas, stale)| Op::Set { k, len, flags, exp, cas, stale }),
        6 => k.clone().prop_map(Op::Get),
        2 => (k.clone(), len()).prop_map(|(k, l)| Op::Add(k, l)),
        2 => (k.clone(), 0usize..100).prop_map(|(k, l)| Op::Append(k, l)),
        2 => (k.clone(), any::<bool>(), len()).prop_map(|(k, b, l)| Op::CasIfLast(k, b, l)),
        1 => (k.clone(), exp()).prop_map(|(k, e)| Op::Touch(k, e)),
        1 => k.clone().prop_map(Op::Incr),
        2 => k.clone().prop_map(Op::Delete),
        1 => prop_oneof![Just(None), (0u32..3).prop_map(Some)].prop_map(Op::Flush),
        1 => (1u32..3).prop_map(Op::Advance),
        1 => Just(Op::Sweep),
        1 => Just(Op::FlashFlush),
        1 => Just(Op::Reclaim),
        1 => Just(Op::Reopen),
    ]
}

/// An item without `last_access` and `fetched` (approximate on flash).
fn norm(it: Option<Item>, _t0: u32) -> Option<Item> {
    it.map(|mut i| {
        i.meta.last_access = 0;
        i.meta.fetched = false;
        i
    })
}

struct Ctx {
    clock: Clock,
    t0: u32,
    seq: u64,
    last_cas: [u64; 12],
}

impl Ctx {
    fn base(&self) -> u32 {
        // Start of the current 100 s step.
        self.t0 + (self.clock.now() - self.t0) / 100 * 100
    }
    fn exptime(&self, e: &Exp) -> u32 {
        match e {
            Exp::Never => 0,
            Exp::Past => self.base() - 50,
            Exp::Steps(n) => self.base() + 100 * n + 50,
        }
    }
}

fn key(k: u8) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

/// Apply `op` to `store`, returning a printable observation.
fn apply<S: KvStore>(s: &S, op: &Op, cx: &Ctx, seq: u64) -> String {
    use common::block_on as run;
    let t0 = cx.t0;
    match op {
        Op::Set {
            k,
            len,
            flags,
            exp,
            cas,
            stale,
        } => {
            let w = ItemWrite {
                value: common::value(seq, *len),
                flags: *flags,
                exptime: cx.exptime(exp),
                cas: match cas {
                    Cas::New => CasMode::New,
                    Cas::Keep => CasMode::Keep,
                    Cas::Explicit(c) => CasMode::Explicit(*c),
                },
                meta: ItemMeta {
                    stale: *stale,
                    win_token_sent: !*stale,
                    ..ItemMeta::default()
                },
            };
            format!("{:?}", run(s.set(&key(*k), w)).map_err(|e| e.to_string()))
        }
        Op::Get(k) => format!("{:?}", norm(run(s.get(&key(*k))).ok().flatten(), t0)),
        Op::Add(k, len) => {
            let v = common::value(seq, *len);
            let r = run(s.update(&key(*k), |cur| match cur {
                None => (Update::Put(ItemWrite::new(v.clone(), 1, 0)), true),
                Some(_) => (Update::Keep, false),
            }));
            format!("{:?}", r.map_err(|e| e.to_string()))
        }
        Op::Append(k, len) => {
            let tail = common::value(seq, *len);
            let r = run(s.update(&key(*k), |cur| match cur {
                None => (Update::Keep, None),
                Some(it) => {
                    let mut v = it.value.to_vec();
                    v.extend_from_slice(&tail);
                    let w = ItemWrite::new(Bytes::from(v), it.flags, it.exptime);
                    (Update::Put(w), Some(norm(Some(it.clone()), t0)))
                }
            }));
            format!("{:?}", r.map_err(|e| e.to_string()))
        }
        Op::CasIfLast(k, right, len) => {
            let expect = if *right {
                cx.last_cas[*k as usize]
            } else {
                999_999
            };
            let v = common::value(seq, *len);
            let r = run(s.update(&key(*k), |cur| match cur {
                Some(it) if it.cas == expect => (Update::Put(ItemWrite::new(v.clone(), 2, 0)), 1),
                Some(_) => (Update::Keep, 2),
                None => (Update::Keep, 3),
            }));
            format!("{:?}", r.map_err(|e| e.to_string()))
        }
        Op::Touch(k, e) => {
            let exptime = cx.exptime(e);
            let r = run(s.update(&key(*k), |cur| match cur {
                None => (Update::Keep, false),
                Some(it) => {
                    let w = ItemWrite {
                        value: it.value.clone(),
                        flags: it.flags,
                        exptime,
                        cas: CasMode::Keep,
                        meta: it.meta,
                    };
                    (Update::Put(w), true)
                }
            }));
            format!("{:?}", r.map_err(|e| e.to_string()))
        }
        Op::Incr(k) => {
            let r = run(s.update(&key(*k), |cur| match cur {
                None => (Update::Keep, None),
                Some(it) => {
                    let n = it.value.len() as u64 + 1;
                    let w = ItemWrite::new(Bytes::from(n.to_string()), it.flags, it.exptime);
                    (Update::Put(w), Some(n))
                }
            }));
            format!("{:?}", r.map_err(|e| e.to_string()))
        }
        Op::Delete(k) => {
            let r = run(s.update(&key(*k), |cur| match cur {
                None => (Update::Keep, false),
                Some(_) => (Update::Delete, true),
            }));
            format!("{:?}", r.map_err(|e| e.to_string()))
        }
        Op::Flush(d) => {
            let at = match d {
                None => 0,
                Some(n) => cx.base() + 100 * n + 50,
            };
            s.flush_all(at);
            String::new()
        }
        Op::Advance(_) | Op::Sweep | Op::FlashFlush | Op::Reclaim | Op::Reopen => String::new(),
    }
}

fn cas_of(obs: &str) -> Option<u64> {
    obs.strip_prefix("Ok(")?.strip_suffix(')')?.parse().ok()
}

fn open(dev: &Arc<MemoryDevice>, clock: &Clock) -> Cache {
    let d: Arc<dyn Device> = dev.clone();
    let mut fs = FlashSettings::devices(vec![d]);
    fs.engine = Some(FlashConfig {
        background_reclaim: false,
        keep_limit: 1.0,
        io_backend: flashtier_cache::flash::IoBackend::Psync,
        ..FlashConfig::small()
    });
    let cfg = CacheConfig::builder()
        .memory_limit(256 << 10)
        .segment_size(64 << 10)
        .max_item_size(64 << 10)
        .index_shards(16)
        .sweep_interval(None)
        .clock(clock.clone())
        .flash(fs)
        .build()
        .unwrap();
    Cache::new(cfg).unwrap()
}

/// Read every key on both stores (drops dead items from both, so reclaim or recovery
/// dropping them early stays unobservable); fails on any difference.
fn read_all(model: &ModelStore, cache: &Cache, t0: u32, when: &str) -> Result<(), TestCaseError> {
    for k in 0..12u8 {
        let m = norm(common::block_on(model.get(&key(k))).unwrap(), t0);
        let c = norm(common::block_on(cache.get(&key(k))).unwrap(), t0);
        prop_assert_eq!(m, c, "{} key {}", when, k);
    }
    let (ms, cs) = (model.stats().curr_items, cache.stats().curr_items);
    prop_assert_eq!(cs, ms, "{} curr_items", when);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn flash_cache_matches_model(ops in proptest::collection::vec(op(), 1..200)) {
        let clock = Clock::system();
        let dev = Arc::new(MemoryDevice::new("model", 16 << 20));
        let mut cache = open(&dev, &clock);
        let model = ModelStore::new(clock.clone(), 64 << 10);
        let mut cx = Ctx { t0: clock.now(), clock: clock.clone(), seq: 0, last_cas: [0; 12] };
        for op in &ops {
            cx.seq += 1;
            let seq = cx.seq;
            let m = apply(&model, op, &cx, seq);
            let c = apply(&cache, op, &cx, seq);
            prop_assert_eq!(&m, &c, "op {:?}", op);
            match op {
                Op::Set { k, .. } => {
                    if let Some(cas) = cas_of(&m) {
                        cx.last_cas[*k as usize] = cas;
                    }
                }
                Op::Advance(n) => clock.advance(100 * n),
                Op::Sweep => {
                    read_all(&model, &cache, cx.t0, "pre-sweep")?;
                    cache.sweep();
                }
                Op::FlashFlush => {
                    cache.flash().unwrap().flush().wait().unwrap();
                }
                Op::Reclaim => {
                    read_all(&model, &cache, cx.t0, "pre-reclaim")?;
                    cache.flash().unwrap().reclaim_now(true).unwrap();
                }
                Op::Reopen => {
                    read_all(&model, &cache, cx.t0, "pre-reopen")?;
                    cache.close().unwrap();
                    drop(cache);
                    cache = open(&dev, &clock);
                    model.continue_cas_above(cache.last_cas());
                    read_all(&model, &cache, cx.t0, "post-reopen")?;
                }
                _ => {}
            }
            // RAM eviction reclaims dead items the model still counts (it drops them lazily),
            // so between full reads the cache may count fewer; after one, exactly as many.
            let (ms, cs) = (model.stats().curr_items, cache.stats().curr_items);
            prop_assert!(cs <= ms, "curr_items {} > {} after {:?}", cs, ms, op);
        }
        read_all(&model, &cache, cx.t0, "final")?;
        prop_assert_eq!(cache.stats().curr_items, model.stats().curr_items, "final curr_items");
        let st = cache.stats();
        prop_assert_eq!(st.evictions, 0, "nothing may be evicted while flash has room");
    }
}
