//! An item written to flash from its RAM record — by the write-back pass (at a clean close,
//! every version RAM holds unwritten) or by a RAM eviction — comes back byte-exact after a
//! restart: value, flags and CAS. Both append the value straight from the arena's words into
//! the engine's write chunk (one copy, `PutValue::Ram`), so this covers that copy at every
//! length around a word's and a page's end and for a large segment's chunked record.
mod common;

use std::sync::Arc;

use bytes::Bytes;
use flashtier_cache::flash::{Device, MemoryDevice};
use flashtier_cache::{Cache, ItemWrite};
use proptest::prelude::*;

use common::ext_stat as ext;

fn open(dev: Arc<dyn Device>) -> Cache {
    let cfg = common::small_flash_config(dev, common::foreground_engine())
        .sweep_interval(None)
        .build()
        .unwrap();
    Cache::new(cfg).unwrap()
}

/// Value lengths: short ones, a word's end, a page's end, and large-segment records (RAM
/// segments are 64 KiB; a record over half of one spans chunks).
fn value_len() -> impl Strategy<Value = usize> {
    prop_oneof![0..40usize, 4080..4112usize, 33_000..40_000usize]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn items_written_from_ram_come_back_byte_exact(
        items in proptest::collection::vec((value_len(), any::<u32>(), any::<u64>()), 1..16)
    ) {
        let mem = Arc::new(MemoryDevice::new("wb-exact", 16 << 20));
        let c = open(mem.clone());
        let mut want = Vec::new();
        for (i, &(len, flags, seed)) in items.iter().enumerate() {
            let key = format!("key-{i}").into_bytes();
            let value = common::value(seed, len);
            let cas = c.set_now(&key, ItemWrite::new(value.clone(), flags, 0)).unwrap();
            want.push((key, value, flags, cas));
        }
        // The default window (2 s) has not passed: what RAM still holds is dirty, and the
        // close's write-back appends it.
        c.close().unwrap();
        let back = ext(&c, "extstore_written_back");
        prop_assert!(back > 0, "the write-back pass appended nothing at close");
        drop(c);
        let c = open(mem);
        prop_assert_eq!(ext(&c, "extstore_objects_recovered"), want.len() as u64);
        for (key, value, flags, cas) in want {
            let got = c.get_now(&key).unwrap();
            prop_assert!(got.is_some(), "{:?} lost", String::from_utf8_lossy(&key));
            let got = got.unwrap();
            prop_assert_eq!(got.value, Bytes::clone(&value), "value of {:?}", key);
            prop_assert_eq!((got.flags, got.cas), (flags, cas));
        }
    }
}
