//! The small-object tier across restarts of the real binary (`--small-item-max 200
//! --small-flash`): after SIGTERM every key is its last value (deleted ones a miss), with
//! or without the flash log beside it; after `kill -9` (alone and beside the flash log) no
//! deleted or replaced value comes back although the tier's pages still hold the versions
//! the killed run replaced, and the sets the killed run did not change are kept; after
//! `kill -9` with nothing staged, the tier's log is replayed and nothing on flash is lost.
mod common;
use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use common::{get_flags_value, read_until, scratch_dir, stats_section, value_of, Server};

/// Keys (~5 MB of items); 4 MiB of RAM holds part of them, the rest reach the tier's pages.
const N: u32 = 30_000;
/// Commands sent before reading their replies.
const BATCH: u32 = 200;

fn value(key: u32, version: u32) -> Vec<u8> {
    let len = 20 + (key as usize * 31 + version as usize * 7) % 170;
    let seed = key as usize * 131 + version as usize;
    (0..len)
        .map(|j| b'a' + ((seed + j * 7) % 26) as u8)
        .collect()
}

fn key(k: u32) -> String {
    format!("small:{k}")
}

/// What the test last told the server about each key: `Some(version)` or deleted.
type Model = HashMap<u32, Option<u32>>;

/// Pipelined `set`s of (key, version), `BATCH` at a time.
fn set_all(c: &mut TcpStream, model: &mut Model, items: impl IntoIterator<Item = (u32, u32)>) {
    let items: Vec<(u32, u32)> = items.into_iter().collect();
    for chunk in items.chunks(BATCH as usize) {
        let mut req = Vec::new();
        for &(k, v) in chunk {
            let val = value(k, v);
            req.extend_from_slice(format!("set {} {v} 0 {}\r\n", key(k), val.len()).as_bytes());
            req.extend_from_slice(&val);
            req.extend_from_slice(b"\r\n");
            model.insert(k, Some(v));
        }
        c.write_all(&req).expect("write");
        let want = b"STORED\r\n".repeat(chunk.len());
        assert_eq!(read_until(c, &want), want);
    }
}

/// Pipelined `delete`s.
fn delete_all(c: &mut TcpStream, model: &mut Model, keys: impl IntoIterator<Item = u32>) {
    let keys: Vec<u32> = keys.into_iter().collect();
    for chunk in keys.chunks(BATCH as usize) {
        let mut req = Vec::new();
        for &k in chunk {
            req.extend_from_slice(format!("delete {}\r\n", key(k)).as_bytes());
            model.insert(k, None);
        }
        c.write_all(&req).expect("write");
        let mut replies = 0;
        let mut got = Vec::new();
        while replies < chunk.len() {
            got.extend(read_until(c, b"\r\n"));
            replies = got.windows(2).filter(|w| w == b"\r\n").count();
        }
    }
}

/// The version served for `k` (its flags), its bytes checked; `None` on a miss.
fn served(c: &mut TcpStream, k: u32) -> Option<u32> {
    let (flags, body) = get_flags_value(c, &key(k))?;
    assert!(
        body == value(k, flags),
        "{}: wrong bytes for version {flags}",
        key(k)
    );
    Some(flags)
}

fn small_stat(c: &mut TcpStream, name: &str) -> u64 {
    value_of(&stats_section(c, "small"), name)
        .parse()
        .expect("number")
}

