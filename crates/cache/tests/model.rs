//! Model-based test: random operation sequences against `Cache` and `ModelStore` must give
//! identical observable results (memory large enough that nothing is evicted).
//!
//! The operations and the comparison are shared with `flash_model.rs` (`common::model_ops`);
//! `last_access` is compared in 100 s buckets, as the clock moves in 100 s steps.
mod common;

use common::model_ops::{apply, op, read_all, Ctx, FirstPoll, Norm, Op};
use flashtier_cache::{Cache, CacheConfig, Clock, KvStore, ModelStore};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn cache_matches_model(ops in proptest::collection::vec(op(false), 1..250)) {
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
        let mut cx = Ctx::new(&clock, Norm::AccessBucket);
        for op in &ops {
            cx.seq += 1;
            let seq = cx.seq;
            let m = apply::<FirstPoll, _>(&model, op, &cx, seq);
            let c = apply::<FirstPoll, _>(&cache, op, &cx, seq);
            prop_assert_eq!(&m, &c, "op {:?}", op);
            cx.after(op, &m);
            if let Op::Sweep = op {
                // Reading every key first makes the model drop what is dead too (it removes
                // lazily), so the sweep's early reclaim stays unobservable.
                read_all::<FirstPoll, _>(&model, &cache, &cx, "pre-sweep")?;
                cache.sweep();
            }
            let (ms, cs) = (model.stats().curr_items, cache.stats().curr_items);
            prop_assert_eq!(cs, ms, "curr_items");
        }
        read_all::<FirstPoll, _>(&model, &cache, &cx, "final")?;
    }
}
