//! `flashtier kv --admin`: `/metrics` is valid Prometheus text with the flash counters
//! (checked line by line here and by `promtool check metrics`, which must find nothing),
//! latency histograms and process metrics, answers `HEAD`; `/stats` and `/knobs` list
//! values, and a knob POSTed over HTTP takes effect in the protocol's `stats extstore` (the
//! same path as `extstore <knob> <value>`).
mod common;

use std::net::SocketAddr;

use common::{http, promtool_clean, roundtrip, scratch_dir, stats_section, value_of, Server};

fn start_with_admin(extra: &[&str]) -> (Server, SocketAddr) {
    let mut args = vec!["--admin", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let (server, log) = Server::start_in(&args, None);
    let admin = log
        .iter()
        .find_map(|l| {
            l.split_once(" kv: admin endpoint on http://")
                .map(|(_, a)| a)
        })
        .unwrap_or_else(|| panic!("no admin address logged: {log:?}"))
        .parse()
        .expect("admin address");
    (server, admin)
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Check the exposition format line by line; return (name, value) of the samples.
fn parse_metrics(text: &str) -> Vec<(String, f64)> {
    let mut samples = Vec::new();
    let mut typed = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let name = parts.next().expect("type name");
            assert!(valid_name(name), "bad metric name in {line:?}");
            let kind = parts.next().expect("type kind");
            assert!(
                ["counter", "gauge", "histogram"].contains(&kind),
                "bad type in {line:?}"
            );
            typed.insert(name.to_string());
            continue;
        }
        assert!(
            !line.starts_with('#') || line.starts_with("# HELP "),
            "{line:?}"
        );
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("name value");
        let name = series.split('{').next().expect("name");
        assert!(valid_name(name), "bad metric name in {line:?}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
            .unwrap_or(name);
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                assert!(
                    labels.starts_with('{') && labels.ends_with('}'),
                    "bad labels in {line:?}"
                );
            }
        }
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        assert!(typed.contains(family), "no # TYPE before {line:?}");
        samples.push((name.to_string(), v));
    }
    samples
}

