//! `flashtier block --trace FILE` through a real NBD connection: every request the export
//! receives is in the file, in order, with its kind, offset and length, and the file is
//! complete once the server has stopped (`ctl detach`).
mod block_common;
mod common;

use block_common::{scratch, BlockServer};
use bytes::Bytes;
use flashtier_backend::BlockBackend;

fn records(path: &std::path::Path) -> Vec<(u64, u32, u8)> {
    let data = std::fs::read(path).expect("trace file");
    assert_eq!(&data[..8], b"FTTRACE1");
    assert_eq!((data.len() - 16) % 24, 0, "whole records");
    let mut last = 0;
    data[16..]
        .chunks(24)
        .map(|r| {
            let t = u64::from_le_bytes(r[0..8].try_into().expect("8"));
            assert!(t >= last, "times ascend");
            last = t;
            (
                u64::from_le_bytes(r[8..16].try_into().expect("8")),
                u32::from_le_bytes(r[16..20].try_into().expect("4")),
                r[20],
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_records_every_request_and_is_complete_after_detach() {
    let dir = scratch("trace");
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(8 << 20))
        .expect("backing");
    let cache = format!("{}:16M", dir.join("cache.img").display());
    let trace = dir.join("requests.trace");
    let mut server = BlockServer::start(
        &dir,
        backing.to_str().expect("utf8"),
        &cache,
        &["--trace", trace.to_str().expect("utf8")],
    );
    let client = server.client().await;
    let mut want = Vec::new();
    for i in 0..100u64 {
        let off = (i * 7919 % 2000) * 4096;
        client
            .write(off, Bytes::from(vec![i as u8; 8192]), false)
            .await
            .expect("write");
        want.push((off, 8192, 1));
        assert_eq!(client.read(off, 4096).await.expect("read")[0], i as u8);
        want.push((off, 4096, 0));
    }
    client.flush().await.expect("flush");
    want.push((0, 0, 4));
    drop(client);
    let out = server.ctl(&["detach"]);
    assert!(out.contains("detached"), "{out}");
    assert!(server.wait_exit().success());
    assert_eq!(records(&trace), want);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_trace_path_fails_the_start_with_the_flag_named() {
    let dir = scratch("trace-bad");
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(1 << 20))
        .expect("backing");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flashtier"))
        .args(["block", "--backing"])
        .arg(&backing)
        .arg("--cache")
        .arg(format!("{}:16M", dir.join("cache.img").display()))
        .arg("--listen")
        .arg(format!("unix:{}", dir.join("nbd.sock").display()))
        .args(["--admin", "none", "--run-dir"])
        .arg(dir.join("run"))
        .arg("--trace")
        .arg(dir.join("no-such-dir/requests.trace"))
        .output()
        .expect("run flashtier block");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--trace"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
