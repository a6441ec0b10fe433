//! Monitoring tools read flashtier as they read memcached: `memcached-tool` (from the
//! memcached package) `display`, `stats` and `dump` — the dump includes items whose only copy
//! is on flash —, and memcached_exporter's parsing rules (its vendored gomemcache splitting of
//! `stats`, `stats slabs`, `stats items`, `stats settings`, then a float for every value it
//! knows, a timeval for `rusage_*`, and the extstore block when `extstore_limit_maxbytes`
//! is present).
mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::{roundtrip, scratch_dir, Server};

const TOOL: &str = "/usr/share/memcached/scripts/memcached-tool";

fn tool(addr: &str, args: &[&str]) -> (String, String) {
    let out = Command::new("perl")
        .arg(TOOL)
        .arg(addr)
        .args(args)
        .output()
        .expect("memcached-tool");
    assert!(
        out.status.success(),
        "memcached-tool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn value(i: usize) -> Vec<u8> {
    (0..8000).map(|j| b'a' + ((i * 7 + j) % 26) as u8).collect()
}

/// A server with 4 MiB of RAM and a flash file, holding 2,000 items of 8 KB: most are on
/// flash only.
fn loaded(dir: &std::path::Path) -> Server {
    let flash = format!("{}:64M", dir.join("flash.bin").display());
    let server = Server::start(&["--memory", "4M", "--flash", &flash]);
    let mut c = server.connect();
    for i in 0..2000 {
        let v = value(i);
        let mut req = format!("set key:{i} {i} 0 {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(&v);
        req.extend_from_slice(b"\r\n");
        assert_eq!(roundtrip(&mut c, &req, b"\r\n"), "STORED\r\n");
    }
    server
}

#[test]
fn memcached_tool_display_stats_and_dump() {
    assert!(std::path::Path::new(TOOL).exists(), "memcached package");
    let dir = scratch_dir("memcached-tool");
    let server = loaded(&dir);
    let addr = server.addr.to_string();
    let mut c = server.connect();
    let items = roundtrip(&mut c, b"stats items\r\n", b"END\r\n");
    let flash_only: u64 = items
        .lines()
        .find_map(|l| l.strip_prefix("STAT items:2:number "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{items}"));
    assert!(flash_only > 1000, "most items on flash only: {items}");

    let (display, _) = tool(&addr, &["display"]);
    let rows: Vec<Vec<&str>> = display
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "a RAM row and a flash row: {display}");
    assert_eq!(rows[0][0], "1");
    assert_eq!(rows[1][0], "2");
    let count = |r: &Vec<&str>| r[4].parse::<u64>().expect("count");
    assert_eq!(count(&rows[1]), flash_only, "{display}");
    assert_eq!(count(&rows[0]) + count(&rows[1]), 2000, "{display}");
    assert_eq!(rows[0][1], "1024.0K", "RAM segments of 1 MiB: {display}");

    let (stats, _) = tool(&addr, &["stats"]);
    for name in [
        "curr_items",
        "get_extstore",
        "extstore_limit_maxbytes",
        "cmd_set",
    ] {
        assert!(
            stats
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} in memcached-tool stats: {stats}"
        );
    }

    let (dump, err) = tool(&addr, &["dump"]);
    assert!(err.contains("Dumping memcache contents"), "{err}");
    // "add <key> <flags> <exptime> <len>\r\n<value>\r\n" per item.
    let mut got = BTreeMap::new();
    let bytes = dump.as_bytes();
    let mut pos = 0;
    while pos < bytes.len() {
        let end = pos + dump[pos..].find("\r\n").expect("line end");
        let head: Vec<&str> = dump[pos..end].split(' ').collect();
        assert_eq!(head[0], "add", "{}", &dump[pos..end]);
        let len: usize = head[4].parse().expect("len");
        let val = &bytes[end + 2..end + 2 + len];
        got.insert(head[1].to_string(), (head[2].to_string(), val.to_vec()));
        pos = end + 2 + len + 2;
    }
    assert_eq!(got.len(), 2000, "every item dumped, flash ones too");
    for i in [0usize, 1, 777, 1999] {
        let (flags, v) = &got[&format!("key:{i}")];
        assert_eq!(flags, &i.to_string());
        assert_eq!(v, &value(i));
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// gomemcache's `statsFromAddr`: (global, slabs, items) or the error the exporter would log.
type Parsed = (
    BTreeMap<String, String>,
    BTreeMap<i64, BTreeMap<String, String>>,
    BTreeMap<i64, BTreeMap<String, String>>,
);

fn gomemcache_stats(text: &str) -> Result<Parsed, String> {
    let (mut g, mut slabs, mut items) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    for line in text.split("\r\n").filter(|l| *l != "END" && !l.is_empty()) {
        let s: Vec<&str> = line.split(' ').collect();
        if s.len() != 3 || !s[0].starts_with("STAT") {
            continue;
        }
        let f: Vec<&str> = s[1].split(':').collect();
        let v = s[2].trim().to_string();
        match f.len() {
            1 => {
                g.insert(s[1].to_string(), v);
            }
            2 => {
                let i: i64 = f[0].parse().map_err(|e| format!("{line}: {e}"))?;
                slabs
                    .entry(i)
                    .or_insert_with(BTreeMap::new)
                    .insert(f[1].to_string(), v);
            }
            3 => {
                let i: i64 = f[1].parse().map_err(|e| format!("{line}: {e}"))?;
                items
                    .entry(i)
                    .or_insert_with(BTreeMap::new)
                    .insert(f[2].to_string(), v);
            }
            _ => {}
        }
    }
    Ok((g, slabs, items))
}

fn float(m: &BTreeMap<String, String>, k: &str) -> Result<(), String> {
    match m.get(k) {
        None => Ok(()),
        Some(v) => v
            .parse::<f64>()
            .map(|_| ())
            .map_err(|e| format!("{k}={v}: {e}")),
    }
}

#[test]
// Longer than clippy.toml's 120 lines; left as is by issue 29 (cache crate only).
#[allow(clippy::too_many_lines)]
fn memcached_exporter_parses_every_section() {
    let dir = scratch_dir("exporter");
    for flash in [true, false] {
        let server = if flash {
            loaded(&dir)
        } else {
            Server::start(&[])
        };
        let mut c = server.connect();
        let mut text = String::new();
        for cmd in ["stats\r\n", "stats slabs\r\n", "stats items\r\n"] {
            text.push_str(&roundtrip(&mut c, cmd.as_bytes(), b"END\r\n"));
        }
        let (g, slabs, items) = gomemcache_stats(&text).expect("gomemcache parse");
        let mut keys: Vec<String> = [
            "uptime",
            "time",
            "cas_badval",
            "cmd_flush",
            "cmd_set",
            "cas_misses",
            "cas_hits",
            "bytes",
            "limit_maxbytes",
            "curr_items",
            "total_items",
            "bytes_read",
            "bytes_written",
            "curr_connections",
            "total_connections",
            "rejected_connections",
            "conn_yields",
            "listen_disabled_num",
            "evictions",
            "reclaimed",
            "store_too_large",
            "store_no_memory",
            "total_malloced",
            "accepting_conns",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for op in ["get", "delete", "incr", "decr", "cas", "touch"] {
            keys.push(format!("{op}_hits"));
            keys.push(format!("{op}_misses"));
        }
        for k in [
            "cmd_set",
            "cas_misses",
            "cas_hits",
            "cas_badval",
            "uptime",
            "curr_items",
        ] {
            assert!(g.contains_key(k), "the exporter needs {k}");
        }
        for k in &keys {
            float(&g, k).expect("float");
        }
        for k in ["rusage_user", "rusage_system"] {
            let v = &g[k];
            let parts: Vec<&str> = v.split('.').collect();
            assert_eq!(parts.len(), 2, "{k}={v} is a timeval");
            parts[0].parse::<f64>().expect("seconds");
            parts[1].parse::<f64>().expect("microseconds");
        }
        assert_eq!(g.contains_key("extstore_limit_maxbytes"), flash);
        if flash {
            for k in [
                "extstore_compact_lost",
                "extstore_compact_rescues",
                "extstore_compact_skipped",
                "extstore_page_allocs",
                "extstore_page_evictions",
                "extstore_page_reclaims",
                "extstore_pages_free",
                "extstore_pages_used",
                "extstore_objects_evicted",
                "extstore_objects_read",
                "extstore_objects_written",
                "extstore_objects_used",
                "extstore_bytes_evicted",
                "extstore_bytes_written",
                "extstore_bytes_read",
                "extstore_bytes_used",
                "extstore_bytes_fragmented",
                "extstore_limit_maxbytes",
                "extstore_io_queue",
            ] {
                float(&g, k).expect("extstore float");
            }
            // Items RAM evicted are on flash; the rest may still be in the write-back window.
            assert!(g["extstore_objects_written"].parse::<u64>().expect("n") > 0);
            assert!(g["get_extstore"].parse::<u64>().is_ok());
        }
        for (class, u) in items.iter() {
            for k in [
                "number",
                "age",
                "hits_to_hot",
                "hits_to_warm",
                "hits_to_cold",
                "hits_to_temp",
                "crawler_reclaimed",
                "evicted",
                "evicted_nonzero",
                "evicted_time",
                "evicted_unfetched",
                "expired_unfetched",
                "outofmemory",
                "reclaimed",
                "tailrepairs",
                "mem_requested",
                "moves_to_cold",
                "moves_to_warm",
                "moves_within_lru",
                "number_hot",
                "number_warm",
                "number_cold",
                "number_temp",
                "age_hot",
                "age_warm",
            ] {
                float(u, k).expect("items float");
            }
            // Missing keys are skipped by the exporter; the RAM class has its age.
            assert!(u.contains_key("number"));
            assert!(*class != 1 || u.contains_key("age"));
        }
        assert_eq!(items.len(), if flash { 2 } else { 1 });
        for (_, v) in slabs.iter() {
            for k in [
                "chunk_size",
                "chunks_per_page",
                "total_pages",
                "total_chunks",
                "used_chunks",
                "free_chunks",
                "free_chunks_end",
                "mem_requested",
            ] {
                float(v, k).expect("slabs float");
            }
        }
        // stats settings: every line splits into 3 (or 4) words; maxconns is a number.
        let settings = roundtrip(&mut c, b"stats settings\r\n", b"END\r\n");
        for line in settings
            .split("\r\n")
            .filter(|l| *l != "END" && !l.is_empty())
        {
            let n = line.split(' ').count();
            assert!(n == 3 || n == 4, "exporter refuses {line:?}");
        }
        let maxconns = settings
            .lines()
            .find_map(|l| l.strip_prefix("STAT maxconns "))
            .expect("maxconns");
        maxconns.trim().parse::<f64>().expect("maxconns");
        drop(server);
        let _ = std::fs::remove_file(dir.join("flash.bin"));
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
