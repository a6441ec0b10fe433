//! Helpers shared by the integration tests.
#![allow(dead_code)]
pub mod gated;
pub mod model_ops;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use flashtier_cache::flash::{Device, FlashConfig, IoBackend};
use flashtier_cache::{Cache, CacheConfig, CacheConfigBuilder, FlashSettings, KvStore};

/// Run a future that completes on its first poll (every RAM-tier operation does).
pub fn now<F: Future>(f: F) -> F::Output {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a RAM-tier operation did not complete on first poll"),
    }
}

/// A value of `len` bytes derived from `seed`, so different writes carry different bytes.
pub fn value(seed: u64, len: usize) -> bytes::Bytes {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

/// Resident set size of this process in bytes (Linux).
pub fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Run a future to completion on this thread (flash-tier operations may wait for a read).
pub fn block_on<F: Future>(f: F) -> F::Output {
    use std::sync::Arc;
    use std::task::Wake;
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// The engine the model-style flash tests drive by hand: `FlashConfig::small()`, psync, no
/// background reclaim, and reclaim keeping every live record (`keep_limit` 1.0), so only the
/// operations a test draws move or drop anything.
pub fn foreground_engine() -> FlashConfig {
    FlashConfig {
        background_reclaim: false,
        keep_limit: 1.0,
        io_backend: flashtier_cache::flash::IoBackend::Psync,
        ..FlashConfig::small()
    }
}

/// The flash-tier tests' cache: 256 KiB of RAM in 64 KiB segments (so items move to flash
/// all the time) and a 64 KiB item limit, over the one device `dev` run with `engine`.
/// Callers add what differs (no sweeper, a clock, shards) and build.
pub fn small_flash_config(dev: Arc<dyn Device>, engine: FlashConfig) -> CacheConfigBuilder {
    let mut fs = FlashSettings::devices(vec![dev]);
    fs.engine = Some(engine);
    CacheConfig::builder()
        .memory_limit(256 << 10)
        .segment_size(64 << 10)
        .max_item_size(64 << 10)
        .flash(fs)
}

/// A cache of [`small_flash_config`] over `dev` (no sweeper) whose engine writes one chunk
/// at a time (psync, no reclaim thread, no periodic flush, device retries for 200 ms): with
/// a held-back device (`gated::Gated`) every append past the first waits for room, so the
/// tests can put the flash writer behind at will.
pub fn one_chunk_cache(dev: Arc<dyn Device>) -> Cache {
    let engine = FlashConfig {
        io_backend: IoBackend::Psync,
        background_reclaim: false,
        flush_interval: None,
        max_chunks_in_flight: 1,
        device_retry_max: std::time::Duration::from_millis(200),
        ..FlashConfig::small()
    };
    let cfg = small_flash_config(dev, engine)
        .sweep_interval(None)
        .build()
        .unwrap();
    Cache::new(cfg).unwrap()
}

/// A cache with 1 MiB of RAM over `dev` (psync, `FlashConfig::small()`, no sweeper) in
/// write-through mode (`write_back_ms 0`: every item reaches flash at its SET), for the
/// tests that wrap a small flash several times with items RAM cannot hold.
pub fn write_through_cache(dev: Arc<dyn Device>) -> flashtier_cache::Cache {
    write_through_cache_with(dev, |_| {})
}

/// [`write_through_cache`] with `tune` applied to its engine settings first.
pub fn write_through_cache_with(
    dev: Arc<dyn Device>,
    tune: impl FnOnce(&mut FlashConfig),
) -> flashtier_cache::Cache {
    let mut engine = FlashConfig {
        io_backend: flashtier_cache::flash::IoBackend::Psync,
        ..FlashConfig::small()
    };
    tune(&mut engine);
    let cfg = small_flash_config(dev, engine)
        .memory_limit(1 << 20)
        .sweep_interval(None)
        .build()
        .unwrap();
    let c = flashtier_cache::Cache::new(cfg).unwrap();
    c.set_knob("write_back_ms", "0").unwrap();
    c
}

/// A `stats extstore` value of `c`.
#[allow(dead_code)]
pub fn ext_stat(c: &flashtier_cache::Cache, name: &str) -> u64 {
    use flashtier_cache::KvStore as _;
    c.stats_section("extstore")
        .unwrap()
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or_else(|| panic!("no {name} in stats extstore"))
}
