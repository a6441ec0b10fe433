//! The write-back window's crash rule through the real binary and a real `kill -9`: a value
//! acknowledged more than `write_back_ms` + `flush_interval` before the kill is served; a
//! newer one may be lost (then the key is a miss, never its older value: the overwrite's
//! tombstone is journaled); never a wrong value, never a deleted key back — also when the
//! deleted version was still in its window over an older flash version.
mod common;
use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{get_flags_value, read_until, scratch_dir, Server};

const VALUE: usize = 3000;
/// Items per group; 8 MiB of RAM holds about 2500, so some versions reach flash by eviction
/// and others by the window.
const N: usize = 2000;
const WINDOW_MS: u64 = 3000;
/// The engine's default flush interval.
const FLUSH_MS: u64 = 1000;

fn value_of(key: &str, version: u32) -> Vec<u8> {
    let seed = key
        .bytes()
        .fold(version as usize, |a, b| a * 31 + b as usize);
    (0..VALUE)
        .map(|j| b'a' + ((seed + j * 7) % 26) as u8)
        .collect()
}

fn set(c: &mut TcpStream, key: &str, version: u32) {
    let mut req = format!("set {key} {version} 0 {VALUE}\r\n").into_bytes();
    req.extend_from_slice(&value_of(key, version));
    req.extend_from_slice(b"\r\n");
    c.write_all(&req).expect("write");
    assert_eq!(read_until(c, b"\r\n"), b"STORED\r\n");
}

fn delete(c: &mut TcpStream, key: &str) {
    c.write_all(format!("delete {key}\r\n").as_bytes())
        .expect("write");
    read_until(c, b"\r\n");
}

/// The version served for `key` (its flags), checking the bytes; `None` on a miss.
fn served(c: &mut TcpStream, key: &str) -> Option<u32> {
    let (flags, body) = get_flags_value(c, key)?;
    assert!(
        body == value_of(key, flags),
        "{key}: wrong bytes served for version {flags}"
    );
    Some(flags)
}

#[test]
fn kill9_within_and_beyond_the_write_back_window() {
    let dir = scratch_dir("wb-crash");
    let spec = format!("{}:256MiB", dir.join("flash.bin").display());
    let knob = format!("write_back_ms={WINDOW_MS}");
    let args = ["--memory", "8MiB", "--flash", &spec, "--knob", &knob];
    let server = Server::start(&args);
    let mut c = server.connect();

    // Old: acknowledged long before the kill. `expect` is what must be served.
    let mut expect: HashMap<String, u32> = HashMap::new();
    for i in 0..N {
        let k = format!("old:{i}");
        set(&mut c, &k, 1);
        if i % 4 == 0 {
            set(&mut c, &k, 2); // an overwrite inside the window: only v2 matters
        }
        expect.insert(k.clone(), if i % 4 == 0 { 2 } else { 1 });
    }
    let mut gone = Vec::new();
    for i in 0..N / 10 {
        let k = format!("old-deleted:{i}");
        set(&mut c, &k, 1);
        delete(&mut c, &k);
        gone.push(k);
    }
    std::thread::sleep(Duration::from_millis(WINDOW_MS + FLUSH_MS + 1500));

    // Deletes older than the flush interval but inside the window, of keys on flash: of a
    // clean flash version, and of a dirty version written over an older flash version.
    for i in (0..N).step_by(10) {
        let k = format!("old:{i}");
        if i % 20 == 0 {
            set(&mut c, &k, 3); // dirty over the flash version
        }
        delete(&mut c, &k);
        expect.remove(&k);
        gone.push(k);
    }
    std::thread::sleep(Duration::from_millis(FLUSH_MS + 500));

    // Recent: inside the window at the kill; may be lost, never wrong.
    let mut recent: HashMap<String, (Option<u32>, u32)> = HashMap::new();
    for i in (1..N).step_by(3) {
        let k = format!("old:{i}");
        if let Some(&v) = expect.get(&k) {
            set(&mut c, &k, 7);
            recent.insert(k.clone(), (Some(v), 7));
            expect.remove(&k);
        }
    }
    for i in 0..N / 4 {
        let k = format!("new:{i}");
        set(&mut c, &k, 9);
        recent.insert(k, (None, 9));
    }
    drop(server); // SIGKILL, no clean shutdown

    let server = Server::start(&args);
    let mut c = server.connect();
    for (k, v) in &expect {
        assert_eq!(
            served(&mut c, k),
            Some(*v),
            "{k}: acknowledged beyond the window, must be served"
        );
    }
    for k in &gone {
        assert_eq!(served(&mut c, k), None, "{k}: deleted key came back");
    }
    let (mut newest, mut lost) = (0, 0);
    for (k, (before, now)) in &recent {
        match served(&mut c, k) {
            Some(v) if v == *now => newest += 1,
            None => lost += 1,
            Some(v) => panic!(
                "{k}: served v{v}, the version before the last acknowledged one \
                 ({before:?} -> {now}): stale"
            ),
        }
    }
    println!(
        "kill -9 inside the window: {newest} recent versions survived, {lost} were lost \
         (misses; never the previous value) of {}",
        recent.len()
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
