//! Warm restart after `kill -9`: a child process (this test binary re-run with an env var)
//! appends records to a real file with O_DIRECT, flushing every 50 and printing
//! `durable N` after each completed flush; the parent SIGKILLs it at a varying moment,
//! reopens the file and checks that every record acknowledged durable is recovered and reads
//! back byte-exact, and that nothing recovered is wrong.
mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use flashtier_flash::{kind, DeviceSpec, DropAll, Error, Flash, FlashConfig, RecordWrite};

const ENV: &str = "FLASH_KILL9_CHILD";

fn value(id: u64) -> Vec<u8> {
    let len = 100 + (id.wrapping_mul(7919) % 3000) as usize;
    (0..len)
        .map(|j| (id.wrapping_mul(31) as usize + j) as u8)
        .collect()
}

fn cfg() -> FlashConfig {
    FlashConfig {
        flush_interval: Some(Duration::from_millis(2)),
        ..FlashConfig::for_capacity(64 << 20)
    }
}

fn spec(path: PathBuf) -> DeviceSpec {
    common::file_spec(&path, 64 << 20)
}

/// Runs only as the child (when the env var is set): write until killed or full.
#[test]
fn child_writer() {
    let Some(path) = std::env::var_os(ENV) else {
        return;
    };
    let (flash, _) =
        Flash::open_specs(&[spec(path.into())], cfg(), Arc::new(DropAll), |_| {}).unwrap();
    for id in 0u64.. {
        let v = value(id);
        let w = RecordWrite {
            kind: kind::PUT,
            key_id: id,
            version: id,
            flags: 0,
            exptime: 0,
            key: &id.to_le_bytes(),
            value: &v,
        };
        match flash.append_blocking((id % 2) as u8, &w, Duration::from_secs(10)) {
            Ok(_) => {}
            Err(Error::NoSpace) => break,
            Err(e) => panic!("append: {e}"),
        }
        if id % 50 == 49 {
            flash.flush().wait().unwrap();
            println!("durable {}", id + 1);
        }
    }
}

#[test]
fn kill_9_keeps_every_flushed_record() {
    if std::env::var_os(ENV).is_some() {
        return;
    }
    let dir = common::disk_dir();
    let path = dir.join(format!("flashtier-kill9-{}", std::process::id()));
    for trial in 0..4u64 {
        let _ = std::fs::remove_file(&path);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
            .env(ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut durable = 0u64;
        let kill_after = 3 + trial * 9;
        let mut seen = 0;
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(n) = line.strip_prefix("durable ") {
                durable = n.parse().unwrap();
                seen += 1;
                if seen == kill_after {
                    break;
                }
            }
        }
        if seen == 0 {
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            if err.contains("O_DIRECT") {
                eprintln!("SKIPPED: O_DIRECT unsupported under {}", dir.display());
                return;
            }
            panic!("child wrote nothing: {err}");
        }
        child.kill().unwrap(); // SIGKILL
                               // Flushes acknowledged before the kill landed are durable too.
        for line in lines {
            if let Some(n) = line.unwrap().strip_prefix("durable ") {
                durable = n.parse().unwrap();
            }
        }
        child.wait().unwrap();

        let mut recovered = Vec::new();
        let (flash, info) =
            Flash::open_specs(&[spec(path.clone())], cfg(), Arc::new(DropAll), |m| {
                recovered.push(m)
            })
            .unwrap();
        assert!(!info.formatted);
        let mut ids: Vec<u64> = recovered.iter().map(|m| m.key_id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), recovered.len(), "no record recovered twice");
        for id in 0..durable {
            assert!(
                ids.binary_search(&id).is_ok(),
                "trial {trial}: durable record {id} of {durable} lost"
            );
        }
        for m in &recovered {
            let r = flash.read(m.location).wait().unwrap();
            assert_eq!(r.header.key_id, m.key_id);
            assert_eq!(&r.value[..], &value(m.key_id)[..]);
        }
        eprintln!(
            "trial {trial}: {durable} acknowledged durable, {} recovered",
            recovered.len()
        );
        flash.close().unwrap();
    }
    let _ = std::fs::remove_file(&path);
}
