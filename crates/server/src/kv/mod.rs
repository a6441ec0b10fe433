//! `flashtier kv` (and the binary started as `memcached`): resolve the configuration
//! ([`config`]), open the sockets ([`listen`]) and TLS ([`tls`]), daemonize if asked, build
//! the store, drop root, and run the memcached-protocol server — and the admin endpoint
//! ([`admin`]) with `--admin` — until SIGTERM/SIGINT (or `shutdown` with -A); exit 0.
//!
//! Start-up order (each step only after the ones before succeeded, so a refused start
//! changes nothing — [`crate::startup`]): configuration and -o options; user (-u) and auth
//! file (-Y); TLS files; sockets; fork (-d, while single-threaded); runtime and store (flash
//! opened or formatted); knobs; mlockall (-k); pid file (-P); privileges dropped; serve.
//!
//! Threads: the tokio runtime's workers (`--threads`) run the accept loop and every
//! connection; the main thread only blocks on the runtime.

mod address;
mod admin;
mod check;
mod config;
mod listen;
mod options;
mod tls;

use std::sync::Arc;

use anyhow::Context as _;
use flashtier_cache::flash::DeviceSpec;
use flashtier_cache::{Cache, CacheConfig, FlashSettings, KvStore, SmallDevice, SmallSettings};
use flashtier_memcache::{auth::AuthFile, Context, Listener, MemoryLimitHook, Settings};

pub use config::KvConfig;
#[cfg(test)]
pub(crate) use config::KvFile;

use crate::cli::{KvArgs, Usage};
use crate::daemon;
use crate::startup::Litter;

/// The one place the server chooses its store: `flashtier_cache::Cache`, the RAM tier with
/// the configured memory limit and item size, over the flash tier when `--flash` (or
/// `-o ext_path`) names devices. Opening formats blank flash files (never foreign data
/// unless `--force-format`) and recovers used ones (warm restart). Every flash file and
/// directory it may create is noted in `litter`. Everything downstream is generic over
/// `KvStore`.
fn build_store(cfg: &KvConfig, litter: &mut Litter) -> anyhow::Result<Arc<Cache>> {
    let mut builder = CacheConfig::builder()
        .memory_limit(cfg.memory as usize)
        .max_item_size(cfg.max_item_size as usize)
        .evict_to_free(cfg.evictions);
    if !cfg.flash.is_empty() {
        let specs = flash_specs(cfg)?;
        for spec in &specs {
            let path = &spec.path;
            // Only the built-in default creates its directory (`data/`); any other flash
            // file's directory must exist (checked before: `check::check`).
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                if cfg.default_flash {
                    litter.create_dir_all(dir).with_context(|| {
                        format!("cannot create flash directory {}", dir.display())
                    })?;
                }
            }
            litter.note_file(path);
        }
        let mut flash = FlashSettings::specs(specs);
        flash.force_format = cfg.force_format;
        flash.reformat_on_mismatch = cfg.reformat_on_mismatch;
        // One io_uring per serving thread (see flashtier_memcache::Workers).
        flash.io_lanes = cfg.threads;
        builder = builder.flash(flash);
    }
    if let (Some((path, size)), n) = (&cfg.small, cfg.small_item_max) {
        if n > 0 {
            litter.note_file(path);
            let dev = SmallDevice::File {
                path: path.clone(),
                size: *size,
            };
            let mut small = SmallSettings::new(dev, n as usize);
            small.log_fraction = f64::from(cfg.small_log_percent) / 100.0;
            small.merge_min = cfg.small_log_merge_min as usize;
            small.merge_pages = cfg.small_merge_pages;
            small.hugepages = cfg.small_hugepages;
            small.wait = std::time::Duration::from_millis(cfg.small_wait_ms);
            // One small-tier ring per serving thread (see flashtier_memcache::Workers).
            small.io_lanes = cfg.threads;
            // The flusher frees a merge's decoded log pages; purge them when it goes idle.
            small.release_memory = Some(crate::alloc::collect);
            builder = builder.small(small);
        }
    }
    let cache_cfg = builder.build().context("invalid cache configuration")?;
    Ok(Arc::new(
        Cache::new(cache_cfg).context("cannot start the cache")?,
    ))
}

/// The flash devices to open, `PATH:0` resolved to the whole existing file or device (so the
/// engine's segment size follows the real capacity, and the start line names it).
fn flash_specs(cfg: &KvConfig) -> anyhow::Result<Vec<DeviceSpec>> {
    cfg.flash
        .iter()
        .map(|text| {
            let mut spec = DeviceSpec::parse(text).with_context(|| format!("--flash {text}"))?;
            if spec.size == 0 {
                spec.size = crate::startup::whole_size(&spec.path, "--flash", text)?;
            }
            Ok(spec)
        })
        .collect()
}

