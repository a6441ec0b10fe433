//! With `--verify`, a server that returns a damaged value is caught: every corrupted GET hit
//! is counted as a mismatch, clean hits are not.

mod fake_server;

use std::time::Duration;

use flashtier_bench::{run, KeyDist, Protocol, Rate, RunConfig, ValueSizes, WorkloadSpec};

fn config(addr: &str) -> RunConfig {
    RunConfig {
        server: addr.to_string(),
        connections: 2,
        threads: 1,
        depth: 4,
        workload: WorkloadSpec {
            keys: 500,
            dist: KeyDist::Uniform,
            scramble: true,
            sizes: "1-300".parse::<ValueSizes>().unwrap(),
            get_ratio: 1.0,
            delete_ratio: 0.0,
            prefix: "v:".into(),
            protocol: Protocol::Text,
            verify: true,
            cache_aside: false,
        },
        load_phase: true,
        load_depth: 8,
        load_rate: None,
        warmup: Duration::ZERO,
        duration: Duration::from_secs(60),
        ops: Some(4000),
        arrival: flashtier_bench::Arrival::Poisson,
        rates: vec![Rate::Max],
        seed: 3,
        drain_timeout: Duration::from_secs(5),
        server_stats: false,
        server_pid: None,
    }
}

#[test]
fn clean_server_verifies_every_hit() {
    let srv = fake_server::start(0);
    let r = run(&config(&srv.addr), |_| {}).unwrap();
    assert_eq!(r.load_phase.as_ref().unwrap().sets, 500);
    let row = &r.rows[0];
    assert_eq!(row.completed_ops, 4000);
    assert_eq!(row.counters.get_hits, 4000);
    assert_eq!(row.counters.verified, 4000);
    assert_eq!(row.counters.verify_mismatches, 0);
    assert_eq!(row.errors, 0);
    assert_eq!(row.hit_ratio, Some(1.0));
}

#[test]
fn corrupted_values_are_counted() {
    let srv = fake_server::start(10);
    let r = run(&config(&srv.addr), |_| {}).unwrap();
    let row = &r.rows[0];
    assert_eq!(row.counters.verified, 4000);
    // Every 10th hit the server served is damaged; all of them are in the measured window.
    assert_eq!(row.counters.verify_mismatches, 400);
    assert!(row.errors >= 400);
    assert!(row.first_error.as_deref().unwrap().contains("mismatch"));
}
