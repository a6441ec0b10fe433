//! Measure recovery time per GiB: fill a file with ~4 KiB records through the engine
//! (O_DIRECT), close, reopen and time recovery from summaries and with a full scan.
//!
//! `cargo run --release -p flashtier-flash --example recovery_time -- [PATH] [SIZE] [VALUE_LEN]`
//! Defaults: `/var/tmp/flashtier-recovery.bin`, `1GiB`, `4000` (4064-byte records).
use std::sync::Arc;
use std::time::{Duration, Instant};

use flashtier_flash::{
    kind, parse_size, DeviceSpec, DropAll, Error, Flash, FlashConfig, FlashStats, RecordWrite,
};

// Longer than clippy.toml's 120 lines; left as is by issue 29 (cache crate only).
#[allow(clippy::too_many_lines)]
fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "/var/tmp/flashtier-recovery.bin".into());
    let size = args
        .get(2)
        .map(|s| parse_size(s))
        .transpose()?
        .unwrap_or(1 << 30);
    let vlen: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4000);
    let _ = std::fs::remove_file(&path);
    let spec = DeviceSpec {
        path: path.clone().into(),
        size,
        tier: 0,
        create: true,
    };
    let cfg = FlashConfig {
        background_reclaim: false,
        ..FlashConfig::default()
    };

    let (flash, info) = Flash::open_specs(
        std::slice::from_ref(&spec),
        cfg.clone(),
        Arc::new(DropAll),
        |_| {},
    )?;
    println!(
        "device {path}: {} segments of {} MiB, backend {}",
        info.segments,
        info.segment_size >> 20,
        info.backend
    );
    let value = vec![0x5au8; vlen];
    let t = Instant::now();
    let mut n = 0u64;
    loop {
        let key = n.to_le_bytes();
        let w = RecordWrite {
            kind: kind::PUT,
            key_id: n,
            version: n,
            flags: 0,
            exptime: 0,
            key: &key,
            value: &value,
        };
        match flash.append_blocking(0, &w, Duration::from_secs(30)) {
            Ok(_) => n += 1,
            Err(Error::NoSpace) => break,
            Err(e) => return Err(e),
        }
    }
    flash.flush().wait()?;
    let fill = t.elapsed();
    let written = FlashStats::get(&flash.stats().device_bytes_written);
    println!(
        "filled {n} records, {:.1} MiB to the device in {:.2} s ({:.0} MiB/s, write amplification {:.3})",
        written as f64 / 1048576.0,
        fill.as_secs_f64(),
        written as f64 / 1048576.0 / fill.as_secs_f64(),
        written as f64 / FlashStats::get(&flash.stats().bytes_written) as f64
    );
    flash.close()?;
    drop(flash);

    for full_scan in [false, true] {
        let cfg = FlashConfig {
            recovery_full_scan: full_scan,
            ..cfg.clone()
        };
        let mut got = 0u64;
        let t = Instant::now();
        let (flash, _) =
            Flash::open_specs(std::slice::from_ref(&spec), cfg, Arc::new(DropAll), |_| {
                got += 1
            })?;
        let wall = t.elapsed();
        let s = flash.stats();
        let us = FlashStats::get(&s.recovery_time_us);
        let gib = size as f64 / (1u64 << 30) as f64;
        println!(
            "recovery ({}): {got} records, {} segments, read {:.1} MiB, {:.1} ms ({:.1} ms per GiB; open total {:.1} ms)",
            if full_scan { "full scan" } else { "summaries" },
            FlashStats::get(&s.recovered_segments),
            FlashStats::get(&s.device_bytes_read) as f64 / 1048576.0,
            us as f64 / 1000.0,
            us as f64 / 1000.0 / gib,
            wall.as_secs_f64() * 1000.0
        );
        assert_eq!(got, n, "every record recovered");
        flash.close()?;
    }

    // Random reads of recovered records (O_DIRECT, one IO each), 32 in flight.
    let mut locs = Vec::new();
    let (flash, _) = Flash::open_specs(std::slice::from_ref(&spec), cfg, Arc::new(DropAll), |m| {
        locs.push(m.location)
    })?;
    let reads = 100_000usize;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let t = Instant::now();
    let mut done = 0;
    while done < reads {
        let batch: Vec<_> = (0..32)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                flash.read(locs[(x % locs.len() as u64) as usize])
            })
            .collect();
        for c in batch {
            let r = c.wait()?;
            assert_eq!(r.value.len(), vlen);
            done += 1;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "random reads: {done} in {secs:.2} s = {:.0} reads/s at queue depth 32",
        done as f64 / secs
    );
    flash.close()?;
    let _ = std::fs::remove_file(&path);
    Ok(())
}
