//! What every connection of one server shares: the store, the counters, the settings and the
//! table of open connections (for `stats conns`).
//!
//! Built once by [`crate::server::serve`] and handed to every connection task behind an
//! `Arc`; all fields are safe to use from any worker thread.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::stats::Stats;

/// Settings a server reports (`stats settings`) and enforces.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The first TCP address the server listens on (`inter`, `tcpport`).
    pub listen: SocketAddr,
    /// Unix socket path and access mask (`domain_socket`, `umask`), if one is served.
    pub unix_socket: Option<(String, u32)>,
    /// Most simultaneous client connections. Default: `1024`.
    pub max_connections: usize,
    /// Largest value in bytes. Default: `1 MiB`.
    pub max_item_size: usize,
    /// RAM limit of the store in bytes, reported as `limit_maxbytes`. Default: `64 MiB`.
    pub memory_limit: u64,
    /// Worker threads of the runtime (reported as `threads`).
    pub threads: usize,
    /// Output bytes buffered per connection before the connection stops executing requests
    /// and waits for the client to read. Default: `1 MiB`.
    pub max_output_buffer: usize,
    /// The string returned by `version`.
    pub version: String,
    /// CAS values are handed out (memcached -C turns this off: `gets` answers 0 and `cas`
    /// matches any item). Default: `true`.
    pub cas_enabled: bool,
    /// The store evicts to make room (memcached -M turns this off). Reported only; the
    /// store enforces it. Default: `true`.
    pub evictions: bool,
    /// `flush_all` is allowed (memcached -F). Default: `true`.
    pub flush_enabled: bool,
    /// `stats cachedump` and `lru_crawler metadump` are allowed (memcached -X).
    /// Default: `true`.
    pub dump_enabled: bool,
    /// The `shutdown` command is allowed (memcached -A). Default: `false`.
    pub shutdown_enabled: bool,
    /// Requests one connection runs before yielding to the others (memcached -R).
    /// Default: `20`.
    pub reqs_per_event: u32,
    /// Listen backlog (reported). Default: `1024`.
    pub backlog: u32,
    /// Connections idle this long are closed (`idle_kicks`). Default: `None` (never).
    pub idle_timeout: Option<std::time::Duration>,
    /// `stats detail` key prefix delimiter (memcached -D). Default: `:`.
    pub detail_delimiter: u8,
    /// As `stats settings` names it: `ascii` or `auto-negotiate`. Default: `ascii`.
    pub binding_protocol: &'static str,
    /// TLS is served (memcached -Z), and its minimum version as memcached names it.
    /// Default: `None`.
    pub tls: Option<&'static str>,
    /// ASCII authentication (memcached -Y): connections must authenticate first.
    pub auth: Option<Arc<crate::auth::AuthFile>>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 11211)),
            unix_socket: None,
            max_connections: 1024,
            max_item_size: 1 << 20,
            memory_limit: 64 << 20,
            threads: 1,
            max_output_buffer: 1 << 20,
            version: default_version(),
            cas_enabled: true,
            evictions: true,
            flush_enabled: true,
            dump_enabled: true,
            shutdown_enabled: false,
            reqs_per_event: 20,
            backlog: 1024,
            idle_timeout: None,
            detail_delimiter: b':',
            binding_protocol: "ascii",
            tls: None,
            auth: None,
        }
    }
}

/// `1.6.18-flashtier-<crate version>`: memcached's protocol level first, so clients that
/// parse the version number see the feature set they get.
pub fn default_version() -> String {
    format!("1.6.18-flashtier-{}", env!("CARGO_PKG_VERSION"))
}

/// One open connection, for `stats conns`.
#[derive(Clone, Debug)]
pub struct ConnEntry {
    /// `tcp:ADDR:PORT` or `unix:PATH`, as memcached shows it.
    pub peer: String,
    /// The listener it came in on, in the same form.
    pub listen: String,
}

/// State shared by all connections of a server.
pub struct Context<S> {
    pub store: Arc<S>,
    pub stats: Stats,
    /// Request latency per command family (metrics).
    pub latency: crate::latency::Latency,
    pub settings: Settings,
    /// Unix seconds at start (for `uptime`).
    pub started: u32,
    /// Current `verbosity` level (accepted and reported; logging uses the binary's flags).
    pub verbosity: std::sync::atomic::AtomicU32,
    /// Per-key-prefix counters (`stats detail`).
    pub detail: crate::detail::Detail,
    /// Woken by the `shutdown` command (memcached -A): the server stops as on SIGTERM.
    pub shutdown: tokio::sync::Notify,
    conns: Mutex<BTreeMap<u64, ConnEntry>>,
    /// Current RAM limit in bytes (starts at `settings.memory_limit`; `cache_memlimit`).
    memory_limit: AtomicU64,
    memory_limit_hook: Mutex<Option<MemoryLimitHook>>,
    /// Connections each serving thread runs (set when connections go to `Workers`).
    worker_loads: OnceLock<Arc<[AtomicUsize]>>,
    /// The serving threads' kernel thread ids (`set_worker_threads`).
    worker_tids: OnceLock<Arc<[std::sync::atomic::AtomicU64]>>,
}

