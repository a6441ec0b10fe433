//! Model-based test of the flash tier: random operation sequences against a `Cache` with a
//! tiny RAM (4 × 64 KiB segments, so items are demoted to flash all the time) over a
//! `MemoryDevice`, and `ModelStore`, must give identical observable results — across forced
//! flash flushes, forced reclaims and clean close/reopen (warm restart).
//!
//! Compared exactly: value, flags, exptime, CAS, stale/win bits, every closure's view and
//! result, `curr_items`. Not compared: `fetched` and `last_access`, which a flash-resident
//! item reports approximately (see `flash_tier` docs).
//!
//! The operations and the comparison are shared with `model.rs` (`common::model_ops`), plus
//! three flash-only operations: flash flush, reclaim and reopen.
mod common;

use std::sync::Arc;

use common::model_ops::{apply, op, read_all, Blocking, Ctx, Norm, Op};
use flashtier_cache::flash::{Device, MemoryDevice};
use flashtier_cache::{Cache, Clock, KvStore, ModelStore};
use proptest::prelude::*;

fn open(dev: &Arc<MemoryDevice>, clock: &Clock) -> Cache {
    let d: Arc<dyn Device> = dev.clone();
    let engine = common::foreground_engine();
    let cfg = common::small_flash_config(d, engine)
        .index_shards(16)
        .sweep_interval(None)
        .clock(clock.clone())
        .build()
        .unwrap();
    Cache::new(cfg).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn flash_cache_matches_model(ops in proptest::collection::vec(op(true), 1..200)) {
        let clock = Clock::system();
        let dev = Arc::new(MemoryDevice::new("model", 16 << 20));
        let mut cache = open(&dev, &clock);
        let model = ModelStore::new(clock.clone(), 64 << 10);
        let mut cx = Ctx::new(&clock, Norm::NoAccess);
        for op in &ops {
            cx.seq += 1;
            let seq = cx.seq;
            let m = apply::<Blocking, _>(&model, op, &cx, seq);
            let c = apply::<Blocking, _>(&cache, op, &cx, seq);
            prop_assert_eq!(&m, &c, "op {:?}", op);
            cx.after(op, &m);
            match op {
                Op::Sweep => {
                    read_all::<Blocking, _>(&model, &cache, &cx, "pre-sweep")?;
                    cache.sweep();
                }
                Op::FlashFlush => {
                    cache.flash().unwrap().flush().wait().unwrap();
                }
                Op::Reclaim => {
                    read_all::<Blocking, _>(&model, &cache, &cx, "pre-reclaim")?;
                    cache.flash().unwrap().reclaim_now(true).unwrap();
                }
                Op::Reopen => {
                    read_all::<Blocking, _>(&model, &cache, &cx, "pre-reopen")?;
                    cache.close().unwrap();
                    drop(cache);
                    cache = open(&dev, &clock);
                    model.continue_cas_above(cache.last_cas());
                    read_all::<Blocking, _>(&model, &cache, &cx, "post-reopen")?;
                }
                _ => {}
            }
            // RAM eviction reclaims dead items the model still counts (it drops them lazily),
            // so between full reads the cache may count fewer; after one, exactly as many.
            let (ms, cs) = (model.stats().curr_items, cache.stats().curr_items);
            prop_assert!(cs <= ms, "curr_items {} > {} after {:?}", cs, ms, op);
        }
        read_all::<Blocking, _>(&model, &cache, &cx, "final")?;
        let st = cache.stats();
        prop_assert_eq!(st.evictions, 0, "nothing may be evicted while flash has room");
    }
}
