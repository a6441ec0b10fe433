//! `flashtier kv`: resolve the optional TOML file (`--config`) and the flags (which override
//! it) into a validated configuration, build the store (with a flash tier on
//! [`DEFAULT_FLASH`] unless told otherwise), run the memcached-protocol server — and the admin
//! endpoint ([`crate::kv_admin`]) with `--admin` — until SIGTERM/SIGINT, then shut down
//! gracefully (exit 0).
//!
//! Threads: the tokio runtime's workers (`--threads`) run the accept loop and every
//! connection; the main thread only blocks on the runtime.
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use flashtier_cache::{Cache, CacheConfig, FlashSettings, KvStore};
use flashtier_memcache::{Context, MemoryLimitHook, Settings};

use crate::cli::KvArgs;
use crate::startup::Litter;
use flashtier_cache::flash::parse_size;

const DEFAULT_LISTEN: &str = "127.0.0.1:11211";
const DEFAULT_MEMORY: u64 = 64 << 20;
const DEFAULT_MAX_ITEM: u64 = 1 << 20;
const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// The flash tier `flashtier kv` runs on when no flash and no `--ram-only` is given: a
/// 1 GiB file under the current directory.
pub const DEFAULT_FLASH: &str = "data/flash.bin:1GiB";
/// memcached's bounds for `-I`.
const MIN_ITEM: u64 = 1 << 10;
const MAX_ITEM: u64 = 1 << 30;

/// memcached `-o` options that tune memcached internals with no flashtier equivalent. They
/// are accepted (so existing command lines keep working) and ignored.
const IGNORED_OPTIONS: &[&str] = &[
    "modern",
    "no_modern",
    "slab_reassign",
    "no_slab_reassign",
    "slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "slab_chunk_max",
    "lru_crawler",
    "no_lru_crawler",
    "lru_maintainer",
    "no_lru_maintainer",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "hash_algorithm",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
    "idle_timeout",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "track_sizes",
    "no_hashexpand",
    "hashpower",
    "tail_repair_time",
    "maxconns_fast",
    "no_maxconns_fast",
    "no_inline_ascii_resp",
    "read_buf_mem_limit",
];

/// memcached `-o ext_*` options that set a flashtier runtime knob at startup (the rest of
/// memcached's `ext_*` options tune extstore internals and are ignored).
const EXT_KNOBS: &[&str] = &[
    "ext_item_size",
    "ext_recache_rate",
    "ext_compact_under",
    "ext_drop_under",
    "ext_drop_unread",
];

/// A validated `flashtier kv` configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvConfig {
    pub listen: SocketAddr,
    /// Bytes of RAM for items. Default: 64 MiB.
    pub memory: u64,
    /// Largest value in bytes. Default: 1 MiB.
    pub max_item_size: u64,
    /// Runtime worker threads. Default: number of cores.
    pub threads: usize,
    /// Default: 1024.
    pub max_connections: usize,
    pub verbose: u8,
    /// Flash tier devices (`--flash`, `-o ext_path`), validated `PATH:SIZE[:TIER]` specs;
    /// empty = RAM only (`--ram-only`). Default: [`DEFAULT_FLASH`].
    pub flash: Vec<String>,
    /// Admin HTTP endpoint (`--admin`). Default: none.
    pub admin: Option<SocketAddr>,
    /// Runtime knobs to set at startup, in order (`--knob NAME=VALUE`, memcached's
    /// `-o ext_item_size=...` and friends, the file's `[knobs]`). Default: none.
    pub knobs: Vec<(String, String)>,
    /// Format flash devices that hold other data (`--force-format`). Default: false.
    pub force_format: bool,
}

