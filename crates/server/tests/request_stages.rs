//! Where a request's time goes, as an operator sees it: `stats latency` and `/metrics` carry
//! per-family and per-stage histograms (socket wait from the kernel's receive timestamp, the
//! turnaround of a read burst, the reply write) and the serving threads' scheduler
//! statistics (run-queue waits), through the real binary over TCP.
mod common;
use std::collections::HashMap;
use std::io::Write;

use common::{http, read_until, Server};

fn latency(s: &Server) -> HashMap<String, f64> {
    let mut c = s.connect();
    c.write_all(b"stats latency\r\n").expect("write");
    let out = String::from_utf8_lossy(&read_until(&mut c, b"END\r\n")).to_string();
    out.lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("STAT ")?.split(' ');
            Some((f.next()?.to_string(), f.next()?.parse().ok()?))
        })
        .collect()
}

#[test]
fn stages_and_run_queue_waits_are_reported() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let admin = format!("127.0.0.1:{port}");
    let s = Server::start(&["--threads", "2", "--admin", &admin]);
    let mut c = s.connect();
    for i in 0..200 {
        c.write_all(format!("set k{i} 0 0 5\r\nhello\r\nget k{i}\r\n").as_bytes())
            .expect("write");
        read_until(&mut c, b"END\r\n");
    }
    let l = latency(&s);
    assert!(l["latency_get_count"] >= 200.0, "{l:?}");
    assert!(l["latency_set_count"] >= 200.0);
    for stage in ["socket_wait", "turnaround", "write"] {
        let n = l[&format!("latency_stage_{stage}_count")];
        assert!(n >= 100.0, "stage {stage}: {n} records");
        assert!(l[&format!("latency_stage_{stage}_p99_us")] > 0.0);
    }
    assert!(l.contains_key("worker_0_runqueue_wait_us") && l.contains_key("worker_1_cpu_us"));
    assert!(l["worker_0_cpu_us"] + l["worker_1_cpu_us"] > 0.0, "{l:?}");
    assert!(s.stat("worker_runs") > 0);
    let (code, body) = http(&admin, "GET", "/metrics");
    assert_eq!(code, 200);
    assert!(
        body.contains("flashtier_request_stage_duration_seconds_count{stage=\"socket_wait\"}"),
        "no stage histogram in /metrics"
    );
    common::promtool_clean(&body);
}
