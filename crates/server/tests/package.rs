//! The Debian package as an administrator installs it: `scripts/build-deb.sh --no-build
//! --fast` packages the release binary this test suite was built with (cargo-deb, a few
//! seconds; the release build itself is the suite's), `dpkg -x` unpacks it into a clean
//! directory root, and then: the layout (stripped binary, split debug info in the dbgsym
//! package with the binary's build id, units, example configs, man pages, completions,
//! license), `systemd-analyze verify` on both units inside that root (host units copied in
//! for the targets they reference; the man pages they cite must open), and the installed
//! binary runs: `--version`, both example configs pass `--check-config`, and `kv` serves a
//! set/get.
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn build_id(elf: &Path) -> String {
    let notes = run(Command::new("readelf").arg("-n").arg(elf));
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build id in {}", elf.display()))
        .to_string()
}

#[test]
// Longer than clippy.toml's 120 lines; left as is by issue 29 (cache crate only).
#[allow(clippy::too_many_lines)]
fn deb_installs_verifies_and_runs() {
    let repo = repo();
    let built = PathBuf::from(env!("CARGO_BIN_EXE_flashtier"));
    assert_eq!(
        built.canonicalize().unwrap(),
        repo.join("target/release/flashtier")
            .canonicalize()
            .unwrap(),
        "run this test with `cargo test --release` in the repo's own target dir"
    );
    let out = run(Command::new(repo.join("scripts/build-deb.sh"))
        .args(["--no-build", "--fast"])
        .current_dir(&repo));
    let find = |suffix: &str| -> PathBuf {
        let p = out
            .lines()
            .map(str::trim)
            .find(|l| l.ends_with(suffix))
            .unwrap_or_else(|| panic!("no {suffix} in build-deb output:\n{out}"));
        repo.join(p)
    };
    let deb = find(".deb");
    let ddeb = find(".ddeb");

    let root = std::env::temp_dir().join(format!("ft-debroot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&root));
    let dbg = root.join("dbgsym");
    run(Command::new("dpkg").arg("-x").arg(&ddeb).arg(&dbg));

    // Layout.
    for f in [
        "usr/bin/flashtier",
        "lib/systemd/system/flashtier-kv.service",
        "lib/systemd/system/flashtier-block@.service",
        "etc/flashtier/kv.toml",
        "etc/flashtier/block-example.toml",
        "usr/share/man/man1/flashtier.1",
        "usr/share/man/man1/flashtier-kv.1",
        "usr/share/man/man1/flashtier-block.1",
        "usr/share/man/man1/flashtier-ctl.1",
        "usr/share/bash-completion/completions/flashtier",
        "usr/share/zsh/vendor-completions/_flashtier",
        "usr/share/fish/vendor_completions.d/flashtier.fish",
        "usr/share/doc/flashtier/copyright",
        "usr/share/doc/flashtier/operations.md",
        "usr/share/flashtier/grafana/flashtier.json",
    ] {
        assert!(root.join(f).is_file(), "{f} missing from the .deb");
    }
    let bin = root.join("usr/bin/flashtier");
    let sections = run(Command::new("readelf").args(["-S", "--wide"]).arg(&bin));
    assert!(
        !sections.contains(".debug_info"),
        "the packaged binary is not stripped"
    );
    let id = build_id(&bin);
    let debug = dbg.join(format!(
        "usr/lib/debug/.build-id/{}/{}.debug",
        &id[..2],
        &id[2..]
    ));
    assert!(
        debug.is_file(),
        "no split debug info at {}",
        debug.display()
    );
    let dsections = run(Command::new("readelf").args(["-S", "--wide"]).arg(&debug));
    assert!(
        dsections.contains(".debug_info"),
        "debug file without debug info"
    );
    let control = run(Command::new("dpkg-deb").arg("-I").arg(&deb));
    assert!(
        control.contains("postinst") && control.contains("adduser"),
        "{control}"
    );
    let comp =
        std::fs::read_to_string(root.join("usr/share/bash-completion/completions/flashtier"))
            .unwrap();
    assert!(comp.contains("reset-stats") && comp.contains("--log-format"));

    // systemd-analyze verify inside the root: the host's units provide the targets.
    let units = root.join("lib/systemd/system");
    for host in ["/lib/systemd/system", "/usr/lib/systemd/system"] {
        if let Ok(entries) = std::fs::read_dir(host) {
            for e in entries.flatten() {
                let dst = units.join(e.file_name());
                if !dst.exists() && e.path().is_file() {
                    let _ = std::fs::copy(e.path(), dst);
                }
            }
        }
    }
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .args(["flashtier-kv.service", "flashtier-block@example.service"])
        .env("MANPATH", root.join("usr/share/man"))
        .output()
        .expect("systemd-analyze (package systemd)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(
        verify.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
    for unit in ["flashtier-kv.service", "flashtier-block@.service"] {
        let text = std::fs::read_to_string(units.join(unit)).unwrap();
        for hardening in [
            "User=flashtier",
            "StateDirectory=flashtier/",
            "ProtectSystem=strict",
            "NoNewPrivileges=yes",
            "CapabilityBoundingSet=\n",
        ] {
            assert!(text.contains(hardening), "{unit} lacks {hardening}");
        }
    }

    // The installed binary runs.
    let version = run(Command::new(&bin).arg("--version"));
    assert!(version.starts_with("flashtier "), "{version}");
    let scratch = root.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let cfg = run(Command::new(&bin)
        .args(["kv", "--config"])
        .arg(root.join("etc/flashtier/kv.toml"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--flash",
        ])
        .arg(format!("{}/flash.bin:64MiB", scratch.display()))
        .arg("--check-config"));
    assert!(cfg.contains("configuration ok"), "{cfg}");
    let backing = scratch.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(1 << 20))
        .unwrap();
    let cfg = run(Command::new(&bin)
        .args(["block", "--config"])
        .arg(root.join("etc/flashtier/block-example.toml"))
        .arg("--backing")
        .arg(&backing)
        .arg("--cache")
        .arg(format!("{}/cache.img:64MiB", scratch.display()))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--run-dir",
        ])
        .arg(scratch.join("run"))
        .arg("--check-config"));
    assert!(
        cfg.contains("seq_threshold_kb=1024") && cfg.contains("configuration ok"),
        "{cfg}"
    );
    assert!(!scratch.join("cache.img").exists() && !scratch.join("run").exists());

    let mut kv = Command::new(&bin)
        .args(["kv", "--ram-only", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kv");
    let mut lines = BufReader::new(kv.stderr.take().unwrap()).lines();
    let addr = loop {
        let l = lines.next().expect("kv exited").unwrap();
        if let Some((_, rest)) = l.split_once(" kv: listening on ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"set k 0 0 2\r\nhi\r\nget k\r\nquit\r\n")
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert_eq!(reply, "STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\n");
    let _ = kv.kill();
    let _ = kv.wait();
    std::fs::remove_dir_all(&root).unwrap();
}
