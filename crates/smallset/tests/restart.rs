//! Restarts of the small tier: a clean close and reopen keeps every item byte-exact (value,
//! flags, exptime, stored time, CAS) and every delete; a crash at any moment (a copy of the
//! device taken mid-run) never lets a deleted or replaced value be served; a change after a
//! clean close is not vouched for; foreign files are refused untouched.
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;

use flashtier_flash::{Device, MemoryDevice};
use flashtier_smallset::{block_on, ItemMeta, SmallConfig, SmallSets, SmallStore};
use proptest::prelude::*;

fn cfg() -> SmallConfig {
    SmallConfig {
        staging_bytes: 64 << 10,
        batch_sets: 4,
        log_fraction: 0.0,
        io_lanes: 1,
        merge_min: 1,
        log_tag_bits: 16,
        release_memory: None,
        merge_pages: 2048,
        hugepages: false,
    }
}

thread_local! {
    /// The log index's tag width the tiers of this thread's test get (`with_tag_bits`).
    static TAG_BITS: Cell<u32> = const { Cell::new(16) };
}

/// Run `f` with tiers whose log index keeps `bits` bits of tag (0–2: tags collide all the
/// time, so every answer must come from the key compare, never from the tag).
fn with_tag_bits<R>(bits: u32, f: impl FnOnce() -> R) -> R {
    TAG_BITS.with(|b| b.set(bits));
    let r = f();
    TAG_BITS.with(|b| b.set(16));
    r
}

thread_local! {
    /// Log pages the devices of this thread's test get (0: no log; `with_log`).
    static LOG: Cell<u64> = const { Cell::new(0) };
}

thread_local! {
    /// Kangaroo's admission threshold the tiers of this thread's test get (`with_merge_min`).
    static MERGE_MIN: Cell<usize> = const { Cell::new(1) };
}

/// Run `f` with tiers whose log merges drop fewer than `min` new objects of a set.
fn with_merge_min<R>(min: usize, f: impl FnOnce() -> R) -> R {
    MERGE_MIN.with(|m| m.set(min));
    let r = f();
    MERGE_MIN.with(|m| m.set(1));
    r
}

/// Run `f` with devices that have `pages` log pages after their sets.
fn with_log<R>(pages: u64, f: impl FnOnce() -> R) -> R {
    LOG.with(|l| l.set(pages));
    let r = f();
    LOG.with(|l| l.set(0));
    r
}

/// A memory device of `sets` sets (≤ 4096: plus the superblock and one dirty-map page),
/// and the log pages `with_log` asks for.
fn device(sets: u64) -> Arc<MemoryDevice> {
    let log = LOG.with(Cell::get);
    Arc::new(MemoryDevice::new("small", (sets + 2 + log) * 4096))
}

fn open(dev: &Arc<MemoryDevice>) -> SmallSets {
    let d: Arc<dyn Device> = dev.clone();
    let log = LOG.with(Cell::get);
    let pages = dev.len() / 4096;
    let cfg = SmallConfig {
        log_fraction: if log == 0 {
            0.0
        } else {
            (log as f64 + 0.5) / (pages - 1) as f64
        },
        merge_min: MERGE_MIN.with(Cell::get),
        log_tag_bits: TAG_BITS.with(Cell::get),
        release_memory: None,
        merge_pages: 2048,
        ..cfg()
    };
    let t = SmallSets::with_device(d, cfg).expect("open");
    assert_eq!(u64::from(t.log_pages()), log);
    t
}

/// Every field distinct per key and version, so a mix-up shows.
fn meta(k: u16, version: u64) -> ItemMeta {
    ItemMeta {
        flags: u32::from(k) * 7 + version as u32,
        exptime: 4_000_000_000 - u32::from(k),
        stored: 1_700_000_000 + u32::from(k),
        cas: version,
    }
}

fn value(k: u16, version: u64) -> Vec<u8> {
    let mut v = format!("{k}:{version}:").into_bytes();
    v.resize(
        10 + (k as usize * 13 + version as usize) % 180,
        b'a' + (k % 26) as u8,
    );
    v
}

fn key(k: u16) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

fn get(t: &SmallSets, k: u16) -> Option<(Vec<u8>, ItemMeta)> {
    block_on(t.lookup(&key(k)))
        .expect("lookup")
        .item
        .map(|i| (i.value.to_vec(), i.meta))
}

