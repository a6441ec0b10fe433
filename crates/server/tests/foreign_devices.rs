//! flashtier never formats what the user did not give it: `kv --flash` and `block --cache`
//! refuse a file holding a real file system, partition table, volume signature or random
//! data (one line naming what was found and `--force-format`, exit status 78, the file byte
//! for byte as it was); `--force-format` overrides; a cache that is the backing (same path,
//! symlink, hard link) or a flash file given twice is refused; the backing is locked while
//! served; and a start that fails leaves no file it created, and no file it grew, behind (a
//! 64 MiB loop-mounted ext4 asked for a 1 GiB flash file).
#[path = "block_common/mod.rs"]
mod block_common;
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use block_common::BlockServer;
use common::{have, roundtrip, scratch_dir, Server};

/// Run flashtier to its exit (killed after 60 s: a start that should have been refused and
/// serves instead fails the test rather than hanging it).
fn flashtier(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flashtier"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run flashtier");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "flashtier {args:?} still running after 60 s: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// `flashtier block --backing B --cache SPEC --listen 127.0.0.1:0 <extra>` to its exit, with
/// a run dir beside the backing: tests run in parallel, and two starts sharing the default
/// run dir would refuse each other before reaching the check under test.
fn block(backing: &Path, cache: &str, extra: &[&str]) -> Output {
    let run_dir = backing.with_file_name("run-refused");
    let mut args = vec![
        "block",
        "--backing",
        backing.to_str().expect("utf-8"),
        "--cache",
        cache,
        "--listen",
        "127.0.0.1:0",
        "--run-dir",
        run_dir.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    flashtier(&args)
}

fn sh(cmd: &str) {
    let out = Command::new("sh").args(["-c", cmd]).output().expect("sh");
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sha256(p: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(p)
        .output()
        .expect("sha256sum");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("digest")
        .to_string()
}

/// (path, size, checksum) of a file, to compare after a refused start.
fn snapshot(p: &Path) -> (u64, String) {
    (std::fs::metadata(p).expect("stat").len(), sha256(p))
}

/// A refused start: exit status 78 (`EX_CONFIG`), one line on stderr that names `what` and
/// the override.
fn assert_refused(out: &Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "exit status; stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].contains(what), "{err:?} should name {what:?}");
}

fn need(tool: &str) {
    assert!(
        have(tool),
        "{tool} is missing: scripts/install-deps.sh installs it"
    );
}

/// Real images made by the tools that own the formats, and random data.
fn foreign_images(dir: &Path) -> Vec<(PathBuf, &'static str)> {
    for t in [
        "mkfs.ext4",
        "mkfs.xfs",
        "mkfs.btrfs",
        "mkswap",
        "sfdisk",
        "cryptsetup",
        "make-bcache",
    ] {
        need(t);
    }
    let d = dir.display();
    let mut imgs = Vec::new();
    let mut add = |name: &str, size: &str, make: &str, what: &'static str| {
        sh(&format!(
            "cd {d} && truncate -s {size} {name} && {make} >/dev/null 2>&1"
        ));
        imgs.push((dir.join(name), what));
    };
    add(
        "ext4.img",
        "64M",
        "mkfs.ext4 -q -F ext4.img",
        "ext4 file system",
    );
    add("xfs.img", "320M", "mkfs.xfs -q xfs.img", "XFS file system");
    add(
        "btrfs.img",
        "128M",
        "mkfs.btrfs -q btrfs.img",
        "btrfs file system",
    );
    add("swap.img", "64M", "mkswap swap.img", "swap area");
    add(
        "gpt.img",
        "64M",
        "printf 'label: gpt\\ntype=linux\\n' | sfdisk -q gpt.img",
        "GPT partition table",
    );
    add(
        "mbr.img",
        "64M",
        "echo type=83 | sfdisk -q mbr.img",
        "MBR partition table",
    );
    add(
        "luks.img",
        "64M",
        "printf pw > key && cryptsetup luksFormat -q --batch-mode --key-file key \
         --pbkdf pbkdf2 --pbkdf-force-iterations 1000 luks.img",
        "LUKS encrypted volume",
    );
    add(
        "bcache.img",
        "64M",
        "make-bcache -C bcache.img",
        "bcache device",
    );
    // Random bytes (the first one made non-zero so the message names byte 0).
    let mut random = vec![0u8; 8 << 20];
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(std::process::id());
    for b in random.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    random[0] = 0xA5;
    std::fs::write(dir.join("random.img"), &random).expect("write random.img");
    imgs.push((dir.join("random.img"), "non-zero data at byte 0"));
    imgs
}

#[test]
fn kv_and_block_refuse_foreign_data_and_leave_it_untouched() {
    let dir = scratch_dir("foreign");
    let backing = dir.join("backing.img");
    sh(&format!("truncate -s 64M {}", backing.display()));
    for (img, what) in foreign_images(&dir) {
        let before = snapshot(&img);
        let spec = format!("{}:64M", img.display());
        let out = flashtier(&["kv", "--listen", "127.0.0.1:0", "--flash", &spec]);
        assert_refused(&out, what);
        assert!(String::from_utf8_lossy(&out.stderr).contains("--force-format"));
        assert_eq!(snapshot(&img), before, "kv changed {}", img.display());
        // memcached's spelling of the same file.
        let ext = format!("ext_path={spec}");
        let out = flashtier(&["kv", "--listen", "127.0.0.1:0", "-o", &ext]);
        assert_refused(&out, what);
        let out = block(&backing, &spec, &[]);
        assert_refused(&out, what);
        assert!(String::from_utf8_lossy(&out.stderr).contains("--force-format"));
        assert_eq!(snapshot(&img), before, "block changed {}", img.display());
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn force_format_overwrites_and_then_the_device_is_flashtiers() {
    need("mkfs.ext4");
    let dir = scratch_dir("force");
    let img = dir.join("ext4.img");
    sh(&format!(
        "truncate -s 64M {0} && mkfs.ext4 -q -F {0}",
        img.display()
    ));
    let spec = format!("{}:64M", img.display());
    let server = Server::start(&["--flash", &spec, "--force-format"]);
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"set k 0 0 1\r\nv\r\nget k\r\n", b"END\r\n"),
        "STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n"
    );
    drop(server);
    // Now a kv flash file: reopened without the flag; refused by the block face.
    let server = Server::start(&["--flash", &spec]);
    drop(server);
    let backing = dir.join("backing.img");
    sh(&format!("truncate -s 16M {}", backing.display()));
    let b = backing.to_str().expect("utf-8");
    let out = block(std::path::Path::new(b), &spec, &[]);
    assert_refused(&out, "flashtier kv flash device");
    // The block face with the override; then the kv face refuses the block cache.
    let server = BlockServer::start(&dir, b, &spec, &["--force-format"]);
    drop(server);
    let out = flashtier(&["kv", "--listen", "127.0.0.1:0", "--flash", &spec]);
    assert_refused(&out, "flashtier block cache device");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn a_cache_that_is_the_backing_is_refused() {
    let dir = scratch_dir("same");
    // All zeros: only the identity check stands between the cache and the backing.
    let backing = dir.join("b.img");
    sh(&format!("truncate -s 64M {}", backing.display()));
    let link = dir.join("link.img");
    std::os::unix::fs::symlink(&backing, &link).expect("symlink");
    let hard = dir.join("hard.img");
    std::fs::hard_link(&backing, &hard).expect("hard link");
    let before = snapshot(&backing);
    let b = backing.to_str().expect("utf-8");
    for cache in [&backing, &link, &hard] {
        let spec = format!("{}:32M", cache.display());
        for force in [false, true] {
            let extra: &[&str] = if force { &["--force-format"] } else { &[] };
            assert_refused(&block(&backing, &spec, extra), "same file");
            assert_eq!(snapshot(&backing), before);
        }
        // The backing named through the link, the cache by its own path (and the default
        // run dir: the identity check comes before the run dir is even looked at).
        let link_s = link.to_str().expect("utf-8");
        let spec = format!("{b}:32M");
        let out = flashtier(&["block", "--backing", link_s, "--cache", &spec]);
        assert_refused(&out, "same file");
    }
    // kv: one flash file named twice (also before it exists).
    let flash = dir.join("f.bin");
    for second in [flash.clone(), dir.join("flink.bin")] {
        let a = format!("{}:64M", flash.display());
        let b = format!("{}:64M", second.display());
        let out = flashtier(&[
            "kv",
            "--listen",
            "127.0.0.1:0",
            "--flash",
            &a,
            "--flash",
            &b,
        ]);
        assert_refused(&out, "same");
        assert!(!flash.exists(), "nothing created");
        if second != flash {
            break;
        }
        std::os::unix::fs::symlink(&flash, dir.join("flink.bin")).expect("symlink");
    }
    assert_eq!(snapshot(&backing), before);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn the_backing_is_locked_while_served() {
    let dir = scratch_dir("lock");
    let backing = dir.join("b.img");
    sh(&format!("truncate -s 16M {}", backing.display()));
    let b = backing.to_str().expect("utf-8");
    let c1 = format!("{}:16M", dir.join("c1.img").display());
    let server = BlockServer::start(&dir, b, &c1, &[]);
    let c2 = format!("{}:16M", dir.join("c2.img").display());
    let out = block(std::path::Path::new(b), &c2, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("locked") && err.contains("b.img"), "{err}");
    assert!(!dir.join("c2.img").exists(), "nothing created: {err}");
    // The first server's cache is locked too: it cannot be another server's backing.
    let c1_path = dir.join("c1.img");
    let out = block(&c1_path, &c2, &[]);
    assert_eq!(out.status.code(), Some(1));
    drop(server);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn a_start_that_fails_before_serving_creates_nothing() {
    let dir = scratch_dir("nolitter");
    // The port is taken: the flash file must not appear (the default flash's `data/`
    // directory, the one a start creates, is checked in flash_directory.rs).
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").to_string();
    let spec = format!("{}:64M", dir.join("f.bin").display());
    let out = flashtier(&["kv", "--listen", &port, "--flash", &spec]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.join("f.bin").exists(), "left f.bin");
    let backing = dir.join("b.img");
    sh(&format!("truncate -s 16M {}", backing.display()));
    let cache = format!("{}:16M", dir.join("c.img").display());
    let out = flashtier(&[
        "block",
        "--backing",
        backing.to_str().expect("utf-8"),
        "--cache",
        &cache,
        "--listen",
        &port,
        "--run-dir",
        dir.join("run").to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.join("c.img").exists());
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// A 64 MiB ext4 loop-mounted at a scratch mount point, unmounted when dropped.
struct TinyFs {
    dir: PathBuf,
    mnt: PathBuf,
}

impl TinyFs {
    fn new(name: &str) -> TinyFs {
        // SAFETY-free check: loop mounts need root.
        let uid = Command::new("id").arg("-u").output().expect("id");
        assert_eq!(
            String::from_utf8_lossy(&uid.stdout).trim(),
            "0",
            "the tiny file system test mounts a loop device and needs root"
        );
        let dir = scratch_dir(name);
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).expect("mkdir");
        let img = dir.join("fs.img");
        sh(&format!(
            "truncate -s 64M {0} && mkfs.ext4 -q -F {0} && mount -o loop {0} {1}",
            img.display(),
            mnt.display()
        ));
        TinyFs { dir, mnt }
    }

    /// Used 1K blocks of the file system.
    fn used(&self) -> u64 {
        sh("sync");
        let out = Command::new("df")
            .args(["-k", "--output=used"])
            .arg(&self.mnt)
            .output()
            .expect("df");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .expect("df used")
    }

    fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.mnt)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_filesystem_too_small_for_size_keeps_nothing() {
    let fs = TinyFs::new("tinyfs");
    let used = fs.used();
    let names = fs.entries();
    let m = fs.mnt.display();
    // kv: a new file.
    let spec = format!("{m}/flash.bin:1G");
    let out = flashtier(&["kv", "--listen", "127.0.0.1:0", "--flash", &spec]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left"), "{err}");
    assert_eq!(fs.entries(), names, "left files behind: {err}");
    assert_eq!(fs.used(), used, "space not given back");
    // kv: an existing blank file is not left grown.
    let small = fs.mnt.join("small.bin");
    std::fs::write(&small, vec![0u8; 1 << 20]).expect("write");
    let used = fs.used();
    let spec = format!("{}:1G", small.display());
    let out = flashtier(&["kv", "--listen", "127.0.0.1:0", "--flash", &spec]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::metadata(&small).expect("stat").len(), 1 << 20);
    assert_eq!(fs.used(), used, "space not given back");
    std::fs::remove_file(&small).expect("rm");
    // block: a new cache file.
    let backing = fs.dir.join("b.img");
    sh(&format!("truncate -s 16M {}", backing.display()));
    let used = fs.used();
    let cache = format!("{m}/cache.img:1G");
    let out = block(&backing, &cache, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(fs.entries(), names);
    assert_eq!(fs.used(), used);
}
