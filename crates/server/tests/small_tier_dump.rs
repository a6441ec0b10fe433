//! The small-object tier seen through the real binary (`--small-item-max 200
//! --small-flash`, RAM smaller than the items): `lru_crawler metadump all` lists every live
//! key exactly once — those only on the tier's pages too — and no deleted one, while
//! deletes of small items are still staged and after they are merged; `stats small` counts
//! the tier's items; and after `kill -9` no CAS value handed out before the kill (to versions
//! that lived only in RAM and died with it) is handed out again.
mod common;
use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;

use common::{read_until, scratch_dir, stats_section, value_of, Server};

/// Keys (~3.5 MB of items); 4 MiB of RAM holds part of them, the rest reach the tier.
const N: u32 = 20_000;
/// Commands sent before reading their replies.
const BATCH: usize = 200;

fn key(k: u32) -> String {
    format!("small:{k}")
}

fn args(dir: &Path) -> Vec<String> {
    vec![
        "--memory".into(),
        "4MiB".into(),
        "--small-item-max".into(),
        "200".into(),
        "--small-flash".into(),
        format!("{}:64MiB", dir.join("small.bin").display()),
    ]
}

/// Pipelined requests, each answered by one line; the replies.
fn pipelined(c: &mut TcpStream, reqs: &[Vec<u8>]) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in reqs.chunks(BATCH) {
        c.write_all(&chunk.concat()).expect("write");
        let mut got = Vec::new();
        while got.windows(2).filter(|w| w == b"\r\n").count() < chunk.len() {
            got.extend(read_until(c, b"\r\n"));
        }
        out.extend(String::from_utf8_lossy(&got).lines().map(str::to_string));
    }
    out
}

fn set_req(k: u32, len: usize) -> Vec<u8> {
    let mut r = format!("set {} 0 0 {len}\r\n", key(k)).into_bytes();
    r.extend(std::iter::repeat_n(b'v', len));
    r.extend_from_slice(b"\r\n");
    r
}

/// Keys listed by `lru_crawler metadump all`, with how often.
fn metadump(c: &mut TcpStream) -> HashMap<String, usize> {
    c.write_all(b"lru_crawler metadump all\r\n").expect("write");
    let out = read_until(c, b"END\r\n");
    let mut seen = HashMap::new();
    for line in String::from_utf8_lossy(&out).lines() {
        if let Some(k) = line.strip_prefix("key=") {
            let k = k.split_whitespace().next().unwrap_or_default();
            *seen.entry(k.replace("%3A", ":")).or_insert(0) += 1;
        }
    }
    seen
}

fn small_stat(c: &mut TcpStream, name: &str) -> u64 {
    value_of(&stats_section(c, "small"), name)
        .parse()
        .expect("number")
}

#[test]
fn metadump_lists_every_live_small_item_once_and_no_deleted_one() {
    let dir = scratch_dir("small-dump");
    let a = args(&dir);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let server = Server::start(&a);
    let mut c = server.connect();
    let sets: Vec<Vec<u8>> = (0..N).map(|k| set_req(k, 150)).collect();
    assert!(pipelined(&mut c, &sets).iter().all(|r| r == "STORED"));
    // Deletes of keys on the tier's pages and in RAM: staged ones must hide the pages.
    let dels: Vec<Vec<u8>> = (0..N)
        .filter(|k| k % 3 == 0)
        .map(|k| format!("delete {}\r\n", key(k)).into_bytes())
        .collect();
    pipelined(&mut c, &dels);
    assert!(small_stat(&mut c, "small_inserts") > u64::from(N / 4));
    let live: Vec<String> = (0..N).filter(|k| k % 3 != 0).map(key).collect();
    let seen = metadump(&mut c);
    for k in &live {
        assert_eq!(seen.get(k), Some(&1), "{k} listed once");
    }
    assert_eq!(seen.len(), live.len(), "no deleted key listed");
    // Live keys = curr_items (index) + the tier's count, within the estimate's bound.
    let curr = common::stat(
        &String::from_utf8_lossy(&{
            c.write_all(b"stats\r\n").expect("write");
            read_until(&mut c, b"END\r\n")
        }),
        "curr_items",
    );
    let small = small_stat(&mut c, "small_live_items_estimate");
    let total = curr + small;
    let want = live.len() as u64;
    assert!(
        total.abs_diff(want) <= want / 20,
        "curr_items {curr} + small {small} vs {want} live"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CAS values `gets` shows for keys `0..n`.
fn cas_of(c: &mut TcpStream, n: u32) -> Vec<u64> {
    let mut out = Vec::new();
    for k in 0..n {
        c.write_all(format!("gets {}\r\n", key(k)).as_bytes())
            .expect("write");
        let reply = String::from_utf8_lossy(&read_until(c, b"END\r\n")).to_string();
        if let Some(line) = reply.lines().find(|l| l.starts_with("VALUE ")) {
            out.push(
                line.split_whitespace()
                    .nth(4)
                    .expect("cas")
                    .parse()
                    .expect("cas"),
            );
        }
    }
    out
}

#[test]
fn kill9_never_hands_out_a_cas_value_again() {
    let dir = scratch_dir("small-kill9-cas");
    let a = args(&dir);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let server = Server::start(&a);
    let mut c = server.connect();
    let sets: Vec<Vec<u8>> = (0..N).map(|k| set_req(k, 150)).collect();
    pipelined(&mut c, &sets);
    // Newest versions, only in RAM: their CAS values are the largest handed out.
    let sets: Vec<Vec<u8>> = (0..100).map(|k| set_req(k, 40)).collect();
    pipelined(&mut c, &sets);
    let before = cas_of(&mut c, 100);
    let top = before.iter().copied().max().expect("values in RAM");
    drop(c);
    drop(server); // kill -9
    let server = Server::start(&a);
    let mut c = server.connect();
    let sets: Vec<Vec<u8>> = (0..100).map(|k| set_req(k, 40)).collect();
    pipelined(&mut c, &sets);
    for cas in cas_of(&mut c, 100) {
        assert!(
            cas > top,
            "CAS {cas} was handed out before the kill (up to {top})"
        );
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