fn stat(t: &SmallSets, name: &str) -> u64 {
    t.stats()
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.parse().expect("number"))
        .unwrap_or_else(|| panic!("no stat {name}"))
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16),
    Remove(u16),
    Merge,
    /// Append what is staged to the log (merging its oldest pages only as it needs room).
    Append,
    Clear,
    /// Take a copy of the device now: what a `kill -9` here would leave.
    Crash,
}

fn ops(clear: bool) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        8 => (0u16..300).prop_map(Op::Insert),
        4 => (0u16..300).prop_map(Op::Remove),
        1 => Just(Op::Merge),
        2 => Just(Op::Append),
        2 => Just(Op::Crash),
        1 => (0u8..30).prop_map(move |x| if clear && x == 0 { Op::Clear } else { Op::Merge }),
    ];
    proptest::collection::vec(op, 1..300)
}

/// The model: key → (value, meta) of its live version.
type Model = HashMap<u16, (Vec<u8>, ItemMeta)>;

/// Apply `ops` to the tier and to `model` (versions continue above `version`); returns, per
/// crash point, the device image and the model then.
fn apply(
    t: &SmallSets,
    dev: &MemoryDevice,
    ops: &[Op],
    model: &mut Model,
    version: &mut u64,
) -> Vec<(Vec<u8>, Model)> {
    let mut crashes = Vec::new();
    for op in ops {
        match op {
            Op::Insert(k) => {
                *version += 1;
                let (v, m) = (value(*k, *version), meta(*k, *version));
                if t.insert(&key(*k), &v, m) {
                    model.insert(*k, (v, m));
                } else {
                    model.remove(k);
                }
            }
            Op::Remove(k) => {
                t.remove(&key(*k));
                model.remove(k);
            }
            Op::Merge => t.flush_staged(),
            Op::Append => t.flush_to_log(),
            Op::Clear => {
                t.clear();
                model.clear();
            }
            Op::Crash => crashes.push((dev.image(), model.clone())),
        }
    }
    crashes
}

/// Apply `ops` to a fresh model: (the model at the end, the crash points).
fn run(t: &SmallSets, dev: &MemoryDevice, ops: &[Op]) -> (Model, Vec<(Vec<u8>, Model)>) {
    let (mut model, mut version) = (Model::new(), 0);
    let crashes = apply(t, dev, ops, &mut model, &mut version);
    (model, crashes)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Clean close, reopen: with room in every set, each key is exactly its last version
    /// (value, flags, exptime, stored, CAS), each removed or cleared key a miss.
    #[test]
    fn a_clean_reopen_keeps_every_item_exactly(ops in ops(true)) {
        clean_reopen(&ops)?;
    }

    /// The same with an on-flash log: the close merges the log into the sets.
    #[test]
    fn with_a_log_a_clean_reopen_keeps_every_item_exactly(ops in ops(true)) {
        with_log(24, || clean_reopen(&ops))?;
    }

    /// A crash at any moment (a device image taken mid-run, reopened on the same boot): the
    /// reopened tier never serves a value the model does not hold at that moment — no
    /// deleted, replaced or cleared value comes back.
    #[test]
    fn a_crash_never_serves_a_deleted_or_replaced_value(ops in ops(true)) {
        crash(&ops)?;
    }

    /// The same with an on-flash log (crash images while it holds objects, between appends
    /// and merges): every set with anything in the log restarts empty.
    #[test]
    fn with_a_log_a_crash_never_serves_a_deleted_or_replaced_value(ops in ops(true)) {
        with_log(8, || crash(&ops))?;
    }

    /// After a clean close, changes made anyway (and a crash before any other close) are not
    /// vouched for by the clean mark: the reopen never serves what they replaced or removed.
    #[test]
    fn changes_after_close_reopen_the_superblock(ops in ops(false), late in ops(true)) {
        after_close(&ops, &late)?;
    }

    /// The same with an on-flash log.
    #[test]
    fn with_a_log_changes_after_close_reopen_the_superblock(ops in ops(false), late in ops(true)) {
        with_log(12, || after_close(&ops, &late))?;
    }
}

