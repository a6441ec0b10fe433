//! A serve-through chain: nbdcopy → our server → NbdClientBackend → nbdkit (delay filter,
//! 5 ms per read/write, the slow-disk stand-in) → file. Checked with nbdcopy out + compare,
//! and the nbdkit backing file holds the bytes after the copy's FLUSH.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::{
    fio_with_nbd, peers_present, random_bytes, run, runtime, Nbdkit, TestDir, TestServer,
};
use flashtier_nbd::NbdClientBackend;

const SIZE: usize = 64 << 20;

/// Our server in front of an `NbdClientBackend` connected to the nbdkit at `kit_uri`; the
/// runtime drives the backend and must outlive the server.
fn serve_over(dir: &TestDir, kit_uri: &str) -> (tokio::runtime::Runtime, TestServer) {
    let rt = runtime();
    let backend = rt
        .block_on(NbdClientBackend::connect_str(kit_uri, 2))
        .expect("connect to nbdkit");
    let server = TestServer::single(dir, Arc::new(backend));
    (rt, server)
}

#[test]
fn nbdcopy_through_our_server_over_nbdkit_delay_file() {
    let name = "nbdcopy_through_our_server_over_nbdkit_delay_file";
    if !peers_present(name, &["nbdkit", "nbdcopy"]) {
        return;
    }
    let dir = TestDir::new("chain");
    let backing = dir.path("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(SIZE as u64))
        .expect("backing");
    let backing_arg = backing.to_string_lossy().into_owned();
    let _kit = Nbdkit::start(
        &dir,
        "slow",
        &[
            "--filter=delay",
            "file",
            &backing_arg,
            "rdelay=5ms",
            "wdelay=5ms",
        ],
    );
    let kit_uri = format!("nbd+unix:///?socket={}", dir.path("slow.sock").display());

    let (rt, server) = serve_over(&dir, &kit_uri);
    let uri = server.uri("disk");

    let src = dir.path("src.img");
    let data = random_bytes(SIZE, 0xc4a1);
    std::fs::write(&src, &data).expect("source");
    run(Command::new("nbdcopy").arg("--flush").arg(&src).arg(&uri));
    assert!(
        std::fs::read(&backing).expect("backing") == data,
        "backing file differs after flush"
    );

    let out = dir.path("out.img");
    run(Command::new("nbdcopy").arg(&uri).arg(&out));
    assert!(
        std::fs::read(&out).expect("out") == data,
        "image read through the chain differs"
    );
    let t = server.server.stats().totals();
    assert_eq!(t.errors, 0);
    assert!(t.flushes >= 1);
    server.stop();
    drop(rt);
}

#[test]
fn fio_verify_through_our_server_over_nbdkit_memory() {
    let name = "fio_verify_through_our_server_over_nbdkit_memory";
    if !peers_present(name, &["nbdkit"]) || !fio_with_nbd(name) {
        return;
    }
    let dir = TestDir::new("chainfio");
    let _kit = Nbdkit::start(&dir, "mem", &["memory", "32M"]);
    let kit_uri = format!("nbd+unix:///?socket={}", dir.path("mem.sock").display());
    let (rt, server) = serve_over(&dir, &kit_uri);
    run(Command::new("fio")
        .current_dir(&dir.0)
        .args([
            "--name=chain",
            "--ioengine=nbd",
            "--rw=randrw",
            "--bs=4k",
            "--iodepth=16",
            "--size=32M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
        ])
        .arg(format!("--uri={}", server.uri("disk"))));
    assert_eq!(server.server.stats().totals().errors, 0);
    server.stop();
    drop(rt);
}