#[test]
fn metrics_stats_and_knobs_over_http() {
    let dir = scratch_dir("kv-admin");
    let spec = format!("{}:64MiB", dir.join("flash.bin").display());
    let (server, admin) = start_with_admin(&["--memory", "8MiB", "--flash", &spec]);
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"set k 0 0 3\r\nabc\r\nget k\r\n", b"END\r\n"),
        "STORED\r\nVALUE k 0 3\r\nabc\r\nEND\r\n"
    );

    let (code, text) = http(admin, "GET", "/metrics");
    assert_eq!(code, 200);
    let samples = parse_metrics(&text);
    let get = |n: &str| {
        samples
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no {n} in {text}"))
    };
    assert_eq!(get("flashtier_cmd_get_total"), 1.0);
    assert_eq!(get("flashtier_curr_items"), 1.0);
    // Written at once, or still inside the write-back window (2 s).
    assert!(get("flashtier_extstore_objects_written_total") <= 1.0);
    // One item: what an item costs at a working load, not the index's fixed tables
    // (237504 bytes) charged to it (docs/stats.md).
    let per_item = get("flashtier_ram_bytes_per_flash_item");
    assert!(per_item > 8.0 && per_item < 32.0, "{per_item}");
    for n in [
        "flashtier_extstore_bytes_written_total",
        "flashtier_extstore_segments_free",
        "flashtier_extstore_compactions_total",
        "flashtier_extstore_io_queue",
        "flashtier_extstore_checksum_failures_total",
        "flashtier_flash_bytes_used",
        "flashtier_flash_segments",
        "flashtier_flash_recovery_time_seconds",
        "flashtier_extstore_knob_item_size",
        "flashtier_extstore_knob_append_wait_seconds",
        "flashtier_extstore_live_bytes",
        "flashtier_extstore_dead_bytes",
        "flashtier_extstore_live_ratio",
        "flashtier_extstore_compaction_bytes_read_total",
        "flashtier_extstore_compaction_bytes_written_total",
        "flashtier_extstore_device_bytes_per_byte_stored",
        "flashtier_extstore_written_back_total",
        "flashtier_extstore_write_back_queue",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        get(n);
    }
    assert_eq!(get("flashtier_extstore_knob_append_wait_seconds"), 0.2);
    assert_eq!(get("flashtier_extstore_knob_write_back_seconds"), 2.0);
    // One get and one set, each in its command family's histogram.
    assert!(
        text.contains("flashtier_request_duration_seconds_count{command=\"get\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("flashtier_request_duration_seconds_count{command=\"set\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("flashtier_flash_io_duration_seconds_bucket{op=\"write\",le=\"+Inf\"}"));
    assert!(
        text.contains("# TYPE flashtier_cmd_get_total counter\n"),
        "{text}"
    );
    promtool_clean(&text);
    let (code, head) = http(admin, "HEAD", "/metrics");
    assert_eq!((code, head.as_str()), (200, ""));
    assert!(
        text.contains("# TYPE flashtier_curr_items gauge\n"),
        "{text}"
    );

    let (code, stats) = http(admin, "GET", "/stats");
    assert_eq!(code, 200);
    assert!(stats.lines().any(|l| l == "cmd_get=1"), "{stats}");
    assert!(stats
        .lines()
        .any(|l| l.starts_with("extstore_objects_written=")));

    let (code, knobs) = http(admin, "GET", "/knobs");
    assert_eq!(code, 200);
    assert!(knobs.lines().any(|l| l == "item_size=0"), "{knobs}");
    assert!(
        knobs.lines().any(|l| l == "reclaim_policy=cost-benefit"),
        "{knobs}"
    );
    assert!(knobs.lines().any(|l| l == "write_back_ms=2000"), "{knobs}");
    assert_eq!(
        http(admin, "GET", "/knobs?drop_unread"),
        (200, "drop_unread=0\n".into())
    );

    // Set over HTTP; the protocol sees it.
    let (code, body) = http(admin, "POST", "/knobs?item_size=2k&reclaim_policy=greedy");
    assert_eq!(code, 200, "{body}");
    assert_eq!(body, "item_size=2048\nreclaim_policy=greedy\n");
    let (code, body) = http(admin, "PUT", "/knobs?compact_under=1");
    assert_eq!(code, 200, "{body}");
    let ext = stats_section(&mut c, "extstore");
    assert_eq!(value_of(&ext, "extstore_knob_item_size"), "2048");
    assert_eq!(value_of(&ext, "extstore_knob_reclaim_policy"), "greedy");
    assert_eq!(value_of(&ext, "extstore_knob_free_low_watermark"), "1");

    // Refusals.
    let (code, body) = http(admin, "POST", "/knobs?bogus=1");
    assert_eq!(code, 400);
    assert!(body.contains("unknown knob bogus"), "{body}");
    assert_eq!(http(admin, "POST", "/knobs?item_size=x").0, 400);
    assert_eq!(http(admin, "POST", "/knobs").0, 400);
    assert_eq!(http(admin, "GET", "/knobs?item_size=1").0, 405);
    assert_eq!(http(admin, "DELETE", "/metrics").0, 405);
    assert_eq!(http(admin, "GET", "/nope").0, 404);
    let ext = stats_section(&mut c, "extstore");
    assert_eq!(value_of(&ext, "extstore_knob_item_size"), "2048");

    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ram_only_metrics() {
    let (server, admin) = start_with_admin(&["--ram-only"]);
    let mut c = server.connect();
    roundtrip(&mut c, b"get x\r\n", b"END\r\n");
    let (code, text) = http(admin, "GET", "/metrics");
    assert_eq!(code, 200);
    let samples = parse_metrics(&text);
    assert!(samples
        .iter()
        .any(|(k, v)| k == "flashtier_get_misses_total" && *v == 1.0));
    promtool_clean(&text);
    assert!(!text.contains("extstore"), "{text}");
    assert_eq!(http(admin, "GET", "/knobs"), (200, String::new()));
    assert_eq!(http(admin, "POST", "/knobs?item_size=1").0, 400);
}

/// With the small-object tier on, `/metrics` carries `stats small` too (its live-item count
/// as a gauge, its page counters as counters), and promtool still finds nothing.
#[test]
fn metrics_include_the_small_tier() {
    let dir = scratch_dir("kv-admin-small");
    let spec = format!("{}:16MiB", dir.join("small.bin").display());
    let (server, admin) = start_with_admin(&[
        "--memory",
        "8MiB",
        "--small-item-max",
        "200",
        "--small-flash",
        &spec,
    ]);
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"set k 0 0 3\r\nabc\r\n", b"\r\n"),
        "STORED\r\n"
    );
    let (code, text) = http(admin, "GET", "/metrics");
    assert_eq!(code, 200);
    for needle in [
        "# TYPE flashtier_small_live_items_estimate gauge",
        "# TYPE flashtier_small_sets gauge",
        "# TYPE flashtier_small_page_writes_total counter",
        "flashtier_small_restart_clean 0",
    ] {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }
    promtool_clean(&text);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
