//! `flashtier block`: validate the configuration ([`BlockConfig`], also all that
//! `--check-config` does), lock the run dir, open the backing (file, block device or NBD
//! URI) and the flash cache ([`reformat`]: a cache formatted for another size is refused, or
//! with `--reformat-on-mismatch` written back at its old size and then formatted), recover
//! dirty blocks, bind the NBD and admin listeners, and only then announce that it serves.
//! The mode is the one given at start, else the one last set at run time ([`saved_mode`]).
//! Until SIGTERM/SIGINT or `ctl detach` it rewrites the `<export>.stats` file every second
//! and samples counters for per-window rates; at exit the file is rewritten once more with
//! the final state (`state=stopped`).
//!
//! Threads: the tokio runtime's workers run the NBD server, the admin endpoint, the
//! writeback task, the stats writer and the rate sampler; the flash engine runs its own IO
//! and reclaim threads. The main thread only blocks on the runtime.
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use flashtier_backend::{BlockBackend, Traced, Tracer};
use flashtier_blockcache::{Mode, Tunables};
use flashtier_flash::{DeviceSpec, FlashConfig};
use flashtier_nbd::{open_backend, Export, ListenAddr, Server, ServerConfig};

use crate::rundir::{Header, RunDir, SavedMode};
use crate::startup::Litter;

pub use crate::ctl::DEFAULT_ADMIN;
/// The NBD listen address by default (NBD's port).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10809";

mod admin;
mod config;
mod reformat;

pub use crate::cli::BlockArgs;
pub use config::BlockConfig;
pub fn main(args: BlockArgs) -> anyhow::Result<()> {
    // Every refusal here is of a flag or a --config key: a usage error (exit 64).
    let mut cfg = BlockConfig::from_args(&args)
        .map_err(|e| anyhow::Error::new(crate::cli::Usage(crate::logging::error_chain(&e))))?;
    let threads = cfg.threads;
    if args.check_config {
        if let Ok(Some(saved)) = SavedMode::read(&cfg.run_dir, &cfg.export) {
            cfg.use_saved_mode(&saved);
        }
        cfg.check_paths()?;
        print!("{}", cfg.describe());
        println!("configuration ok");
        return Ok(());
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        rt.worker_threads(n.max(1));
    }
    let runtime = rt
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run(cfg))
}

async fn run(mut cfg: BlockConfig) -> anyhow::Result<()> {
    // Declared first, dropped last: if the start fails, the cache is closed and the run-dir
    // lock released before what this start created is removed.
    let mut litter = Litter::default();
    // A cache that is the backing is a typo that would wipe the disk: refused before anything.
    cfg.check_cache_is_not_backing()?;
    cfg.check_cache_dir()?;
    // The run dir next: a busy or unwritable one fails before anything is opened.
    litter
        .create_dir_all(&cfg.run_dir)
        .with_context(|| format!("--run-dir {}: cannot create it", cfg.run_dir.display()))?;
    litter.note_file(&cfg.run_dir.join(format!("{}.lock", cfg.export)));
    let run_dir = RunDir::lock(&cfg.run_dir, &cfg.export)?;
    let overridden = saved_mode(&mut cfg);
    // The backing path is locked for as long as it is served (another flashtier using it as
    // backing or cache is refused).
    let _backing_lock = lock_backing(&cfg.backing)?;
    let backing = open_backend(&cfg.backing)
        .await
        .with_context(|| format!("--backing {:?}", cfg.backing))?;
    // Sockets next: a start that cannot serve never touches the cache device.
    if let ListenAddr::Unix(path) = &cfg.listen {
        litter.note_file(path);
    }
    let listener = Server::bind(&cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {} (--listen)", cfg.listen_text))?;
    let admin = match cfg.admin {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.with_context(|| {
            format!(
                "cannot listen on {addr} (--admin; another flashtier block? give --admin \
                 HOST:PORT or --admin none)"
            )
        })?),
        None => None,
    };
    litter.note_file(&cfg.cache.path);
    let cache = open_cache(&cfg, &backing).await?;
    let (served_backend, tracer) = traced(&cfg, Arc::clone(&cache) as Arc<dyn BlockBackend>)?;
    let server = Server::new(
        vec![Export::new(cfg.export.clone(), served_backend)
            .with_description("flashtier block cache")],
        ServerConfig::default(),
    )?;
    let listen_addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| cfg.listen_text.clone());
    let run_dir = Arc::new(run_dir);
    let ctx = Arc::new(admin::AdminCtx::new(
        Arc::clone(&cache),
        server.shutdown_handle(),
        server.stats(),
        Arc::clone(&run_dir),
    ));
    let admin_bound = match &admin {
        Some(l) => l
            .local_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string()),
        None => "none".to_string(),
    };
    let write = stats_writer(
        &cfg.export,
        (&listen_addr, &admin_bound),
        Arc::clone(&run_dir),
        Arc::clone(&ctx),
    );
    litter.note_file(&cfg.run_dir.join(format!("{}.stats", cfg.export)));
    write("serving").with_context(|| {
        format!(
            "--run-dir {}: cannot write the stats file",
            cfg.run_dir.display()
        )
    })?;
    // Nothing below fails the start: keep what it created, then serve.
    litter.keep();
    if let Some(saved) = overridden {
        // A mode given at start replaced the one set at run time: forget that one now that
        // the start succeeded, so a later start without a mode does not bring it back.
        if let Err(e) = run_dir.forget_mode() {
            log::warn!("cannot remove {}: {e}", saved.path.display());
        }
    }
    let writeback = cache.start();
    if let Some(l) = admin {
        log::info!("admin on http://{admin_bound}");
        tokio::spawn(admin::serve(l, Arc::clone(&ctx)));
    }
    log::info!("serving export {:?} on {listen_addr}", cfg.export);
    let stats_task = tokio::spawn(rewrite_stats(write.clone()));
    let sampler = tokio::spawn(sample_rates(Arc::clone(&ctx)));
    let stop = server.shutdown_handle();
    let on_signal = Arc::clone(&cache);
    tokio::spawn(async move {
        crate::signals::shutdown_signal().await;
        on_signal.interrupt();
        stop.shutdown();
    });
    let served = server.serve(listener).await;
    stats_task.abort();
    sampler.abort();
    if let Some(t) = &tracer {
        finish_trace(t);
    }
    stop_cache(&cache, writeback, &write).await;
    served?;
    Ok(())
}