fn clean_reopen(ops: &[Op]) -> Result<(), TestCaseError> {
    let dev = device(512);
    let t = open(&dev);
    let (model, _) = run(&t, &dev, ops);
    let last_cas = ops.len() as u64 + 7;
    t.close(last_cas, Some(1_900_000_000)).expect("close");
    drop(t);
    let t = open(&dev);
    let r = t.recovered();
    prop_assert!(r.clean);
    prop_assert_eq!(r.items, model.len() as u64);
    prop_assert!(r.last_cas >= last_cas);
    prop_assert_eq!(r.flush_at, Some(1_900_000_000));
    for k in 0..300u16 {
        prop_assert_eq!(get(&t, k), model.get(&k).cloned(), "key {}", k);
    }
    // A removed key stays gone through the next merges too (the filters were rebuilt:
    // a remove after the restart finds the page copy).
    for k in 0..300u16 {
        if k % 3 == 0 {
            t.remove(&key(k));
        }
    }
    t.flush_staged();
    for k in (0..300u16).step_by(3) {
        prop_assert_eq!(get(&t, k), None, "key {} removed after the restart", k);
    }
    Ok(())
}

fn crash(ops: &[Op]) -> Result<(), TestCaseError> {
    let dev = device(16);
    let t = open(&dev);
    let (model, crashes) = run(&t, &dev, ops);
    let mut images = crashes;
    images.push((dev.image(), model));
    drop(t); // no close: a kill at the end
    for (image, model) in images {
        let d = Arc::new(MemoryDevice::from_image("crashed", image));
        let t = open(&d);
        prop_assert!(!t.recovered().clean);
        for k in 0..300u16 {
            if let Some(got) = get(&t, k) {
                prop_assert_eq!(Some(&got), model.get(&k), "key {} after a crash", k);
            }
        }
    }
    Ok(())
}

fn after_close(ops: &[Op], late: &[Op]) -> Result<(), TestCaseError> {
    let dev = device(64);
    let t = open(&dev);
    let (mut model, mut version) = (Model::new(), 0);
    apply(&t, &dev, ops, &mut model, &mut version);
    t.close(version, None).expect("close");
    apply(&t, &dev, late, &mut model, &mut version);
    drop(t);
    let t = open(&dev);
    for k in 0..300u16 {
        if let Some(got) = get(&t, k) {
            prop_assert_eq!(Some(&got), model.get(&k), "key {}", k);
        }
    }
    Ok(())
}

#[test]
fn a_kill_keeps_the_sets_with_nothing_staged_and_empties_the_others() {
    let dev = device(256);
    let t = open(&dev);
    for k in 0..200 {
        assert!(t.insert(&key(k), &value(k, 1), meta(k, 1)));
    }
    t.close(200, None).unwrap();
    t.close(200, None).unwrap(); // idempotent
    drop(t);
    let t = open(&dev);
    assert_eq!(stat(&t, "small_restart_clean"), 1);
    assert_eq!(stat(&t, "small_recovered_items"), 200);
    assert_eq!(stat(&t, "small_items"), 200);
    // Replace and delete without merging, then a kill: neither old version may come back;
    // every set with nothing staged keeps its items.
    assert!(t.insert(&key(3), &value(3, 2), meta(3, 2)));
    t.remove(&key(4));
    drop(t);
    let t = open(&dev);
    assert_eq!(stat(&t, "small_restart_clean"), 0);
    let dropped = stat(&t, "small_recovered_dirty_sets");
    assert!((1..=2).contains(&dropped), "{dropped} dirty sets");
    assert_eq!(get(&t, 3), None, "its set had a staged change");
    assert_eq!(get(&t, 4), None, "its set had a staged change");
    let kept = (0..200).filter(|&k| get(&t, k).is_some()).count();
    assert!(kept >= 190, "only {kept} of 200 kept");
    for k in 5..200 {
        if let Some(got) = get(&t, k) {
            assert_eq!(got, (value(k, 1), meta(k, 1)));
        }
    }
    // Merged changes are kept by a kill too.
    assert!(t.insert(&key(3), &value(3, 3), meta(3, 3)));
    t.remove(&key(5));
    t.flush_staged();
    drop(t);
    let t = open(&dev);
    assert_eq!(stat(&t, "small_recovered_dirty_sets"), 0);
    assert_eq!(get(&t, 3), Some((value(3, 3), meta(3, 3))));
    assert_eq!(get(&t, 5), None);
}

