//! `flashtier block`: open the backing (file, block device or NBD URI) and the flash cache,
//! recover dirty blocks, serve the cache over NBD, expose the admin endpoint and rewrite the
//! stats file every second, until SIGTERM/SIGINT or `ctl detach`.
//!
//! Threads: the tokio runtime's workers run the NBD server, the admin endpoint, the
//! writeback task and the stats writer; the flash engine runs its own IO and reclaim
//! threads. The main thread only blocks on the runtime.
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use flashtier_blockcache::{BlockCache, BlockCacheConfig, Mode};
use flashtier_flash::{DeviceSpec, FlashConfig};
use flashtier_nbd::{open_backend, BlockBackend, Export, ListenAddr, Server, ServerConfig};

use crate::startup::Litter;

#[derive(Clone, Debug, Args)]
pub struct BlockArgs {
    /// The slow device: a file or block device path, `nbd://HOST[:PORT]/EXPORT` or
    /// `nbd+unix:///EXPORT?socket=PATH`.
    #[arg(long, value_name = "PATH|URI")]
    pub backing: String,

    /// The cache device, PATH:SIZE (created and sized if missing), e.g. /var/cache/ft.img:4G.
    #[arg(long, value_name = "PATH:SIZE")]
    pub cache: String,

    /// writeback | writethrough | writearound. Default: writeback.
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,

    /// NBD listen address: HOST:PORT or unix:PATH. Default: 127.0.0.1:10809.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:10809")]
    pub listen: String,

    /// Export name. Default: block.
    #[arg(long, default_value = "block")]
    pub export: String,

    /// Admin HTTP endpoint (stats, /metrics, tunables, flush, status, detach), HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub admin: Option<String>,

    /// Directory for `<export>.stats` (rewritten every second). Default: ./data/run/block.
    #[arg(long, value_name = "DIR", default_value = "data/run/block")]
    pub run_dir: PathBuf,

    /// Cache block size in bytes (power of two, 512..=1MiB). Default: 4096.
    #[arg(long, default_value_t = 4096)]
    pub block_size: u32,

    /// Dirty percentage of the cache at which writeback starts. Default: 40.
    #[arg(long)]
    pub dirty_high_pct: Option<u64>,
    /// Dirty percentage at which threshold writeback stops. Default: 20.
    #[arg(long)]
    pub dirty_low_pct: Option<u64>,
    /// Dirty percentage at which writes wait for writeback. Default: 70.
    #[arg(long)]
    pub dirty_max_pct: Option<u64>,
    /// Seconds within which a dirty block is written back (0 = no deadline). Default: 30.
    #[arg(long, value_name = "SECONDS")]
    pub flush_period: Option<u64>,
    /// fifo | lru | lba. Default: fifo.
    #[arg(long)]
    pub flush_order: Option<String>,
    /// Sequential-stream bypass threshold in KiB (0 = off). Default: 1024.
    #[arg(long, value_name = "KIB")]
    pub seq_threshold_kb: Option<u64>,
    /// Requests larger than this many KiB are not admitted (0 = any). Default: 0.
    #[arg(long, value_name = "KIB")]
    pub admit_max_kb: Option<u64>,

    /// Any tunable (see `ctl get all`), repeatable; `flash.NAME=VALUE` sets an engine knob.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// Open the cache device without O_DIRECT (needed on tmpfs).
    #[arg(long)]
    pub no_direct_io: bool,

    /// Runtime worker threads. Default: the number of CPU cores.
    #[arg(long)]
    pub threads: Option<usize>,

    /// Format a cache device that holds other data (a file system, a partition table,
    /// random bytes, a kv flash file) instead of refusing to start. What it holds is lost.
    /// Default: off (only all-zero devices and flashtier's own block caches are used).
    #[arg(long)]
    pub force_format: bool,
}

pub fn main(args: BlockArgs) -> anyhow::Result<()> {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        rt.worker_threads(n.max(1));
    }
    let runtime = rt
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run(args))
}

fn tunables(args: &BlockArgs) -> anyhow::Result<Vec<(String, String)>> {
    let mut t: Vec<(String, String)> = Vec::new();
    let mut push = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            t.push((k.to_string(), v));
        }
    };
    if let Some(m) = &args.mode {
        if Mode::parse(m).is_none() {
            bail!("--mode {m:?}: expected writeback, writethrough or writearound");
        }
    }
    push("mode", args.mode.clone());
    // Order matters for the low <= high <= max check: raise max first, lower low last.
    push("dirty_max_pct", args.dirty_max_pct.map(|v| v.to_string()));
    push("dirty_high_pct", args.dirty_high_pct.map(|v| v.to_string()));
    push("dirty_low_pct", args.dirty_low_pct.map(|v| v.to_string()));
    push("flush_period_s", args.flush_period.map(|v| v.to_string()));
    push("flush_order", args.flush_order.clone());
    push(
        "seq_threshold_kb",
        args.seq_threshold_kb.map(|v| v.to_string()),
    );
    push("admit_max_kb", args.admit_max_kb.map(|v| v.to_string()));
    for kv in &args.set {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--set {kv:?}: expected KEY=VALUE"))?;
        t.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(t)
}

