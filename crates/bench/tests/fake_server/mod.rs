//! A tiny in-process memcached server for the generator's integration tests: `get`, `set`,
//! `delete` and their meta forms `mg <k> v`, `ms <k> <len>`, `md <k>` only, a thread per
//! connection, values in a shared map. `corrupt_every` flips one byte in every n-th GET hit,
//! to prove verification catches it; `stall` freezes the connection that receives the n-th
//! request for a while, like a server hiccup; `forget_deletes` answers every delete as if it
//! removed the key but keeps the value, like a server that loses its tombstones.
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
    /// Deletes that found the key (and, unless forgetting, removed it).
    pub deleted: Arc<AtomicU64>,
}

/// Faults a fake server injects.
#[derive(Clone, Copy, Default)]
pub struct Faults {
    /// Flip a byte in every n-th GET hit (0: never).
    pub corrupt_every: u64,
    /// The connection handling request number `.0` (counted over all connections) sleeps
    /// for `.1` before replying.
    pub stall: Option<(u64, Duration)>,
    /// Reply `DELETED`/`HD` to a delete of a present key but keep its value.
    pub forget_deletes: bool,
}

/// Starts a fake server; 0 means never corrupt.
pub fn start(corrupt_every: u64) -> FakeServer {
    start_with(corrupt_every, None)
}

/// Starts a fake server that also stalls once: the connection handling request number
/// `stall.0` (counted over all connections) sleeps for `stall.1` before replying.
pub fn start_with(corrupt_every: u64, stall: Option<(u64, Duration)>) -> FakeServer {
    start_faulty(Faults {
        corrupt_every,
        stall,
        ..Faults::default()
    })
}

/// Starts a fake server with the given faults.
pub fn start_faulty(faults: Faults) -> FakeServer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let map: Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>> = Arc::default();
    let counts = Counts::default();
    let (hits, deleted) = (counts.hits.clone(), counts.deleted.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let map = map.clone();
            let counts = counts.clone();
            std::thread::spawn(move || serve(stream, map, counts, faults));
        }
    });
    FakeServer {
        addr,
        hits,
        deleted,
    }
}

#[derive(Clone, Default)]
struct Counts {
    hits: Arc<AtomicU64>,
    deleted: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
}

fn serve(
    stream: TcpStream,
    map: Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>>,
    counts: Counts,
    faults: Faults,
) {
    let mut out = stream.try_clone().expect("clone");
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let n = counts.requests.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some((at, pause)) = faults.stall {
            if n == at {
                std::thread::sleep(pause);
            }
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let mut reply = Vec::new();
        let get = |key: &str| {
            let mut v = map.lock().unwrap().get(key.as_bytes()).cloned()?;
            let n = counts.hits.fetch_add(1, Ordering::Relaxed) + 1;
            let every = faults.corrupt_every;
            if every > 0 && n.is_multiple_of(every) && !v.is_empty() {
                v[0] ^= 0xFF;
            }
            Some(v)
        };
        let delete = |key: &str| {
            let mut map = map.lock().unwrap();
            let found = if faults.forget_deletes {
                map.contains_key(key.as_bytes())
            } else {
                map.remove(key.as_bytes()).is_some()
            };
            if found {
                counts.deleted.fetch_add(1, Ordering::Relaxed);
            }
            found
        };
        match w.as_slice() {
            ["get", key] => {
                if let Some(v) = get(key) {
                    reply.extend_from_slice(format!("VALUE {key} 0 {}\r\n", v.len()).as_bytes());
                    reply.extend_from_slice(&v);
                    reply.extend_from_slice(b"\r\n");
                }
                reply.extend_from_slice(b"END\r\n");
            }
            ["mg", key, "v"] => match get(key) {
                Some(v) => {
                    reply.extend_from_slice(format!("VA {}\r\n", v.len()).as_bytes());
                    reply.extend_from_slice(&v);
                    reply.extend_from_slice(b"\r\n");
                }
                None => reply.extend_from_slice(b"EN\r\n"),
            },
            ["set", key, _, _, len] | ["ms", key, len] => {
                let len: usize = len.parse().expect("len");
                let mut v = vec![0; len + 2];
                if r.read_exact(&mut v).is_err() {
                    return;
                }
                v.truncate(len);
                map.lock().unwrap().insert(key.as_bytes().to_vec(), v);
                reply.extend_from_slice(if w[0] == "ms" {
                    b"HD\r\n"
                } else {
                    b"STORED\r\n"
                });
            }
            ["delete", key] => {
                reply.extend_from_slice(if delete(key) {
                    b"DELETED\r\n"
                } else {
                    b"NOT_FOUND\r\n"
                });
            }
            ["md", key] => reply.extend_from_slice(if delete(key) { b"HD\r\n" } else { b"NF\r\n" }),
            _ => reply.extend_from_slice(b"ERROR\r\n"),
        }
        if out.write_all(&reply).is_err() {
            return;
        }
    }
}
