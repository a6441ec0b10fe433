//! Load-then-read over both tiers, to see whether promotion brings the hot items back to
//! RAM: load `ITEMS` values of 4 KiB (RAM holds ~5% of them; the rest are demoted to an
//! in-memory flash device), then GET keys drawn from a zipf(0.99) distribution and report
//! how many hits were served from RAM and how many from flash, per phase of the read run.
//!
//! Run: `cargo run --release -p flashtier-cache --example promote_zipf [items] [gets]`
//! (defaults 40000 items, 400000 GETs, RAM = items × 4 KiB / 20).
use std::sync::Arc;

use flashtier_cache::flash::{Device, FlashConfig, IoBackend, MemoryDevice};
use flashtier_cache::{Cache, CacheConfig, FlashSettings, ItemWrite, KvStore};

const VALUE: usize = 4096;

fn ext(c: &Cache, name: &str) -> u64 {
    c.stats_section("extstore")
        .and_then(|v| v.into_iter().find(|(k, _)| k == name))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// Cumulative zipf(s) weights over ranks 1..=n.
fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=n)
        .map(|r| {
            acc += 1.0 / (r as f64).powf(s);
            acc
        })
        .collect();
    for x in &mut cdf {
        *x /= acc;
    }
    cdf
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let items: usize = args.next().map_or(Ok(40_000), |a| a.parse())?;
    let gets: usize = args.next().map_or(Ok(400_000), |a| a.parse())?;
    let ram = ((items * VALUE / 20) as u64).max(4 << 20) & !((1 << 20) - 1);
    let flash = (items * (VALUE + 512)) as u64 * 3 / 2;
    let dev: Arc<dyn Device> = Arc::new(MemoryDevice::new("zipf", flash));
    let mut fs = FlashSettings::devices(vec![dev]);
    fs.engine = Some(FlashConfig {
        io_backend: IoBackend::Psync,
        ..FlashConfig::for_capacity(flash)
    });
    let cfg = CacheConfig::builder()
        .memory_limit(ram as usize)
        .segment_size(1 << 20)
        .flash(fs)
        .build()?;
    let c = Cache::new(cfg)?;
    let value = bytes::Bytes::from(vec![7u8; VALUE]);
    for i in 0..items {
        c.set_now(
            format!("key{i}").as_bytes(),
            ItemWrite::new(value.clone(), 0, 0),
        )?;
    }
    println!(
        "loaded {items} x {VALUE} B, RAM {} MiB, flash {} MiB, {} items on flash",
        ram >> 20,
        flash >> 20,
        c.flash_items()
    );
    let cdf = zipf_cdf(items, 0.99);
    // Ranks are scattered over the key space so the hot keys are not the first loaded.
    let perm = |r: usize| (r as u64).wrapping_mul(2_654_435_761) as usize % items;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let phases = 4;
    for p in 0..phases {
        let flash0 = ext(&c, "extstore_hits");
        let mut hits = 0u64;
        let t = std::time::Instant::now();
        for _ in 0..gets / phases {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            let r = cdf.partition_point(|&c| c < u).min(items - 1);
            let k = format!("key{}", perm(r));
            if c.get_now(k.as_bytes())?.is_some() {
                hits += 1;
            }
        }
        let from_flash = ext(&c, "extstore_hits") - flash0;
        println!(
            "phase {p}: {} GETs in {:.2?}: {hits} hits, {} from RAM ({:.1}%), {from_flash} from flash",
            gets / phases,
            t.elapsed(),
            hits - from_flash,
            100.0 * (hits - from_flash) as f64 / hits.max(1) as f64
        );
    }
    for name in [
        "extstore_objects_promoted",
        "extstore_promotions_abandoned",
        "extstore_promotions_skipped",
        "extstore_objects_demoted",
        "extstore_objects_read",
    ] {
        println!("{name} {}", ext(&c, name));
    }
    c.close()?;
    Ok(())
}