#[test]
fn a_flush_all_survives_a_kill() {
    let dev = device(32);
    let t = open(&dev);
    for k in 0..40 {
        t.insert(&key(k), &value(k, 1), meta(k, 1));
    }
    t.flush_staged();
    t.clear();
    t.flush_later(1_900_000_000);
    t.insert(&key(1), &value(1, 2), meta(1, 2));
    t.flush_staged();
    drop(t);
    let t = open(&dev);
    assert!(t.recovered().kept);
    assert_eq!(t.recovered().flush_at, Some(1_900_000_000));
    assert_eq!(get(&t, 1), Some((value(1, 2), meta(1, 2))));
    for k in 2..40 {
        assert_eq!(get(&t, k), None);
    }
}

#[test]
fn a_flush_all_before_a_clean_close_stays_flushed() {
    let dev = device(32);
    let t = open(&dev);
    for k in 0..40 {
        t.insert(&key(k), &value(k, 1), meta(k, 1));
    }
    t.flush_staged();
    t.clear();
    t.insert(&key(1), &value(1, 2), meta(1, 2));
    t.close(2, None).unwrap();
    drop(t);
    let t = open(&dev);
    assert_eq!(get(&t, 1), Some((value(1, 2), meta(1, 2))));
    for k in 2..40 {
        assert_eq!(get(&t, k), None);
    }
}

#[test]
fn a_resized_device_starts_fresh() {
    let dev = device(32);
    let t = open(&dev);
    t.insert(&key(1), &value(1, 1), meta(1, 1));
    t.close(1, None).unwrap();
    drop(t);
    let mut image = dev.image();
    image.resize(image.len() + 4096, 0);
    let grown = Arc::new(MemoryDevice::from_image("grown", image));
    let t = open(&grown);
    assert!(!t.recovered().clean);
    assert_eq!(get(&t, 1), None);
}

#[test]
fn a_damaged_superblock_starts_fresh_and_a_foreign_device_is_refused() {
    let dev = device(8);
    let t = open(&dev);
    t.insert(&key(1), &value(1, 1), meta(1, 1));
    t.close(1, None).unwrap();
    drop(t);
    // Flip every bit of one byte (setting it to a constant could leave it unchanged: the
    // generation and boot id are random).
    let byte = dev.image()[20];
    dev.poke(20, &[!byte]);
    let t = open(&dev);
    assert!(!t.recovered().clean);
    assert_eq!(get(&t, 1), None);
    drop(t);

    let foreign = device(8);
    foreign.poke(0, b"not a cache");
    let d: Arc<dyn Device> = foreign.clone();
    let e = SmallSets::with_device(d, cfg()).unwrap_err();
    assert!(e.to_string().contains("not a small-object tier"), "{e}");
    assert!(
        foreign.image()[11..].iter().all(|&b| b == 0),
        "nothing written"
    );
}

