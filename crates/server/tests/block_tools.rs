//! Standard NBD tools against `flashtier block` (each part is skipped with a note if the
//! tool is not installed): nbdcopy a 64 MiB random image in and out + compare,
//! `qemu-img compare`, fio random read/write with `verify=crc32c`, then `ctl detach`.
mod block_common;
mod common;

use std::process::Command;

use block_common::{scratch, BlockServer, Rng};
use common::have;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn tool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn nbdcopy_qemu_img_and_fio_verify() {
    const SIZE: usize = 64 << 20;
    let dir = scratch("tools");
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(SIZE as u64))
        .expect("backing");
    let image = dir.join("random.img");
    std::fs::write(&image, Rng(99).bytes(SIZE)).expect("image");
    let cache = format!("{}:16M", dir.join("cache.img").display());
    let mut server = BlockServer::start(&dir, backing.to_str().expect("utf8"), &cache, &[]);
    let uri = server.uri();
    if have("nbdcopy") {
        let out = dir.join("out.img");
        run(Command::new("nbdcopy").arg(&image).arg(&uri));
        run(Command::new("nbdcopy").arg(&uri).arg(&out));
        assert!(
            std::fs::read(&out).expect("out") == std::fs::read(&image).expect("in"),
            "nbdcopy round trip differs"
        );
    } else {
        eprintln!("nbdcopy not installed: skipped");
    }
    if have("qemu-img") && have("nbdcopy") {
        let t = run(Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&image)
            .arg(&uri));
        assert!(t.contains("identical"), "{t}");
    } else {
        eprintln!("qemu-img not installed: skipped");
    }
    if have("fio") {
        let t = run(Command::new("fio").args([
            "--name=verify",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randrw",
            "--rwmixread=30",
            "--bs=4k",
            "--size=64M",
            "--io_size=8M",
            "--iodepth=8",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--do_verify=1",
            "--verify_state_save=0",
        ]));
        assert!(t.contains("err= 0"), "{t}");
    } else {
        eprintln!("fio not installed: skipped");
    }
    let out = server.ctl(&["detach"]);
    assert!(
        out.contains("detached") && out.contains("dirty_blocks=0"),
        "{out}"
    );
    assert!(server.wait_exit().success());
    let _ = std::fs::remove_dir_all(&dir);
}
