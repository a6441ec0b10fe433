//! The window delays appends, overwrites keep the first dirty time, and a delete of a dirty
//! version over an older flash version appends a tombstone.
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;

use crate::clock::Clock;
use crate::flash::{FlashConfig, IoBackend};
use crate::flash_tier::writeback::WriteBack;
use crate::{Cache, ItemWrite};

fn open(clock: Clock) -> Cache {
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        ..FlashConfig::small()
    };
    let (settings, builder) = crate::config::test_flash("wb", 4 << 20, engine);
    let cfg = builder.clock(clock).flash(settings).build().unwrap();
    Cache::new(cfg).unwrap()
}

fn set(c: &Cache, v: u8) {
    c.set_now(b"k", ItemWrite::new(Bytes::from(vec![v; 1000]), 0, 0))
        .unwrap();
}

fn written(c: &Cache) -> u64 {
    c.tier().counters().objects_written.load(Relaxed)
}

#[test]
fn window_absorbs_overwrites_and_keeps_first_dirty_time() {
    let clock = Clock::system();
    let c = open(clock.clone());
    for v in 0..5 {
        set(&c, v);
    }
    WriteBack::new(c.tier(), c.core()).pass();
    assert_eq!(written(&c), 0, "nothing written inside the window");
    clock.advance(1);
    set(&c, 9);
    clock.advance(2);
    // 3 s after the first unwritten version: due although the last SET is 2 s old.
    WriteBack::new(c.tier(), c.core()).pass();
    assert_eq!(written(&c), 1);
    assert_eq!(c.get_now(b"k").unwrap().unwrap().value[0], 9);
    WriteBack::new(c.tier(), c.core()).pass();
    assert_eq!(written(&c), 1, "a written version is not written again");
}

#[test]
fn delete_of_dirty_version_over_flash_version_appends_tombstone() {
    let c = open(Clock::system());
    set(&c, 1);
    WriteBack::new(c.tier(), c.core()).due(u64::MAX);
    assert_eq!(written(&c), 1);
    set(&c, 2);
    assert!(c.delete_now(b"k"));
    let t = &c.tier().counters();
    assert_eq!(
        t.tombstones.load(Relaxed),
        1,
        "the older flash version is covered"
    );
    // A key never on flash needs none.
    c.set_now(b"j", ItemWrite::new(Bytes::from_static(b"x"), 0, 0))
        .unwrap();
    assert!(c.delete_now(b"j"));
    assert_eq!(t.tombstones.load(Relaxed), 1);
}
