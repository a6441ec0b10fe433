//! nbdkit's failing scenario: 32 MiB of random data written through a 4 MiB cache, FLUSH,
//! read back identical; after `ctl flush --wait` the backing file holds the same bytes.
//! Also exercises `ctl get/set/status/stats` and the stats file.
mod block_common;

use block_common::{scratch, BlockServer, Rng};
use bytes::Bytes;
use flashtier_backend::BlockBackend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_mib_through_four_mib_cache() {
    const SIZE: usize = 32 << 20;
    let dir = scratch("small");
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(SIZE as u64))
        .expect("backing");
    let cache = format!("{}:4M", dir.join("cache.img").display());
    let server = BlockServer::start(
        &dir,
        backing.to_str().expect("utf8"),
        &cache,
        &["--seq-threshold-kb", "0"],
    );
    assert!(server.ctl(&["get", "mode"]).contains("mode=writeback"));
    assert!(server
        .ctl(&["set", "flush_order=lba"])
        .contains("flush_order=lba"));
    let client = server.client().await;
    let mut rng = Rng(0x5eed);
    let data = rng.bytes(SIZE);
    let mut tasks = tokio::task::JoinSet::new();
    let client = std::sync::Arc::new(client);
    for chunk in 0..SIZE / (64 << 10) {
        let c = std::sync::Arc::clone(&client);
        let off = chunk * (64 << 10);
        let piece = Bytes::copy_from_slice(&data[off..off + (64 << 10)]);
        tasks.spawn(async move { c.write(off as u64, piece, false).await });
        if tasks.len() >= 8 {
            tasks
                .join_next()
                .await
                .expect("task")
                .expect("join")
                .expect("write");
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("join").expect("write");
    }
    client.flush().await.expect("flush");
    for off in (0..SIZE).step_by(1 << 20) {
        let got = client.read(off as u64, 1 << 20).await.expect("read");
        assert!(
            got[..] == data[off..off + (1 << 20)],
            "device differs at {off}"
        );
    }
    let out = server.ctl(&["flush", "--wait"]);
    assert!(out.contains("flush done"), "{out}");
    let on_disk = std::fs::read(&backing).expect("read backing");
    assert!(on_disk == data, "backing differs after ctl flush --wait");
    let stats = server.ctl(&["stats"]);
    assert!(stats.contains("dirty_blocks=0"), "{stats}");
    assert!(stats.contains("dirty_lost=0"), "{stats}");
    let status = server.ctl(&["status"]);
    assert!(status.contains("flush=done"), "{status}");
    // The stats file is rewritten about once a second by a server task: wait for it (a
    // fixed 1.2 s sleep would fail whenever a loaded machine ran that task late).
    let path = dir.join("run").join("block.stats");
    let t0 = std::time::Instant::now();
    let file = loop {
        let file = std::fs::read_to_string(&path).unwrap_or_default();
        if file.contains("read_hit_percent=") {
            break file;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "no read_hit_percent in {} after 60 s: {file:?}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(file.contains("read_hit_percent="), "{file}");
    let _ = std::fs::remove_dir_all(&dir);
}
