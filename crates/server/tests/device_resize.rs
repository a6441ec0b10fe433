//! A flash or cache file formatted for one size and started with another is refused (exit
//! 78) with one line that names both sizes in human units and the two ways out — the old
//! size, which keeps the data, or `--reformat-on-mismatch` — and leaves the file as it was;
//! `--check-config` finds the same. The old size (as suggested) restarts warm. On the kv face
//! `--reformat-on-mismatch` starts empty at the new size with the segment size chosen for
//! it; on the block face it first writes every dirty block back to the backing (the cache
//! is opened at its old size for that), then starts empty at the new size.
mod block_common;
mod common;

use std::process::{Command, Output};
use std::time::Duration;

use block_common::{num, BlockServer, Rng};
use bytes::Bytes;
use common::{roundtrip, scratch_dir, stats_section, value_of, Server};
use flashtier_backend::BlockBackend;

fn flashtier(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashtier"))
        .args(args)
        .output()
        .expect("run flashtier")
}

/// A refused start: exit status 78, one line naming both sizes, the size that keeps the
/// data and the flag that reformats.
fn assert_resize_refused(out: &Output, flag: &str, path: &str, old: &str, new: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    for needle in [
        format!("formatted for {old}, now {new} is asked"),
        format!("start with {flag} {path}:{old}"),
        "--reformat-on-mismatch".to_string(),
        "reformat_on_mismatch = true".to_string(),
    ] {
        assert!(err.contains(&needle), "{needle:?} missing: {err}");
    }
}

#[test]
fn kv_refuses_a_new_size_then_keeps_the_old_or_reformats() {
    let dir = scratch_dir("kv-resize");
    let path = dir.join("flash.bin");
    let f = path.to_str().expect("utf-8");
    let (mut server, _) = Server::start_in(&["--flash", &format!("{f}:32M")], None);
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"set k 0 0 2\r\nhi\r\n", b"\r\n"),
        "STORED\r\n"
    );
    drop(c);
    // A clean stop writes what RAM holds to flash.
    assert!(server.terminate(Duration::from_secs(20)).is_some());
    let before = std::fs::read(&path).expect("read flash file");

    let out = flashtier(&["kv", "-p", "0", "--flash", &format!("{f}:128M")]);
    assert_resize_refused(&out, "--flash", f, "32MiB", "128MiB");
    assert!(
        std::fs::read(&path).expect("read") == before,
        "a refused file is unchanged"
    );
    let out = flashtier(&[
        "kv",
        "-p",
        "0",
        "--flash",
        &format!("{f}:128M"),
        "--check-config",
    ]);
    assert_resize_refused(&out, "--flash", f, "32MiB", "128MiB");

    // The size the message suggests: warm, the item is there.
    let (server, _) = Server::start_in(&["--flash", &format!("{f}:32MiB")], None);
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"get k\r\n", b"END\r\n"),
        "VALUE k 0 2\r\nhi\r\nEND\r\n"
    );
    drop(c);
    drop(server);

    // Reformat at the new size: empty, 128 MiB, the segment size a fresh 128 MiB file gets.
    let args = [
        "--flash".to_string(),
        format!("{f}:128M"),
        "--reformat-on-mismatch".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (server, _) = Server::start_in(&args, None);
    let mut c = server.connect();
    assert_eq!(roundtrip(&mut c, b"get k\r\n", b"END\r\n"), "END\r\n");
    let ext = stats_section(&mut c, "extstore");
    assert_eq!(value_of(&ext, "extstore_segment_size"), "524288");
    assert_eq!(value_of(&ext, "flash_superblocks_lost"), "1");
    assert!(
        server
            .log_lines("formatting it: the cache starts empty")
            .iter()
            .all(|l| l.contains(" WARN ")),
        "an asked-for reformat is a warning"
    );
    drop(c);
    drop(server);
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 128 << 20);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_writes_dirty_blocks_back_before_it_reformats() {
    const SIZE: usize = 8 << 20;
    let dir = scratch_dir("block-resize");
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(SIZE as u64))
        .expect("backing");
    let b = backing.to_str().expect("utf-8");
    let cache = dir.join("cache.img");
    let c = cache.to_str().expect("utf-8");
    // Nothing written back on its own: every write stays dirty on the cache.
    let keep_dirty = [
        "--no-direct-io",
        "--flush-period",
        "0",
        "--seq-threshold-kb",
        "0",
        "--dirty-high-pct",
        "90",
        "--dirty-max-pct",
        "95",
    ];
    let mut server = BlockServer::start(&dir, b, &format!("{c}:16M"), &keep_dirty);
    let client = server.client().await;
    let mut rng = Rng(0x5eed);
    let mut model = vec![0u8; SIZE];
    for _ in 0..300 {
        let off = rng.below(SIZE as u64 / 4096) * 4096;
        let data = rng.bytes(4096);
        client
            .write(off, Bytes::from(data.clone()), false)
            .await
            .expect("write");
        model[off as usize..off as usize + 4096].copy_from_slice(&data);
    }
    client.flush().await.expect("flush");
    let dirty = num(&server.ctl(&["status"]), "dirty_blocks");
    assert!(dirty > 100, "{dirty} dirty blocks");
    drop(client);
    let pid = server.child.id().to_string();
    let term = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(term.expect("kill").success());
    assert!(server.wait_exit().success());
    let zeros = vec![0u8; SIZE];
    assert!(
        std::fs::read(&backing).expect("backing") == zeros,
        "written back before"
    );

    let run = dir.join("run");
    let run = run.to_str().expect("utf-8");
    let base = [
        "block",
        "--backing",
        b,
        "--listen",
        "127.0.0.1:0",
        "--run-dir",
        run,
    ];
    let new = format!("{c}:32M");
    let refused = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(&["--cache", &new, "--admin", "none"]);
        args.extend_from_slice(extra);
        flashtier(&args)
    };
    assert_resize_refused(&refused(&[]), "--cache", c, "16MiB", "32MiB");
    assert_resize_refused(
        &refused(&["--check-config"]),
        "--cache",
        c,
        "16MiB",
        "32MiB",
    );
    assert!(
        std::fs::read(&backing).expect("backing") == zeros,
        "a refusal writes nothing"
    );
    assert_eq!(std::fs::metadata(&cache).expect("stat").len(), 16 << 20);

    // --reformat-on-mismatch: every dirty block reaches the backing, then the cache starts
    // empty at 32 MiB and serves what the backing now holds.
    let mut extra = keep_dirty.to_vec();
    extra.push("--reformat-on-mismatch");
    let server = BlockServer::start(&dir, b, &new, &extra);
    assert!(
        std::fs::read(&backing).expect("backing") == model,
        "dirty blocks lost"
    );
    let stats = server.ctl(&["stats"]);
    assert_eq!(num(&stats, "recovered_dirty_blocks"), 0, "{stats}");
    assert_eq!(num(&stats, "cached_blocks"), 0, "{stats}");
    assert!(num(&stats, "capacity_blocks") > 6000, "{stats}");
    let client = server.client().await;
    let got = client.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..]);
    drop(client);
    drop(server);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
