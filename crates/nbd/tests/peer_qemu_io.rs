//! `qemu-io` (qemu's NBD client) drives WRITE, FUA writes, WRITE_ZEROES (with and without
//! NO_HOLE, i.e. `-u` unmap allowed or not), TRIM and FLUSH, then verifies patterns.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::{peers_present, run, TestDir, TestServer};
use flashtier_backend::FileBackend;

#[test]
fn qemu_io_write_zero_discard_fua_flush_and_verify() {
    if !peers_present(
        "qemu_io_write_zero_discard_fua_flush_and_verify",
        &["qemu-io"],
    ) {
        return;
    }
    let dir = TestDir::new("qemuio");
    let img = dir.path("img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(4 << 20))
        .expect("image");
    let server = TestServer::single(
        &dir,
        Arc::new(FileBackend::open(&img, false).expect("open")),
    );
    let mut cmd = Command::new("qemu-io");
    cmd.args(["-f", "raw"]);
    for c in [
        "write -P 0xab 0 1M",
        "write -z 64k 64k",
        "discard 128k 64k",
        "write -P 0xab 128k 64k",
        "write -f -P 0xcd 256k 4k",
        "write -z -u 512k 64k",
        "flush",
        "read -P 0xab 0 64k",
        "read -P 0 64k 64k",
        "read -P 0xab 128k 64k",
        "read -P 0xcd 256k 4k",
        "read -P 0 512k 64k",
        "read -P 0xab 576k 448k",
    ] {
        cmd.arg("-c").arg(c);
    }
    cmd.arg(server.uri("disk"));
    let out = run(&mut cmd);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("verification failed"), "{text}");
    let t = server.server.stats().totals();
    assert_eq!((t.write_zeroes, t.trims, t.errors), (2, 1, 0), "{t:?}");
    assert!(t.fua >= 1 && t.flushes >= 1, "{t:?}");
    let data = std::fs::read(&img).expect("image");
    assert!(data[..64 << 10].iter().all(|&b| b == 0xab));
    assert!(data[64 << 10..128 << 10].iter().all(|&b| b == 0));
    assert!(data[256 << 10..260 << 10].iter().all(|&b| b == 0xcd));
    assert!(data[512 << 10..576 << 10].iter().all(|&b| b == 0));
    server.stop();
}