#[test]
fn a_foreign_file_is_refused_untouched() {
    let dir = std::env::temp_dir().join(format!("smallset-foreign-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data.bin");
    let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8 + 1).collect();
    std::fs::write(&path, &bytes).unwrap();
    let e = SmallSets::open(&path, 1 << 20, cfg()).unwrap_err();
    assert!(e.to_string().contains("not a small-object tier"), "{e}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "not grown, not written"
    );
    // A blank file is formatted, and then reopened as ours.
    let blank = dir.join("blank.bin");
    let t = SmallSets::open(&blank, 1 << 20, cfg()).unwrap();
    t.insert(b"k", b"v", ItemMeta::default());
    t.close(0, None).unwrap();
    drop(t);
    let t = SmallSets::open(&blank, 1 << 20, cfg()).unwrap();
    assert!(t.recovered().clean);
    assert_eq!(
        block_on(t.lookup(b"k"))
            .unwrap()
            .item
            .map(|i| i.value.to_vec()),
        Some(b"v".to_vec())
    );
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_kill_on_another_boot_keeps_nothing() {
    use flashtier_smallset::superblock::{self, Found};
    let dev = device(32);
    let t = open(&dev);
    for k in 0..40 {
        t.insert(&key(k), &value(k, 1), meta(k, 1));
    }
    t.flush_staged();
    drop(t); // killed with nothing staged: on this boot every set would be kept
    let Found::Ours(mut sb) = superblock::decode(&dev.image()[..4096]) else {
        panic!("no superblock");
    };
    // What a power cut looks like: the same superblock, read on another boot.
    sb.boot_id = [0x42; 16];
    dev.poke(0, &superblock::encode(&sb));
    let t = open(&dev);
    assert!(!t.recovered().kept);
    for k in 0..40 {
        assert_eq!(get(&t, k), None);
    }
}

/// Crash images taken while the flusher thread merges on its own (staging over its small
/// budget) as the test thread keeps staging: a merge that finishes while newer changes of
/// its set are staged must leave the set dirty. A quarter of the images follow a drain by
/// 50 operations, so some sets are clean at them however the flusher was scheduled.
#[test]
fn a_crash_while_the_flusher_merges_never_serves_a_replaced_value() {
    crash_while_merging();
}

/// The same with an on-flash log: the flusher thread appends and merges the log's oldest
/// segments while the images are taken (mid-append, mid-merge), and the test thread checks
/// the log's own counters moved.
#[test]
fn with_a_log_a_crash_while_appends_and_merges_run_never_serves_a_replaced_value() {
    with_log(16, crash_while_merging);
}

/// A kill while the log holds objects: the open replays the log, so a replace, a delete
/// and a new key that reached the log are served as they were, and every set is kept.
#[test]
fn with_a_log_a_kill_keeps_what_reached_the_log() {
    with_log(16, || {
        let dev = device(256);
        let t = open(&dev);
        for k in 0..200 {
            assert!(t.insert(&key(k), &value(k, 1), meta(k, 1)));
        }
        t.flush_staged();
        // Through the log: a replace, a delete, a new key; then a kill.
        assert!(t.insert(&key(3), &value(3, 2), meta(3, 2)));
        t.remove(&key(4));
        assert!(t.insert(&key(250), &value(250, 2), meta(250, 2)));
        t.flush_to_log();
        assert!(stat(&t, "small_log_items") >= 3);
        assert_eq!(
            get(&t, 3),
            Some((value(3, 2), meta(3, 2))),
            "served from the log"
        );
        assert_eq!(get(&t, 4), None, "the log's tombstone shadows the page");
        drop(t);
        let t = open(&dev);
        assert_eq!(stat(&t, "small_recovered_dirty_sets"), 0);
        assert_eq!(stat(&t, "small_recovered_log_items"), 3);
        assert_eq!(stat(&t, "small_recovered_log_lost_pages"), 0);
        assert_eq!(stat(&t, "small_log_items"), 3);
        assert_eq!(get(&t, 3), Some((value(3, 2), meta(3, 2))));
        assert_eq!(get(&t, 4), None, "the replayed tombstone shadows the page");
        assert_eq!(get(&t, 250), Some((value(250, 2), meta(250, 2))));
        for k in (0..200).filter(|k| ![3, 4].contains(k)) {
            assert_eq!(get(&t, k), Some((value(k, 1), meta(k, 1))), "key {k}");
        }
        // The replayed objects merge like any others, and a second kill keeps them too.
        t.remove(&key(250));
        t.flush_staged();
        drop(t);
        let t = open(&dev);
        assert_eq!(stat(&t, "small_recovered_log_items"), 0, "merged");
        assert_eq!(get(&t, 3), Some((value(3, 2), meta(3, 2))));
        assert_eq!(get(&t, 4), None);
        assert_eq!(get(&t, 250), None);
    });
}

/// A delete still staged (not in the log) when the kill comes: its set is emptied, and the
/// key's older copies — in the log and on the page — are not served.
#[test]
fn with_a_log_a_staged_delete_lost_by_a_kill_uncovers_nothing() {
    with_log(16, || {
        // The flusher appends whatever is staged on its 100 ms tick, so a tick between the
        // removes and the kill (likelier when a loaded machine preempts this thread there)
        // puts the deletes in the log and leaves nothing staged to lose. Every try checks
        // that nothing older is served; the scenario must be met (deletes still staged at
        // the kill) in one of 20 tries.
        for _ in 0..20 {
            if staged_delete_lost_by_a_kill() {
                return;
            }
        }
        panic!("in 20 tries the flusher always appended the deletes before the kill");
    });
}

/// One try of the test above; false when the deletes reached the log before the kill.
fn staged_delete_lost_by_a_kill() -> bool {
    let dev = device(64);
    let t = open(&dev);
    for k in 0..60 {
        assert!(t.insert(&key(k), &value(k, 1), meta(k, 1)));
    }
    t.flush_staged();
    assert!(t.insert(&key(7), &value(7, 2), meta(7, 2)));
    t.flush_to_log();
    t.remove(&key(7)); // staged only
    t.remove(&key(8));
    drop(t);
    let t = open(&dev);
    let dirty = stat(&t, "small_recovered_dirty_sets");
    assert!(dirty <= 2, "{dirty} dirty sets");
    assert_eq!(get(&t, 7), None, "neither the log's nor the page's copy");
    assert_eq!(get(&t, 8), None);
    for k in 0..60 {
        if let Some(got) = get(&t, k) {
            assert_eq!(got, (value(k, 1), meta(k, 1)), "key {k}");
        }
    }
    if dirty == 0 {
        // The tick won: the deletes were in the log, nothing was staged at the kill.
        return false;
    }
    // The emptied set's log objects stay dead through another kill (its empty page's
    // watermark is past them).
    drop(t);
    let t = open(&dev);
    assert_eq!(get(&t, 7), None);
    true
}

/// A log page lost in the middle of the recorded window (torn, damaged): every set not
/// merged since is emptied, so no delete or replace on the lost page uncovers an older
/// version; sets merged after it keep their pages and their newer log objects.
#[test]
fn with_a_log_a_lost_log_page_uncovers_no_older_version() {
    with_log(16, || {
        let dev = device(64);
        let t = open(&dev);
        for k in 0..100 {
            assert!(t.insert(&key(k), &value(k, 1), meta(k, 1)));
        }
        t.flush_staged();
        let mut model: Model = (0..100).map(|k| (k, (value(k, 1), meta(k, 1)))).collect();
        // Page A: replaces and deletes; page B: more replaces.
        let before = stat(&t, "small_log_pages_written");
        for k in 0..30u16 {
            if k % 2 == 0 {
                t.remove(&key(k));
                model.remove(&k);
            } else {
                assert!(t.insert(&key(k), &value(k, 2), meta(k, 2)));
                model.insert(k, (value(k, 2), meta(k, 2)));
            }
        }
        t.flush_to_log();
        assert!(stat(&t, "small_log_pages_written") > before);
        for k in 30..60u16 {
            assert!(t.insert(&key(k), &value(k, 3), meta(k, 3)));
            model.insert(k, (value(k, 3), meta(k, 3)));
        }
        t.flush_to_log();
        drop(t);
        // Damage page A (its sequence number is the pages written before it).
        let log_off = (1 + 1 + 64 + before % 16) * 4096;
        dev.poke(log_off + 100, &[0xff; 16]);
        let t = open(&dev);
        assert!(stat(&t, "small_recovered_log_lost_pages") >= 1);
        assert!(stat(&t, "small_recovered_dirty_sets") > 0);
        for k in 0..100u16 {
            if let Some(got) = get(&t, k) {
                assert_eq!(Some(&got), model.get(&k), "key {k} after a lost log page");
            }
        }
    });
}

/// With nothing staged at the kill (the flusher appended it all), a kill loses nothing: every
/// key is its latest value or deleted, exactly as after a clean close (room in every set).
fn kill_with_nothing_staged(ops: &[Op]) -> Result<(), TestCaseError> {
    let dev = device(512);
    let t = open(&dev);
    let (mut model, mut version) = (Model::new(), 0);
    let mut images = Vec::new();
    for op in ops {
        if let Op::Crash = op {
            t.flush_to_log();
            images.push((dev.image(), model.clone()));
        } else {
            apply(&t, &dev, std::slice::from_ref(op), &mut model, &mut version);
        }
    }
    t.flush_to_log();
    images.push((dev.image(), model));
    drop(t);
    for (image, model) in images {
        let d = Arc::new(MemoryDevice::from_image("killed", image));
        let t = open(&d);
        prop_assert_eq!(stat(&t, "small_recovered_dirty_sets"), 0);
        for k in 0..300u16 {
            prop_assert_eq!(get(&t, k), model.get(&k).cloned(), "key {} after a kill", k);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Kills with nothing staged, at random points of appends and merges of the log: every
    /// object acknowledged is served byte-exact.
    #[test]
    fn with_a_log_a_kill_with_nothing_staged_keeps_every_item_exactly(ops in ops(true)) {
        with_log(8, || kill_with_nothing_staged(&ops))?;
    }

    /// Crashes at random points with Kangaroo's admission threshold on (objects dropped by
    /// a merge stay in the log below the page's watermark): never an older or deleted value.
    #[test]
    fn with_a_log_and_dropped_merges_a_crash_never_serves_a_deleted_or_replaced_value(
        ops in ops(true)
    ) {
        with_merge_min(3, || with_log(8, || crash(&ops)))?;
    }

    /// 4-byte links keep few tag bits on a large log: with 0 to 2 bits (tags collide all
    /// the time) a kill at any point still serves every acknowledged object byte-exact and
    /// a crash never an older or deleted value.
    #[test]
    fn with_narrow_log_tags_kills_and_crashes_keep_the_rule(
        ops in ops(true), bits in 0u32..3
    ) {
        with_tag_bits(bits, || with_log(8, || kill_with_nothing_staged(&ops)))?;
        with_tag_bits(bits, || with_log(8, || crash(&ops)))?;
        with_tag_bits(bits, || with_log(24, || clean_reopen(&ops)))?;
    }
}

fn crash_while_merging() {
    let dev = device(512);
    let t = open(&dev);
    let (mut model, mut version) = (Model::new(), 0u64);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut images = Vec::new();
    for i in 0..40_000u32 {
        let k = (next() % 3000) as u16;
        let op = if next() % 3 == 0 {
            Op::Remove(k)
        } else {
            Op::Insert(k)
        };
        apply(&t, &dev, &[op], &mut model, &mut version);
        // Every fourth image is taken 50 operations after the staging drained, so it holds
        // sets with nothing staged whatever the scheduler gave the flusher (on a loaded
        // machine the flusher can fall behind for the whole run and leave every set dirty
        // at the others): the liveness check below does not rest on timing.
        if i % 8000 == 7949 {
            t.flush_staged();
        }
        if i % 2000 == 1999 {
            images.push((dev.image(), model.clone()));
        }
    }
    if LOG.with(Cell::get) > 0 {
        assert!(stat(&t, "small_log_pages_written") > 0);
        assert!(
            stat(&t, "small_log_merges") > 0,
            "the log's merges ran during the run"
        );
    }
    drop(t);
    let (mut kept, mut live, mut from_log) = (0, 0, 0);
    for (image, model) in images {
        let d = Arc::new(MemoryDevice::from_image("crashed", image));
        let t = open(&d);
        from_log += stat(&t, "small_recovered_log_items");
        live += model.len();
        for k in 0..3000u16 {
            if let Some(got) = get(&t, k) {
                assert_eq!(Some(&got), model.get(&k), "key {k} after a crash");
                kept += 1;
            }
        }
    }
    println!(
        "crash while merging: {kept} of {live} live keys served, {from_log} log objects replayed"
    );
    assert!(kept > 0, "some sets had nothing staged at some crash");
    if LOG.with(Cell::get) > 0 {
        assert!(from_log > 0, "the log's objects are replayed");
    }
}

/// A recorded CAS ceiling survives a kill, a clean close after it and a fresh generation:
/// every later open continues above it.
#[test]
fn a_cas_ceiling_survives_every_kind_of_stop() {
    let dev = device(64);
    let t = open(&dev);
    assert_eq!(t.recovered().last_cas, 0);
    t.reserve_cas(1_000).unwrap();
    t.reserve_cas(500).unwrap();
    let killed = dev.image();
    drop(t);
    let t = open(&Arc::new(MemoryDevice::from_image("k", killed)));
    assert_eq!(
        t.recovered().last_cas,
        1_000,
        "a kill continues above the ceiling"
    );
    drop(t);
    // A clean close with a smaller counter keeps the ceiling; one raised after close too.
    let dev = device(64);
    let t = open(&dev);
    t.reserve_cas(3_000).unwrap();
    t.close(2_500, None).unwrap();
    t.reserve_cas(4_000).unwrap();
    drop(t);
    let t = open(&dev);
    assert_eq!(t.recovered().last_cas, 4_000);
    assert_eq!(stat(&t, "small_restart_clean"), 1);
    drop(t);
    // A resized file starts a fresh generation but keeps counting above the ceiling.
    let mut image = dev.image();
    image.resize(image.len() + 8 * 4096, 0);
    let t = open(&Arc::new(MemoryDevice::from_image("r", image)));
    assert!(!t.recovered().kept);
    assert_eq!(t.recovered().last_cas, 4_000);
}

/// A memory device whose superblock writes (page 0) fail while `fail` is set: the log's
/// head cannot be recorded.
struct NoSuperblock {
    inner: Arc<MemoryDevice>,
    fail: std::sync::atomic::AtomicBool,
}

impl Device for NoSuperblock {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        if off == 0 && self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(5));
        }
        self.inner.write_at(buf, off)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
}

/// The log's head could not be recorded (superblock writes failing) while a set was merged:
/// the page's watermark stays at the recorded head, so after a kill the next run's log
/// objects of that set (appended from the recorded head on) are replayed over the page, not
/// hidden behind it — and a kill after the failure serves nothing older either.
#[test]
fn with_a_log_a_failed_head_record_never_hides_a_newer_log_object() {
    with_log(16, || {
        let dev = device(64);
        let w = Arc::new(NoSuperblock {
            inner: dev.clone(),
            fail: false.into(),
        });
        let log = LOG.with(Cell::get);
        let cfg = SmallConfig {
            log_fraction: (log as f64 + 0.5) / (dev.len() / 4096 - 1) as f64,
            ..cfg()
        };
        let t = SmallSets::with_device(w.clone(), cfg).expect("open");
        for k in 0..60 {
            assert!(t.insert(&key(k), &value(k, 1), meta(k, 1)));
        }
        t.flush_staged();
        w.fail.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(t.insert(&key(7), &value(7, 2), meta(7, 2)));
        t.flush_to_log(); // the head is not recorded: the set stays dirty
        t.flush_staged(); // merged into its page anyway (watermark: the recorded head)
        assert!(stat(&t, "small_io_errors") > 0);
        assert_eq!(get(&t, 7), Some((value(7, 2), meta(7, 2))));
        let image = dev.image();
        drop(t);
        // A kill now: the page's copy, or a miss; never version 1.
        let d = Arc::new(MemoryDevice::from_image("killed", image));
        let t = open(&d);
        for k in 0..60 {
            if let Some(got) = get(&t, k) {
                let v = if k == 7 { 2 } else { 1 };
                assert_eq!(
                    got,
                    (value(k, v), meta(k, v)),
                    "key {k} after the first kill"
                );
            }
        }
        // The next run logs a newer version of the key, and is killed too.
        assert!(t.insert(&key(7), &value(7, 3), meta(7, 3)));
        t.flush_to_log();
        drop(t);
        let t = open(&d);
        assert_eq!(stat(&t, "small_recovered_log_lost_pages"), 0);
        match get(&t, 7) {
            None => {}
            Some(got) => assert_eq!(
                got,
                (value(7, 3), meta(7, 3)),
                "never the page's older copy"
            ),
        }
        for k in 0..60 {
            if let Some(got) = get(&t, k) {
                let v = match k {
                    7 => 3,
                    _ => 1,
                };
                assert_eq!(
                    got,
                    (value(k, v), meta(k, v)),
                    "key {k} after the second kill"
                );
            }
        }
    });
}

/// A set page damaged at open: its watermark is unknown, so the set is emptied and none of
/// its log objects is replayed (one of them may be older than what the page had).
#[test]
fn with_a_log_a_damaged_set_page_is_emptied_with_its_log_objects() {
    with_log(16, || {
        let dev = device(64);
        let t = open(&dev);
        for k in 0..100 {
            assert!(t.insert(&key(k), &value(k, 1), meta(k, 1)));
        }
        t.flush_staged();
        for k in 0..20 {
            assert!(t.insert(&key(k), &value(k, 2), meta(k, 2)));
        }
        t.flush_to_log();
        drop(t);
        // Damage every set page (page 0 superblock, page 1 the dirty map, then the sets).
        for set in 0..64u64 {
            dev.poke((2 + set) * 4096 + 200, &[0xa5; 8]);
        }
        let t = open(&dev);
        assert_eq!(stat(&t, "small_recovered_dirty_sets"), 64);
        assert_eq!(stat(&t, "small_recovered_log_items"), 0);
        for k in 0..100 {
            assert_eq!(get(&t, k), None, "key {k}: its set page was damaged");
        }
    });
}
