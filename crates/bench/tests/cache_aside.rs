//! `--cache-aside`: a GET miss is followed by a SET of that key on the same connection, so a
//! GET-only workload against an empty server fills it and then hits; without it nothing is
//! ever stored and every GET misses. Refilled values verify byte-exact.

mod fake_server;

use std::time::Duration;

use flashtier_bench::{run, KeyDist, Protocol, Rate, RunConfig, ValueSizes, WorkloadSpec};

fn config(addr: &str, cache_aside: bool) -> RunConfig {
    RunConfig {
        server: addr.to_string(),
        connections: 2,
        threads: 1,
        depth: 4,
        workload: WorkloadSpec {
            keys: 300,
            dist: KeyDist::Uniform,
            scramble: true,
            sizes: "1-300".parse::<ValueSizes>().unwrap(),
            get_ratio: 1.0,
            delete_ratio: 0.0,
            prefix: "a:".into(),
            protocol: Protocol::Text,
            verify: true,
            cache_aside,
        },
        load_phase: false,
        load_depth: 8,
        load_rate: None,
        warmup: Duration::from_millis(300),
        duration: Duration::from_millis(700),
        ops: None,
        arrival: flashtier_bench::Arrival::Poisson,
        rates: vec![Rate::Max],
        seed: 5,
        drain_timeout: Duration::from_secs(5),
        server_stats: false,
        server_pid: None,
    }
}

#[test]
fn misses_are_refilled_and_then_hit() {
    let srv = fake_server::start(0);
    let r = run(&config(&srv.addr, true), |_| {}).unwrap();
    let row = &r.rows[0];
    let c = &row.counters;
    assert_eq!(row.errors, 0);
    assert_eq!(c.verify_mismatches, 0);
    assert!(c.cache_aside_sets > 0, "no refill sent");
    assert!(c.cache_aside_sets <= c.set_ops_sent);
    // 300 keys, refilled on their first miss: the measured window mostly hits.
    assert!(
        c.get_hits * 10 >= c.gets * 9,
        "{} hits of {} gets",
        c.get_hits,
        c.gets
    );
    assert_eq!(c.cache_aside_dropped, 0);
}

#[test]
fn without_it_nothing_is_stored() {
    let srv = fake_server::start(0);
    let r = run(&config(&srv.addr, false), |_| {}).unwrap();
    let c = &r.rows[0].counters;
    assert!(c.gets > 0);
    assert_eq!(c.get_hits, 0);
    assert_eq!((c.cache_aside_sets, c.set_ops_sent), (0, 0));
}