/// The `--config` TOML file. Every key is optional; flags override the file.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvFile {
    /// HOST:PORT. Default: 127.0.0.1:11211.
    pub listen: Option<String>,
    /// Size such as "64MiB". Default: 64 MiB.
    pub memory: Option<String>,
    /// Size such as "1MiB". Default: 1 MiB.
    pub max_item_size: Option<String>,
    /// Default: number of cores.
    pub threads: Option<usize>,
    /// Default: 1024.
    pub max_connections: Option<usize>,
    /// Flash devices as "PATH:SIZE"; an empty list means RAM only.
    /// Default: ["data/flash.bin:1GiB"].
    pub flash: Option<Vec<String>>,
    /// No flash tier. Default: false.
    pub ram_only: Option<bool>,
    /// Admin endpoint HOST:PORT. Default: none.
    pub admin: Option<String>,
    /// Runtime knobs set at startup (`[knobs]` table, e.g. `item_size = 512`); `--knob`
    /// flags come after them. Default: none.
    pub knobs: Option<std::collections::BTreeMap<String, toml::Value>>,
}

impl KvFile {
    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
    }
}

impl KvConfig {
    /// Resolve the config file (if any) and the flags (memcached flags refine native ones),
    /// then validate.
    pub fn from_args(args: &KvArgs) -> anyhow::Result<Self> {
        let file = match &args.config {
            Some(path) => KvFile::load(path)?,
            None => KvFile::default(),
        };
        let mut a = args.clone();
        // A file value counts only where no flag (native or memcached-style) was given.
        if a.listen.is_none() {
            a.listen = file.listen;
        }
        if a.memory.is_none() && a.memory_mb.is_none() {
            a.memory = file.memory;
        }
        if a.max_item_size.is_none() && a.item_size.is_none() {
            a.max_item_size = file.max_item_size;
        }
        if a.threads.is_none() && a.thread_count.is_none() {
            a.threads = file.threads;
        }
        if a.max_connections.is_none() && a.conn_limit.is_none() {
            a.max_connections = file.max_connections;
        }
        if a.admin.is_none() {
            a.admin = file.admin;
        }
        if let Some(table) = &file.knobs {
            let mut from_file: Vec<String> = table
                .iter()
                .map(|(k, v)| match v {
                    toml::Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect();
            from_file.append(&mut a.knob);
            a.knob = from_file;
        }
        // Flash: flags first (`--flash`, `-o ext_path`, `--ram-only`), then the file, then
        // the default file under the current directory.
        let flag_flash = !a.flash.is_empty() || a.extended.iter().any(|o| o.contains("ext_path"));
        if a.ram_only && flag_flash {
            bail!("--ram-only conflicts with --flash / -o ext_path");
        }
        let ram_only = a.ram_only || (!flag_flash && file.ram_only == Some(true));
        let file_flash = if flag_flash || ram_only {
            None
        } else {
            file.flash
        };
        if let Some(f) = &file_flash {
            a.flash = f.clone();
        }
        let mut cfg = Self::from_flags(&a)?;
        if cfg.flash.is_empty() && !ram_only && file_flash.is_none() {
            cfg.flash = vec![DEFAULT_FLASH.to_string()];
        }
        Ok(cfg)
    }

    fn from_flags(a: &KvArgs) -> anyhow::Result<Self> {
        let listen_text = a
            .listen
            .clone()
            .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let (mut host, mut port) = split_host_port(&listen_text).context("--listen")?;
        if let Some(l) = &a.listen_addr {
            host = l.clone();
        }
        if let Some(p) = a.port {
            port = p;
        }
        let listen = resolve(&host, port).context("--listen")?;

        let memory = match (a.memory_mb, &a.memory) {
            (Some(_), Some(_)) => bail!("give the memory limit once: --memory or -m, not both"),
            (Some(mb), None) => mb.checked_mul(1 << 20).context("-m is too large")?,
            (None, Some(s)) => parse_size(s).context("--memory")?,
            (None, None) => DEFAULT_MEMORY,
        };
        let max_item_size = match (&a.item_size, &a.max_item_size) {
            (Some(_), Some(_)) => bail!("give the item size limit once: --max-item-size or -I"),
            (Some(s), None) => parse_size(s).context("-I")?,
            (None, Some(s)) => parse_size(s).context("--max-item-size")?,
            (None, None) => DEFAULT_MAX_ITEM,
        };
        let threads = match (a.thread_count, a.threads) {
            (Some(_), Some(_)) => bail!("give the thread count once: --threads or -t"),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => std::thread::available_parallelism().map_or(4, |n| n.get()),
        };
        let max_connections = match (a.conn_limit, a.max_connections) {
            (Some(_), Some(_)) => bail!("give the connection limit once: --max-connections or -c"),
            (Some(c), None) | (None, Some(c)) => c,
            (None, None) => DEFAULT_MAX_CONNECTIONS,
        };
        if let Some(udp) = a.udp_port {
            if udp != 0 {
                bail!("-U {udp}: UDP is not supported; use -U 0 (the default)");
            }
        }
        let mut knobs = Vec::new();
        for k in &a.knob {
            let (name, value) = k
                .split_once('=')
                .with_context(|| format!("--knob {k}: expected NAME=VALUE"))?;
            knobs.push((name.trim().to_string(), value.trim().to_string()));
        }
        let mut flash = Vec::new();
        for spec in &a.flash {
            flash.push(parse_flash_spec(spec, "--flash")?);
        }
        for opt in a
            .extended
            .iter()
            .flat_map(|o| o.split(','))
            .filter(|o| !o.is_empty())
        {
            let (name, value) = opt.split_once('=').unwrap_or((opt, ""));
            match name {
                "ext_path" => flash.push(parse_flash_spec(value, "ext_path")?),
                n if EXT_KNOBS.contains(&n) => {
                    knobs.push((n.trim_start_matches("ext_").to_string(), value.to_string()));
                }
                n if IGNORED_OPTIONS.contains(&n) || n.starts_with("ext_") => {}
                other => bail!("-o {other}: unknown option"),
            }
        }
        let admin = match &a.admin {
            Some(text) => {
                let (host, port) = split_host_port(text).context("--admin")?;
                Some(resolve(&host, port).context("--admin")?)
            }
            None => None,
        };
        let cfg = Self {
            listen,
            memory,
            max_item_size,
            threads,
            max_connections,
            verbose: a.verbose,
            flash,
            admin,
            knobs,
            force_format: a.force_format,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self.threads == 0 || self.threads > 1024 {
            bail!("threads must be between 1 and 1024 (got {})", self.threads);
        }
        if self.max_connections == 0 {
            bail!("max connections must be at least 1");
        }
        if !(MIN_ITEM..=MAX_ITEM).contains(&self.max_item_size) {
            bail!(
                "max item size must be between 1KiB and 1GiB (got {})",
                self.max_item_size
            );
        }
        if self.memory < self.max_item_size {
            bail!(
                "memory ({}) must be at least the max item size ({})",
                self.memory,
                self.max_item_size
            );
        }
        Ok(())
    }
}

fn split_host_port(s: &str) -> anyhow::Result<(String, u16)> {
    let (host, port) = s
        .rsplit_once(':')
        .with_context(|| format!("{s:?}: expected HOST:PORT"))?;
    let port: u16 = port.parse().with_context(|| format!("{s:?}: bad port"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok((host, port))
}

fn resolve(host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}:{port}"))?
        .next()
        .with_context(|| format!("{host}:{port} resolves to nothing"))
}

fn parse_flash_spec(v: &str, what: &str) -> anyhow::Result<String> {
    flashtier_cache::flash::DeviceSpec::parse(v)
        .with_context(|| format!("{what} {v}: expected PATH:SIZE (e.g. data/flash.bin:2GiB)"))?;
    Ok(v.to_string())
}

/// The one place the server chooses its store: `flashtier_cache::Cache`, the RAM tier with
/// the configured memory limit and item size, over the flash tier when `--flash` (or
/// `-o ext_path`) names devices. Opening formats blank flash files (never foreign data
/// unless `--force-format`) and recovers used ones (warm restart). Every flash file and
/// directory it may create is noted in `litter`. Everything downstream is generic over
/// `KvStore`.
fn build_store(cfg: &KvConfig, litter: &mut Litter) -> anyhow::Result<Arc<Cache>> {
    let mut builder = CacheConfig::builder()
        .memory_limit(cfg.memory as usize)
        .max_item_size(cfg.max_item_size as usize);
    if !cfg.flash.is_empty() {
        let specs: Vec<&str> = cfg.flash.iter().map(String::as_str).collect();
        // A flash file under a data directory that does not exist yet: create the directory.
        for spec in &specs {
            let path = flashtier_cache::flash::DeviceSpec::parse(spec)
                .context("--flash")?
                .path;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                litter
                    .create_dir_all(dir)
                    .with_context(|| format!("cannot create flash directory {}", dir.display()))?;
            }
            litter.note_file(&path);
        }
        let mut flash = FlashSettings::parse(&specs).context("--flash")?;
        flash.force_format = cfg.force_format;
        builder = builder.flash(flash);
    }
    let cache_cfg = builder.build().context("invalid cache configuration")?;
    Ok(Arc::new(
        Cache::new(cache_cfg).context("cannot start the cache")?,
    ))
}

pub fn main(args: KvArgs) -> anyhow::Result<()> {
    let cfg = KvConfig::from_args(&args)?;
    crate::logging::set_level(match cfg.verbose {
        0 => log::LevelFilter::Info,
        1 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    });
    crate::kv_check::check(&cfg)?;
    if args.check_config {
        crate::kv_check::check_more(&cfg)?;
        print!("{}", crate::kv_check::describe(&cfg));
        println!("# configuration ok");
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.threads)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // Sockets first: a start that cannot serve never touches a flash file.
    let listener = runtime
        .block_on(async { bind(cfg.listen) })
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let admin = match cfg.admin {
        Some(addr) => Some(
            runtime
                .block_on(tokio::net::TcpListener::bind(addr))
                .with_context(|| format!("cannot listen on {addr} (--admin)"))?,
        ),
        None => None,
    };
    // Declared before the store: on failure the store is closed first, then undone.
    let mut litter = Litter::default();
    let store = build_store(&cfg, &mut litter).map_err(crate::startup::explain)?;
    for (name, value) in &cfg.knobs {
        store
            .set_knob(name, value)
            .with_context(|| format!("knob {name}={value}"))?;
    }
    log_flash(&cfg, &store);
    // `cache_memlimit` changes the RAM tier's limit (memcached answers OK to any value the
    // protocol accepts; the store refuses only what it cannot hold, see
    // `Cache::set_memory_limit`).
    let limit_store = Arc::clone(&store);
    let hook: MemoryLimitHook = Box::new(move |bytes| limit_store.set_memory_limit(bytes).is_ok());
    litter.keep();
    runtime.block_on(run(cfg, store, listener, admin, Some(hook)))
}

/// One line at startup: which flash files and sizes are in use, or that there are none.
fn log_flash(cfg: &KvConfig, store: &Cache) {
    if cfg.flash.is_empty() {
        log::info!("RAM only, no flash tier");
        return;
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    let devices: Vec<String> = cfg
        .flash
        .iter()
        .filter_map(|s| flashtier_cache::flash::DeviceSpec::parse(s).ok())
        .map(|d| format!("{} ({} bytes)", cwd.join(&d.path).display(), d.size))
        .collect();
    let recovered = store
        .stats_section("extstore")
        .unwrap_or_default()
        .into_iter()
        .find(|(k, _)| k == "extstore_objects_recovered")
        .map_or_else(|| "0".to_string(), |(_, v)| v);
    log::info!(
        "flash tier on {} ({recovered} items recovered)",
        devices.join(", ")
    );
}

async fn run<S: KvStore>(
    cfg: KvConfig,
    store: Arc<S>,
    listener: tokio::net::TcpListener,
    admin: Option<tokio::net::TcpListener>,
    memory_limit_hook: Option<MemoryLimitHook>,
) -> anyhow::Result<()> {
    let listen = listener.local_addr().context("listener address")?;
    let settings = Settings {
        listen,
        max_connections: cfg.max_connections,
        max_item_size: cfg.max_item_size as usize,
        memory_limit: cfg.memory,
        threads: cfg.threads,
        ..Settings::default()
    };
    let ctx = Arc::new(Context::new(store, settings));
    if let Some(hook) = memory_limit_hook {
        ctx.set_memory_limit_hook(hook);
    }
    if let Some(admin) = admin {
        let bound = admin.local_addr().context("admin address")?;
        log::info!("admin endpoint on http://{bound}");
        tokio::spawn(crate::kv_admin::serve(admin, Arc::clone(&ctx)));
    }
    log::info!(
        "listening on {listen} (memory {} bytes, max item {} bytes, {} threads, max {} \
         connections)",
        cfg.memory,
        cfg.max_item_size,
        cfg.threads,
        cfg.max_connections
    );
    flashtier_memcache::serve(listener, ctx, crate::signals::shutdown_signal()).await?;
    log::info!("shut down");
    Ok(())
}

/// Listen with `SO_REUSEADDR` (a restart does not wait for old connections' TIME_WAIT) and
/// memcached's backlog of 1024.
fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn parse(args: &[&str]) -> anyhow::Result<KvConfig> {
        let mut full = vec!["flashtier", "kv"];
        full.extend_from_slice(args);
        let cli = crate::cli::Cli::try_parse_from(full)?;
        let crate::cli::Command::Kv(a) = cli.command else {
            anyhow::bail!("not a kv command line")
        };
        KvConfig::from_args(&a)
    }

    #[test]
    fn defaults() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.listen, "127.0.0.1:11211".parse().unwrap());
        assert_eq!(c.memory, 64 << 20);
        assert_eq!(c.max_item_size, 1 << 20);
        assert_eq!(c.max_connections, 1024);
        assert!(c.threads >= 1);
        assert_eq!(c.flash, vec![DEFAULT_FLASH.to_string()]);
        assert_eq!(c.admin, None);
    }

    #[test]
    fn startup_knobs() {
        let c = parse(&[
            "--knob",
            "item_size=4k",
            "-o",
            "ext_drop_unread=1,ext_wbuf_size=8,ext_item_age=5",
        ])
        .unwrap();
        assert_eq!(
            c.knobs,
            vec![
                ("item_size".to_string(), "4k".to_string()),
                ("drop_unread".to_string(), "1".to_string())
            ]
        );
        assert!(parse(&["--knob", "item_size"]).is_err());
    }

    #[test]
    fn flash_default_and_ram_only() {
        assert!(parse(&["--ram-only"]).unwrap().flash.is_empty());
        let c = parse(&["--flash", "/tmp/a:2G"]).unwrap();
        assert_eq!(c.flash, vec!["/tmp/a:2G".to_string()]);
        assert!(parse(&["--ram-only", "--flash", "/tmp/a:2G"]).is_err());
        assert!(parse(&["--ram-only", "-o", "ext_path=/tmp/a:2G"]).is_err());
        let c = parse(&["--admin", "127.0.0.1:0"]).unwrap();
        assert_eq!(c.admin, Some("127.0.0.1:0".parse().unwrap()));
        assert!(parse(&["--admin", "nocolon"]).is_err());
    }

    #[test]
    fn memcached_flags() {
        let c = parse(&[
            "-p", "11311", "-m", "1024", "-c", "10", "-t", "2", "-I", "2m", "-U", "0", "-u",
            "root", "-l", "0.0.0.0", "-vv",
        ])
        .unwrap();
        assert_eq!(c.listen, "0.0.0.0:11311".parse().unwrap());
        assert_eq!(c.memory, 1024 << 20);
        assert_eq!(c.max_connections, 10);
        assert_eq!(c.threads, 2);
        assert_eq!(c.max_item_size, 2 << 20);
        assert_eq!(c.verbose, 2);
    }

    #[test]
    fn native_flags() {
        let c = parse(&[
            "--listen",
            "127.0.0.1:9999",
            "--memory",
            "1G",
            "--max-item-size",
            "512k",
            "--threads",
            "3",
            "--max-connections",
            "5",
        ])
        .unwrap();
        assert_eq!(c.listen.port(), 9999);
        assert_eq!(c.memory, 1 << 30);
        assert_eq!(c.max_item_size, 512 << 10);
        assert_eq!(c.threads, 3);
        assert_eq!(c.max_connections, 5);
    }

    #[test]
    fn rejects_bad_values() {
        assert!(parse(&["-U", "11211"]).is_err());
        assert!(parse(&["-I", "10"]).is_err());
        assert!(parse(&["-m", "1", "-I", "2m"]).is_err());
        assert!(parse(&["-m", "1", "--memory", "1G"]).is_err());
        assert!(parse(&["--threads", "0"]).is_err());
        assert!(parse(&["--listen", "nocolon"]).is_err());
        assert!(parse(&["-o", "bogus_option"]).is_err());
        assert!(parse(&["-o", "ext_path=/tmp/x"]).is_err());
    }

    #[test]
    fn config_file_with_flag_overrides() {
        let dir = std::env::temp_dir().join(format!("flashtier-kv-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kv.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:7000\"\nmemory = \"2G\"\nthreads = 3\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let c = parse(&["--config", p]).unwrap();
        assert_eq!(c.listen.port(), 7000);
        assert_eq!(c.memory, 2 << 30);
        assert_eq!(c.threads, 3);
        let c = parse(&["--config", p, "-m", "100", "-p", "7001", "-t", "1"]).unwrap();
        assert_eq!(c.memory, 100 << 20);
        assert_eq!(c.listen.port(), 7001);
        assert_eq!(c.threads, 1);
        std::fs::write(&path, "ram_only = true\nadmin = \"127.0.0.1:9\"\n").unwrap();
        let c = parse(&["--config", p]).unwrap();
        assert!(c.flash.is_empty());
        assert_eq!(c.admin, Some("127.0.0.1:9".parse().unwrap()));
        assert_eq!(
            parse(&["--config", p, "--flash", "/tmp/b:1G"])
                .unwrap()
                .flash
                .len(),
            1
        );
        std::fs::write(&path, "flash = []\n").unwrap();
        assert!(parse(&["--config", p]).unwrap().flash.is_empty());
        std::fs::write(&path, "flash = [\"/tmp/c:1G\"]\n").unwrap();
        assert_eq!(
            parse(&["--config", p]).unwrap().flash,
            vec!["/tmp/c:1G".to_string()]
        );
        std::fs::write(
            &path,
            "[knobs]\nitem_size = 512\nreclaim_policy = \"greedy\"\n",
        )
        .unwrap();
        let c = parse(&["--config", p, "--knob", "item_size=1k"]).unwrap();
        assert_eq!(
            c.knobs,
            vec![
                ("item_size".to_string(), "512".to_string()),
                ("reclaim_policy".to_string(), "greedy".to_string()),
                ("item_size".to_string(), "1k".to_string()),
            ]
        );
        std::fs::write(&path, "bogus = 1\n").unwrap();
        assert!(parse(&["--config", p]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn extended_options() {
        let c = parse(&[
            "-o",
            "modern,slab_reassign,ext_path=/tmp/f:4G,ext_wbuf_size=8",
        ])
        .unwrap();
        assert_eq!(c.flash, vec!["/tmp/f:4G".to_string()]);
        let c = parse(&["--flash", "/tmp/a:1GiB", "--flash", "/tmp/b:2G"]).unwrap();
        assert_eq!(
            c.flash,
            vec!["/tmp/a:1GiB".to_string(), "/tmp/b:2G".to_string()]
        );
        assert!(parse(&["--flash", "/tmp/a"]).is_err());
    }
}
