//! `flashtier kv` with no flash flag runs on a 1 GiB `data/flash.bin` under the current
//! directory (created); `--ram-only` creates nothing.
mod common;

use common::{roundtrip, scratch_dir, stats_section, value_of, Server};

#[test]
fn default_flash_file_under_cwd() {
    let dir = scratch_dir("default-flash");
    // Plain `kv` (the harness adds --ram-only only when no flash argument is given, so give
    // an empty config file, which leaves every setting at its default).
    let config = dir.join("kv.toml");
    std::fs::write(&config, "").expect("write config");
    let config = config.to_str().expect("utf-8 path");
    let (server, log) = Server::start_in(&["--config", config], Some(&dir));
    let file = dir.join("data").join("flash.bin");
    let meta = std::fs::metadata(&file).expect("data/flash.bin created");
    assert_eq!(meta.len(), 1 << 30);
    assert!(
        log.iter()
            .any(|l| l.contains("flash tier on") && l.contains("data/flash.bin")),
        "{log:?}"
    );
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"set k 0 0 2\r\nhi\r\nget k\r\n", b"END\r\n"),
        "STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\n"
    );
    let ext = stats_section(&mut c, "extstore");
    // The usable capacity: the 1 GiB file less the engine's header area.
    let capacity: u64 = value_of(&ext, "extstore_capacity").parse().expect("number");
    assert!(
        (1u64 << 30) - (64 << 20) < capacity && capacity <= 1 << 30,
        "{capacity}"
    );
    // Written at once or still inside the write-back window (2 s): at most one append.
    let written: u64 = value_of(&ext, "extstore_objects_written")
        .parse()
        .expect("number");
    assert!(written <= 1, "{written}");
    drop(server);

    let empty = dir.join("ram");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let (server, log) = Server::start_in(&["--ram-only"], Some(&empty));
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"set k 0 0 2\r\nhi\r\nget k\r\n", b"END\r\n"),
        "STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\n"
    );
    assert!(
        log.iter().any(|l| l.contains("RAM only, no flash tier")),
        "{log:?}"
    );
    assert_eq!(std::fs::read_dir(&empty).expect("ls").count(), 0);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
