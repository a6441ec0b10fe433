//! `flashtier block`: validate the configuration ([`BlockConfig`], also all that
//! `--check-config` does), lock the run dir, open the backing (file, block device or NBD
//! URI) and the flash cache, recover dirty blocks, bind the NBD and admin listeners, and only
//! then announce that it serves. Until SIGTERM/SIGINT or `ctl detach` it rewrites the
//! `<export>.stats` file every second and samples counters for per-window rates; at exit the
//! file is rewritten once more with the final state (`state=stopped`).
//!
//! Threads: the tokio runtime's workers run the NBD server, the admin endpoint, the
//! writeback task, the stats writer and the rate sampler; the flash engine runs its own IO
//! and reclaim threads. The main thread only blocks on the runtime.
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use flashtier_blockcache::{BlockCache, BlockCacheConfig, Mode, Tunables};
use flashtier_flash::{DeviceSpec, FlashConfig};
use flashtier_nbd::{open_backend, BlockBackend, Export, ListenAddr, Server, ServerConfig};

use crate::rundir::{Header, RunDir};
use crate::startup::Litter;

/// The admin endpoint's default address, the one `flashtier ctl` talks to by default.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:10810";
/// The NBD listen address by default (NBD's port).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10809";

#[derive(Clone, Debug, Args)]
pub struct BlockArgs {
    /// The slow device: a file or block device path, `nbd://HOST[:PORT]/EXPORT` or
    /// `nbd+unix:///EXPORT?socket=PATH`.
    #[arg(long, value_name = "PATH|URI")]
    pub backing: Option<String>,

    /// The cache device, PATH:SIZE (created and sized if missing), e.g. /var/cache/ft.img:4G.
    #[arg(long, value_name = "PATH:SIZE")]
    pub cache: Option<String>,

    /// writeback | writethrough | writearound. Default: writeback.
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,

    /// NBD listen address: HOST:PORT or unix:PATH. Default: 127.0.0.1:10809.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// Export name. Default: block.
    #[arg(long)]
    pub export: Option<String>,

    /// Admin HTTP endpoint (stats, /metrics, tunables, flush, status, detach), HOST:PORT, or
    /// `none`. Default: 127.0.0.1:10810, where `flashtier ctl` looks.
    #[arg(long, value_name = "HOST:PORT|none")]
    pub admin: Option<String>,

    /// Directory for `<export>.stats` (rewritten every second). Default: ./data/run/block.
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,

    /// Cache block size in bytes (power of two, 512..=1MiB). Default: 4096.
    #[arg(long)]
    pub block_size: Option<u32>,

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
    /// lba | fifo | lru. Default: lba.
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

    /// TOML configuration file: the flags' names as keys (backing, cache, mode, listen,
    /// export, admin, run_dir, block_size, no_direct_io, threads, dirty_high_pct, ...) and a
    /// [set] table of tunables (`"flash.reclaim_policy" = "greedy"`). Flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Validate everything a start validates (tunables, addresses, sizes, paths; creating
    /// and changing nothing), print the effective configuration and exit.
    #[arg(long)]
    pub check_config: bool,
}

/// The `--config` TOML file of `flashtier block`. Every key is optional; flags override.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlockFile {
    pub backing: Option<String>,
    pub cache: Option<String>,
    pub mode: Option<String>,
    pub listen: Option<String>,
    pub export: Option<String>,
    pub admin: Option<String>,
    pub run_dir: Option<PathBuf>,
    pub block_size: Option<u32>,
    pub dirty_high_pct: Option<u64>,
    pub dirty_low_pct: Option<u64>,
    pub dirty_max_pct: Option<u64>,
    pub flush_period: Option<u64>,
    pub flush_order: Option<String>,
    pub seq_threshold_kb: Option<u64>,
    pub admit_max_kb: Option<u64>,
    pub no_direct_io: Option<bool>,
    pub threads: Option<usize>,
    /// Tunables as `--set` takes them (`flash.*` included); `--set` flags come after.
    pub set: Option<std::collections::BTreeMap<String, toml::Value>>,
}

