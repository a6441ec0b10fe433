//! Data integrity through real clients: `nbdcopy` a random 64 MiB image in and out (over
//! several connections, as nbdcopy does when CAN_MULTI_CONN is set), compare with `cmp`
//! semantics and with `qemu-img compare`.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::{peers_present, random_bytes, run, TestDir, TestServer};
use flashtier_backend::FileBackend;

const SIZE: usize = 64 << 20;

#[test]
fn nbdcopy_round_trip_multi_conn_and_qemu_img_compare() {
    let name = "nbdcopy_round_trip_multi_conn_and_qemu_img_compare";
    if !peers_present(name, &["nbdcopy", "qemu-img"]) {
        return;
    }
    let dir = TestDir::new("nbdcopy");
    let src = dir.path("src.img");
    let data = random_bytes(SIZE, 0x5eed);
    std::fs::write(&src, &data).expect("write source");
    let img = dir.path("backing.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(SIZE as u64))
        .expect("backing");
    let server = TestServer::single(
        &dir,
        Arc::new(FileBackend::open(&img, false).expect("open")),
    );
    let uri = server.uri("disk");

    run(Command::new("nbdcopy")
        .args(["--flush", "--connections=4", "--threads=4", "--requests=16"])
        .arg(&src)
        .arg(&uri));
    let accepted = server.server.stats().connections_accepted();
    assert!(
        accepted >= 4,
        "nbdcopy should use several connections, used {accepted}"
    );

    let out = dir.path("out.img");
    run(Command::new("nbdcopy").arg(&uri).arg(&out));
    assert!(
        std::fs::read(&out).expect("read out") == data,
        "copied-out image differs"
    );
    assert!(
        std::fs::read(&img).expect("read backing") == data,
        "backing file differs"
    );

    let cmp = run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&src)
        .arg(&uri));
    assert!(String::from_utf8_lossy(&cmp.stdout).contains("identical"));

    let t = server.server.stats().totals();
    assert_eq!(t.bytes_written, SIZE as u64);
    assert!(t.bytes_read >= 2 * SIZE as u64);
    assert!(t.flushes >= 1);
    assert_eq!(t.errors, 0);
    assert!(t.max_in_flight > 1, "requests were handled concurrently");
    server.stop();
}
