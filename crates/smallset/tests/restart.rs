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
    }
}

thread_local! {
    /// Log pages the devices of this thread's test get (0: no log; `with_log`).
    static LOG: Cell<u64> = const { Cell::new(0) };
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
/// its set are staged must leave the set dirty.
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

/// A kill while the log holds objects: their sets restart empty, every other set is kept,
/// and nothing deleted or replaced through the log comes back.
#[test]
fn with_a_log_a_kill_empties_the_sets_it_held_and_keeps_the_others() {
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
        let dropped = stat(&t, "small_recovered_dirty_sets");
        assert!((1..=3).contains(&dropped), "{dropped} dirty sets");
        assert_eq!(stat(&t, "small_log_items"), 0, "the log starts empty");
        assert_eq!(get(&t, 3), None);
        assert_eq!(get(&t, 4), None);
        assert_eq!(get(&t, 250), None);
        let kept = (0..200).filter(|&k| get(&t, k).is_some()).count();
        assert!(kept >= 190, "only {kept} of 200 kept");
        for k in 0..200 {
            if let Some(got) = get(&t, k) {
                assert_eq!(got, (value(k, 1), meta(k, 1)));
            }
        }
    });
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
    let mut kept = 0;
    for (image, model) in images {
        let d = Arc::new(MemoryDevice::from_image("crashed", image));
        let t = open(&d);
        for k in 0..3000u16 {
            if let Some(got) = get(&t, k) {
                assert_eq!(Some(&got), model.get(&k), "key {k} after a crash");
                kept += 1;
            }
        }
    }
    assert!(kept > 0, "some sets had nothing staged at some crash");
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
