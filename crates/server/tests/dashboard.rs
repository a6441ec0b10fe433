//! The Grafana dashboard in packaging/grafana/flashtier.json queries only metrics the two
//! faces export: every `flashtier_*` and `process_*` name in every panel's expressions (and
//! in the instance variable's query) must appear as a sample in the `/metrics` of a running
//! `flashtier kv` (with flash) or `flashtier block`.
mod block_common;
mod common;

use std::collections::BTreeSet;

use block_common::{scratch, BlockServer};
use common::{http, scratch_dir, Server};

/// Every metric name in a PromQL expression (identifiers starting with our prefixes).
fn names_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_string = false;
    for c in expr.chars().chain([' ']) {
        if c == '"' {
            in_string = !in_string;
        }
        if !in_string && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            cur.push(c);
            continue;
        }
        if cur.starts_with("flashtier_") || cur.starts_with("process_") {
            out.push(cur.clone());
        }
        cur.clear();
    }
    out
}

/// Sample names in an exposition text.
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => exprs(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

#[test]
fn every_dashboard_metric_is_exported() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../packaging/grafana/flashtier.json"
    );
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard")).expect("json");
    let panels = dash["panels"].as_array().expect("panels");
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let targets = p["targets"].as_array().map_or(0, Vec::len);
        assert!(targets > 0, "panel {} has no query", p["title"]);
    }
    let mut all = Vec::new();
    exprs(&dash, &mut all);
    let wanted: BTreeSet<String> = all.iter().flat_map(|e| names_in(e)).collect();
    assert!(wanted.len() > 30, "{wanted:?}");

    // kv with flash, one set and one get so every family has samples.
    let dir = scratch_dir("dashboard-kv");
    let spec = format!("{}:64MiB", dir.join("flash.bin").display());
    let (kv, log) = Server::start_in(&["--admin", "127.0.0.1:0", "--flash", &spec], None);
    let admin: std::net::SocketAddr = log
        .iter()
        .find_map(|l| {
            l.split_once(" kv: admin endpoint on http://")
                .map(|(_, a)| a)
        })
        .expect("admin line")
        .parse()
        .expect("admin address");
    let mut c = kv.connect();
    common::roundtrip(&mut c, b"set k 0 0 1\r\nx\r\nget k\r\n", b"END\r\n");
    let (code, kv_text) = http(admin, "GET", "/metrics");
    assert_eq!(code, 200);

    let bdir = scratch("dashboard-block");
    let backing = bdir.join("backing.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(8 << 20))
        .expect("backing");
    let cache = format!("{}:32MiB", bdir.join("cache.img").display());
    let block = BlockServer::start(&bdir, backing.to_str().unwrap(), &cache, &[]);
    let block_text = block.ctl(&["metrics"]);

    let have: BTreeSet<String> = exported(&kv_text)
        .union(&exported(&block_text))
        .cloned()
        .collect();
    let missing: Vec<&String> = wanted.iter().filter(|n| !have.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics nobody exports: {missing:?}"
    );
    drop(kv);
    drop(block);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&bdir);
}

#[test]
fn names_are_found_in_expressions() {
    assert_eq!(
        names_in(r#"sum(rate(flashtier_a_total{instance=~"flashtier_x"}[1m])) / process_b"#),
        vec!["flashtier_a_total", "process_b"]
    );
}