/// `flashtier kv`; `memcached`: started under that name.
pub fn main(args: KvArgs, memcached: bool) -> anyhow::Result<()> {
    if args.version {
        if memcached {
            println!(
                "memcached {}",
                flashtier_memcache::context::default_version()
            );
        } else {
            println!(
                "flashtier kv {} (memcached {} protocol)",
                env!("CARGO_PKG_VERSION"),
                flashtier_memcache::context::default_version()
            );
        }
        return Ok(());
    }
    if args.license {
        println!(
            "flashtier {}: Apache License 2.0 (https://www.apache.org/licenses/LICENSE-2.0)",
            env!("CARGO_PKG_VERSION")
        );
        return Ok(());
    }
    let cfg = KvConfig::from_args(&args, memcached)?;
    // -v: info and warnings (always shown); -vv: every command (debug); -vvv: connection
    // events (trace).
    crate::logging::set_level(match cfg.verbose {
        0 | 1 => log::LevelFilter::Info,
        2 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    });
    check::check(&cfg)?;
    if args.check_config {
        check::check_more(&cfg)?;
        print!("{}", check::describe(&cfg));
        println!("# configuration ok");
        return Ok(());
    }
    for w in &cfg.warnings {
        log::warn!("{w}");
    }
    // Everything that can be refused is checked before anything is opened.
    let user = match (&cfg.user, daemon::is_root()) {
        (Some(name), true) => match daemon::lookup_user(name) {
            Ok(Some(ids)) => Some(ids),
            Ok(None) => crate::usage!("can't find the user {name} to switch to"),
            Err(e) => crate::usage!("-u {name}: cannot look the user up: {e}"),
        },
        _ => None,
    };
    let auth = match &cfg.auth_file {
        Some(path) => Some(Arc::new(AuthFile::load(path).map_err(Usage)?)),
        None => None,
    };
    let acceptor = match &cfg.tls {
        Some(t) => Some(tls::acceptor(t)?),
        None => None,
    };
    if cfg.coredumps {
        if let Err(e) = daemon::raise_core_limit() {
            log::warn!("-r: cannot raise the core file size limit: {e}");
        }
    }
    // Declared before the store: on failure the store is closed first, then undone.
    let mut litter = Litter::default();
    let sockets = listen::bind_all(&cfg, &mut litter)?;
    if cfg.daemon {
        daemon::daemonize().context("cannot daemonize")?;
    }
    // This thread's runtime accepts connections and runs the admin endpoint and signals;
    // connections are served by `cfg.threads` thread-per-core workers (started below, once
    // the store is built: each reaps its own flash ring; flashtier_memcache::workers).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let store = build_store(&cfg, &mut litter)
        .map_err(|e| crate::startup::explain(e, crate::startup::Face::Kv))?;
    for (name, value) in &cfg.knobs {
        store
            .set_knob(name, value)
            .with_context(|| format!("knob {name}={value}"))?;
    }
    if cfg.lock_memory {
        if let Err(e) = daemon::lock_memory() {
            log::warn!("-k: mlockall() failed: {e}");
        }
    }
    let pidfile = match &cfg.pidfile {
        Some(path) => {
            litter.note_file(path);
            Some(
                daemon::PidFile::write(path)
                    .with_context(|| format!("cannot write the pid file {}", path.display()))?,
            )
        }
        None => None,
    };
    if let Some(ids) = user {
        daemon::drop_privileges(ids).context("failed to assume the identity of the -u user")?;
    }
    log_flash(&cfg, &store);
    // `cache_memlimit` changes the RAM tier's limit (memcached answers OK to any value the
    // protocol accepts; the store refuses only what it cannot hold, see
    // `Cache::set_memory_limit`).
    let limit_store = Arc::clone(&store);
    let hook: MemoryLimitHook = Box::new(move |bytes| limit_store.set_memory_limit(bytes).is_ok());
    let workers = flashtier_memcache::Workers::start(cfg.threads, "worker", &*store)
        .context("cannot start the worker threads")?;
    litter.keep();
    let served = runtime.block_on(run(
        cfg,
        store,
        sockets,
        acceptor,
        auth,
        Some(hook),
        &workers,
    ));
    // Outside the runtime: stopping joins the worker threads.
    drop(workers);
    drop(pidfile);
    served
}

