//! SIGHUP reloads a root-only `-Y` auth file after `-u` dropped root: the server keeps the
//! descriptor it opened as root and reads it again, so an edit in place takes effect; a file
//! replaced by a rename (what most editors do) is a new inode that descriptor does not see,
//! so the reload is refused with a warning that says why and what to do, and the entries in
//! force stay; once the file is readable by the user, the path works again. Needs root (the
//! test suite runs as root here); `nobody` is the user dropped to.
mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{roundtrip, scratch_dir, Server};

fn auth(server: &Server, user: &str, pass: &str) -> String {
    let token = format!("{user} {pass}");
    let req = format!("set auth 0 0 {}\r\n{token}\r\n", token.len());
    roundtrip(&mut server.connect(), req.as_bytes(), b"\r\n")
}

/// Send SIGHUP and wait for the `n`-th log line about the auth file (reloaded or refused).
fn hangup(server: &Server, n: usize) -> String {
    let pid = server.child.id().to_string();
    let hup = Command::new("kill").args(["-HUP", &pid]).status();
    assert!(hup.expect("kill").success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = server.log_lines("SIGHUP: ");
        if lines.len() >= n {
            return lines[n - 1].clone();
        }
        assert!(Instant::now() < deadline, "no SIGHUP log line");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn write_private(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

#[test]
fn a_root_only_auth_file_reloads_after_dropping_root() {
    let uid = Command::new("id").arg("-u").output().expect("id");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        eprintln!("SKIPPED: needs root to drop to a user with -u");
        return;
    }
    let dir = scratch_dir("auth-user");
    let file = dir.join("auth");
    write_private(&file, "alice:one\n");
    let f = file.to_str().expect("utf-8");
    let server = Server::start(&["-u", "nobody", "-Y", f]);
    assert_eq!(auth(&server, "alice", "one"), "STORED\r\n");

    // Edited in place (truncated and rewritten, as `cat new > file` does): reloaded through
    // the descriptor opened as root.
    std::fs::write(&file, "bob:two\n").expect("rewrite in place");
    let line = hangup(&server, 1);
    assert!(
        line.contains("auth file reloaded (1 entries) through the descriptor opened at start"),
        "{line}"
    );
    assert_eq!(auth(&server, "bob", "two"), "STORED\r\n");
    assert_eq!(
        auth(&server, "alice", "one"),
        "CLIENT_ERROR authentication failure\r\n"
    );

    // Replaced by a rename: refused, naming why and what to do; bob still gets in.
    let new = dir.join("auth.new");
    write_private(&new, "carol:three\n");
    std::fs::rename(&new, &file).expect("rename");
    let line = hangup(&server, 2);
    assert!(line.contains(" WARN "), "{line}");
    for needle in [
        "was replaced or removed since",
        "Edit the file in place",
        "readable by the -u user",
        "keeping the previous entries",
    ] {
        assert!(line.contains(needle), "{needle:?}: {line}");
    }
    assert_eq!(auth(&server, "bob", "two"), "STORED\r\n");
    assert_eq!(
        auth(&server, "carol", "three"),
        "CLIENT_ERROR authentication failure\r\n"
    );

    // Readable by the user: reloaded by its path again.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let line = hangup(&server, 3);
    assert!(line.contains("auth file reloaded (1 entries)"), "{line}");
    assert!(!line.contains("descriptor"), "{line}");
    assert_eq!(auth(&server, "carol", "three"), "STORED\r\n");
    drop(server);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
