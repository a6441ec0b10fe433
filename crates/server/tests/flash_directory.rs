//! flashtier creates a missing flash or cache *file*, never its directory: a mistyped
//! `kv --flash` or `block --cache` directory is refused before anything is created (exit
//! status 78, naming the directory that is missing and the nearest one that exists), by a
//! start and by `--check-config` alike. The one exception is `kv`'s built-in default,
//! `data/flash.bin`, whose `data/` a first start in a fresh checkout creates (a refused
//! start leaves none).
mod common;

use std::path::Path;
use std::process::Command;

use common::{scratch_dir, Server};

fn flashtier_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_flashtier"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run flashtier")
}

#[test]
fn a_missing_flash_or_cache_directory_is_refused() {
    let dir = scratch_dir("flash-dir");
    let d = dir.display();
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(8 << 20))
        .expect("backing");
    let b = backing.to_str().expect("utf-8");
    let flash = format!("{d}/typo/deeper/flash.bin:16M");
    let cache = format!("{d}/typo/cache.img:16M");
    let run_dir = format!("{d}/run");
    let starts: [(&str, Vec<&str>, &str); 4] = [
        (
            "kv",
            vec!["kv", "-p", "0", "--flash", &flash],
            "typo/deeper",
        ),
        (
            "kv --check-config",
            vec!["kv", "-p", "0", "--flash", &flash, "--check-config"],
            "typo/deeper",
        ),
        (
            "block",
            vec![
                "block",
                "--backing",
                b,
                "--cache",
                &cache,
                "--listen",
                "127.0.0.1:0",
                "--admin",
                "none",
                "--run-dir",
                &run_dir,
            ],
            "typo",
        ),
        (
            "block --check-config",
            vec![
                "block",
                "--backing",
                b,
                "--cache",
                &cache,
                "--listen",
                "127.0.0.1:0",
                "--admin",
                "none",
                "--run-dir",
                &run_dir,
                "--check-config",
            ],
            "typo",
        ),
    ];
    for (what, args, missing) in starts {
        let out = flashtier_in(&dir, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{what}: {err}");
        assert!(
            err.contains(&format!(
                "directory {d}/{missing} does not exist ({d} does)"
            )),
            "{what}: {err}"
        );
        assert!(
            err.contains("creates the file but not its directory"),
            "{what}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert!(!dir.join("typo").exists(), "{what} created the directory");
        assert!(!dir.join("run").exists(), "{what} created the run dir");
    }

    // The built-in default creates data/ (default_flash.rs starts it); a start refused
    // before it serves (the port is taken) leaves none.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").to_string();
    let out = flashtier_in(&dir, &["kv", "--listen", &port]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.join("data").exists(), "a failed start left data/");

    // An existing directory is all it takes.
    std::fs::create_dir_all(dir.join("typo/deeper")).expect("mkdir");
    let (server, _) = Server::start_in(&["--flash", &flash], None);
    drop(server);
    assert!(dir.join("typo/deeper/flash.bin").exists());
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
