//! A tiny in-process memcached text-protocol server for the generator's integration tests:
//! `get` and `set` only, a thread per connection, values in a shared map. `corrupt_every`
//! flips one byte in every n-th GET hit, to prove verification catches it; `stall` freezes the
//! connection that receives the n-th request for a while, like a server hiccup.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A running fake server.
pub struct FakeServer {
    /// `127.0.0.1:port`.
    pub addr: String,
    /// GET hits served.
    pub hits: Arc<AtomicU64>,
}

/// Starts a fake server; 0 means never corrupt.
pub fn start(corrupt_every: u64) -> FakeServer {
    start_with(corrupt_every, None)
}

/// Starts a fake server that also stalls once: the connection handling request number
/// `stall.0` (counted over all connections) sleeps for `stall.1` before replying.
pub fn start_with(corrupt_every: u64, stall: Option<(u64, Duration)>) -> FakeServer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let map: Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>> = Arc::default();
    let hits = Arc::new(AtomicU64::new(0));
    let h = hits.clone();
    let requests = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let map = map.clone();
            let hits = h.clone();
            let requests = requests.clone();
            std::thread::spawn(move || serve(stream, map, hits, corrupt_every, requests, stall));
        }
    });
    FakeServer { addr, hits }
}

fn serve(
    stream: TcpStream,
    map: Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>>,
    hits: Arc<AtomicU64>,
    corrupt_every: u64,
    requests: Arc<AtomicU64>,
    stall: Option<(u64, Duration)>,
) {
    let mut out = stream.try_clone().expect("clone");
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let n = requests.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some((at, pause)) = stall {
            if n == at {
                std::thread::sleep(pause);
            }
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let mut reply = Vec::new();
        match w.as_slice() {
            ["get", key] => {
                let v = map.lock().unwrap().get(key.as_bytes()).cloned();
                if let Some(mut v) = v {
                    let n = hits.fetch_add(1, Ordering::Relaxed) + 1;
                    if corrupt_every > 0 && n.is_multiple_of(corrupt_every) && !v.is_empty() {
                        v[0] ^= 0xFF;
                    }
                    reply.extend_from_slice(format!("VALUE {key} 0 {}\r\n", v.len()).as_bytes());
                    reply.extend_from_slice(&v);
                    reply.extend_from_slice(b"\r\n");
                }
                reply.extend_from_slice(b"END\r\n");
            }
            ["set", key, _flags, _exp, len] => {
                let len: usize = len.parse().expect("len");
                let mut v = vec![0; len + 2];
                if r.read_exact(&mut v).is_err() {
                    return;
                }
                v.truncate(len);
                map.lock().unwrap().insert(key.as_bytes().to_vec(), v);
                reply.extend_from_slice(b"STORED\r\n");
            }
            _ => reply.extend_from_slice(b"ERROR\r\n"),
        }
        if out.write_all(&reply).is_err() {
            return;
        }
    }
}
