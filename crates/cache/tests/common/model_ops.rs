//! The random operations of the model tests (`model.rs`: RAM only; `flash_model.rs`: RAM over
//! a flash tier), how to apply one to any [`KvStore`], and what is compared.
//!
//! The two tests differ in three ways, all parameters here: how a store call is run
//! ([`Runner`]: RAM-tier calls must finish on their first poll, flash-tier calls may wait for a
//! read), how an item is normalised before comparison ([`Norm`]), and whether the
//! flash-only operations (flush, reclaim, reopen) are drawn ([`op`]).
//!
//! Time: the clock only moves in 100 s steps and every exptime / flush time is 50 s past a
//! step, so a wall-clock second ticking between the two stores' calls never changes an
//! outcome.
use std::future::Future;

use bytes::Bytes;
use flashtier_cache::{CasMode, Clock, Item, ItemMeta, ItemWrite, KvStore, ModelStore, Update};
use proptest::prelude::*;

/// Number of distinct keys the operations draw from.
pub const KEYS: u8 = 12;

/// An expiry time, relative to the current 100 s step.
#[derive(Clone, Debug)]
pub enum Exp {
    Never,
    Past,
    Steps(u32),
}

/// The CAS mode of a set.
#[derive(Clone, Debug)]
pub enum Cas {
    New,
    Keep,
    Explicit(u64),
}

