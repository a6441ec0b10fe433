//! `flashtier block` in front of a backing that fails a fraction of its writes: nbdkit's
//! error filter over a file (`error-pwrite-rate`, on while its error file exists).
//!
//! - 5 % of backing writes fail: `ctl flush` of ~2000 scattered dirty blocks completes within
//!   30 s once it has retried, its status shows `flush_errors`, the last error and the blocks
//!   left while it runs, reads stay right throughout, and afterwards the backing file equals
//!   the cache's view byte for byte.
//! - 2 % fail with a 16 MiB cache: clients keep writing past `dirty_max_pct`; no write takes
//!   longer than `write_stall_max_ms` (plus scheduling slack) — each succeeds or fails with
//!   EIO — and once the errors stop a flush leaves the backing equal to what the client wrote.
//!
//! Skipped, loudly, when nbdkit is not installed.
mod block_common;
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use block_common::{field, num, scratch, BlockServer, Rng};
use bytes::Bytes;
use common::have;
use flashtier_backend::BlockBackend;

const BS: usize = 4096;

/// `nbdkit --filter=error file IMG error=EIO error-pwrite-rate=RATE error-pwrite-file=ERRS`.
struct FlakyBacking {
    child: Child,
    sock: PathBuf,
    errs: PathBuf,
}

