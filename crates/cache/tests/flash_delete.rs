//! Deletes never read flash: `Cache::delete` of flash-resident items removes the slots and
//! appends tombstones without a single flash read (with the default index; a narrow one checks
//! each tag-matching slot, `tests/flash_tag_collisions.rs`), and the deleted keys stay deleted
//! across a clean close and reopen while the others come back.
mod common;

use std::sync::Arc;

use flashtier_cache::flash::{Device, FlashConfig, IoBackend, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite, KvStore};

fn open(dev: &Arc<MemoryDevice>) -> Cache {
    let d: Arc<dyn Device> = dev.clone();
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        ..FlashConfig::small()
    };
    let cfg = common::small_flash_config(d, engine)
        .sweep_interval(None)
        .build()
        .unwrap();
    Cache::new(cfg).unwrap()
}

fn reads(c: &Cache) -> u64 {
    c.stats_section("extstore")
        .unwrap()
        .into_iter()
        .find(|(k, _)| k == "extstore_objects_read")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap()
}

#[test]
fn deletes_do_not_read_flash_and_survive_restart() {
    let dev = Arc::new(MemoryDevice::new("del", 16 << 20));
    let c = open(&dev);
    let n = 400u64;
    for i in 0..n {
        let w = ItemWrite::new(common::value(i, 2000), 0, 0);
        c.set_now(format!("d{i}").as_bytes(), w).unwrap();
    }
    assert!(c.flash_items() > n / 2);
    let before = reads(&c);
    for i in (0..n).step_by(2) {
        assert!(common::block_on(c.delete(format!("d{i}").as_bytes())).unwrap());
    }
    assert_eq!(reads(&c), before, "a delete read an item");
    // The default index compares enough hash bits for deletes to take slots unread.
    assert!(common::ext_stat(&c, "extstore_index_hash_width") >= 41);
    assert_eq!(common::ext_stat(&c, "extstore_write_check_reads"), 0);
    assert!(!common::block_on(c.delete(b"never-stored")).unwrap());
    assert_eq!(c.stats().curr_items, n / 2);
    c.close().unwrap();
    drop(c);
    let c = open(&dev);
    assert_eq!(c.stats().curr_items, n / 2);
    for i in 0..n {
        let got = c.get_now(format!("d{i}").as_bytes()).unwrap();
        if i % 2 == 0 {
            assert!(got.is_none(), "deleted d{i} came back");
        } else {
            assert_eq!(got.unwrap().value, common::value(i, 2000));
        }
    }
}
