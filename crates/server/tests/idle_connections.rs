//! Thousands of idle connections are cheap: they cost little memory and do not slow others.
mod common;
use std::time::Instant;

use common::{roundtrip, Server};

#[test]
fn thousands_of_idle_connections() {
    let server = Server::start(&["-c", "5000"]);
    let mut probe = server.connect();
    assert_eq!(roundtrip(&mut probe, b"mn\r\n", b"MN\r\n"), "MN\r\n");
    let before = server.rss_kib();
    let n = 2000;
    let t = Instant::now();
    let mut idle: Vec<_> = (0..n).map(|_| server.connect()).collect();
    eprintln!("{n} connects took {:?}", t.elapsed());
    // Every connection did something once, then idles.
    for c in idle.iter_mut().step_by(10) {
        assert_eq!(roundtrip(c, b"mn\r\n", b"MN\r\n"), "MN\r\n");
    }
    let t = Instant::now();
    assert_eq!(
        roundtrip(&mut probe, b"set k 0 0 1\r\nx\r\nget k\r\n", b"END\r\n"),
        "STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n"
    );
    assert!(t.elapsed().as_millis() < 1000);
    assert_eq!(server.stat("curr_connections"), n as u64 + 2);
    let per_conn = (server.rss_kib().saturating_sub(before)) * 1024 / n as u64;
    eprintln!("RSS per idle connection: {per_conn} bytes");
    assert!(per_conn < 16 * 1024, "{per_conn} bytes per idle connection");
}
