//! `flashtier block` across restarts: after SIGTERM the next start serves the clean blocks
//! it had cached from flash (hits right after restart, correct data); after `kill -9` it
//! keeps them too (intents and floors prove them current), yet a block written around the
//! cache just before the kill reads back new, never the older cached copy.
mod block_common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use block_common::{scratch, BlockServer, Rng};
use bytes::Bytes;
use flashtier_backend::BlockBackend;

const SIZE: usize = 4 << 20;

fn stats(server: &BlockServer) -> HashMap<String, u64> {
    server
        .ctl(&["stats"])
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

fn sigterm(server: &mut BlockServer) {
    let pid = server.child.id().to_string();
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(ok.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Some(exit) = server.child.try_wait().expect("wait") {
            assert!(exit.success(), "exit status {exit:?}");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("flashtier block did not exit after SIGTERM");
}

async fn read_all(server: &BlockServer) -> Vec<u8> {
    let client = server.client().await;
    let mut out = Vec::with_capacity(SIZE);
    for off in (0..SIZE).step_by(64 << 10) {
        out.extend_from_slice(&client.read(off as u64, 64 << 10).await.expect("read"));
        // Admission is best effort: let the cache device keep up.
        client.flush().await.expect("flush");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_after_sigterm_and_after_kill9() {
    let dir = scratch("warm");
    let backing = dir.join("backing.img");
    let mut model = Rng(0xbeef).bytes(SIZE);
    std::fs::write(&backing, &model).expect("backing");
    let backing = backing.to_str().expect("utf8").to_string();
    let cache = format!("{}:16M", dir.join("cache.img").display());
    let flags = ["--seq-threshold-kb", "0", "--no-direct-io"];

    // Run 1: cache everything by reading it, stop with SIGTERM.
    let mut server = BlockServer::start(&dir, &backing, &cache, &flags);
    assert!(read_all(&server).await == model);
    let cached = stats(&server)["cached_blocks"];
    assert!(cached > 900, "only {cached} blocks cached");
    sigterm(&mut server);

    // Run 2: warm; the first reads are hits and correct.
    let mut server = BlockServer::start(&dir, &backing, &cache, &flags);
    let counters = stats(&server);
    assert_eq!(counters["recovered_clean_blocks"], cached, "{counters:?}");
    let client = server.client().await;
    let got = client.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..], "warm restart served wrong data");
    let counters = stats(&server);
    assert!(counters["read_hits"] >= cached, "{counters:?}");

    // Write around the cache to cached blocks (one whole, one partial), then kill -9.
    assert!(server
        .ctl(&["set", "mode=writearound"])
        .contains("mode=writearound"));
    let fresh = Rng(7).bytes(4096 + 100);
    client
        .write(40 * 4096, Bytes::from(fresh.clone()), false)
        .await
        .expect("write around");
    model[40 * 4096..40 * 4096 + fresh.len()].copy_from_slice(&fresh);
    drop(client);
    server.kill9();

    // Run 3: warm for clean blocks (all but the two written around), read right away:
    // hits, and every byte is right, the new data included.
    let mut server = BlockServer::start(&dir, &backing, &cache, &flags);
    let counters = stats(&server);
    let kept = counters["recovered_clean_blocks"];
    assert!(kept + 2 >= cached, "{counters:?}");
    let client = server.client().await;
    let got = client.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..], "stale data after kill -9");
    assert!(stats(&server)["read_hits"] >= kept, "{counters:?}");
    drop(client);
    // And a clean stop after that is warm again, still correct.
    sigterm(&mut server);
    let server = BlockServer::start(&dir, &backing, &cache, &flags);
    assert!(stats(&server)["recovered_clean_blocks"] > 0);
    let client = server.client().await;
    let got = client.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..]);
    drop(client);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rounds of writes around the cache (writearound, writethrough, partial and whole blocks,
/// WRITE_ZEROES) over cached blocks, each ended by `kill -9` right after the last write was
/// acknowledged: the restart keeps clean blocks, and every block reads back its newest data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_right_after_writes_around_never_serves_the_older_copy() {
    let dir = scratch("warmkill");
    let backing = dir.join("backing.img");
    let mut model = Rng(0xfeed).bytes(SIZE);
    std::fs::write(&backing, &model).expect("backing");
    let backing = backing.to_str().expect("utf8").to_string();
    let cache = format!("{}:16M", dir.join("cache.img").display());
    let flags = ["--seq-threshold-kb", "0", "--no-direct-io"];
    let mut rng = Rng(99);
    let mut server = BlockServer::start(&dir, &backing, &cache, &flags);
    assert!(read_all(&server).await == model);
    let mut kept_rounds = 0;
    for round in 0..6u64 {
        let mode = ["writearound", "writethrough"][round as usize % 2];
        let set = format!("mode={mode}");
        assert!(server.ctl(&["set", &set]).contains(&set));
        let client = server.client().await;
        for i in 0..(5 + rng.below(40)) {
            let len = 1 + rng.below(3 * 4096);
            let off = rng.below(SIZE as u64 - len);
            if i % 7 == 6 {
                client
                    .write_zeroes(off, len as u32, Default::default())
                    .await
                    .expect("zeroes");
                model[off as usize..(off + len) as usize].fill(0);
                continue;
            }
            let data = rng.bytes(len as usize);
            client
                .write(off, Bytes::from(data.clone()), false)
                .await
                .expect("write");
            model[off as usize..off as usize + data.len()].copy_from_slice(&data);
        }
        drop(client);
        server.kill9();
        server = BlockServer::start(&dir, &backing, &cache, &flags);
        let counters = stats(&server);
        if counters["recovered_clean_blocks"] > 0 {
            kept_rounds += 1;
        }
        let client = server.client().await;
        let got = client.read(0, SIZE as u32).await.expect("read");
        assert!(
            got[..] == model[..],
            "round {round}: an older cached copy shadowed a write around the cache"
        );
        drop(client);
    }
    assert_eq!(
        kept_rounds, 6,
        "every restart after kill -9 keeps clean blocks"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