async fn run(args: BlockArgs) -> anyhow::Result<()> {
    let all = tunables(&args)?;
    let (flash_knobs, cache_tun): (Vec<_>, Vec<_>) =
        all.into_iter().partition(|(k, _)| k.starts_with("flash."));
    let listen: ListenAddr = args
        .listen
        .parse()
        .with_context(|| format!("--listen {:?}", args.listen))?;
    let spec =
        DeviceSpec::parse(&args.cache).with_context(|| format!("--cache {:?}", args.cache))?;
    if spec.size == 0 {
        bail!("--cache {:?}: give a size, e.g. PATH:4G", args.cache);
    }
    // The backing path is locked for as long as it is served (another flashtier using it as
    // backing or cache is refused), and is never the cache.
    let _backing_lock = lock_backing(&args.backing, &spec.path)?;
    let backing = open_backend(&args.backing)
        .await
        .with_context(|| format!("--backing {:?}", args.backing))?;
    // Declared before the cache: on failure the cache is closed first, then undone.
    let mut litter = Litter::default();
    if let ListenAddr::Unix(path) = &listen {
        litter.note_file(path);
    }
    // Sockets first: a start that cannot serve never touches the cache device.
    let listener = Server::bind(&listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let admin = match &args.admin {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--admin {addr}"))?,
        ),
        None => None,
    };
    let flash = FlashConfig {
        direct_io: !args.no_direct_io,
        force_format: args.force_format,
        ..FlashConfig::for_capacity(spec.size)
    };
    let cfg = BlockCacheConfig {
        block_size: args.block_size,
        flash: Some(flash),
        tunables: cache_tun,
    };
    litter
        .create_dir_all(&args.run_dir)
        .with_context(|| format!("--run-dir {}", args.run_dir.display()))?;
    litter.note_file(&spec.path);
    let cache = tokio::task::spawn_blocking(move || BlockCache::open_specs(&[spec], backing, cfg))
        .await
        .context("open task")?
        .context("cannot open the block cache")
        .map_err(crate::startup::explain)?;
    for (k, v) in flash_knobs {
        cache
            .set_tunable(&k, &v)
            .with_context(|| format!("--set {k}={v}"))?;
    }
    litter.keep();
    let rec = cache.recovery();
    eprintln!(
        "flashtier block: cache {} blocks of {} bytes; recovered {} dirty blocks (watermark {}), kept {} clean, dropped {} clean{}",
        cache.capacity_blocks(),
        args.block_size,
        rec.dirty_blocks,
        rec.watermark,
        rec.clean_kept,
        rec.clean_dropped,
        rec.cold_reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    let writeback = cache.start();
    let server = Server::new(
        vec![Export::new(
            args.export.clone(),
            Arc::clone(&cache) as Arc<dyn BlockBackend>,
        )
        .with_description("flashtier block cache")],
        ServerConfig::default(),
    )?;
    eprintln!(
        "flashtier block: serving export {:?} on {}",
        args.export,
        listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default()
    );
    if let Some(l) = admin {
        eprintln!("flashtier block: admin on {}", l.local_addr()?);
        let ctx = Arc::new(crate::admin::AdminCtx {
            cache: Arc::clone(&cache),
            stop: server.shutdown_handle(),
        });
        tokio::spawn(crate::admin::serve(l, ctx));
    }
    let stats_path = args.run_dir.join(format!("{}.stats", args.export));
    let stats_cache = Arc::clone(&cache);
    let stats_task = tokio::spawn(async move {
        loop {
            write_stats_file(&stats_path, &stats_cache);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let stop = server.shutdown_handle();
    let on_signal = Arc::clone(&cache);
    tokio::spawn(async move {
        crate::signals::shutdown_signal().await;
        on_signal.interrupt();
        stop.shutdown();
    });
    let served = server.serve(listener).await;
    stats_task.abort();
    // Dirty blocks not yet written back stay on the cache device; the next start recovers
    // and writes them back. Clean blocks are listed in a snapshot so the next start is
    // warm (a crash never gets here: its next start is cold for clean blocks).
    cache.interrupt();
    let _ = writeback.await;
    let report = cache.shutdown().await;
    eprintln!(
        "flashtier block: stopped with {} dirty blocks on the cache device, {} clean blocks saved{}",
        report.dirty_left,
        report.clean_saved,
        report
            .skipped
            .map(|r| format!(" (no snapshot: {r})"))
            .unwrap_or_default()
    );
    served?;
    Ok(())
}

/// Refuse a cache that is the backing, then lock the backing path (if it is a path, not an
/// NBD URI) the way the flash engine locks its devices; the lock lasts as long as the file.
fn lock_backing(backing: &str, cache: &std::path::Path) -> anyhow::Result<Option<std::fs::File>> {
    if flashtier_nbd::is_nbd_uri(backing) {
        return Ok(None);
    }
    let path = std::path::Path::new(backing);
    let same = flashtier_flash::probe::same_storage(path, cache)
        .with_context(|| format!("--backing {backing}"))?;
    if let Some(why) = same {
        bail!(
            "--cache {} is the backing: {why}; the cache must be another device",
            cache.display()
        );
    }
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

fn write_stats_file(path: &std::path::Path, cache: &BlockCache) {
    let mut text = String::new();
    for (k, v) in cache.stats_pairs() {
        text.push_str(&k);
        text.push('=');
        text.push_str(&v);
        text.push('\n');
    }
    let tmp = path.with_extension("stats.tmp");
    if std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .is_err()
    {
        // The stats file is best effort; the admin endpoint still answers.
    }
}
