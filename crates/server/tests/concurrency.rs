//! Many clients at once: read-modify-write commands stay atomic across connections and every
//! client gets exactly its own replies.
mod common;
use std::io::Write;

use common::{read_until, roundtrip, Server};

#[test]
fn concurrent_incr_and_cas_are_atomic() {
    let server = Server::start(&["--threads", "4"]);
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"set n 0 0 1\r\n0\r\n", b"\r\n"),
        "STORED\r\n"
    );
    let clients = 8;
    let per = 300;
    let handles: Vec<_> = (0..clients)
        .map(|id| {
            let mut s = server.connect();
            std::thread::spawn(move || {
                // Pipeline incrs and private sets/gets; check every reply belongs to us.
                let mut req = Vec::new();
                for i in 0..per {
                    req.extend_from_slice(b"incr n 1\r\n");
                    req.extend_from_slice(
                        format!("set c{id} 0 0 4\r\n{i:04}\r\nget c{id}\r\n").as_bytes(),
                    );
                }
                req.extend_from_slice(b"mn\r\n");
                s.write_all(&req).unwrap();
                let out = String::from_utf8(read_until(&mut s, b"MN\r\n")).unwrap();
                let mut lines = out.split("\r\n");
                for i in 0..per {
                    let n: u64 = lines.next().unwrap().parse().expect("incr reply");
                    assert!(n >= 1 && n <= (clients * per) as u64);
                    assert_eq!(lines.next(), Some("STORED"));
                    assert_eq!(lines.next(), Some(format!("VALUE c{id} 0 4").as_str()));
                    assert_eq!(lines.next(), Some(format!("{i:04}").as_str()));
                    assert_eq!(lines.next(), Some("END"));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let out = roundtrip(&mut c, b"get n\r\n", b"END\r\n");
    let total = clients * per;
    assert_eq!(
        out,
        format!(
            "VALUE n 0 {}\r\n{total}\r\nEND\r\n",
            total.to_string().len()
        )
    );
}

/// CPU ticks (utime + stime) of each of the server's threads named `worker-*`.
fn worker_ticks(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = t.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let comm = comm.trim().to_string();
        if !comm.starts_with("worker-") {
            continue;
        }
        let f = common::proc_stat_fields(dir.join("stat"));
        let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        out.push((comm, ticks));
    }
    out.sort();
    out
}

#[test]
fn connections_are_spread_over_the_worker_threads() {
    // Thread per core: `--threads 3` serves on three event-loop threads, and connections are
    // handed out in turn, so six busy clients keep all three busy.
    let server = Server::start(&["--threads", "3"]);
    let pid = server.child.id();
    // A thread names itself once it runs: give a loaded machine a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let before = loop {
        let t = worker_ticks(pid);
        if t.len() == 3 || std::time::Instant::now() > deadline {
            break t;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let names: Vec<&str> = before.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["worker-0", "worker-1", "worker-2"]);
    let handles: Vec<_> = (0..6)
        .map(|id| {
            let mut s = server.connect();
            std::thread::spawn(move || {
                for round in 0..50 {
                    let mut req = Vec::new();
                    for i in 0..1000 {
                        req.extend_from_slice(
                            format!("set k{id}-{i} 0 0 5\r\nv{round:04}\r\nget k{id}-{i}\r\n")
                                .as_bytes(),
                        );
                    }
                    req.extend_from_slice(b"mn\r\n");
                    s.write_all(&req).unwrap();
                    let out = read_until(&mut s, b"MN\r\n");
                    let want = format!("VALUE k{id}-999 0 5\r\nv{round:04}\r\nEND\r\nMN\r\n");
                    assert!(out.ends_with(want.as_bytes()));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let after = worker_ticks(pid);
    for ((name, t0), (_, t1)) in before.iter().zip(&after) {
        assert!(t1 > t0, "{name} did no work: {before:?} -> {after:?}");
    }
}

#[test]
fn stats_show_the_spread_of_connections_over_workers() {
    let server = Server::start(&["--threads", "3"]);
    let _idle: Vec<_> = (0..5).map(|_| server.connect()).collect();
    let mut c = server.connect();
    // Six open connections over three workers, each placed on the least busy one: two each
    // (a probe connection from start-up may still be closing: wait for it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let stats = roundtrip(&mut c, b"stats\r\n", b"END\r\n");
        let range = (
            common::stat(&stats, "worker_connections_min"),
            common::stat(&stats, "worker_connections_max"),
        );
        if range == (2, 2) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "worker connections (min, max) = {range:?}, want (2, 2)"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
