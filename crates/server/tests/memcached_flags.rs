//! memcached's behaviour flags do what memcached's do: -M (an error instead of evicting),
//! -C (no CAS), -F (no flush_all), -X (no dumps), -A (`shutdown`), -R (yield after N
//! requests), -o idle_timeout, -vv (every command logged), -D (detail prefixes), -l lists and
//! ip:port, -b/-c reported; options without effect are accepted with one warning line each.
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{closed, connect_to, roundtrip, stat, Server};

#[test]
fn disable_evictions_answers_out_of_memory() {
    // RAM only, 4 MiB: with -M the writes that would evict fail instead.
    let server = Server::start(&["-M", "--memory", "4M"]);
    let mut c = server.connect();
    let v = vec![b'x'; 100_000];
    let mut errors = 0;
    for i in 0..200 {
        let mut req = format!("set k{i} 0 0 {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(&v);
        req.extend_from_slice(b"\r\n");
        match roundtrip(&mut c, &req, b"\r\n").as_str() {
            "STORED\r\n" => {}
            "SERVER_ERROR out of memory storing object\r\n" => errors += 1,
            other => panic!("{other}"),
        }
    }
    assert!(errors > 100, "{errors} refusals");
    let stats = roundtrip(&mut c, b"stats\r\n", b"END\r\n");
    assert_eq!(stat(&stats, "evictions"), 0);
    assert_eq!(stat(&stats, "store_no_memory"), errors);
    // Nothing stored was lost.
    let kept = 200 - errors;
    assert_eq!(
        roundtrip(&mut c, b"get k0\r\n", b"END\r\n").len(),
        "VALUE k0 0 100000\r\n\r\nEND\r\n".len() + 100_000
    );
    assert_eq!(stat(&stats, "curr_items"), kept);
    let settings = roundtrip(&mut c, b"stats settings\r\n", b"END\r\n");
    assert!(settings.contains("STAT evictions off\r\n"), "{settings}");
}

#[test]
fn cas_flush_dump_and_shutdown_switches() {
    let server = Server::start(&["-C", "-F", "-X"]);
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"set a 0 0 1\r\nx\r\ngets a\r\n", b"END\r\n"),
        "STORED\r\nVALUE a 0 1 0\r\nx\r\nEND\r\n"
    );
    assert_eq!(
        roundtrip(
            &mut c,
            b"cas a 0 0 1 12345\r\ny\r\ncas b 0 0 1 1\r\nz\r\n",
            b"NOT_FOUND\r\n"
        ),
        "STORED\r\nNOT_FOUND\r\n"
    );
    assert_eq!(
        roundtrip(
            &mut c,
            b"set n 0 0 1\r\n1\r\nma n C999 c\r\nmd n C999\r\n",
            b"HD\r\n"
        ),
        "STORED\r\nHD c0\r\nHD\r\n",
        "a compare value matches any item"
    );
    assert_eq!(
        roundtrip(&mut c, b"flush_all\r\n", b"\r\n"),
        "CLIENT_ERROR flush_all not allowed\r\n"
    );
    assert_eq!(
        roundtrip(&mut c, b"stats cachedump 1 0\r\n", b"\r\n"),
        "CLIENT_ERROR stats cachedump not allowed\r\n"
    );
    assert_eq!(
        roundtrip(&mut c, b"lru_crawler metadump all\r\n", b"\r\n"),
        "ERROR metadump not allowed\r\n"
    );
    assert_eq!(
        roundtrip(&mut c, b"shutdown\r\n", b"\r\n"),
        "ERROR: shutdown not enabled\r\n"
    );
    let settings = roundtrip(&mut c, b"stats settings\r\n", b"END\r\n");
    for want in ["cas_enabled no", "flush_enabled no", "dump_enabled no"] {
        assert!(settings.contains(&format!("STAT {want}\r\n")), "{settings}");
    }
    drop(server);

    let mut server = Server::start(&["-A"]);
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"shutdown now\r\n", b"\r\n"),
        "CLIENT_ERROR invalid shutdown mode\r\n"
    );
    use std::io::Write as _;
    c.write_all(b"shutdown\r\n").expect("write");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = server.child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "shutdown did not stop the server"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
}

