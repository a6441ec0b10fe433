//! Unit tests of `journal`.
use super::*;
use crate::io::memory::MemoryDevice;

const SEG: u64 = 4 * PAGE;

fn journal(dev: &Arc<MemoryDevice>, mode: JournalMode) -> Journal {
    let d: Arc<dyn Device> = dev.clone();
    Journal::new(d, PAGE, SEG, [5; 16], mode, Arc::default())
}

fn entry(key_id: u64, version: u64) -> Entry {
    Entry {
        kind: 2,
        flags: 0,
        key_id,
        version,
        exptime: 0,
    }
}

#[test]
fn entries_survive_until_the_next_epoch() {
    let dev = Arc::new(MemoryDevice::new("j", PAGE + SEG));
    let j = journal(&dev, JournalMode::Write);
    assert!(j.commit(entry(1, 1), true).is_err(), "not started");
    j.begin().unwrap();
    for v in 0..10 {
        assert_eq!(j.commit(entry(v, v + 100), true).unwrap(), None);
    }
    // A process crash: the device (page cache) keeps what was written.
    let again = journal(&dev, JournalMode::Write);
    let rec = again.recover(false).unwrap();
    assert!(rec.trusted, "{}", rec.why);
    assert_eq!(rec.entries.len(), 10);
    assert_eq!(rec.entries[3], entry(3, 103));
    again.begin().unwrap();
    again.close(true);
    let third = journal(&dev, JournalMode::Write);
    let rec = third.recover(false).unwrap();
    assert!(
        rec.trusted && rec.entries.is_empty(),
        "a new epoch retires them"
    );
}

#[test]
fn another_boot_without_sync_is_untrusted() {
    let dev = Arc::new(MemoryDevice::new("j", PAGE + SEG));
    let j = journal(&dev, JournalMode::Write);
    j.begin().unwrap();
    j.commit(entry(1, 5), true).unwrap();
    let mut other = journal(&dev, JournalMode::Write);
    other.boot_id = [0xee; 16];
    let rec = other.recover(false).unwrap();
    assert!(!rec.trusted, "a reboot loses page-cache entries");
    // The same in sync mode is trusted: entries were synced before acknowledgement.
    let dev = Arc::new(MemoryDevice::new("j", PAGE + SEG));
    let j = journal(&dev, JournalMode::Sync);
    j.begin().unwrap();
    let t = j.commit(entry(1, 5), true).unwrap().unwrap();
    assert!(!j.is_synced(t.0));
    let (_, owed) = j.wait_work(Duration::ZERO);
    j.sync_upto(owed.unwrap()).unwrap();
    assert!(j.is_synced(t.0));
    j.wait_synced(t);
    let mut other = journal(&dev, JournalMode::Sync);
    other.boot_id = [0xee; 16];
    assert!(other.recover(false).unwrap().trusted);
}

#[test]
fn the_mode_changes_while_serving_and_the_run_record_follows() {
    let dev = Arc::new(MemoryDevice::new("j", PAGE + SEG));
    let j = journal(&dev, JournalMode::Write);
    j.begin().unwrap();
    assert_eq!(j.commit(entry(1, 1), true).unwrap(), None);
    j.set_mode(JournalMode::Sync).unwrap();
    let t = j
        .commit(entry(2, 2), true)
        .unwrap()
        .expect("a ticket in sync mode");
    let run = |dev: &Arc<MemoryDevice>| {
        let mut other = journal(dev, JournalMode::Write);
        other.boot_id = [0xee; 16];
        other.recover(false).unwrap().trusted
    };
    assert!(run(&dev), "sync mode: a reboot keeps the journal trusted");
    // Leaving sync mode releases the commit awaiting its sync.
    j.set_mode(JournalMode::Write).unwrap();
    assert!(j.is_synced(t.0));
    assert!(!run(&dev), "write mode: a reboot makes it untrusted");
    j.set_mode(JournalMode::Off).unwrap();
    assert_eq!(j.commit(entry(3, 3), true).unwrap(), None);
    let rec = journal(&dev, JournalMode::Write).recover(false).unwrap();
    assert_eq!(rec.entries.len(), 2, "off: nothing more journaled");
}

#[test]
fn a_full_ring_waits_for_retirement_and_uncovered_entries_hold_it() {
    let dev = Arc::new(MemoryDevice::new("j", PAGE + SEG));
    let j = journal(&dev, JournalMode::Write);
    j.begin().unwrap();
    let cap = j.capacity();
    j.commit(entry(0, 1), false).unwrap();
    for v in 1..cap {
        j.commit(entry(v, v + 1), true).unwrap();
    }
    let (asked, _) = j.wait_work(Duration::ZERO);
    assert!(asked, "past half the ring a retiring flush is asked for");
    let head = j.head();
    j.retire(head, &[]);
    assert_eq!(j.uncovered().len(), 1, "still uncovered");
    // Entry 0 is uncovered: nothing retired, the next commit finds the ring full and
    // gives up after FULL_WAIT (the run turns untrusted).
    let t0 = Instant::now();
    j.commit(entry(99, 999), true).unwrap();
    assert!(t0.elapsed() >= FULL_WAIT);
    j.close(true);
    let rec = journal(&dev, JournalMode::Write).recover(false).unwrap();
    assert!(!rec.trusted);
    // Once the log takes it, everything retires.
    let dev = Arc::new(MemoryDevice::new("j", PAGE + SEG));
    let j = journal(&dev, JournalMode::Write);
    j.begin().unwrap();
    j.commit(entry(0, 1), false).unwrap();
    let head = j.head();
    j.retire(head, &[0]);
    assert!(j.uncovered().is_empty());
    for v in 1..=cap {
        j.commit(entry(v, v + 1), true).unwrap();
    }
}
