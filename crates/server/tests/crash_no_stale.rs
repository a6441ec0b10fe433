//! A cache may lose; it never lies — after `kill -9` right after acknowledgements.
//!
//! Trials on one flash file, each: restart the real binary (warm), check every key against
//! what was last acknowledged, put back some lost keys and let them reach flash, then delete
//! and overwrite keys whose versions are on flash (some trials end with `flush_all`) and
//! `kill -9` the server within a few milliseconds of the last acknowledgement. The next
//! restart must serve, for every key, its last acknowledged value or a miss: never an older
//! value, never a deleted key. Keys put back and left alone must be served exactly.
//! `FLASHTIER_CRASH_TRIALS=N` runs N trials (default 100); `FLASHTIER_CRASH_JOURNAL=MODE`
//! sets the `journal_mode` knob (default `write`; `off` shows what the journal prevents).
mod common;
use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{get_flags_value, read_until, scratch_dir, Rng, Server};

const KEYS: usize = 300;
const VALUE: usize = 2500;

fn value_of(key: &str, version: u32) -> Vec<u8> {
    let seed = key
        .bytes()
        .fold(version as usize, |a, b| a.wrapping_mul(31) + b as usize);
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
    let r = read_until(c, b"\r\n");
    assert!(r == b"DELETED\r\n" || r == b"NOT_FOUND\r\n", "{r:?}");
}

/// What a key last had acknowledged.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Acked {
    /// Deleted or flushed (or found missing, which a cache may do).
    Gone,
    /// This version, acknowledged before the previous kill's flash settle: must be served.
    Settled(u32),
    /// This version, acknowledged just before the kill: served or a miss.
    Recent(u32),
}

#[test]
fn kill_9_after_deletes_and_overwrites_serves_nothing_stale() {
    let trials: usize = std::env::var("FLASHTIER_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let dir = scratch_dir("crash-no-stale");
    let spec = format!("{}:64MiB", dir.join("flash.bin").display());
    // A short write-back window and flush interval so that keys reach flash quickly.
    let mode = format!(
        "journal_mode={}",
        std::env::var("FLASHTIER_CRASH_JOURNAL").unwrap_or_else(|_| "write".into())
    );
    let args = [
        "--memory",
        "4MiB",
        "--flash",
        &spec,
        "--knob",
        "write_back_ms=20",
        "--knob",
        "flush_interval_ms=20",
        "--knob",
        &mode,
    ];
    let mut rng = Rng(0x5eed_c0de_0000_0025);
    let mut model: HashMap<String, Acked> = (0..KEYS)
        .map(|i| (format!("key:{i}"), Acked::Gone))
        .collect();
    let mut next_version = 1u32;
    let (mut exact, mut lost) = (0u64, 0u64);
    let mut mutated = 0u64;
    for trial in 0..trials {
        let server = Server::start(&args);
        let mut c = server.connect();
        // Check what the last run acknowledged.
        for (k, acked) in model.iter_mut() {
            let got = get_flags_value(&mut c, k).map(|(flags, body)| {
                assert!(body == value_of(k, flags), "{k}: bytes of v{flags} wrong");
                flags
            });
            match (*acked, got) {
                (Acked::Gone, None) => {}
                (Acked::Gone, Some(v)) => panic!("trial {trial}: {k} was deleted, served v{v}"),
                (Acked::Settled(v) | Acked::Recent(v), Some(g)) if g == v => exact += 1,
                (Acked::Recent(_), None) => {
                    lost += 1;
                    *acked = Acked::Gone;
                }
                (Acked::Settled(v), None) => {
                    panic!("trial {trial}: {k} v{v} was on flash long before the kill, missing")
                }
                (Acked::Settled(v) | Acked::Recent(v), Some(g)) => {
                    panic!("trial {trial}: {k}: acknowledged v{v}, served v{g} (stale)")
                }
            }
            if let Acked::Recent(v) = *acked {
                *acked = Acked::Settled(v);
            }
        }
        // Put back some missing keys and let them reach flash.
        let keys: Vec<String> = model.keys().cloned().collect();
        for k in &keys {
            if model[k] == Acked::Gone && rng.chance(60) {
                set(&mut c, k, next_version);
                model.insert(k.clone(), Acked::Settled(next_version));
                next_version += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(400));
        // Delete and overwrite keys on flash, then kill right after the last reply.
        for k in &keys {
            if let Acked::Settled(_) = model[k] {
                match rng.below(4) {
                    0 => {
                        delete(&mut c, k);
                        model.insert(k.clone(), Acked::Gone);
                        mutated += 1;
                    }
                    1 => {
                        set(&mut c, k, next_version);
                        model.insert(k.clone(), Acked::Recent(next_version));
                        next_version += 1;
                        mutated += 1;
                    }
                    _ => {}
                }
            }
        }
        if trial % 10 == 9 {
            c.write_all(b"flush_all\r\n").expect("write");
            assert_eq!(read_until(&mut c, b"\r\n"), b"OK\r\n");
            for a in model.values_mut() {
                *a = Acked::Gone;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(3000) as u64));
        drop(server); // SIGKILL
    }
    println!(
        "{trials} kill -9 trials: {mutated} deletes and overwrites of keys on flash; at the \
         restarts {exact} values served exactly, {lost} recent writes lost (misses), 0 stale \
         values, 0 deleted keys back"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
