//! Opening the cache device, and `--reformat-on-mismatch`: a cache formatted for another
//! size than `--cache PATH:SIZE` now gives cannot be opened at the new size, and formatting
//! it would drop the dirty blocks it holds — writes acknowledged to clients that the backing
//! does not have yet. So the reformat is done in two opens: the cache is opened at the size
//! it was formatted for (recovering its dirty blocks), every dirty block is written back to
//! the backing and the cache is closed; only then is it opened at the new size with the
//! engine's `reformat_on_mismatch`, and starts empty. If the write-back cannot finish (the
//! backing refuses writes, or no block moves for [`STALL`]), the start fails as a
//! [`crate::cli::Conflict`] and nothing is formatted. `--force-format` skips the write-back
//! (what the cache holds is lost, as documented for that flag).
//!
//! Runs on the start-up task, before the listeners serve: no client request reaches either
//! open.
use std::sync::Arc;
use std::time::{Duration, Instant};

use flashtier_backend::BlockBackend;
use flashtier_blockcache::{BlockCache, BlockCacheConfig};
use flashtier_flash::{DeviceSpec, FlashConfig};

use super::BlockConfig;

/// How long the write-back may go without a block written back before the reformat is
/// refused.
const STALL: Duration = Duration::from_secs(30);

/// What opening the cache gave: the cache, or the cache crate's error.
pub type Opened = Result<Arc<BlockCache>, flashtier_blockcache::Error>;

/// Open the cache device `spec` over `backing` on a blocking thread, with `tunables` and,
/// if `reformat`, the engine's `reformat_on_mismatch`.
pub async fn open(
    cfg: &BlockConfig,
    spec: DeviceSpec,
    backing: &Arc<dyn BlockBackend>,
    tunables: Vec<(String, String)>,
    reformat: bool,
) -> Result<Opened, tokio::task::JoinError> {
    let flash = FlashConfig {
        direct_io: cfg.direct_io,
        force_format: cfg.force_format,
        reformat_on_mismatch: reformat,
        ..FlashConfig::for_capacity(spec.size)
    };
    let bc = BlockCacheConfig {
        block_size: cfg.block_size,
        flash: Some(flash),
        tunables,
    };
    let backing = Arc::clone(backing);
    tokio::task::spawn_blocking(move || BlockCache::open_specs(&[spec], backing, bc)).await
}

/// The size the cache device was formatted for, when that is why it did not open.
pub fn resized(opened: &Opened) -> Option<u64> {
    match opened {
        Err(flashtier_blockcache::Error::Flash(flashtier_flash::Error::Resized {
            formatted,
            ..
        })) => Some(*formatted),
        _ => None,
    }
}

/// Open the cache at the `formatted` size it has, write every dirty block back to the
/// backing and close it. Fails, with what to do instead, if a block cannot be written back.
pub async fn write_back_at(
    cfg: &BlockConfig,
    formatted: u64,
    backing: &Arc<dyn BlockBackend>,
) -> anyhow::Result<()> {
    let old = DeviceSpec {
        size: formatted,
        ..cfg.cache.clone()
    };
    let refuse = |why: String| -> anyhow::Error {
        let path = cfg.cache.path.display().to_string();
        let text = crate::startup::resized_keep(
            crate::startup::Face::Block,
            &path,
            formatted,
            cfg.cache.size,
        );
        anyhow::Error::new(crate::cli::Conflict(format!(
            "{text}. --reformat-on-mismatch could not write its dirty blocks back first \
             ({why}), so nothing was formatted; --force-format formats it anyway (the dirty \
             blocks are lost)"
        )))
    };
    let cache = open(cfg, old, backing, Vec::new(), false)
        .await
        .map_err(|e| refuse(format!("open task: {e}")))?
        .map_err(|e| refuse(format!("cannot open it at its old size: {e}")))?;
    let dirty = cache.dirty_blocks();
    log::info!(
        "--reformat-on-mismatch: {} was formatted for {}; writing its {dirty} dirty blocks back \
         to the backing before formatting it at {}",
        cfg.cache.path.display(),
        flashtier_flash::format_size(formatted),
        flashtier_flash::format_size(cfg.cache.size)
    );
    let drained = if dirty > 0 {
        let writeback = cache.start();
        let r = drain(&cache).await;
        cache.interrupt();
        let _ = writeback.await;
        r
    } else {
        Ok(())
    };
    let report = cache.shutdown().await;
    drop(cache);
    drained.map_err(refuse)?;
    if report.dirty_left > 0 {
        return Err(refuse(format!(
            "{} dirty blocks left at close",
            report.dirty_left
        )));
    }
    log::info!("--reformat-on-mismatch: {dirty} dirty blocks written back");
    Ok(())
}

/// Write back every dirty block; fails when none has moved for [`STALL`].
async fn drain(cache: &BlockCache) -> Result<(), String> {
    let flush = cache.flush_wait();
    tokio::pin!(flush);
    let mut left = cache.dirty_blocks();
    let mut moved = Instant::now();
    loop {
        tokio::select! {
            r = &mut flush => {
                r.map_err(|e| e.to_string())?;
                break;
            }
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                let now = cache.dirty_blocks();
                if now < left {
                    (left, moved) = (now, Instant::now());
                } else if moved.elapsed() >= STALL {
                    return Err(format!(
                        "{now} dirty blocks not written back for {} s; last error: {}",
                        STALL.as_secs(),
                        cache.last_error().unwrap_or_else(|| "none".into())
                    ));
                }
            }
        }
    }
    match cache.dirty_blocks() {
        0 => Ok(()),
        n => Err(format!("{n} dirty blocks left after the flush")),
    }
}
