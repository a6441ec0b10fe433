//! Above the connection limit a client gets memcached's error line and is closed; the
//! rejection is counted and the limit frees up when clients leave.
mod common;
use std::io::Read;

use common::{roundtrip, Server};

#[test]
fn limit_rejects_then_recovers() {
    let server = Server::start(&["-c", "3"]);
    let mut held: Vec<_> = (0..3).map(|_| server.connect()).collect();
    for c in &mut held {
        assert_eq!(roundtrip(c, b"mn\r\n", b"MN\r\n"), "MN\r\n");
    }
    let mut extra = server.connect();
    let mut buf = Vec::new();
    extra.read_to_end(&mut buf).unwrap();
    assert_eq!(buf, b"ERROR Too many open connections\r\n");
    let mut first = held.remove(0);
    let out = roundtrip(&mut first, b"stats\r\n", b"END\r\n");
    assert!(out.contains("STAT rejected_connections 1\r\n"), "{out}");
    assert!(out.contains("STAT curr_connections 3\r\n"), "{out}");
    drop(first);
    drop(held);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut again = server.connect();
    assert_eq!(roundtrip(&mut again, b"mn\r\n", b"MN\r\n"), "MN\r\n");
}