/// The flags with the `--config` file under them: a flag wins, then the file.
fn merged(args: &BlockArgs) -> anyhow::Result<BlockArgs> {
    let Some(path) = &args.config else {
        return Ok(args.clone());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--config {}: cannot read it", path.display()))?;
    let f: BlockFile =
        toml::from_str(&text).with_context(|| format!("--config {}", path.display()))?;
    let mut a = args.clone();
    macro_rules! fill {
        ($($field:ident),*) => { $( if a.$field.is_none() { a.$field = f.$field.clone(); } )* };
    }
    fill!(
        backing,
        cache,
        mode,
        listen,
        export,
        admin,
        run_dir,
        block_size,
        dirty_high_pct,
        dirty_low_pct,
        dirty_max_pct,
        flush_period,
        flush_order,
        seq_threshold_kb,
        admit_max_kb,
        threads
    );
    a.no_direct_io |= f.no_direct_io.unwrap_or(false);
    if let Some(table) = &f.set {
        let mut set: Vec<String> = table
            .iter()
            .map(|(k, v)| match v {
                toml::Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect();
        set.extend(a.set.iter().cloned());
        a.set = set;
    }
    Ok(a)
}

pub fn main(args: BlockArgs) -> anyhow::Result<()> {
    let cfg = BlockConfig::from_args(&args)?;
    let threads = cfg.threads;
    if args.check_config {
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

/// A validated `flashtier block` configuration: what a start needs before it touches a
/// file or a socket.
#[derive(Debug)]
pub struct BlockConfig {
    pub backing: String,
    pub cache: DeviceSpec,
    pub cache_text: String,
    pub listen: ListenAddr,
    pub listen_text: String,
    pub export: String,
    /// `None`: `--admin none`.
    pub admin: Option<SocketAddr>,
    pub run_dir: PathBuf,
    pub block_size: u32,
    pub direct_io: bool,
    /// `--force-format` (a flag only, never from the config file).
    pub force_format: bool,
    pub threads: Option<usize>,
    /// Cache tunables in the order they are applied, then `flash.*` engine knobs.
    pub tunables: Vec<(String, String)>,
    pub flash_knobs: Vec<(String, String)>,
    /// Every tunable's effective value (defaults with the changes applied).
    pub effective: Vec<(String, String)>,
}

impl BlockConfig {
    pub fn from_args(args: &BlockArgs) -> anyhow::Result<Self> {
        let args = &merged(args)?;
        let all = tunables(args)?;
        let (flash_knobs, tun): (Vec<_>, Vec<_>) =
            all.into_iter().partition(|(k, _)| k.starts_with("flash."));
        let backing = args
            .backing
            .clone()
            .context("--backing PATH|URI is required (or `backing` in --config)")?;
        let cache_text = args
            .cache
            .clone()
            .context("--cache PATH:SIZE is required (or `cache` in --config)")?;
        let listen_text = args
            .listen
            .clone()
            .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let listen: ListenAddr = listen_text
            .parse()
            .with_context(|| format!("--listen {listen_text:?}"))?;
        let cache =
            DeviceSpec::parse(&cache_text).with_context(|| format!("--cache {cache_text:?}"))?;
        if cache.size == 0 {
            bail!("--cache {cache_text:?}: give a size, e.g. PATH:4G");
        }
        let block_size = args.block_size.unwrap_or(4096);
        if !block_size.is_power_of_two() || !(512..=1 << 20).contains(&block_size) {
            bail!("--block-size {block_size}: expected a power of two from 512 to 1MiB");
        }
        let export = args.export.clone().unwrap_or_else(|| "block".to_string());
        if export.is_empty() || export.contains('/') {
            bail!("--export {export:?}: expected a non-empty name without '/'");
        }
        let admin = match args.admin.as_deref().unwrap_or(DEFAULT_ADMIN).trim() {
            "none" | "off" | "" => None,
            a => Some(resolve_admin(a)?),
        };
        // The same checks the cache applies at open, on a scratch copy.
        let scratch = Tunables::default();
        for (k, v) in &tun {
            scratch
                .set(k, v)
                .with_context(|| format!("tunable {k}={v}"))?;
        }
        let flash = FlashConfig::for_capacity(cache.size);
        let engine: Vec<(String, String)> = flash_knobs
            .iter()
            .map(|(k, v)| (k.trim_start_matches("flash.").to_string(), v.clone()))
            .collect();
        if engine.iter().any(|(k, _)| k == "keep_limit") {
            bail!("--set flash.keep_limit: fixed at 1 for the block face");
        }
        flashtier_flash::knobs::validate_knobs(&flash, &engine).context("--set flash.*")?;
        let mut effective: Vec<(String, String)> = scratch
            .list()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        effective.extend(flash_knobs.iter().cloned());
        Ok(Self {
            backing,
            cache_text,
            cache,
            listen,
            listen_text,
            export,
            admin,
            run_dir: args
                .run_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("data/run/block")),
            block_size,
            direct_io: !args.no_direct_io,
            force_format: args.force_format,
            threads: args.threads,
            tunables: tun,
            flash_knobs,
            effective,
        })
    }

    /// What `--check-config` adds to [`Self::from_args`]: the paths a start would use, read
    /// without being created or changed, and the TCP ports (bound and released at once).
    pub fn check_paths(&self) -> anyhow::Result<()> {
        if !flashtier_nbd::is_nbd_uri(&self.backing) {
            let m = std::fs::metadata(&self.backing)
                .with_context(|| format!("--backing {}", self.backing))?;
            if m.is_dir() {
                bail!("--backing {}: is a directory", self.backing);
            }
        }
        let cache = &self.cache.path;
        if !flashtier_nbd::is_nbd_uri(&self.backing) {
            let same = flashtier_flash::probe::same_storage(Path::new(&self.backing), cache)
                .with_context(|| format!("--backing {}", self.backing))?;
            if let Some(why) = same {
                bail!(
                    "--cache {} is the backing: {why}; the cache must be another device",
                    cache.display()
                );
            }
        }
        crate::kv_check::check_contents(cache, "--cache", self.force_format)?;
        match std::fs::metadata(cache) {
            Ok(m) if m.is_dir() => bail!("--cache {}: is a directory", cache.display()),
            Ok(_) => {}
            Err(_) => writable_dir(parent_of(cache))
                .with_context(|| format!("--cache {}: cannot be created", cache.display()))?,
        }
        writable_dir(existing_ancestor(&self.run_dir))
            .with_context(|| format!("--run-dir {}", self.run_dir.display()))?;
        match &self.listen {
            ListenAddr::Tcp(a) => {
                let addr = a
                    .to_socket_addrs()
                    .with_context(|| format!("--listen {a}"))?
                    .next()
                    .with_context(|| format!("--listen {a}: resolves to nothing"))?;
                std::net::TcpListener::bind(addr).with_context(|| format!("--listen {a}"))?;
            }
            ListenAddr::Unix(p) => writable_dir(parent_of(p))
                .with_context(|| format!("--listen unix:{}", p.display()))?,
        }
        if let Some(a) = self.admin {
            std::net::TcpListener::bind(a).with_context(|| format!("--admin {a}"))?;
        }
        Ok(())
    }

    /// The effective configuration, `key=value` lines.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "backing={}\ncache={}\ncache_size={}\nlisten={}\nexport={}\nadmin={}\nrun_dir={}\n\
             block_size={}\ndirect_io={}\n",
            self.backing,
            self.cache.path.display(),
            self.cache.size,
            self.listen_text,
            self.export,
            self.admin.map_or("none".to_string(), |a| a.to_string()),
            self.run_dir.display(),
            self.block_size,
            self.direct_io
        );
        for (k, v) in &self.effective {
            s.push_str(&format!("{k}={v}\n"));
        }
        s
    }
}

fn resolve_admin(a: &str) -> anyhow::Result<SocketAddr> {
    let (host, port) = a
        .rsplit_once(':')
        .with_context(|| format!("--admin {a:?}: expected HOST:PORT or none"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("--admin {a:?}: bad port {port:?}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("--admin {a:?}: cannot resolve {host:?}"))?
        .next()
        .with_context(|| format!("--admin {a:?}: resolves to nothing"))
}

fn parent_of(p: &Path) -> &Path {
    p.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The path itself if it exists, else its nearest existing ancestor (what `create_dir_all`
/// would create under).
fn existing_ancestor(p: &Path) -> &Path {
    p.ancestors()
        .find(|a| !a.as_os_str().is_empty() && a.exists())
        .unwrap_or(Path::new("."))
}

/// A directory this process may create files in (checked with access(2), nothing written).
fn writable_dir(d: &Path) -> anyhow::Result<()> {
    let m = std::fs::metadata(d).with_context(|| format!("{}", d.display()))?;
    if !m.is_dir() {
        bail!("{} is not a directory", d.display());
    }
    rustix::fs::access(
        d,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    )
    .with_context(|| format!("{} is not writable", d.display()))?;
    Ok(())
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

async fn run(cfg: BlockConfig) -> anyhow::Result<()> {
    // Declared first, dropped last: if the start fails, the cache is closed and the run-dir
    // lock released before what this start created is removed.
    let mut litter = Litter::default();
    // The run dir first: a busy or unwritable one fails before anything is opened.
    litter
        .create_dir_all(&cfg.run_dir)
        .with_context(|| format!("--run-dir {}: cannot create it", cfg.run_dir.display()))?;
    litter.note_file(&cfg.run_dir.join(format!("{}.lock", cfg.export)));
    let run_dir = RunDir::lock(&cfg.run_dir, &cfg.export)?;
    // The backing path is locked for as long as it is served (another flashtier using it as
    // backing or cache is refused), and is never the cache.
    let _backing_lock = lock_backing(&cfg.backing, &cfg.cache.path)?;
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
    let flash = FlashConfig {
        direct_io: cfg.direct_io,
        force_format: cfg.force_format,
        ..FlashConfig::for_capacity(cfg.cache.size)
    };
    let bc = BlockCacheConfig {
        block_size: cfg.block_size,
        flash: Some(flash),
        tunables: cfg.tunables.clone(),
    };
    litter.note_file(&cfg.cache.path);
    let spec = cfg.cache.clone();
    let cache = tokio::task::spawn_blocking(move || BlockCache::open_specs(&[spec], backing, bc))
        .await
        .context("open task")?
        .with_context(|| format!("cannot open the block cache on {}", cfg.cache_text))
        .map_err(crate::startup::explain)?;
    for (k, v) in &cfg.flash_knobs {
        cache
            .set_tunable(k, v)
            .with_context(|| format!("--set {k}={v}"))?;
    }
    let rec = cache.recovery();
    log::info!(
        "cache {} blocks of {} bytes; recovered {} dirty blocks (watermark {}), kept {} clean, dropped {} clean{}",
        cache.capacity_blocks(),
        cfg.block_size,
        rec.dirty_blocks,
        rec.watermark,
        rec.clean_kept,
        rec.clean_dropped,
        rec.cold_reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    let server = Server::new(
        vec![Export::new(
            cfg.export.clone(),
            Arc::clone(&cache) as Arc<dyn BlockBackend>,
        )
        .with_description("flashtier block cache")],
        ServerConfig::default(),
    )?;
    let listen_addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| cfg.listen_text.clone());
    let ctx = Arc::new(crate::admin::AdminCtx::new(
        Arc::clone(&cache),
        server.shutdown_handle(),
        server.stats(),
    ));
    let admin_bound = match &admin {
        Some(l) => l
            .local_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string()),
        None => "none".to_string(),
    };
    let run_dir = Arc::new(run_dir);
    let write = {
        let (export, listen, admin) =
            (cfg.export.clone(), listen_addr.clone(), admin_bound.clone());
        let run_dir = Arc::clone(&run_dir);
        let ctx = Arc::clone(&ctx);
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
    };
    litter.note_file(&cfg.run_dir.join(format!("{}.stats", cfg.export)));
    write("serving").with_context(|| {
        format!(
            "--run-dir {}: cannot write the stats file",
            cfg.run_dir.display()
        )
    })?;
    // Nothing below fails the start: keep what it created, then serve.
    litter.keep();
    let writeback = cache.start();
    if let Some(l) = admin {
        log::info!("admin on http://{admin_bound}");
        tokio::spawn(crate::admin::serve(l, Arc::clone(&ctx)));
    }
    log::info!("serving export {:?} on {listen_addr}", cfg.export);
    let stats_task = {
        let write = write.clone();
        tokio::spawn(async move {
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
        })
    };
    let sampler = {
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            loop {
                ctx.rates.record(Instant::now(), ctx.counters());
                tokio::time::sleep(crate::rates::INTERVAL).await;
            }
        })
    };
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
