//! `server_pid` yields server CPU per op over the measured window (here the "server" is a
//! thread of this test process, so its CPU is this process's); a run with no rates but a
//! load phase (the `fill` subcommand) sets every key once and measures nothing else.

mod fake_server;

use std::time::Duration;

use flashtier_bench::{run, Arrival, KeyDist, Protocol, Rate, RunConfig, ValueSizes, WorkloadSpec};

fn config(addr: &str, rates: Vec<Rate>, load_phase: bool, pid: Option<u32>) -> RunConfig {
    RunConfig {
        server: addr.to_string(),
        connections: 2,
        threads: 1,
        depth: 4,
        workload: WorkloadSpec {
            keys: 500,
            dist: "uniform".parse::<KeyDist>().unwrap(),
            scramble: true,
            sizes: ValueSizes::Fixed(32),
            get_ratio: 0.9,
            delete_ratio: 0.0,
            prefix: "c:".into(),
            protocol: Protocol::Text,
            verify: false,
            cache_aside: false,
        },
        load_phase,
        load_depth: 4,
        load_rate: None,
        warmup: Duration::from_millis(100),
        duration: Duration::from_millis(700),
        ops: None,
        arrival: Arrival::Poisson,
        rates,
        seed: 3,
        drain_timeout: Duration::from_secs(5),
        server_stats: false,
        server_pid: pid,
    }
}

#[test]
fn server_cpu_per_op_is_reported_with_a_pid() {
    let srv = fake_server::start(0);
    let r = run(
        &config(&srv.addr, vec![Rate::Max], false, Some(std::process::id())),
        |_| {},
    )
    .unwrap();
    let row = &r.rows[0];
    assert!(row.completed_ops > 0);
    let cpu = row.server_cpu_s.expect("cpu sampled");
    // A closed loop on loopback keeps this process busy for most of 0.7 s.
    assert!(cpu > 0.0 && cpu < 10.0, "{cpu}");
    let per_op = row.server_cpu_us_per_op.expect("per op");
    assert!((per_op - cpu * 1e6 / row.completed_ops as f64).abs() < 1e-6);

    let without = run(&config(&srv.addr, vec![Rate::Max], false, None), |_| {}).unwrap();
    assert!(without.rows[0].server_cpu_s.is_none());
    // A pid that does not exist gives no figure rather than a wrong one.
    let gone = run(
        &config(&srv.addr, vec![Rate::Max], false, Some(u32::MAX)),
        |_| {},
    )
    .unwrap();
    assert!(gone.rows[0].server_cpu_s.is_none());
}

#[test]
fn fill_sets_every_key_and_measures_nothing() {
    let srv = fake_server::start(0);
    let r = run(&config(&srv.addr, vec![], true, None), |_| {}).unwrap();
    assert!(r.rows.is_empty());
    let l = r.load_phase.expect("load phase ran");
    assert_eq!(l.sets, 500);
    assert_eq!(l.counters.errors(), 0);
    // Without a load phase, no rates is still a configuration error.
    assert!(run(&config(&srv.addr, vec![], false, None), |_| {}).is_err());
}