/// Open the flash cache over `backing` (a cache formatted for another size is written back
/// at its old size first, with `--reformat-on-mismatch`), apply the `--set` knobs and log
/// what recovery found.
async fn open_cache(
    cfg: &BlockConfig,
    backing: &Arc<dyn BlockBackend>,
) -> anyhow::Result<Arc<flashtier_blockcache::BlockCache>> {
    let opened = reformat::open(cfg, cfg.cache.clone(), backing, cfg.tunables.clone(), false)
        .await
        .context("open task")?;
    let opened = match reformat::resized(&opened) {
        // Formatted for another size: --reformat-on-mismatch writes its dirty blocks back
        // at the old size, then formats it at the new one.
        Some(formatted) if cfg.reformat_on_mismatch && !cfg.force_format => {
            reformat::write_back_at(cfg, formatted, backing).await?;
            reformat::open(cfg, cfg.cache.clone(), backing, cfg.tunables.clone(), true)
                .await
                .context("open task")?
        }
        _ => opened,
    };
    let cache = opened
        .with_context(|| format!("cannot open the block cache on {}", cfg.cache_text))
        .map_err(|e| crate::startup::explain(e, crate::startup::Face::Block))?;
    for (k, v) in &cfg.flash_knobs {
        cache
            .set_tunable(k, v)
            .with_context(|| format!("--set {k}={v}"))?;
    }
    let rec = cache.recovery();
    log::info!(
        "cache {} blocks of {} bytes; recovered {} dirty blocks (watermark {}), kept {} clean, dropped {} stale and {} unprovable{}{}",
        cache.capacity_blocks(),
        cfg.block_size,
        rec.dirty_blocks,
        rec.watermark,
        rec.clean_kept,
        rec.stale_dropped,
        rec.clean_dropped,
        rec.cold_reason
            .as_ref()
            .map(|r| format!("; no snapshot: {r}"))
            .unwrap_or_default(),
        rec.floor_reason
            .as_ref()
            .map(|r| format!("; cold after a crash: {r}"))
            .unwrap_or_default()
    );
    Ok(cache)
}

/// The backend served, and the tracer recording its requests (if any).
type Served = (Arc<dyn BlockBackend>, Option<Arc<Tracer>>);

/// The backend to serve: the cache, wrapped in a tracer recording every request into
/// `--trace` when given (the tracer is returned too, to finish at exit).
fn traced(cfg: &BlockConfig, cache: Arc<dyn BlockBackend>) -> anyhow::Result<Served> {
    let mut served_backend = cache;
    let tracer = match &cfg.trace {
        Some(path) => {
            let t = Tracer::create(path)
                .with_context(|| format!("--trace {}: cannot create it", path.display()))?;
            log::info!("tracing every request into {}", path.display());
            served_backend = Arc::new(Traced::new(served_backend, Arc::clone(&t)));
            Some(t)
        }
        None => None,
    };
    Ok((served_backend, tracer))
}

