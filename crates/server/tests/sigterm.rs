//! SIGTERM stops accepting, lets in-flight requests finish and exits 0.
mod common;
use std::io::{Read, Write};
use std::time::Duration;

use common::{roundtrip, Server};

#[test]
fn sigterm_exits_cleanly_after_in_flight_requests() {
    let mut server = Server::start(&[]);
    let mut idle = server.connect();
    assert_eq!(roundtrip(&mut idle, b"mn\r\n", b"MN\r\n"), "MN\r\n");
    let mut busy = server.connect();
    let mut req = Vec::new();
    for i in 0..500 {
        req.extend_from_slice(format!("set k{i} 0 0 1\r\nx\r\n").as_bytes());
    }
    busy.write_all(&req).unwrap();
    let status = server
        .terminate(Duration::from_secs(10))
        .expect("exited in time");
    assert!(status.success(), "exit status {status:?}");
    let mut out = Vec::new();
    busy.read_to_end(&mut out).unwrap();
    assert_eq!(out, b"STORED\r\n".repeat(500));
    let mut rest = Vec::new();
    idle.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    assert!(
        std::net::TcpStream::connect(server.addr).is_err(),
        "listener closed"
    );
}
