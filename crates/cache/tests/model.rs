//! Model-based test: random operation sequences against `Cache` and `ModelStore` must give
//! identical observable results (memory large enough that nothing is evicted).
//!
//! Time: the clock only moves in 100 s steps and every exptime / flush time is 50 s past a
//! step, so a wall-clock second ticking between the two stores' calls never changes an
//! outcome; `last_access` is compared in 100 s buckets for the same reason.
mod common;

use bytes::Bytes;
use flashtier_cache::{
    Cache, CacheConfig, CasMode, Clock, Item, ItemMeta, ItemWrite, KvStore, ModelStore, Update,
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
    ]
}

/// An item with `last_access` reduced to its 100 s bucket.
fn norm(it: Option<Item>, t0: u32) -> Option<Item> {
    it.map(|mut i| {
        i.meta.last_access = i.meta.last_access.wrapping_sub(t0) / 100;
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
    use common::now as run;
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
        Op::Advance(_) | Op::Sweep => String::new(),
    }
}

fn cas_of(obs: &str) -> Option<u64> {
    obs.strip_prefix("Ok(")?.strip_suffix(')')?.parse().ok()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn cache_matches_model(ops in proptest::collection::vec(op(), 1..250)) {
        let clock = Clock::system();
        let cfg = CacheConfig::builder()
            .memory_limit(64 << 20)
            .segment_size(64 << 10)
            .max_item_size(64 << 10)
            .index_shards(16)
            .sweep_interval(None)
            .clock(clock.clone())
            .build()
            .unwrap();
        let cache = Cache::new(cfg).unwrap();
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
                    // Reading every key first makes the model drop what is dead too (it
                    // removes lazily), so the sweep's early reclaim stays unobservable.
                    for k in 0..12u8 {
                        let m = norm(common::now(model.get(&key(k))).unwrap(), cx.t0);
                        let c = norm(common::now(cache.get(&key(k))).unwrap(), cx.t0);
                        prop_assert_eq!(m, c, "pre-sweep key {}", k);
                    }
                    cache.sweep();
                }
                _ => {}
            }
            let (ms, cs) = (model.stats().curr_items, cache.stats().curr_items);
            prop_assert_eq!(cs, ms, "curr_items");
        }
        for k in 0..12u8 {
            let m = norm(common::now(model.get(&key(k))).unwrap(), cx.t0);
            let c = norm(common::now(cache.get(&key(k))).unwrap(), cx.t0);
            prop_assert_eq!(m, c, "final key {}", k);
        }
    }
}
