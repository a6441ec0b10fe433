//! flashtier installed as `memcached` starts from Debian's own `/etc/memcached.conf` through
//! the memcached package's `systemd-memcached-wrapper`, unchanged: the test bind-mounts the
//! flashtier binary over `/usr/bin/memcached` in a private mount and network namespace (the
//! machine's real memcached stays untouched for other tests), runs the wrapper, and checks
//! the pid file, the dropped user, `stats`, and a clean exit on SIGTERM. Also: the binary
//! started as `memcached` takes memcached's command line and refuses a bad one with one line
//! and exit status 64, creating nothing.
mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::scratch_dir;

/// The flashtier binary under the name `memcached` (a symlink in `dir`).
fn memcached_link(dir: &Path) -> std::path::PathBuf {
    let link = dir.join("memcached");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_flashtier"), &link).expect("symlink");
    link
}

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("id");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

#[test]
fn debian_wrapper_and_conf_start_flashtier() {
    assert!(
        is_root(),
        "this test mounts in a private namespace and needs root"
    );
    let wrapper = Path::new("/usr/share/memcached/scripts/systemd-memcached-wrapper");
    assert!(
        wrapper.exists() && Path::new("/etc/memcached.conf").exists(),
        "the memcached package (scripts/install-deps.sh) provides the wrapper and the conf"
    );
    let conf = std::fs::read_to_string("/etc/memcached.conf").expect("conf");
    let script = r#"
set -e
mount --make-rprivate /
ip link set lo up
mount --bind "$FT" /usr/bin/memcached
mount -t tmpfs -o "uid=$(id -u memcache),gid=$(id -g memcache),mode=0755" tmpfs /run/memcached
/usr/share/memcached/scripts/systemd-memcached-wrapper /etc/memcached.conf 2>"$ERR" &
W=$!
for i in $(seq 200); do [ -s /run/memcached/memcached.pid ] && break; sleep 0.05; done
PID=$(cat /run/memcached/memcached.pid)
echo "pidfile=$PID"
echo "wrapper=$W"
grep -E "^Uid:" /proc/$PID/status | awk '{print "uid=" $2}'
echo "memcache_uid=$(id -u memcache)"
echo "cmdline=$(tr '\0' ' ' < /proc/$PID/cmdline)"
python3 - <<'PY'
import socket
s = socket.create_connection(("127.0.0.1", 11211), timeout=10)
s.sendall(b"set k 0 0 2\r\nhi\r\nget k\r\nstats\r\n")
buf = b""
while not buf.endswith(b"END\r\n") or buf.count(b"END\r\n") < 2:
    d = s.recv(65536)
    if not d:
        break
    buf += d
for line in buf.decode().split("\r\n"):
    if line.startswith(("STORED", "VALUE", "STAT version", "STAT pid ")) or line == "hi":
        print("reply=" + line)
PY
kill -TERM $PID
set +e
wait $W
echo "exit=$?"
[ -e /run/memcached/memcached.pid ] && echo "pidfile_left=yes" || echo "pidfile_left=no"
"#;
    let dir = scratch_dir("debian-wrapper");
    let err = dir.join("wrapper.err");
    let out = Command::new("unshare")
        .args(["--mount", "--net", "--fork", "sh", "-c", script])
        .env("FT", env!("CARGO_BIN_EXE_flashtier"))
        .env("ERR", &err)
        .stdin(Stdio::null())
        .output()
        .expect("unshare");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let log = std::fs::read_to_string(&err).unwrap_or_default();
    let ctx = format!(
        "{text}\n--- stderr\n{}\n--- server\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{ctx}");
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {ctx}"))
            .to_string()
    };
    // The wrapper drops -d and execs memcached (flashtier) in the foreground.
    assert_eq!(get("pidfile"), get("wrapper"), "{ctx}");
    assert_eq!(
        get("uid"),
        get("memcache_uid"),
        "runs as -u memcache: {ctx}"
    );
    let cmdline = get("cmdline");
    assert!(cmdline.starts_with("/usr/bin/memcached "), "{ctx}");
    for flag in [
        "-m 64",
        "-p 11211",
        "-u memcache",
        "-l 127.0.0.1",
        "-P /var/run/memcached/memcached.pid",
    ] {
        assert!(
            conf.contains(flag),
            "the test assumes Debian's conf has {flag}"
        );
        assert!(cmdline.contains(flag), "{flag} passed through: {ctx}");
    }
    assert!(text.contains("reply=STORED\n"), "{ctx}");
    assert!(text.contains("reply=hi\n"), "{ctx}");
    assert!(
        text.contains("reply=STAT version 1.6.18-flashtier-"),
        "flashtier answered: {ctx}"
    );
    assert_eq!(get("exit"), "0", "{ctx}");
    assert_eq!(get("pidfile_left"), "no", "{ctx}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn started_as_memcached_it_takes_memcacheds_command_line() {
    let dir = scratch_dir("argv0");
    let mc = memcached_link(&dir);
    let out = Command::new(&mc).arg("-V").output().expect("run");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("memcached 1.6.18-flashtier-"));
    let out = Command::new(&mc).arg("-h").output().expect("run");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--unix-socket",
        "--pidfile",
        "--disable-evictions",
        "--enable-ssl",
    ] {
        assert!(help.contains(flag), "{flag} in -h: {help}");
    }
    // Bad command lines: one line, exit 64, nothing created.
    let pid = dir.join("x.pid");
    let sock = dir.join("x.sock");
    let cases: &[&[&str]] = &[
        &["--bogus"],
        &["-u", "root", "-o", "no_such_option"],
        &["-u", "root", "-o", "hashpower=99"],
        &["-u", "root", "-B", "binary"],
        &["-u", "root", "-S"],
        &["-u", "root", "-U", "11211"],
        &["-u", "root", "-Z"],
        &["-u", "no-such-user-ft", "-p", "0", "-l", "127.0.0.1:0"],
        &["-u", "root", "-Y", "/nonexistent/auth"],
        &["-u", "root", "-s", "/nonexistent/dir/x.sock"],
    ];
    for args in cases {
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["-P", pid.to_str().expect("utf-8")]);
        if !args.contains(&"-s") {
            full.extend(["-l", "127.0.0.1:0"]);
        }
        let out = Command::new(&mc).args(&full).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(64) | Some(1)),
            "{args:?}: status {:?} {err}",
            out.status
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(!pid.exists() && !sock.exists(), "{args:?} created a file");
    }
    // A usage error is 64, as memcached's EX_USAGE.
    let out = Command::new(&mc).arg("--bogus").output().expect("run");
    assert_eq!(out.status.code(), Some(64));
    if is_root() {
        let out = Command::new(&mc)
            .args(["-p", "0", "-l", "127.0.0.1:0"])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(64));
        assert!(String::from_utf8_lossy(&out.stderr).contains("without the -u switch"));
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