/// One line at startup: which flash files and sizes are in use, or that there are none.
fn log_flash(cfg: &KvConfig, store: &Cache) {
    if cfg.flash.is_empty() {
        log::info!("RAM only, no flash tier");
        return;
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    let devices: Vec<String> = flash_specs(cfg)
        .unwrap_or_default()
        .iter()
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
    sockets: listen::Sockets,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    auth: Option<Arc<AuthFile>>,
    memory_limit_hook: Option<MemoryLimitHook>,
    workers: &flashtier_memcache::Workers,
) -> anyhow::Result<()> {
    let mut listeners = Vec::new();
    for (l, tls) in sockets.tcp {
        let l = tokio::net::TcpListener::from_std(l).context("adopt a TCP listener")?;
        listeners.push(Listener::Tcp(l, tls.then(|| acceptor.clone()).flatten()));
    }
    let unix_path = sockets.unix.as_ref().map(|(_, p)| p.clone());
    if let Some((l, path)) = sockets.unix {
        let l = tokio::net::UnixListener::from_std(l).context("adopt the unix listener")?;
        listeners.push(Listener::Unix(l, path.display().to_string()));
    }
    let settings = Settings {
        listen: listeners
            .iter()
            .find_map(|l| match l {
                Listener::Tcp(t, _) => t.local_addr().ok(),
                Listener::Unix(..) => None,
            })
            .unwrap_or_else(|| cfg.first_listen()),
        unix_socket: cfg
            .unix
            .as_ref()
            .map(|(p, m)| (p.display().to_string(), *m)),
        max_connections: cfg.max_connections,
        max_item_size: cfg.max_item_size as usize,
        memory_limit: cfg.memory,
        threads: cfg.threads,
        cas_enabled: cfg.cas,
        evictions: cfg.evictions,
        flush_enabled: cfg.flush_enabled,
        dump_enabled: cfg.dump_enabled,
        shutdown_enabled: cfg.shutdown_enabled,
        reqs_per_event: cfg.reqs_per_event,
        backlog: cfg.backlog,
        idle_timeout: cfg.idle_timeout,
        detail_delimiter: cfg.detail_delimiter,
        binding_protocol: cfg.protocol,
        tls: cfg.tls.as_ref().map(|t| {
            if t.min_version >= 3 {
                "tlsv1.3"
            } else {
                "tlsv1.2"
            }
        }),
        auth: auth.clone(),
        ..Settings::default()
    };
    let ctx = Arc::new(Context::new(store, settings));
    ctx.detail.set_on(cfg.detail_enabled);
    if let Some(hook) = memory_limit_hook {
        ctx.set_memory_limit_hook(hook);
    }
    if let Some(admin) = sockets.admin {
        let admin = tokio::net::TcpListener::from_std(admin).context("adopt the admin listener")?;
        let bound = admin.local_addr().context("admin address")?;
        log::info!("admin endpoint on http://{bound}");
        tokio::spawn(admin::serve(admin, Arc::clone(&ctx)));
    }
    // SIGHUP reloads the auth file (memcached does the same); without -Y it is ignored.
    tokio::spawn(reload_on_hangup(auth));
    // Diagnostic builds: SIGUSR2 writes the allocation census (`alloc_census`).
    #[cfg(feature = "alloc-census")]
    tokio::spawn(crate::alloc_census::dump_on_usr2(&crate::GLOBAL));
    {
        for (i, l) in listeners.iter().enumerate() {
            let what = match l {
                Listener::Tcp(t, tls) => {
                    let a = t
                        .local_addr()
                        .map_or_else(|_| "?".into(), |a| a.to_string());
                    if tls.is_some() {
                        format!("{a} (TLS)")
                    } else {
                        a
                    }
                }
                Listener::Unix(_, p) => format!("unix:{p}"),
            };
            if i == 0 {
                log::info!(
                    "listening on {what} (memory {} bytes, max item {} bytes, {} threads, max {} \
                     connections)",
                    cfg.memory,
                    cfg.max_item_size,
                    cfg.threads,
                    cfg.max_connections
                );
            } else {
                log::info!("listening on {what}");
            }
        }
    }
    // SIGTERM/SIGINT handlers are installed before anyone is told the server is ready, so a
    // stop sent right after start-up is a clean stop (pid file and socket removed).
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let stop = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    };
    daemon::ready(cfg.verbose > 0);
    flashtier_memcache::serve_on(listeners, ctx, stop, Some(workers)).await?;
    if let Some(p) = unix_path {
        let _ = std::fs::remove_file(p);
    }
    log::info!("shut down");
    Ok(())
}

async fn reload_on_hangup(auth: Option<Arc<AuthFile>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hup.recv().await.is_some() {
        if let Some(a) = &auth {
            match a.reload() {
                Ok(r) if r.through_descriptor => log::info!(
                    "SIGHUP: auth file reloaded ({} entries) through the descriptor opened at \
                     start (this user may not open it: root was dropped with -u)",
                    r.entries
                ),
                Ok(r) => log::info!("SIGHUP: auth file reloaded ({} entries)", r.entries),
                Err(e) => log::warn!("SIGHUP: {e}; keeping the previous entries"),
            }
        }
    }
}
