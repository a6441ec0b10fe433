//! Unit tests of the whole cache that drive a component by hand (a promotion's phases, a
//! write-back pass, a write waiting out back-pressure) through `Cache::core` and
//! `Cache::tier`. The components' own tests, with fakes, are in their files; the behaviours
//! seen through the public API are in `tests/`.
mod backpressure;
mod get_if_ready;
mod promote;
mod writeback;

/// A cache over a 256 KiB flash file (psync, small segments) holding `k0`..`k399`, 2,000
/// bytes of `i as u8` each: the oldest on flash only, the newest still in RAM.
fn loaded_flash_cache(name: &str) -> crate::Cache {
    let engine = crate::flash::FlashConfig {
        io_backend: crate::flash::IoBackend::Psync,
        ..crate::flash::FlashConfig::small()
    };
    let (settings, builder) = crate::config::test_flash(name, 256 << 10, engine);
    let cfg = builder.flash(settings).build().unwrap();
    let c = crate::Cache::new(cfg).unwrap();
    for i in 0..400u32 {
        let v = bytes::Bytes::from(vec![i as u8; 2000]);
        c.set_now(format!("k{i}").as_bytes(), crate::ItemWrite::new(v, 0, 0))
            .unwrap();
    }
    c
}
