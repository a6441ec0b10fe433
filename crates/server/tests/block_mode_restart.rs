//! A block mode set at run time survives a restart: `ctl set mode=…` and `POST /mode` keep
//! it in `<run-dir>/<export>.mode` at once (a `kill -9` right after keeps it too), a start
//! without a mode uses it (and `--check-config` shows it), and a mode given at start
//! (`--mode`, `mode` in --config) wins and forgets it, so the next un-flagged start is back
//! to the default.
mod block_common;
mod common;

use std::process::Command;

use block_common::{field, scratch, BlockServer};
use common::http;

fn mode(server: &BlockServer) -> String {
    field(&server.ctl(&["get", "mode"]), "mode").expect("mode")
}

#[test]
fn a_mode_set_at_run_time_is_kept_unless_the_start_gives_one() {
    let dir = scratch("mode-restart");
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(8 << 20))
        .expect("backing");
    let b = backing.to_str().expect("utf-8");
    let cache = format!("{}:16M", dir.join("cache.img").display());
    let saved = dir.join("run/block.mode");
    let start = |extra: &[&str]| {
        let mut args = vec!["--no-direct-io"];
        args.extend_from_slice(extra);
        BlockServer::start(&dir, b, &cache, &args)
    };

    let mut server = start(&[]);
    assert_eq!(mode(&server), "writeback");
    assert!(!saved.exists());
    server.ctl(&["set", "mode=writethrough"]);
    assert!(saved.exists(), "kept at once");
    server.kill9();
    let mut server = start(&[]);
    assert_eq!(
        mode(&server),
        "writethrough",
        "an un-flagged restart keeps it"
    );

    // The admin route does the same; --check-config shows what a start would use.
    let (code, body) = http(&server.admin, "POST", "/mode?writearound");
    assert_eq!(code, 200, "{body}");
    server.kill9();
    let check = Command::new(env!("CARGO_BIN_EXE_flashtier"))
        .args(["block", "--backing", b, "--cache", &cache, "--no-direct-io"])
        .arg("--run-dir")
        .arg(dir.join("run"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--check-config",
        ])
        .output()
        .expect("check-config");
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{text}");
    assert_eq!(
        field(&text, "mode").as_deref(),
        Some("writearound"),
        "{text}"
    );
    assert!(
        field(&text, "mode_source").is_some_and(|s| s.starts_with("set at run time")),
        "{text}"
    );
    let mut server = start(&[]);
    assert_eq!(mode(&server), "writearound");
    server.kill9();

    // An explicit mode wins and forgets the runtime one.
    let mut server = start(&["--mode", "writeback"]);
    assert_eq!(mode(&server), "writeback");
    assert!(
        !saved.exists(),
        "a mode given at start forgets the runtime one"
    );
    server.ctl(&["set", "mode=writethrough"]);
    server.kill9();
    let config = dir.join("block.toml");
    std::fs::write(&config, "mode = \"writearound\"\n").expect("config");
    let mut server = start(&["--config", config.to_str().expect("utf-8")]);
    assert_eq!(
        mode(&server),
        "writearound",
        "mode in --config is explicit too"
    );
    server.kill9();
    let server = start(&[]);
    assert_eq!(mode(&server), "writeback", "back to the default");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
