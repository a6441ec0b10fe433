//! The write-back pass's work per item, for an instruction count (not a timed test): 2,000
//! items of 4 KiB stored in RAM, then `close`, whose write-back appends them all. Run alone
//! under callgrind, counting only the pass:
//! `valgrind --tool=callgrind --toggle-collect='*append_ram_versions*' <this test binary>
//! --ignored --exact writeback_of_2000_items` (docs/serving.md, thirteenth sitting).
mod common;

use std::sync::Arc;

use flashtier_cache::flash::MemoryDevice;
use flashtier_cache::{Cache, ItemWrite};

use common::ext_stat as ext;

#[test]
#[ignore = "a workload for callgrind, not a check"]
fn writeback_of_2000_items() {
    let n = 2000;
    let mem = Arc::new(MemoryDevice::new("wb-cost", 64 << 20));
    let cfg = common::small_flash_config(mem, common::foreground_engine())
        .memory_limit(32 << 20)
        .segment_size(1 << 20)
        .sweep_interval(None)
        .build()
        .unwrap();
    let c = Cache::new(cfg).unwrap();
    for i in 0..n {
        let key = format!("key-{i}").into_bytes();
        c.set_now(&key, ItemWrite::new(common::value(i, 4096), 0, 0))
            .unwrap();
    }
    c.close().unwrap();
    assert_eq!(ext(&c, "extstore_written_back"), n);
}
