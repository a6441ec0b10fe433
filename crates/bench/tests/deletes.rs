//! `--delete-ratio`: DELETEs in both protocols take their share of the mix, with their own
//! latency histogram and deleted / not-found counts; with `--verify`, a server that answers
//! deletes but keeps the values is caught, and an honest one is never blamed, even with
//! requests for hot keys overlapping on several connections and threads.

mod fake_server;

use std::time::Duration;

use fake_server::Faults;
use flashtier_bench::{run, KeyDist, Protocol, Rate, Report, RunConfig, ValueSizes, WorkloadSpec};

fn config(addr: &str, protocol: Protocol, dist: &str, ratios: (f64, f64)) -> RunConfig {
    RunConfig {
        server: addr.to_string(),
        connections: 4,
        threads: 2,
        depth: 8,
        workload: WorkloadSpec {
            keys: 500,
            dist: dist.parse::<KeyDist>().unwrap(),
            scramble: true,
            sizes: "1-300".parse::<ValueSizes>().unwrap(),
            get_ratio: ratios.0,
            delete_ratio: ratios.1,
            prefix: "d:".into(),
            protocol,
            verify: true,
            cache_aside: false,
        },
        load_phase: true,
        load_depth: 8,
        load_rate: None,
        warmup: Duration::ZERO,
        duration: Duration::from_secs(60),
        ops: Some(8000),
        arrival: flashtier_bench::Arrival::Poisson,
        rates: vec![Rate::Max],
        seed: 11,
        drain_timeout: Duration::from_secs(5),
        server_stats: false,
        server_pid: None,
    }
}

fn run_against(faults: Faults, protocol: Protocol, dist: &str, ratios: (f64, f64)) -> Report {
    let srv = fake_server::start_faulty(faults);
    let r = run(&config(&srv.addr, protocol, dist, ratios), |_| {}).unwrap();
    let c = &r.rows[0].counters;
    // Every DELETE the server acknowledged as removing a key was counted (ops are measured
    // from the start: no warm-up).
    assert_eq!(
        srv.deleted.load(std::sync::atomic::Ordering::Relaxed),
        c.deletes_deleted
    );
    r
}

#[test]
fn deletes_are_measured_in_both_protocols() {
    for protocol in [Protocol::Text, Protocol::Meta] {
        let r = run_against(Faults::default(), protocol, "uniform", (0.5, 0.3));
        let row = &r.rows[0];
        let c = &row.counters;
        assert_eq!(row.errors, 0, "{protocol}: {:?}", row.first_error);
        assert_eq!(row.completed_ops, 8000);
        assert_eq!(c.gets + c.sets + c.deletes, 8000);
        assert_eq!(c.deletes, c.deletes_deleted + c.deletes_not_found);
        // 30 % DELETEs, 20 % SETs over 500 loaded keys: some find their key, some do not.
        assert!((2000..2800).contains(&c.deletes), "{protocol}: {c:?}");
        assert!(c.deletes_deleted > 0 && c.deletes_not_found > 0, "{c:?}");
        assert!(c.get_misses > 0 && c.get_hits > 0, "{c:?}");
        assert_eq!(row.latency_delete.count, c.deletes);
        assert_eq!(row.latency_get.count, c.gets);
        assert_eq!(row.latency_set.count, c.sets);
        assert!(row.latency_delete.p50_us > 0.0);
        assert_eq!((c.verified, c.verify_resurrected), (c.get_hits, 0));

        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["config"]["delete_ratio"], 0.3);
        assert_eq!(json["rows"][0]["latency_delete"]["count"], c.deletes);
        assert_eq!(
            json["rows"][0]["counters"]["deletes_not_found"],
            c.deletes_not_found
        );
    }
}

#[test]
fn an_honest_server_is_never_blamed_for_overlapping_requests() {
    // Hot keys (zipf 1.2) on 4 connections × depth 8 over 2 threads: a GET, a SET and a
    // DELETE of the same key are often in flight together.
    for protocol in [Protocol::Text, Protocol::Meta] {
        let r = run_against(Faults::default(), protocol, "zipf:1.2", (0.4, 0.3));
        let c = &r.rows[0].counters;
        assert!(c.get_hits > 1000 && c.deletes_deleted > 1000, "{c:?}");
        assert_eq!(c.verify_resurrected, 0, "{protocol}: {c:?}");
        assert_eq!(r.rows[0].errors, 0);
    }
}

#[test]
fn values_kept_after_a_delete_are_caught() {
    for protocol in [Protocol::Text, Protocol::Meta] {
        let faults = Faults {
            forget_deletes: true,
            ..Faults::default()
        };
        let r = run_against(faults, protocol, "uniform", (0.6, 0.3));
        let row = &r.rows[0];
        let c = &row.counters;
        // The fake never removes a loaded key: every DELETE "deletes", every GET hits.
        assert_eq!((c.deletes_not_found, c.get_misses), (0, 0));
        // Most GETs of a key come after one of its DELETEs with no SET since (10 % SETs).
        assert!(c.verify_resurrected > c.gets / 4, "{protocol}: {c:?}");
        assert_eq!(c.verify_mismatches, 0);
        assert!(row.errors >= c.verify_resurrected);
        let e = row.first_error.as_deref().unwrap();
        assert!(e.contains("after its DELETE was answered"), "{e}");
    }
}
