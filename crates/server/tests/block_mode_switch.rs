//! `flashtier ctl set mode=writethrough [--wait]`: leaving writeback reports the switch
//! (flush id, dirty blocks left), `--wait` returns once no block is dirty, `status` shows
//! the switch, and afterwards the backing file holds every acknowledged write.
mod block_common;
mod common;

use block_common::{field, scratch, BlockServer, Rng};
use bytes::Bytes;
use common::http;
use flashtier_backend::BlockBackend;

const SIZE: usize = 8 << 20;

fn http_post(addr: &str, path: &str) -> String {
    let (code, body) = http(addr, "POST", path);
    assert_eq!(code, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_away_from_writeback_waits_for_clean() {
    let dir = scratch("modeswitch");
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(SIZE as u64))
        .expect("backing");
    let cache = format!("{}:16M", dir.join("cache.img").display());
    let server = BlockServer::start(
        &dir,
        backing.to_str().expect("utf8"),
        &cache,
        &[
            "--seq-threshold-kb",
            "0",
            "--flush-period",
            "0",
            "--dirty-max-pct",
            "95",
            "--dirty-high-pct",
            "90",
            "--no-direct-io",
        ],
    );
    let client = server.client().await;
    let mut rng = Rng(0xd1f7);
    let mut model = vec![0u8; SIZE];
    for _ in 0..600 {
        let off = rng.below(SIZE as u64 / 4096) * 4096;
        let data = rng.bytes(4096);
        client
            .write(off, Bytes::from(data.clone()), false)
            .await
            .expect("write");
        model[off as usize..off as usize + 4096].copy_from_slice(&data);
    }
    let status = server.ctl(&["status"]);
    let dirty: u64 = field(&status, "dirty_blocks")
        .and_then(|v| v.parse().ok())
        .expect("dirty_blocks");
    assert!(dirty > 100, "{status}");

    // Without --wait: the switch is reported and can be followed in status.
    let out = server.ctl(&["set", "mode=writethrough"]);
    assert!(out.contains("mode=writethrough"), "{out}");
    let id = field(&out, "mode_switch_id").expect("switch id");
    assert!(field(&out, "mode_switch").is_some(), "{out}");
    let status = server.ctl(&["status"]);
    assert_eq!(
        field(&status, "mode_switch_id"),
        Some(id.clone()),
        "{status}"
    );
    assert_eq!(field(&status, "flush_id"), Some(id), "{status}");

    // Writes during the switch, then wait.
    for _ in 0..100 {
        let off = rng.below(SIZE as u64 - 6000);
        let data = rng.bytes(6000);
        client
            .write(off, Bytes::from(data.clone()), false)
            .await
            .expect("write");
        model[off as usize..off as usize + 6000].copy_from_slice(&data);
    }
    let out = server.ctl(&["set", "mode=writethrough", "--wait"]);
    assert!(out.contains("mode=writethrough"), "{out}");
    let status = server.ctl(&["status"]);
    assert_eq!(
        field(&status, "dirty_blocks").as_deref(),
        Some("0"),
        "{status}"
    );
    assert_eq!(
        field(&status, "mode_switch").as_deref(),
        Some("done"),
        "{status}"
    );
    let stats = server.ctl(&["stats"]);
    assert_eq!(
        field(&stats, "mode_switch_in_progress").as_deref(),
        Some("0")
    );
    let on_disk = std::fs::read(&backing).expect("backing");
    assert!(
        on_disk == model,
        "backing lacks acknowledged writes after the switch"
    );

    // Back to writeback, dirty again, switch with --wait straight away.
    server.ctl(&["set", "mode=writeback"]);
    for _ in 0..300 {
        let off = rng.below(SIZE as u64 / 4096) * 4096;
        let data = rng.bytes(4096);
        client
            .write(off, Bytes::from(data.clone()), false)
            .await
            .expect("write");
        model[off as usize..off as usize + 4096].copy_from_slice(&data);
    }
    let out = server.ctl(&["set", "mode=writearound", "--wait"]);
    assert!(out.contains("mode switch done"), "{out}");
    assert!(std::fs::read(&backing).expect("backing") == model);

    // The admin endpoint's own wait: `/mode?MODE&wait` answers once nothing is dirty.
    server.ctl(&["set", "mode=writeback"]);
    for _ in 0..200 {
        let off = rng.below(SIZE as u64 / 4096) * 4096;
        let data = rng.bytes(4096);
        client
            .write(off, Bytes::from(data.clone()), false)
            .await
            .expect("write");
        model[off as usize..off as usize + 4096].copy_from_slice(&data);
    }
    let body = http_post(&server.admin, "/mode?writethrough&wait");
    assert_eq!(
        field(&body, "mode_switch").as_deref(),
        Some("done"),
        "{body}"
    );
    assert_eq!(field(&body, "mode_switch_dirty_left").as_deref(), Some("0"));
    assert!(std::fs::read(&backing).expect("backing") == model);
    let got = client.read(0, SIZE as u32).await.expect("read");
    assert!(got[..] == model[..]);
    drop(client);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
