//! The memcached flags users' scripts pass work, `--check-config` validates and exits, and
//! bad flags fail with a clear message.
mod common;
use std::process::Command;

use common::{roundtrip, Server};

fn flashtier(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_flashtier"))
        .args(args)
        .output()
        .expect("run flashtier")
}

#[test]
fn memcached_style_flags_start_a_server() {
    let server = Server::start(&[
        "-m", "1024", "-c", "100", "-t", "2", "-U", "0", "-u", "root", "-I", "2m",
    ]);
    let mut c = server.connect();
    let out = roundtrip(&mut c, b"stats settings\r\n", b"END\r\n");
    assert!(out.contains("STAT maxbytes 1073741824\r\n"), "{out}");
    assert!(out.contains("STAT maxconns 100\r\n"));
    assert!(out.contains("STAT item_size_max 2097152\r\n"));
    assert!(out.contains("STAT num_threads 2\r\n"));
}

#[test]
fn check_config() {
    let ok = flashtier(&["kv", "-p", "11311", "-m", "64", "--check-config"]);
    assert!(ok.status.success());
    assert!(String::from_utf8_lossy(&ok.stdout).contains("configuration ok"));
    let bad = flashtier(&["kv", "-U", "11211", "--check-config"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("UDP is not supported"));
    let bad = flashtier(&["kv", "-o", "frobnicate", "--check-config"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("-o frobnicate: unknown option"));
    // A flash file's directory must exist (flash_directory.rs); a regular file is none.
    let flash = flashtier(&["kv", "-o", "ext_path=/proc/version/flash:1G"]);
    assert!(!flash.status.success());
    let err = String::from_utf8_lossy(&flash.stderr);
    assert!(err.contains("/proc/version is not a directory"), "{err}");
    // --check-config validates what a start validates, creating nothing, and prints the
    // effective configuration as a config file.
    let dir = common::scratch_dir("checkcfg");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_flashtier"))
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("run")
    };
    let bad = run(&["kv", "--check-config", "--knob", "foo=1"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown knob foo"));
    let bad = run(&["kv", "--check-config", "--knob", "append_wait_ms=99999999"]);
    assert!(!bad.status.success());
    let bad = run(&["kv", "--check-config", "--small-wait-ms", "60001"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("--small-wait-ms 60001"), "{err}");
    let bad = run(&["kv", "--check-config", "--flash", "missing.bin:0"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("give a size"), "{err}");
    let bad = run(&["kv", "--check-config", "--admin", "foo"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--admin") && !err.contains("--listen"),
        "{err}"
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let bad = run(&["kv", "--check-config", "--listen", &port]);
    assert!(!bad.status.success(), "a port in use passed");
    let ok = run(&["kv", "--check-config", "--knob", "item_size=1k", "-p", "0"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let text = String::from_utf8_lossy(&ok.stdout);
    assert!(text.contains("flash = [\"data/flash.bin:1GiB\"]"), "{text}");
    assert!(text.contains("[knobs]\nitem_size = \"1k\""), "{text}");
    assert!(
        !dir.join("data").exists(),
        "--check-config created the flash directory"
    );
    // A bad knob fails the start before the flash file is created.
    let bad = run(&["kv", "--knob", "foo=1", "-p", "0"]);
    assert!(!bad.status.success());
    assert!(
        !dir.join("data").exists(),
        "a failed start left a flash file"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    // Flash flags and --ram-only exclude each other; knobs need a flash tier.
    let both = flashtier(&["kv", "--ram-only", "--flash", "/tmp/x:1G", "--check-config"]);
    assert!(String::from_utf8_lossy(&both.stderr).contains("--ram-only conflicts"));
    let knob = flashtier(&["kv", "--ram-only", "--knob", "item_size=1", "-p", "0"]);
    assert!(!knob.status.success());
    let err = String::from_utf8_lossy(&knob.stderr);
    assert!(
        err.contains("knob item_size=1") && err.contains("no flash tier"),
        "{err}"
    );
}

#[test]
fn a_config_file_error_is_printed_with_its_line_breaks() {
    let dir = common::scratch_dir("badtoml");
    let config = dir.join("bad.toml");
    std::fs::write(&config, "memory = 64M\n").expect("write config");
    let config = config.to_str().expect("utf-8 path");
    for face in ["kv", "block"] {
        let out = flashtier(&[face, "--config", config]);
        let err = String::from_utf8_lossy(&out.stderr);
        // A usage error on both faces; TOML's source line and caret on lines of their own.
        assert_eq!(out.status.code(), Some(64), "{face}: {err}");
        assert!(!err.contains("\\n"), "{face}: escaped line breaks: {err}");
        assert!(err.contains("TOML parse error at line 1"), "{face}: {err}");
        assert!(err.contains("\n1 | memory = 64M\n"), "{face}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        let caret = lines.iter().position(|l| l.trim_end().ends_with('^'));
        let source = lines.iter().position(|l| l.starts_with("1 | "));
        assert_eq!(caret, source.map(|s| s + 1), "{face}: {err}");
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
