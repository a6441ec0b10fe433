//! The kv server over the flash tier, end to end through the real binary: a load several
//! times the RAM budget stays retrievable byte-exact with no evictions, and after `kill -9`
//! a restarted server serves what was flushed to flash (warm restart).
mod common;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{read_until, scratch_dir, Server};

const ITEMS: usize = 6000;
const VALUE: usize = 4000;

fn value_of(i: usize) -> Vec<u8> {
    (0..VALUE)
        .map(|j| b'a' + ((i * 7 + j) % 26) as u8)
        .collect()
}

fn load(c: &mut TcpStream, range: std::ops::Range<usize>) {
    for chunk in range.collect::<Vec<_>>().chunks(100) {
        let mut req = Vec::new();
        for &i in chunk {
            req.extend_from_slice(format!("set item:{i} {i} 0 {VALUE} noreply\r\n").as_bytes());
            req.extend_from_slice(&value_of(i));
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"mn\r\n");
        c.write_all(&req).expect("write");
        read_until(c, b"MN\r\n");
    }
}

/// Count items served byte-exact (with the right flags); panics on a wrong value.
fn count_served(c: &mut TcpStream) -> usize {
    let mut served = 0;
    for i in 0..ITEMS {
        c.write_all(format!("get item:{i}\r\n").as_bytes())
            .expect("write");
        let out = read_until(c, b"END\r\n");
        if out == b"END\r\n" {
            continue;
        }
        let mut expect = format!("VALUE item:{i} {i} {VALUE}\r\n").into_bytes();
        expect.extend_from_slice(&value_of(i));
        expect.extend_from_slice(b"\r\nEND\r\n");
        assert!(out == expect, "item:{i} served wrong bytes");
        served += 1;
    }
    served
}

#[test]
fn load_beyond_ram_then_warm_restart_after_kill9() {
    let dir = scratch_dir("kv-flash");
    let spec = format!("{}:256MiB", dir.join("flash.bin").display());
    let args = ["--memory", "8MiB", "--flash", &spec];

    let server = Server::start(&args);
    let mut c = server.connect();
    load(&mut c, 0..ITEMS);
    assert_eq!(count_served(&mut c), ITEMS, "every item retrievable");
    assert_eq!(
        server.stat("evictions"),
        0,
        "no evictions while flash has room"
    );
    // Versions still in RAM reach flash within the write-back window (2 s), and the engine
    // writes partial buffers within its flush interval (1 s).
    std::thread::sleep(Duration::from_millis(4000));
    drop(server); // SIGKILL: no clean shutdown

    let server = Server::start(&args);
    let mut c = server.connect();
    let served = count_served(&mut c);
    assert!(
        served * 100 >= ITEMS * 99,
        "only {served} of {ITEMS} items served after kill -9 and restart"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