/// Wait (up to 20 s) until the small tier's write-back queue and staging are both empty:
/// every small version written so far is in the log or on a page, so a kill now loses
/// nothing the test counts on.
fn wait_until_taken(c: &mut TcpStream) {
    let mut left = (u64::MAX, u64::MAX);
    for _ in 0..400 {
        left = (
            small_stat(c, "small_write_back_queue"),
            small_stat(c, "small_staged_items"),
        );
        if left == (0, 0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        left,
        (0, 0),
        "the write-back and the flusher took everything"
    );
}

fn args(dir: &Path, flash: bool) -> Vec<String> {
    let mut a: Vec<String> = [
        "--memory",
        "4MiB",
        "--small-item-max",
        "200",
        "--small-flash",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push(format!("{}:64MiB", dir.join("small.bin").display()));
    if flash {
        a.push("--flash".into());
        a.push(format!("{}:128MiB", dir.join("flash.bin").display()));
    }
    a
}

/// Every key at version 1, then deletes, overwrites and re-sets of deleted keys.
fn churn(c: &mut TcpStream, model: &mut Model, round: u32) {
    set_all(c, model, (0..N).map(|k| (k, round * 10 + 1)));
    delete_all(c, model, (0..N).filter(|k| k % 7 == round % 7));
    set_all(
        c,
        model,
        (0..N)
            .filter(|k| k % 5 == 0 || k % 49 == round % 7)
            .map(|k| (k, round * 10 + 2)),
    );
    delete_all(c, model, (0..N).filter(|k| k % 13 == 3));
}

fn clean_restart_keeps_every_key(flash: bool) {
    let dir = scratch_dir(if flash {
        "small-sigterm-flash"
    } else {
        "small-sigterm"
    });
    let a = args(&dir, flash);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut server = Server::start(&a);
    let mut c = server.connect();
    let mut model = Model::new();
    churn(&mut c, &mut model, 0);
    let inserts = small_stat(&mut c, "small_inserts");
    assert!(
        inserts > u64::from(N / 4),
        "{inserts} items went to the small tier"
    );
    let status = server
        .terminate(Duration::from_secs(60))
        .expect("exited in time");
    assert!(status.success(), "exit status {status:?}");
    drop(server);

    let server = Server::start(&a);
    let mut c = server.connect();
    assert_eq!(small_stat(&mut c, "small_restart_clean"), 1);
    assert!(small_stat(&mut c, "small_recovered_items") > u64::from(N / 2));
    assert_eq!(small_stat(&mut c, "small_corrupt_pages"), 0);
    for (k, want) in &model {
        assert_eq!(served(&mut c, *k), *want, "{} after SIGTERM", key(*k));
    }
    // Changes after the restart are kept by the next clean stop too.
    churn(&mut c, &mut model, 1);
    let mut server = server;
    assert!(server.terminate(Duration::from_secs(60)).is_some());
    drop(server);
    let server = Server::start(&a);
    let mut c = server.connect();
    for (k, want) in &model {
        assert_eq!(
            served(&mut c, *k),
            *want,
            "{} after a second SIGTERM",
            key(*k)
        );
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_keeps_every_small_item_and_delete() {
    clean_restart_keeps_every_key(false);
}

#[test]
fn sigterm_keeps_every_small_item_and_delete_beside_the_flash_log() {
    clean_restart_keeps_every_key(true);
}

#[test]
fn kill9_never_serves_a_deleted_or_replaced_small_item() {
    kill9_keeps_no_replaced_value(false);
}

/// `kill -9` once the flusher has appended every change to the tier's on-flash log (nothing
/// staged): the restart replays the log, empties no set, and serves every small key the
/// killed run had on flash — replaced ones at their new version, deleted ones a miss.
#[test]
fn kill9_after_the_log_took_every_change_replays_it() {
    let dir = scratch_dir("small-kill9-log");
    let a = args(&dir, false);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut server = Server::start(&a);
    let mut c = server.connect();
    let mut model = Model::new();
    churn(&mut c, &mut model, 0);
    assert!(server.terminate(Duration::from_secs(60)).is_some());
    drop(server);
    let server = Server::start(&a);
    let mut c = server.connect();
    set_all(
        &mut c,
        &mut model,
        (0..N).filter(|k| k % 10 == 1).map(|k| (k, 12)),
    );
    delete_all(&mut c, &mut model, (0..N).filter(|k| k % 10 == 2));
    // The flusher appends what is staged every 100 ms; the write-back inserts the small
    // RAM versions after its 2 s window (wait for both, or a late insert could land
    // between these stats and the kill).
    wait_until_taken(&mut c);
    let on_flash = small_stat(&mut c, "small_items");
    let logged = small_stat(&mut c, "small_log_items");
    assert!(logged > 0, "the killed run's changes are in the log");
    drop(server); // SIGKILL

    let server = Server::start(&a);
    let mut c = server.connect();
    assert_eq!(small_stat(&mut c, "small_restart_clean"), 0);
    assert_eq!(small_stat(&mut c, "small_recovered_dirty_sets"), 0);
    assert_eq!(small_stat(&mut c, "small_recovered_log_lost_pages"), 0);
    let replayed = small_stat(&mut c, "small_recovered_log_items");
    assert_eq!(replayed, logged, "every log object is back in the index");
    assert_eq!(
        small_stat(&mut c, "small_recovered_items") + replayed,
        on_flash,
        "every object on flash is kept"
    );
    let mut kept = 0;
    for (k, want) in &model {
        if let Some(v) = served(&mut c, *k) {
            assert_eq!(
                Some(v),
                *want,
                "{}: served version {v} after kill -9",
                key(*k)
            );
            kept += 1;
        }
    }
    println!("kill -9 after the log took every change: {kept} of {} keys served, {replayed} log objects replayed", model.len());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Small items RAM still holds reach the tier after the write-back window (2 s without a
/// flash log), so a `kill -9` once that passed keeps every one of them (before: the tier
/// got an item only when RAM evicted it, and a kill lost every small item still in RAM).
#[test]
fn kill9_keeps_small_items_ram_held_past_the_write_back_window() {
    let dir = scratch_dir("small-kill9-writeback");
    let a = args(&dir, false);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let server = Server::start(&a);
    let mut c = server.connect();
    let mut model = Model::new();
    set_all(&mut c, &mut model, (0..N).map(|k| (k, 3)));
    let in_ram = value_of(&stats_section(&mut c, ""), "curr_items")
        .parse::<u64>()
        .expect("number");
    assert!(in_ram > 1000, "RAM holds part of the keys ({in_ram})");
    // Wait for the window, the write-back and the flusher's append to the log.
    wait_until_taken(&mut c);
    assert!(small_stat(&mut c, "small_written_back") >= in_ram / 2);
    drop(server); // SIGKILL

    let server = Server::start(&a);
    let mut c = server.connect();
    let mut kept = 0;
    for k in 0..N {
        match served(&mut c, k) {
            Some(v) => {
                assert_eq!(v, 3, "{}: served version {v}", key(k));
                kept += 1;
            }
            None => panic!("{}: lost although written back before the kill", key(k)),
        }
    }
    println!("kill -9 past the write-back window: {kept} of {N} small keys served ({in_ram} were in RAM)");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kill9_never_serves_a_deleted_or_replaced_small_item_beside_the_flash_log() {
    kill9_keeps_no_replaced_value(true);
}

fn kill9_keeps_no_replaced_value(flash: bool) {
    let dir = scratch_dir(if flash {
        "small-kill9-flash"
    } else {
        "small-kill9"
    });
    let a = args(&dir, flash);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    // A clean stop first, so the tier's pages hold round 0's versions when the next run
    // replaces and deletes some of them and is killed.
    let mut server = Server::start(&a);
    let mut c = server.connect();
    let mut model = Model::new();
    churn(&mut c, &mut model, 0);
    assert!(server.terminate(Duration::from_secs(60)).is_some());
    drop(server);
    let server = Server::start(&a);
    let mut c = server.connect();
    assert_eq!(small_stat(&mut c, "small_restart_clean"), 1);
    let before = model.clone();
    set_all(
        &mut c,
        &mut model,
        (0..N).filter(|k| k % 10 == 1).map(|k| (k, 12)),
    );
    delete_all(&mut c, &mut model, (0..N).filter(|k| k % 10 == 2));
    drop(server); // SIGKILL, no clean shutdown

    let server = Server::start(&a);
    let mut c = server.connect();
    assert_eq!(small_stat(&mut c, "small_restart_clean"), 0);
    // The killed run's changes were staged (their sets emptied) or in the log (replayed).
    assert!(
        small_stat(&mut c, "small_recovered_dirty_sets")
            + small_stat(&mut c, "small_recovered_log_items")
            > 0
    );
    let (mut kept, mut untouched, mut untouched_kept) = (0, 0, 0);
    for (k, want) in &model {
        let got = served(&mut c, *k);
        if let Some(v) = got {
            assert_eq!(
                Some(v),
                *want,
                "{}: served version {v} after kill -9 (before the last run: {:?}, then {want:?})",
                key(*k),
                before.get(k)
            );
            kept += 1;
        }
        if k % 10 > 2 && want.is_some() {
            untouched += 1;
            untouched_kept += usize::from(got.is_some());
        }
    }
    println!(
        "kill -9: {kept} of {} small keys served after the restart; {untouched_kept} of \
         {untouched} the killed run did not touch",
        model.len()
    );
    assert!(
        untouched_kept * 4 > untouched,
        "the sets the killed run did not change are kept: {untouched_kept} of {untouched}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
