//! A write waiting out back-pressure holds no shard lock: a GET of another key of the same
//! shard answers while it waits (event order, no timing bound), and the write completes once
//! reclaim frees room.
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::flash::{FlashConfig, IoBackend};
use crate::store::KvStore;
use crate::{Cache, ItemWrite};

fn open(write_back: Duration) -> Cache {
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        background_reclaim: false,
        ..FlashConfig::small()
    };
    let (mut settings, builder) = crate::config::test_flash("bp", 4 << 20, engine);
    settings.append_wait = Duration::ZERO;
    settings.write_back = write_back;
    let cfg = builder.flash(settings).build().unwrap();
    Cache::new(cfg).unwrap()
}

fn value(i: u32) -> Bytes {
    Bytes::from(vec![(i % 251) as u8; 4000])
}

/// SETs until flash (no background reclaim) has no segment left beyond its reserve and
/// refuses appends of any size even with no write in flight.
fn fill(c: &Cache) -> u32 {
    let t = c.tier();
    let reserve = FlashConfig::small().reserve_segments;
    let full = || {
        t.engine().free_segments() <= reserve
            && t.engine().flush().wait().is_ok()
            && !t.engine().can_append(crate::flash_tier::STREAM, 1)
    };
    let mut i = 0;
    while !full() {
        c.set_now(
            format!("fill{i}").as_bytes(),
            ItemWrite::new(value(i), 0, 0),
        )
        .unwrap();
        i += 1;
        assert!(i < 100_000, "flash never filled");
    }
    i
}

/// A key other than `not` whose hash falls in the same index shard as `of`'s.
fn same_shard(c: &Cache, of: &[u8], prefix: &str) -> Vec<u8> {
    let idx = &c.core().slots;
    let mask = idx.shard_count() as u64 - 1;
    let want = idx.hash(of) & mask;
    (0..1_000_000)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .find(|k| idx.hash(k) & mask == want && k != of)
        .unwrap()
}

/// Reclaim until the waiting writer has stored what it waits with (room one reclaim frees
/// may go to the writer's own evictions or to drop notes first).
fn free_until_done<'a>(
    tier: impl Fn() -> &'a crate::flash_tier::tier::FlashTier,
    writer: &std::thread::JoinHandle<()>,
) {
    let t = Instant::now();
    while !writer.is_finished() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the writer never got room"
        );
        let _ = tier().engine().reclaim_now(true);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(60), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn waiting_write_does_not_block_its_shard() {
    let c = Arc::new(open(Duration::ZERO));
    fill(&c);
    let writer_key = b"writer".to_vec();
    let reader_key = same_shard(&c, &writer_key, "reader");
    // RAM only (flash is full), stored before any wait is configured.
    c.set_now(&reader_key, ItemWrite::new(Bytes::from_static(b"r"), 0, 0))
        .unwrap();
    // The write-back thread retries the stores flash refused (fill's last ones, this
    // one), and once waits are on its next refusal marks the gate: it would race any
    // SET meant to mark it (that SET then waits, on this thread, for room nobody
    // frees). A window of 10 minutes makes none of them due (a pass under way ends at
    // its first refusal), so the writer below is the only one to wait; the gate is
    // marked as a refused append marks it.
    c.set_knob("write_back_ms", "600000").unwrap();
    std::thread::sleep(crate::flash_tier::writeback::PASS_EVERY * 3);
    c.set_knob("append_wait_ms", "60000").unwrap();
    let tier = || c.tier();
    tier().gate().pressure();
    let w = c.clone();
    let key = writer_key.clone();
    let writer = std::thread::spawn(move || {
        w.set_now(&key, ItemWrite::new(value(7), 0, 0)).unwrap();
    });
    wait_for("the writer waits", || {
        tier().gate().waits.load(Relaxed) >= 1
    });
    let got = c.get_now(&reader_key).unwrap().unwrap();
    assert_eq!(&got.value[..], b"r");
    assert!(
        !writer.is_finished(),
        "the GET answered while the SET of the same shard was waiting for flash"
    );
    // Room again (reclaim drops unread items): the waiter goes on and stores its item;
    // no more waits (its evictions may find flash full again).
    c.set_knob("append_wait_ms", "0").unwrap();
    c.set_knob("drop_unread", "1").unwrap();
    free_until_done(tier, &writer);
    writer.join().unwrap();
    assert_eq!(c.get_now(&writer_key).unwrap().unwrap().value, value(7));
    assert!(tier().gate().waits.load(Relaxed) >= 1);
    assert!(tier().gate().wait_us.load(Relaxed) > 0);
    assert_eq!(tier().gate().wait_timeouts.load(Relaxed), 0);
}

#[test]
fn eviction_flash_refuses_waits_outside_every_lock() {
    let c = Arc::new(open(Duration::from_secs(600)));
    let n = fill(&c);
    let tier = || c.tier();
    c.set_knob("append_wait_ms", "60000").unwrap();
    // No segment is free (reclaim behind, here stopped): even a cold item's eviction
    // waits, `evict_when_busy` or not (it drops only while the write buffers are in flight:
    // tests/evict_when_busy.rs).
    let evictions = c.stats().evictions;
    // Every RAM item is dirty (write-back window 600 s): evicting one needs an append,
    // which flash refuses; the writer stalls and waits holding nothing.
    let w = c.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..400 {
            let k = format!("more{i}");
            w.set_now(k.as_bytes(), ItemWrite::new(value(i), 0, 0))
                .unwrap();
        }
    });
    wait_for("the writer waits", || {
        tier().gate().waits.load(Relaxed) >= 1
    });
    // Every shard and the allocator are free: reads of all the loaded keys answer, and
    // nothing was evicted meanwhile.
    let mut found = 0;
    for i in 0..n {
        found += usize::from(c.get_now(format!("fill{i}").as_bytes()).unwrap().is_some());
    }
    assert!(found > 0);
    assert!(
        !writer.is_finished(),
        "reads answered while the writer waited for flash"
    );
    assert_eq!(
        c.stats().evictions,
        evictions,
        "a stalled eviction drops nothing"
    );
    // Let it go: no more waits, and room for the waiting one.
    c.set_knob("append_wait_ms", "0").unwrap();
    c.set_knob("drop_unread", "1").unwrap();
    free_until_done(tier, &writer);
    writer.join().unwrap();
    assert!(c.get_now(b"more399").unwrap().is_some());
}
