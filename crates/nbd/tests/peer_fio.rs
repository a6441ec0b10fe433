//! `fio --ioengine=nbd` random read/write with crc32c verification against a file export.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::{fio_with_nbd, run, TestDir, TestServer};
use flashtier_backend::FileBackend;

#[test]
fn fio_randrw_verify_crc32c() {
    if !fio_with_nbd("fio_randrw_verify_crc32c") {
        return;
    }
    let dir = TestDir::new("fio");
    let img = dir.path("img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(32 << 20))
        .expect("image");
    let server = TestServer::single(
        &dir,
        Arc::new(FileBackend::open(&img, false).expect("open")),
    );
    let out = run(Command::new("fio")
        .current_dir(&dir.0)
        .args([
            "--name=verify",
            "--ioengine=nbd",
            "--rw=randrw",
            "--rwmixread=50",
            "--bs=4k",
            "--iodepth=16",
            "--size=32M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--output-format=json",
        ])
        .arg(format!("--uri={}", server.uri("disk"))));
    let text = String::from_utf8_lossy(&out.stdout);
    let json = &text[text.find('{').expect("fio JSON")..];
    let v: serde_json::Value = serde_json::from_str(json).expect("fio JSON parses");
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0, "fio reported an error: {text}");
    assert!(job["write"]["io_bytes"].as_u64().unwrap_or(0) > 0);
    assert!(job["read"]["io_bytes"].as_u64().unwrap_or(0) > 0);
    assert_eq!(server.server.stats().totals().errors, 0);
    server.stop();
}