#[test]
fn yields_idle_timeout_and_listen_lists() {
    let server = Server::start(&["-R", "2", "-o", "idle_timeout=1", "-b", "64", "-c", "50"]);
    let mut c = server.connect();
    let out = roundtrip(
        &mut c,
        b"set a 0 0 1\r\n1\r\nincr a 1\r\nincr a 1\r\nincr a 1\r\nincr a 1\r\nget a\r\n",
        b"END\r\n",
    );
    assert!(out.ends_with("VALUE a 0 1\r\n5\r\nEND\r\n"), "{out}");
    let stats = roundtrip(&mut c, b"stats\r\n", b"END\r\n");
    assert!(stat(&stats, "conn_yields") >= 2, "{stats}");
    let settings = roundtrip(&mut c, b"stats settings\r\n", b"END\r\n");
    for want in [
        "reqs_per_event 2",
        "idle_timeout 1",
        "tcp_backlog 64",
        "maxconns 50",
    ] {
        assert!(settings.contains(&format!("STAT {want}\r\n")), "{settings}");
    }
    // Idle for more than a second: closed by the server (waited for up to 30 s).
    let mut idle = server.connect();
    idle.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    assert!(closed(&mut idle), "idle connection not closed");
    let stats = roundtrip(&mut server.connect(), b"stats\r\n", b"END\r\n");
    assert!(stat(&stats, "idle_kicks") >= 1);
    drop(server);

    // -l with a list and ip:port, -p for the entries without a port.
    let port = || {
        let a = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
        a.local_addr().expect("addr").port()
    };
    let (pa, pb) = (port(), port());
    let list = format!("127.0.0.2:{pa},127.0.0.3:{pb}");
    let server = Server::start(&["-l", &list]);
    let mut c2 = connect_to(("127.0.0.2", pa));
    assert_eq!(roundtrip(&mut c2, b"mn\r\n", b"\r\n"), "MN\r\n");
    let mut c3 = connect_to(("127.0.0.3", pb));
    assert_eq!(roundtrip(&mut c3, b"mn\r\n", b"\r\n"), "MN\r\n");
    drop(server);
}

#[test]
fn very_verbose_logs_every_command_and_warnings_are_one_line() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flashtier"))
        .args(["kv", "--ram-only", "-l", "127.0.0.1:0", "-vv", "-D", "/"])
        .args([
            "-o",
            "lru_crawler_sleep=50,slab_reassign",
            "-f",
            "1.5",
            "-L",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut warnings = Vec::new();
    let addr = loop {
        let l = lines.next().expect("line").expect("read");
        if l.contains(" WARN ") {
            warnings.push(l.clone());
        }
        if let Some((_, rest)) = l.split_once(" kv: listening on ") {
            break rest.split_whitespace().next().expect("addr").to_string();
        }
    };
    assert_eq!(warnings.len(), 4, "{warnings:?}");
    assert!(warnings
        .iter()
        .any(|w| w.contains("lru_crawler_sleep=50") && w.contains("no effect")));
    assert!(warnings.iter().any(|w| w.contains("-L")));
    let mut c = connect_to(&addr);
    assert_eq!(
        roundtrip(&mut c, b"set p/1 0 0 2\r\nhi\r\nget p/1\r\n", b"END\r\n"),
        "STORED\r\nVALUE p/1 0 2\r\nhi\r\nEND\r\n"
    );
    assert_eq!(
        roundtrip(&mut c, b"stats detail dump\r\n", b"END\r\n"),
        "PREFIX p get 1 hit 1 set 1 del 0\r\nEND\r\n"
    );
    let mut seen = Vec::new();
    for l in lines.by_ref() {
        let l = l.expect("read");
        seen.push(l.clone());
        if l.contains(">1 PREFIX") || seen.len() > 50 {
            break;
        }
    }
    let has = |needle: &str| {
        seen.iter()
            .any(|l| l.contains(" DEBUG ") && l.contains(needle))
    };
    assert!(has("<1 set p/1 0 0 2"), "{seen:?}");
    assert!(has(">1 STORED"), "{seen:?}");
    assert!(has("<1 get p/1"), "{seen:?}");
    assert!(has(">1 VALUE p/1 0 2"), "{seen:?}");
    let _ = child.kill();
    let _ = child.wait();
}