impl FlakyBacking {
    fn start(dir: &Path, img: &Path, rate: &str) -> FlakyBacking {
        let sock = dir.join("backing.sock");
        let errs = dir.join("errs");
        let _ = std::fs::remove_file(&sock);
        let child = Command::new("nbdkit")
            .arg("-f")
            .arg("-U")
            .arg(&sock)
            .args(["--filter=error", "file"])
            .arg(img)
            .arg("error=EIO")
            .arg(format!("error-pwrite-rate={rate}"))
            .arg(format!("error-pwrite-file={}", errs.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nbdkit");
        let t0 = Instant::now();
        while !sock.exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "nbdkit did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        FlakyBacking { child, sock, errs }
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock.display())
    }

    fn errors(&self, on: bool) {
        if on {
            std::fs::write(&self.errs, b"").expect("error file");
        } else {
            let _ = std::fs::remove_file(&self.errs);
        }
    }
}

impl Drop for FlakyBacking {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A backing image of `size` random bytes (so a block never written back shows).
fn image(dir: &Path, size: usize, seed: u64) -> (PathBuf, Vec<u8>) {
    let img = dir.join("backing.img");
    let data = Rng(seed).bytes(size);
    std::fs::write(&img, &data).expect("backing image");
    (img, data)
}

async fn read_all(client: &flashtier_nbd::NbdClientBackend, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size);
    for off in (0..size).step_by(1 << 20) {
        let n = (size - off).min(1 << 20);
        out.extend_from_slice(&client.read(off as u64, n as u32).await.expect("read"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_completes_at_five_percent_backing_write_errors() {
    if !have("nbdkit") {
        eprintln!("SKIPPED flush_completes_at_five_percent_backing_write_errors: nbdkit is not installed (scripts/install-deps.sh)");
        return;
    }
    const SIZE: usize = 64 << 20;
    let dir = scratch("faults-flush");
    let (img, mut model) = image(&dir, SIZE, 5);
    let backing = FlakyBacking::start(&dir, &img, "5%");
    let cache = format!("{}:64M", dir.join("cache.img").display());
    let server = BlockServer::start(
        &dir,
        &backing.uri(),
        &cache,
        &["--seq-threshold-kb", "0", "--flush-period", "3600"],
    );
    let client = server.client().await;
    let mut rng = Rng(17);
    for _ in 0..2000 {
        let blk = rng.below((SIZE / BS) as u64) as usize;
        let data = rng.bytes(BS);
        model[blk * BS..(blk + 1) * BS].copy_from_slice(&data);
        client
            .write((blk * BS) as u64, Bytes::from(data), false)
            .await
            .expect("write");
    }
    let dirty = num(&server.ctl(&["status"]), "dirty_blocks");
    assert!(dirty > 1500, "{dirty} dirty blocks");
    backing.errors(true);
    let t0 = Instant::now();
    let started = server.ctl(&["flush"]);
    assert!(field(&started, "flush_id").is_some(), "{started}");
    let mut saw_errors_while_running = false;
    let status = loop {
        let status = server.ctl(&["status"]);
        match field(&status, "flush").as_deref() {
            Some("done") => break status,
            Some("running") => {
                let left = num(&status, "flush_left");
                assert_eq!(
                    left,
                    num(&status, "flush_total") - num(&status, "flush_done"),
                    "{status}"
                );
                if num(&status, "flush_errors") > 0 {
                    saw_errors_while_running = true;
                    assert_ne!(
                        field(&status, "last_error").as_deref(),
                        Some("none"),
                        "{status}"
                    );
                }
            }
            other => panic!("flush state {other:?}: {status}"),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "flush not done in 30 s at 5 % backing write errors:\n{status}"
        );
        // Reads stay right while blocks wait for their retry.
        for _ in 0..8 {
            let blk = rng.below((SIZE / BS) as u64) as usize;
            let got = client
                .read((blk * BS) as u64, BS as u32)
                .await
                .expect("read");
            assert!(got[..] == model[blk * BS..(blk + 1) * BS], "block {blk}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = t0.elapsed();
    assert!(
        num(&status, "flush_errors") > 0,
        "no backing error was met:\n{status}"
    );
    assert!(saw_errors_while_running || num(&status, "flush_errors") > 0);
    assert_eq!(num(&status, "flush_left"), 0);
    assert_eq!(num(&status, "dirty_blocks"), 0, "{status}");
    eprintln!(
        "5% backing write errors: flush of {dirty} blocks done in {:.1} s with {} errors",
        took.as_secs_f64(),
        num(&status, "flush_errors")
    );
    backing.errors(false);
    assert!(read_all(&client, SIZE).await == model, "the cache's view");
    client.flush().await.expect("flush");
    let stats = server.ctl(&["stats"]);
    assert!(num(&stats, "writeback_write_errors") > 0, "{stats}");
    assert_eq!(num(&stats, "dirty_lost"), 0, "{stats}");
    drop(server);
    drop(backing);
    assert!(
        std::fs::read(&img).expect("backing") == model,
        "the backing equals the cache's view"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_blocks_past_the_bound_at_two_percent_backing_write_errors() {
    if !have("nbdkit") {
        eprintln!("SKIPPED no_write_blocks_past_the_bound: nbdkit is not installed (scripts/install-deps.sh)");
        return;
    }
    const SIZE: usize = 64 << 20;
    const BOUND_MS: u64 = 2000;
    const TASKS: usize = 4;
    let dir = scratch("faults-stall");
    let (img, model) = image(&dir, SIZE, 9);
    let backing = FlakyBacking::start(&dir, &img, "2%");
    let cache = format!("{}:16M", dir.join("cache.img").display());
    let bound = format!("write_stall_max_ms={BOUND_MS}");
    let server = BlockServer::start(
        &dir,
        &backing.uri(),
        &cache,
        &["--seq-threshold-kb", "0", "--set", &bound],
    );
    let client = Arc::new(server.client().await);
    backing.errors(true);
    // Writers on disjoint blocks (block % TASKS == task) for 6 s, well past dirty_max_pct.
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        let client = Arc::clone(&client);
        let mut mine = model.clone();
        tasks.spawn(async move {
            let mut rng = Rng(100 + task as u64);
            let (mut ok, mut eio, mut slowest) = (0u64, 0u64, Duration::ZERO);
            while t0.elapsed() < Duration::from_secs(6) {
                let blk = rng.below((SIZE / BS / TASKS) as u64) as usize * TASKS + task;
                let data = rng.bytes(BS);
                let t = Instant::now();
                let r = client.write((blk * BS) as u64, Bytes::from(data.clone()), false);
                let r = r.await;
                slowest = slowest.max(t.elapsed());
                match r {
                    Ok(()) => {
                        ok += 1;
                        mine[blk * BS..(blk + 1) * BS].copy_from_slice(&data);
                    }
                    Err(e) => {
                        assert_eq!(e.errno(), flashtier_backend::Errno::Io, "{e}");
                        eio += 1;
                    }
                }
            }
            (task, mine, ok, eio, slowest)
        });
    }
    let mut model = model;
    let (mut ok, mut eio, mut slowest) = (0, 0, Duration::ZERO);
    while let Some(r) = tasks.join_next().await {
        let (task, mine, o, e, s) = r.expect("writer");
        for blk in (task..SIZE / BS).step_by(TASKS) {
            model[blk * BS..(blk + 1) * BS].copy_from_slice(&mine[blk * BS..(blk + 1) * BS]);
        }
        ok += o;
        eio += e;
        slowest = slowest.max(s);
    }
    let stats = server.ctl(&["stats"]);
    eprintln!(
        "2% backing write errors, 16 MiB cache: {ok} writes ok, {eio} EIO, slowest {} ms, \
         write_stalls {}, write_stall_timeouts {}, writeback_write_errors {}",
        slowest.as_millis(),
        num(&stats, "write_stalls"),
        num(&stats, "write_stall_timeouts"),
        num(&stats, "writeback_write_errors")
    );
    assert!(
        slowest < Duration::from_millis(BOUND_MS + 3000),
        "a write blocked {} ms (bound {BOUND_MS} ms)",
        slowest.as_millis()
    );
    assert_eq!(num(&stats, "write_stall_timeouts"), eio);
    assert!(
        num(&stats, "write_stalls") > 0,
        "dirty_max_pct was reached: {stats}"
    );
    assert!(num(&stats, "writeback_write_errors") > 0, "{stats}");
    assert!(ok > 1000, "writes kept completing: {ok}");
    backing.errors(false);
    assert!(read_all(&client, SIZE).await == model, "the cache's view");
    let out = server.ctl(&["flush", "--wait"]);
    assert!(out.contains("flush done"), "{out}");
    client.flush().await.expect("flush");
    drop(server);
    drop(backing);
    assert!(
        std::fs::read(&img).expect("backing") == model,
        "the backing equals the cache's view"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
