//! memcached's process flags behave as memcached's: `-d` returns once the daemon serves (and
//! fails visibly, leaving nothing, when it cannot start), `-P` holds the daemon's pid and is
//! removed at exit, `-u` really drops root after the sockets and flash files are open, `-s`
//! serves the text and meta protocols on a unix socket whose mode is `-a`.
mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{roundtrip, scratch_dir};

fn uid_of(name: &str) -> u32 {
    let out = Command::new("id").args(["-u", name]).output().expect("id");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("uid")
}

fn status_field(pid: u32, field: &str) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && status_field(pid, "State").is_some_and(|s| s != "Z")
}

/// Kills the daemon if the test fails before stopping it.
struct Reap(u32);

impl Drop for Reap {
    fn drop(&mut self) {
        if alive(self.0) {
            let _ = Command::new("kill")
                .args(["-KILL", &self.0.to_string()])
                .status();
        }
    }
}

#[test]
fn daemon_pidfile_user_and_unix_socket() {
    let dir = scratch_dir("daemon");
    // The dropped user must be able to remove its pid file, as with /run/memcached.
    let nobody = uid_of("nobody");
    std::os::unix::fs::chown(&dir, Some(nobody), None).expect("chown");
    let pid_path = dir.join("ft.pid");
    let sock = dir.join("ft.sock");
    let flash = format!("{}:16M", dir.join("flash.bin").display());
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_flashtier"))
        .args(["kv", "-d", "-u", "nobody", "-a", "770", "--flash", &flash])
        .arg("-P")
        .arg(&pid_path)
        .arg("-s")
        .arg(&sock)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The parent returned only once the daemon was serving.
    assert!(sock.exists() && pid_path.exists());
    assert!(t0.elapsed() < Duration::from_secs(60));
    let pid: u32 = std::fs::read_to_string(&pid_path)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    let _reap = Reap(pid);
    assert!(alive(pid));
    assert_eq!(
        status_field(pid, "Uid").as_deref(),
        Some(nobody.to_string().as_str())
    );
    // Detached: its own session, parent not us.
    let fields = common::proc_stat_fields(format!("/proc/{pid}/stat"));
    assert!(!fields.is_empty(), "stat");
    assert_eq!(fields[3], pid.to_string(), "session leader (setsid)");
    let meta = std::fs::metadata(&sock).expect("socket");
    assert_eq!(meta.permissions().mode() & 0o777, 0o770, "-a 770");
    assert_eq!(meta.uid(), 0, "created before root was dropped");
    // Text and meta protocols on the unix socket.
    let mut s = UnixStream::connect(&sock).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    assert_eq!(
        roundtrip(&mut s, b"set k 3 0 2\r\nhi\r\nget k\r\n", b"END\r\n"),
        "STORED\r\nVALUE k 3 2\r\nhi\r\nEND\r\n"
    );
    assert_eq!(
        roundtrip(&mut s, b"mg k v f\r\n", b"hi\r\n"),
        "VA 2 f3\r\nhi\r\n"
    );
    assert_eq!(
        roundtrip(&mut s, b"ms m 1\r\nz\r\nmn\r\n", b"MN\r\n"),
        "HD\r\nMN\r\n"
    );
    // The flash file, opened as root, is written by the unprivileged daemon.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ext = roundtrip(&mut s, b"stats extstore\r\n", b"END\r\n");
        let num = |k: &str| common::stat(&ext, k);
        assert_eq!(num("flash_write_errors"), 0, "{ext}");
        if num("flash_device_bytes_written") > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nothing reached the flash file: {ext}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let settings = roundtrip(&mut s, b"stats settings\r\n", b"END\r\n");
    assert!(
        settings.contains(&format!("STAT domain_socket {}\r\n", sock.display())),
        "{settings}"
    );
    assert!(settings.contains("STAT umask 770\r\n"), "{settings}");
    let conns = roundtrip(&mut s, b"stats conns\r\n", b"END\r\n");
    assert!(conns.contains(":addr unix:"), "{conns}");
    drop(s);
    // SIGTERM: clean exit, pid file gone.
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(pid), "daemon still running");
    assert!(!pid_path.exists(), "pid file removed at exit");
    // A restart finds the old socket file gone or stale and serves again (warm flash).
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn a_daemon_that_cannot_start_fails_in_the_foreground() {
    let dir = scratch_dir("daemon-fail");
    let img = dir.join("data.img");
    std::fs::write(&img, vec![0x5Au8; 1 << 20]).expect("write");
    let pid_path = dir.join("ft.pid");
    let out = Command::new(env!("CARGO_BIN_EXE_flashtier"))
        .args(["kv", "-d", "-l", "127.0.0.1:0"])
        .arg("--flash")
        .arg(format!("{}:16M", img.display()))
        .arg("-P")
        .arg(&pid_path)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("refusing to format") && err.contains("--force-format"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!pid_path.exists());
    assert_eq!(std::fs::read(&img).expect("read"), vec![0x5Au8; 1 << 20]);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn a_stop_right_after_start_is_a_clean_stop() {
    let dir = scratch_dir("daemon-stop");
    let pid_path = dir.join("ft.pid");
    for _ in 0..5 {
        let out = Command::new(env!("CARGO_BIN_EXE_flashtier"))
            .args(["kv", "-d", "--ram-only", "-l", "127.0.0.1:0", "-P"])
            .arg(&pid_path)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pid: u32 = std::fs::read_to_string(&pid_path)
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid");
        let _reap = Reap(pid);
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill");
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(pid));
        assert!(
            !pid_path.exists(),
            "SIGTERM at once still removes the pid file"
        );
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
