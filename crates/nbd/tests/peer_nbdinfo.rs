//! `nbdinfo` (libnbd) reads our handshake: size, flags, block sizes, names, descriptions.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::{peers_present, run, TestDir, TestServer};
use flashtier_backend::{FileBackend, MemoryBackend};
use flashtier_nbd::{Export, ServerConfig};
use serde_json::Value;

fn nbdinfo_json(args: &[&str]) -> Value {
    let out = run(Command::new("nbdinfo").arg("--json").args(args));
    serde_json::from_slice(&out.stdout).expect("nbdinfo prints JSON")
}

#[test]
fn nbdinfo_reports_size_flags_and_exports() {
    if !peers_present("nbdinfo_reports_size_flags_and_exports", &["nbdinfo"]) {
        return;
    }
    let dir = TestDir::new("nbdinfo");
    let img = dir.path("img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(48 << 20))
        .expect("image");
    let file = Export::new(
        "disk",
        Arc::new(FileBackend::open(&img, false).expect("open")),
    )
    .with_description("a file");
    let ro = Export::new(
        "ro",
        Arc::new(FileBackend::open(&img, true).expect("open ro")),
    );
    let mem = Export::new("mem", Arc::new(MemoryBackend::new(1 << 20)));
    let server = TestServer::start(&dir, vec![file, ro, mem], ServerConfig::default());

    let v = nbdinfo_json(&[&server.uri("disk")]);
    assert_eq!(v["protocol"], "newstyle-fixed");
    let e = &v["exports"][0];
    assert_eq!(e["export-name"], "disk");
    assert_eq!(e["description"], "a file");
    assert_eq!(e["export-size"], 48u64 << 20);
    for (key, want) in [
        ("can_flush", true),
        ("can_fua", true),
        ("can_trim", true),
        ("can_zero", true),
        ("can_cache", true),
        ("can_multi_conn", true),
        ("is_read_only", false),
        ("can_df", false),
        ("can_fast_zero", false),
    ] {
        assert_eq!(e[key], want, "{key}");
    }
    assert_eq!(e["block_size_minimum"], 1);
    assert_eq!(e["block_size_preferred"], 4096);
    assert_eq!(e["block_size_maximum"], 1u64 << 25);

    let v = nbdinfo_json(&[&server.uri("ro")]);
    assert_eq!(v["exports"][0]["is_read_only"], true);

    let v = nbdinfo_json(&["--list", &server.uri("")]);
    let names: Vec<&str> = v["exports"]
        .as_array()
        .expect("exports")
        .iter()
        .filter_map(|e| e["export-name"].as_str())
        .collect();
    assert_eq!(names, vec!["disk", "ro", "mem"]);

    // nbdinfo --size on the default export (empty name = first export).
    let out = run(Command::new("nbdinfo").arg("--size").arg(server.uri("")));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (48u64 << 20).to_string()
    );
    server.stop();
}