/// The stats file writer: `write(state)` rewrites `<run-dir>/<export>.stats` with the header
/// (`state`, export, listen and admin addresses) and the admin context's stats view.
fn stats_writer(
    export: &str,
    (listen, admin): (&str, &str),
    run_dir: Arc<RunDir>,
    ctx: Arc<admin::AdminCtx>,
) -> impl Fn(&str) -> std::io::Result<()> + Clone + Send + 'static {
    let (export, listen, admin) = (export.to_string(), listen.to_string(), admin.to_string());
    move |state: &str| {
        run_dir.write_stats(
            &Header {
                state,
                export: &export,
                listen: &listen,
                admin: &admin,
            },
            &ctx.stats_view(),
        )
    }
}

/// Rewrite the stats file every second (a failure is logged once per transition).
async fn rewrite_stats(write: impl Fn(&str) -> std::io::Result<()>) {
    let mut failing = false;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Logged once per transition, not every second.
        match write("serving") {
            Ok(()) if failing => {
                failing = false;
                log::info!("stats file writable again");
            }
            Err(e) if !failing => {
                failing = true;
                log::warn!("cannot rewrite the stats file: {e}");
            }
            _ => {}
        }
    }
}

/// Sample the counters for the per-window rates, every [`crate::rates::INTERVAL`].
async fn sample_rates(ctx: Arc<admin::AdminCtx>) {
    loop {
        ctx.rates.record(Instant::now(), ctx.counters());
        tokio::time::sleep(crate::rates::INTERVAL).await;
    }
}

/// Flush the request trace and log what it recorded.
fn finish_trace(t: &Tracer) {
    match t.finish() {
        Ok(()) => log::info!(
            "trace: {} requests recorded, {} dropped",
            t.recorded(),
            t.dropped()
        ),
        Err(e) => log::warn!("trace: writing it failed: {e} ({} dropped)", t.dropped()),
    }
}

/// Stop the cache after serving: the writeback task ends, the clean blocks go into a
/// snapshot, the stats file says `stopped`.
async fn stop_cache(
    cache: &Arc<flashtier_blockcache::BlockCache>,
    writeback: tokio::task::JoinHandle<()>,
    write: &impl Fn(&str) -> std::io::Result<()>,
) {
    // Dirty blocks not yet written back stay on the cache device; the next start recovers
    // and writes them back. Clean blocks are listed in a snapshot so the next start is
    // warm (a crash never gets here: its next start is cold for clean blocks).
    cache.interrupt();
    let _ = writeback.await;
    let report = cache.shutdown().await;
    if let Err(e) = write("stopped") {
        log::warn!("cannot write the final stats file: {e}");
    }
    log::info!(
        "stopped with {} dirty blocks on the cache device, {} clean blocks saved{}",
        report.dirty_left,
        report.clean_saved,
        report
            .skipped
            .map(|r| format!(" (no snapshot: {r})"))
            .unwrap_or_default()
    );
}

/// The mode to start in: one given at start wins (the mode last set at run time,
/// `<run-dir>/<export>.mode`, is returned, to be forgotten once the start succeeds); else
/// that saved mode; else the default (writeback). Logged when the saved mode is used or
/// overridden.
fn saved_mode(cfg: &mut BlockConfig) -> Option<SavedMode> {
    let saved = match SavedMode::read(&cfg.run_dir, &cfg.export) {
        Ok(s) => s,
        Err(e) => {
            log::warn!("ignoring the mode set at run time: {e}");
            None
        }
    };
    let saved = saved?;
    if !cfg.mode_explicit {
        log::info!(
            "mode {}: set at run time {}, kept across the restart ({}; --mode or mode in \
             --config overrides it)",
            saved.mode,
            saved.set_at,
            saved.path.display()
        );
        cfg.use_saved_mode(&saved);
        return None;
    }
    let given = cfg
        .tunables
        .iter()
        .rev()
        .find(|(k, _)| k == "mode")
        .map_or("", |(_, v)| v.as_str());
    if Mode::parse(given).map(Mode::name) != Some(saved.mode.as_str()) {
        log::info!(
            "mode {given} given at start overrides the mode {} set at run time {}",
            saved.mode,
            saved.set_at
        );
    }
    Some(saved)
}

/// Lock the backing path (if it is a path, not an
/// NBD URI) the way the flash engine locks its devices; the lock lasts as long as the file.
fn lock_backing(backing: &str) -> anyhow::Result<Option<std::fs::File>> {
    if flashtier_nbd::is_nbd_uri(backing) {
        return Ok(None);
    }
    let path = std::path::Path::new(backing);
    let Ok(file) = std::fs::File::open(path) else {
        // Opening the backing reports the error.
        return Ok(None);
    };
    flashtier_flash::io::file::lock_exclusive(&file).map_err(|e| {
        anyhow::anyhow!(
            "--backing {backing} is locked by another process (a flashtier serving it or \
             using it as a cache?): {e}"
        )
    })?;
    Ok(Some(file))
}
