//! `PATH:0` means the same on both faces — the whole existing file or device — and is
//! refused in the same words when the file is missing: `kv --flash PATH:0` and `block
//! --cache PATH:0` reopen a cache at the size it has, and a start at size 0 uses the file's
//! real size (the start line and the capacity say so).
mod block_common;
mod common;

use std::process::Command;

use block_common::{num, BlockServer};
use common::{scratch_dir, stats_section, value_of, Server};

fn flashtier(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_flashtier"))
        .args(args)
        .output()
        .expect("run flashtier")
}

#[test]
fn size_zero_is_the_whole_file_on_both_faces() {
    let dir = scratch_dir("size-zero");
    let d = dir.display();
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(8 << 20))
        .expect("backing");
    let b = backing.to_str().expect("utf-8");

    // Missing: one refusal, the same on both faces, and nothing created.
    let kv = flashtier(&["kv", "-p", "0", "--flash", &format!("{d}/missing.bin:0")]);
    let block = flashtier(&[
        "block",
        "--backing",
        b,
        "--cache",
        &format!("{d}/missing.bin:0"),
    ]);
    for (face, out) in [("kv", &kv), ("block", &block)] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{face}: {err}");
        assert!(
            err.contains("size 0 means \"the whole existing file or device\"")
                && err.contains("missing.bin does not exist; give a size to create it"),
            "{face}: {err}"
        );
    }
    assert!(!dir.join("missing.bin").exists());

    // kv: formatted at 32 MiB, reopened (warm) at size 0.
    let flash = format!("{d}/flash.bin");
    let (server, _) = Server::start_in(&["--flash", &format!("{flash}:32M")], None);
    let mut c = server.connect();
    let capacity = value_of(&stats_section(&mut c, "extstore"), "extstore_capacity").to_string();
    drop(c);
    drop(server);
    let (server, log) = Server::start_in(&["--flash", &format!("{flash}:0")], None);
    assert!(
        log.iter().any(|l| l.contains("flash.bin (33554432 bytes)")),
        "the start line names the real size: {log:?}"
    );
    let mut c = server.connect();
    let ext = stats_section(&mut c, "extstore");
    assert_eq!(value_of(&ext, "extstore_capacity"), capacity);
    drop(c);
    drop(server);

    // block: formatted at 16 MiB, reopened at size 0 with the same capacity.
    let cache = format!("{d}/cache.img");
    let server = BlockServer::start(&dir, b, &format!("{cache}:16M"), &["--no-direct-io"]);
    let blocks = num(&server.ctl(&["stats"]), "capacity_blocks");
    assert!(blocks > 0);
    drop(server);
    let server = BlockServer::start(&dir, b, &format!("{cache}:0"), &["--no-direct-io"]);
    assert_eq!(num(&server.ctl(&["stats"]), "capacity_blocks"), blocks);
    drop(server);
    // An existing empty file is no size either.
    std::fs::write(dir.join("empty.img"), b"").expect("empty");
    let out = flashtier(&[
        "block",
        "--backing",
        b,
        "--cache",
        &format!("{d}/empty.img:0"),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("is empty; give a size"), "{err}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