/// One random operation. The last three are drawn only for the flash tier; [`apply`] treats
/// them (and `Advance`, `Sweep`) as no-ops: the test loop carries them out.
#[derive(Clone, Debug)]
pub enum Op {
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

/// The operations both tests draw; the weights add up to [`STORE_OPS_WEIGHT`].
fn store_op() -> impl Strategy<Value = Op> {
    let k = 0u8..KEYS;
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

/// Sum of the weights in [`store_op`].
const STORE_OPS_WEIGHT: u32 = 25;

/// A random operation; with `flash`, also a flash flush, reclaim or reopen, each as likely as
/// a sweep (weight 1 against the store operations' 25).
pub fn op(flash: bool) -> BoxedStrategy<Op> {
    if flash {
        prop_oneof![
            STORE_OPS_WEIGHT => store_op(),
            3 => prop_oneof![Just(Op::FlashFlush), Just(Op::Reclaim), Just(Op::Reopen)],
        ]
        .boxed()
    } else {
        store_op().boxed()
    }
}

/// How a store call's future is run.
pub trait Runner {
    fn run<F: Future>(f: F) -> F::Output;
}

/// RAM tier: every call completes on its first poll (panics otherwise).
pub struct FirstPoll;

impl Runner for FirstPoll {
    fn run<F: Future>(f: F) -> F::Output {
        super::now(f)
    }
}

/// Flash tier: a call may wait for a read; block this thread until it completes.
pub struct Blocking;

impl Runner for Blocking {
    fn run<F: Future>(f: F) -> F::Output {
        super::block_on(f)
    }
}

/// What of an item is compared besides value, flags, exptime, CAS and the stale/win bits.
#[derive(Clone, Copy, Debug)]
pub enum Norm {
    /// `last_access` in 100 s buckets (a wall-clock second may tick between the two calls).
    AccessBucket,
    /// Neither `last_access` nor `fetched`: a flash-resident item reports them approximately.
    NoAccess,
}

/// The test's state beside the two stores.
pub struct Ctx {
    pub clock: Clock,
    pub t0: u32,
    pub seq: u64,
    pub last_cas: [u64; KEYS as usize],
    pub norm: Norm,
}

impl Ctx {
    pub fn new(clock: &Clock, norm: Norm) -> Self {
        Self {
            t0: clock.now(),
            clock: clock.clone(),
            seq: 0,
            last_cas: [0; KEYS as usize],
            norm,
        }
    }

    /// Start of the current 100 s step.
    fn base(&self) -> u32 {
        self.t0 + (self.clock.now() - self.t0) / 100 * 100
    }

    fn exptime(&self, e: &Exp) -> u32 {
        match e {
            Exp::Never => 0,
            Exp::Past => self.base() - 50,
            Exp::Steps(n) => self.base() + 100 * n + 50,
        }
    }

    /// The item as compared (see [`Norm`]).
    pub fn norm(&self, it: Option<Item>) -> Option<Item> {
        it.map(|mut i| {
            match self.norm {
                Norm::AccessBucket => {
                    i.meta.last_access = i.meta.last_access.wrapping_sub(self.t0) / 100;
                }
                Norm::NoAccess => {
                    i.meta.last_access = 0;
                    i.meta.fetched = false;
                }
            }
            i
        })
    }

    /// Bookkeeping after `op` was applied to both stores with the model's observation `obs`:
    /// remember a set's CAS, move the clock.
    pub fn after(&mut self, op: &Op, obs: &str) {
        match op {
            Op::Set { k, .. } => {
                if let Some(cas) = cas_of(obs) {
                    self.last_cas[*k as usize] = cas;
                }
            }
            Op::Advance(n) => self.clock.advance(100 * n),
            _ => {}
        }
    }
}

pub fn key(k: u8) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

fn cas_of(obs: &str) -> Option<u64> {
    obs.strip_prefix("Ok(")?.strip_suffix(')')?.parse().ok()
}

/// Apply `op` to `s`, returning a printable observation.
pub fn apply<R: Runner, S: KvStore>(s: &S, op: &Op, cx: &Ctx, seq: u64) -> String {
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
                value: super::value(seq, *len),
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
            format!(
                "{:?}",
                R::run(s.set(&key(*k), w)).map_err(|e| e.to_string())
            )
        }
        Op::Get(k) => format!("{:?}", cx.norm(R::run(s.get(&key(*k))).ok().flatten())),
        Op::Add(k, len) => {
            let v = super::value(seq, *len);
            let r = R::run(s.update(&key(*k), |cur| match cur {
                None => (Update::Put(ItemWrite::new(v.clone(), 1, 0)), true),
                Some(_) => (Update::Keep, false),
            }));
            format!("{:?}", r.map_err(|e| e.to_string()))
        }
        Op::Append(k, len) => {
            let tail = super::value(seq, *len);
            let r = R::run(s.update(&key(*k), |cur| match cur {
                None => (Update::Keep, None),
                Some(it) => {
                    let mut v = it.value.to_vec();
                    v.extend_from_slice(&tail);
                    let w = ItemWrite::new(Bytes::from(v), it.flags, it.exptime);
                    (Update::Put(w), Some(cx.norm(Some(it.clone()))))
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
            let v = super::value(seq, *len);
            let r = R::run(s.update(&key(*k), |cur| match cur {
                Some(it) if it.cas == expect => (Update::Put(ItemWrite::new(v.clone(), 2, 0)), 1),
                Some(_) => (Update::Keep, 2),
                None => (Update::Keep, 3),
            }));
            format!("{:?}", r.map_err(|e| e.to_string()))
        }
        Op::Touch(k, e) => {
            let exptime = cx.exptime(e);
            let r = R::run(s.update(&key(*k), |cur| match cur {
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
            let r = R::run(s.update(&key(*k), |cur| match cur {
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
            let r = R::run(s.update(&key(*k), |cur| match cur {
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

/// Read every key on both stores (drops dead items from both, so a sweep, reclaim or
/// recovery dropping them early stays unobservable); fails on any difference.
pub fn read_all<R: Runner, S: KvStore>(
    model: &ModelStore,
    store: &S,
    cx: &Ctx,
    when: &str,
) -> Result<(), TestCaseError> {
    for k in 0..KEYS {
        let m = cx.norm(R::run(model.get(&key(k))).unwrap());
        let c = cx.norm(R::run(store.get(&key(k))).unwrap());
        prop_assert_eq!(m, c, "{} key {}", when, k);
    }
    let (ms, cs) = (model.stats().curr_items, store.stats().curr_items);
    prop_assert_eq!(cs, ms, "{} curr_items", when);
    Ok(())
}