/// Applies a new RAM limit (bytes) to the store; `false` if it cannot.
pub type MemoryLimitHook = Box<dyn Fn(u64) -> bool + Send + Sync>;

impl<S> std::fmt::Debug for Context<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<S: flashtier_cache::KvStore> Context<S> {
    /// Change one of the store's runtime knobs: the one path behind the `extstore` command
    /// and the admin endpoint. The error is a client error whose text says what is accepted.
    pub fn set_knob(&self, name: &str, value: &str) -> Result<(), flashtier_cache::Error> {
        self.store.set_knob(name, value)
    }

    /// The store's runtime knobs and their current values.
    pub fn knobs(&self) -> Vec<(String, String)> {
        self.store.knobs()
    }
}

impl<S> Context<S> {
    /// A CAS value as replies show it: 0 when CAS is disabled (memcached -C).
    pub fn cas_out(&self, cas: u64) -> u64 {
        if self.settings.cas_enabled {
            cas
        } else {
            0
        }
    }

    /// A context serving `store` with `settings`.
    pub fn new(store: Arc<S>, settings: Settings) -> Self {
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(0);
        let settings_limit = settings.memory_limit;
        Self {
            store,
            stats: Stats::default(),
            latency: Default::default(),
            settings,
            started,
            verbosity: Default::default(),
            detail: crate::detail::Detail::default(),
            shutdown: tokio::sync::Notify::new(),
            conns: Mutex::new(BTreeMap::new()),
            memory_limit: AtomicU64::new(settings_limit),
            memory_limit_hook: Mutex::new(None),
            worker_loads: OnceLock::new(),
            worker_tids: OnceLock::new(),
        }
    }

    /// Report the serving threads' connection counts (`worker_connections_min`/`_max`).
    pub fn set_worker_loads(&self, loads: Arc<[AtomicUsize]>) {
        let _ = self.worker_loads.set(loads);
    }

    /// Report the serving threads' kernel ids (`worker_*_us` from their scheduler stats).
    pub fn set_worker_threads(&self, tids: Arc<[std::sync::atomic::AtomicU64]>) {
        let _ = self.worker_tids.set(tids);
    }

    /// Per serving thread: (µs on a CPU, µs waiting on a run queue, times scheduled in),
    /// from the kernel's scheduler statistics; empty without workers.
    pub fn worker_schedstats(&self) -> Vec<(u64, u64, u64)> {
        self.worker_tids
            .get()
            .map(|t| {
                t.iter()
                    .filter_map(|tid| {
                        let (cpu, wait, runs) =
                            crate::workers::schedstat(tid.load(Ordering::Relaxed))?;
                        Some((cpu / 1000, wait / 1000, runs))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Fewest and most connections any serving thread runs; `None` without workers.
    pub fn worker_load_range(&self) -> Option<(usize, usize)> {
        let loads = self.worker_loads.get()?;
        let it = loads.iter().map(|l| l.load(Ordering::Relaxed));
        Some((it.clone().min()?, it.max()?))
    }

    /// Let `cache_memlimit` change the store's RAM limit through `hook`. Without a hook the
    /// command answers memcached's `MEMLIMIT_ADJUST_FAILED`.
    pub fn set_memory_limit_hook(&self, hook: MemoryLimitHook) {
        *self
            .memory_limit_hook
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    /// Try to set the RAM limit to `bytes`; true when the store accepted it.
    pub fn adjust_memory_limit(&self, bytes: u64) -> bool {
        let hook = self
            .memory_limit_hook
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let ok = hook.as_ref().is_some_and(|h| h(bytes));
        if ok {
            self.memory_limit.store(bytes, Ordering::Relaxed);
        }
        ok
    }

    /// The RAM limit in bytes as configured or last adjusted.
    pub fn memory_limit(&self) -> u64 {
        self.memory_limit.load(Ordering::Relaxed)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ConnEntry>> {
        self.conns
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Record a new connection.
    pub fn register(&self, id: u64, entry: ConnEntry) {
        self.table().insert(id, entry);
    }

    /// Forget a closed connection.
    pub fn unregister(&self, id: u64) {
        self.table().remove(&id);
    }

    /// A copy of the open connections.
    pub fn connections(&self) -> Vec<(u64, ConnEntry)> {
        self.table().iter().map(|(k, v)| (*k, v.clone())).collect()
    }
}
