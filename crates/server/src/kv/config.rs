//! `flashtier kv`'s configuration: the optional TOML file (`--config`) and the flags — native
//! and memcached's, which override the file — resolved into a validated [`KvConfig`].
//!
//! Two sets of defaults: `flashtier kv` listens on 127.0.0.1 with a flash tier on
//! [`DEFAULT_FLASH`] and one thread per core; invoked as `memcached` it starts as memcached
//! does — every interface, RAM only unless `-o ext_path`, 4 threads, and it refuses to run
//! as root without `-u`. Everything refused is a [`crate::cli::Usage`] error (exit 64)
//! found before anything is opened.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use flashtier_cache::flash::parse_size;

pub use super::address::Listen;
use super::address::{listen_addrs, resolve, split_host_port};
use super::options::{self, TlsOptions};
use crate::cli::{KvArgs, Usage};
use crate::usage;

const DEFAULT_MEMORY: u64 = 64 << 20;
const DEFAULT_MAX_ITEM: u64 = 1 << 20;
const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// memcached's defaults for -t, -R, -b and -a.
const MEMCACHED_THREADS: usize = 4;
const DEFAULT_REQS_PER_EVENT: u32 = 20;
const DEFAULT_BACKLOG: u32 = 1024;
const DEFAULT_UNIX_MASK: u32 = 0o700;
/// The flash tier `flashtier kv` runs on when no flash and no `--ram-only` is given: a
/// 1 GiB file under the current directory.
pub const DEFAULT_FLASH: &str = "data/flash.bin:1GiB";
/// memcached's bounds for `-I`.
const MIN_ITEM: u64 = 1 << 10;
const MAX_ITEM: u64 = 1 << 30;

/// A validated `flashtier kv` configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvConfig {
    /// Started as `memcached` (argv[0]): memcached's defaults and rules.
    pub memcached: bool,
    /// TCP addresses (none with -s, as memcached).
    pub listen: Vec<Listen>,
    /// Unix socket path and its access mask (-s, -a).
    pub unix: Option<(PathBuf, u32)>,
    /// Listen backlog (-b). Default: 1024.
    pub backlog: u32,
    /// Bytes of RAM for items. Default: 64 MiB.
    pub memory: u64,
    /// Largest value in bytes. Default: 1 MiB.
    pub max_item_size: u64,
    /// Runtime worker threads. Default: number of cores (memcached: 4).
    pub threads: usize,
    /// Default: 1024.
    pub max_connections: usize,
    pub verbose: u8,
    /// Flash tier devices (`--flash`, `-o ext_path`), validated `PATH:SIZE[:TIER]` specs;
    /// empty = RAM only (`--ram-only`). Default: [`DEFAULT_FLASH`] (memcached: none).
    pub flash: Vec<String>,
    /// `flash` is the built-in [`DEFAULT_FLASH`] (no flash flag, file key or `--ram-only`):
    /// the only flash file whose missing directory (`data/`) a start creates.
    pub default_flash: bool,
    /// Admin HTTP endpoint (`--admin`). Default: none.
    pub admin: Option<SocketAddr>,
    /// The small-object tier's file and size (`--small-flash PATH:SIZE`) and its item size
    /// limit (`--small-item-max`; 0 = off). Default: none, 0.
    pub small: Option<(PathBuf, u64)>,
    pub small_item_max: u64,
    /// The small tier's log, percent of its file (`--small-log-percent`; 0 off). Default: 10.
    pub small_log_percent: u32,
    /// The small tier's log admission threshold (`--small-log-merge-min`). Default: 1.
    pub small_log_merge_min: u64,
    /// Decoded log pages a merge of the small tier's log holds at most
    /// (`--small-merge-pages`). Default: 2048.
    pub small_merge_pages: usize,
    /// The small tier's lookup arrays on huge pages (`--small-hugepages`). Default: off.
    pub small_hugepages: bool,
    /// How long a write awaits room in the small tier's staging (`--small-wait-ms`).
    /// Default: 200.
    pub small_wait_ms: u64,
    /// Runtime knobs to set at startup, in order (`--knob NAME=VALUE`, memcached's
    /// `-o ext_item_size=...` and friends, the file's `[knobs]`). Default: none.
    pub knobs: Vec<(String, String)>,
    /// Format flash devices that hold other data (`--force-format`). Default: false.
    pub force_format: bool,
    /// Format flash devices whose format does not match (another size or set) instead of
    /// refusing to start (`--reformat-on-mismatch`, `reformat_on_mismatch`). Default: false.
    pub reformat_on_mismatch: bool,
    /// Daemonize (-d).
    pub daemon: bool,
    /// Pid file (-P).
    pub pidfile: Option<PathBuf>,
    /// Drop to this user after opening everything (-u, as root only).
    pub user: Option<String>,
    /// Maximise the core size limit (-r).
    pub coredumps: bool,
    /// mlockall (-k).
    pub lock_memory: bool,
    /// Evict to make room (false with -M).
    pub evictions: bool,
    /// CAS values kept (false with -C).
    pub cas: bool,
    /// Requests per connection before yielding (-R). Default: 20.
    pub reqs_per_event: u32,
    /// `flush_all` allowed (false with -F).
    pub flush_enabled: bool,
    /// `stats cachedump` / `lru_crawler metadump` allowed (false with -X).
    pub dump_enabled: bool,
    /// `shutdown` allowed (-A).
    pub shutdown_enabled: bool,
    /// Close connections idle this long (-o idle_timeout). Default: never.
    pub idle_timeout: Option<Duration>,
    /// `stats detail` prefix delimiter, and whether detail is on from the start (-D).
    pub detail_delimiter: u8,
    pub detail_enabled: bool,
    /// ASCII auth file (-Y).
    pub auth_file: Option<PathBuf>,
    /// TLS settings when -Z is given.
    pub tls: Option<TlsOptions>,
    /// "ascii" or "auto-negotiate" (-B), as `stats settings` reports it.
    pub protocol: &'static str,
    /// One line each: flags and options accepted without effect.
    pub warnings: Vec<String>,
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
    /// Format flash formatted for another size or set as configured (empty) instead of
    /// refusing to start. Default: false.
    pub reformat_on_mismatch: Option<bool>,
    /// Admin endpoint HOST:PORT. Default: none.
    pub admin: Option<String>,
    /// Runtime knobs set at startup (`[knobs]` table, e.g. `item_size = 512`); `--knob`
    /// flags come after them. Default: none.
    pub knobs: Option<std::collections::BTreeMap<String, toml::Value>>,
}

impl KvFile {
    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| Usage(format!("cannot read config file {}", path.display())))?;
        toml::from_str(&text)
            .with_context(|| Usage(format!("invalid config file {}", path.display())))
    }
}

impl KvConfig {
    /// Resolve the config file (if any) and the flags, then validate. `memcached`: started
    /// under that name (its defaults and rules).
    pub fn from_args(args: &KvArgs, memcached: bool) -> anyhow::Result<Self> {
        let file = match &args.config {
            Some(path) => KvFile::load(path)?,
            None => KvFile::default(),
        };
        let mut a = args.clone();
        // A file value counts only where no flag (native or memcached-style) was given.
        if a.listen.is_empty() {
            a.listen.extend(file.listen);
        }
        if a.memory.is_none() && a.memory_mb.is_none() {
            a.memory = file.memory;
        }
        if a.max_item_size.is_none() {
            a.max_item_size = file.max_item_size;
        }
        if a.threads.is_none() {
            a.threads = file.threads;
        }
        if a.conn_limit.is_none() {
            a.conn_limit = file.max_connections;
        }
        if a.admin.is_none() {
            a.admin = file.admin;
        }
        a.reformat_on_mismatch |= file.reformat_on_mismatch == Some(true);
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
        // the default file under the current directory (not as memcached: RAM only).
        let flag_flash = !a.flash.is_empty() || a.extended.iter().any(|o| o.contains("ext_path"));
        if a.ram_only && flag_flash {
            usage!("--ram-only conflicts with --flash / -o ext_path");
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
        let mut cfg = Self::from_flags(&a, memcached)?;
        if cfg.flash.is_empty() && !ram_only && file_flash.is_none() && !memcached {
            cfg.flash = vec![DEFAULT_FLASH.to_string()];
            cfg.default_flash = true;
        }
        Ok(cfg)
    }

    fn from_flags(a: &KvArgs, memcached: bool) -> anyhow::Result<Self> {
        let x = options::apply(&a.extended)?;
        let mut warnings = Vec::new();
        let memory = memory_limit(a)?;
        let max_item_size = match &a.max_item_size {
            Some(s) => size(s, "-I/--max-item-size")?,
            None => DEFAULT_MAX_ITEM,
        };
        let threads = match a.threads {
            Some(t) => t,
            None if memcached => MEMCACHED_THREADS,
            None => std::thread::available_parallelism().map_or(4, |n| n.get()),
        };
        let max_connections = a.conn_limit.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if let Some(udp) = a.udp_port {
            if udp != 0 {
                usage!("-U {udp}: UDP is not supported; use -U 0 (the default)");
            }
        }
        let mut knobs = Vec::new();
        for k in &a.knob {
            let Some((name, value)) = k.split_once('=') else {
                usage!("--knob {k}: expected NAME=VALUE");
            };
            knobs.push((name.trim().to_string(), value.trim().to_string()));
        }
        knobs.extend(x.knobs);
        let mut flash = Vec::new();
        for spec in &a.flash {
            flash.push(flash_spec(spec, "--flash")?);
        }
        for spec in &x.flash {
            flash.push(flash_spec(spec, "-o ext_path")?);
        }
        warnings.extend(x.warnings);

        let unix = unix_socket(a)?;
        let tls = tls_options(a, &x.tls, &mut warnings)?;
        // TCP: none with -s (memcached's "-s disables network support").
        let listen = if unix.is_some() {
            if !a.listen.is_empty() || a.port.is_some() {
                warnings.push(
                    "-l/-p accepted with no effect: -s serves the unix socket only (as memcached)"
                        .into(),
                );
            }
            Vec::new()
        } else {
            listen_addrs(&a.listen, a.port, memcached, tls.is_some())?
        };
        if listen.is_empty() && unix.is_none() {
            usage!("nothing to listen on: -p 0 turns TCP off; give -l ADDR:PORT or -s PATH");
        }
        let protocol = protocol(a, &mut warnings)?;
        ignored_flags(a, &mut warnings)?;
        let (detail_delimiter, detail_enabled) = match &a.prefix_delimiter {
            Some(d) => match d.as_bytes().first() {
                Some(&c) => (c, true),
                None => usage!("-D: no delimiter specified"),
            },
            None => (b':', false),
        };
        if a.reqs_per_event == Some(0) {
            usage!("-R 0: number of requests per event must be greater than 0");
        }
        if a.user.is_some() && !is_root() {
            warnings.push("-u accepted with no effect: not running as root".into());
        }
        let admin = admin_addr(a)?;
        let sm = small_flags(a)?;
        let cfg = Self {
            small: sm.small,
            small_item_max: sm.item_max,
            small_log_percent: sm.log_percent,
            small_log_merge_min: sm.log_merge_min,
            small_merge_pages: sm.merge_pages,
            small_hugepages: sm.hugepages,
            small_wait_ms: sm.wait_ms,
            memcached,
            listen,
            unix,
            backlog: a.backlog.unwrap_or(DEFAULT_BACKLOG),
            memory,
            max_item_size,
            threads,
            max_connections,
            verbose: a.verbose,
            flash,
            default_flash: false,
            admin,
            knobs,
            force_format: a.force_format,
            reformat_on_mismatch: a.reformat_on_mismatch,
            daemon: a.daemon,
            pidfile: a.pidfile.clone(),
            user: a.user.clone(),
            coredumps: a.enable_coredumps,
            lock_memory: a.lock_memory,
            evictions: !a.disable_evictions,
            cas: !a.disable_cas,
            reqs_per_event: a.reqs_per_event.unwrap_or(DEFAULT_REQS_PER_EVENT),
            flush_enabled: !a.disable_flush_all,
            dump_enabled: !a.disable_dumping,
            shutdown_enabled: a.enable_shutdown,
            idle_timeout: x.idle_timeout,
            detail_delimiter,
            detail_enabled,
            auth_file: a.auth_file.clone(),
            tls,
            protocol,
            warnings,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self.threads == 0 || self.threads > 1024 {
            usage!("threads must be between 1 and 1024 (got {})", self.threads);
        }
        if self.max_connections == 0 {
            usage!("max connections must be at least 1");
        }
        if !(MIN_ITEM..=MAX_ITEM).contains(&self.max_item_size) {
            usage!(
                "max item size must be between 1KiB and 1GiB (got {})",
                self.max_item_size
            );
        }
        if self.memory < self.max_item_size {
            usage!(
                "memory ({}) must be at least the max item size ({})",
                self.memory,
                self.max_item_size
            );
        }
        if self.memcached && is_root() && self.user.is_none() {
            usage!("can't run as root without the -u switch");
        }
        Ok(())
    }

    /// The address `stats settings` reports as `inter`/`tcpport` (the first TCP one).
    pub fn first_listen(&self) -> SocketAddr {
        self.listen
            .first()
            .map_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)), |l| l.addr)
    }
}

/// The RAM limit: `--memory` (a size) or memcached's `-m` (MiB), once; else the default.
fn memory_limit(a: &KvArgs) -> anyhow::Result<u64> {
    Ok(match (a.memory_mb, &a.memory) {
        (Some(_), Some(_)) => usage!("give the memory limit once: --memory or -m, not both"),
        (Some(mb), None) => match mb.checked_mul(1 << 20) {
            Some(b) => b,
            None => usage!("-m {mb}: too large"),
        },
        (None, Some(s)) => size(s, "--memory")?,
        (None, None) => DEFAULT_MEMORY,
    })
}

/// The unix socket (`-s`) and its access mask (`-a`, octal), if one is served.
fn unix_socket(a: &KvArgs) -> anyhow::Result<Option<(PathBuf, u32)>> {
    Ok(match &a.unix_socket {
        Some(path) => {
            let mask = match &a.unix_mask {
                Some(m) => match u32::from_str_radix(m, 8) {
                    Ok(v) if v <= 0o777 => v,
                    _ => usage!("-a {m}: an octal access mask such as 700"),
                },
                None => DEFAULT_UNIX_MASK,
            };
            Some((path.clone(), mask))
        }
        None => {
            if a.unix_mask.is_some() {
                usage!("-a needs -s (the mask applies to the unix socket)");
            }
            None
        }
    })
}

/// TLS settings when `-Z` asks for TLS (checked: a chain, and a CA when clients are
/// verified); without it, TLS options given have no effect (a warning).
fn tls_options(
    a: &KvArgs,
    tls: &TlsOptions,
    warnings: &mut Vec<String>,
) -> anyhow::Result<Option<TlsOptions>> {
    Ok(if a.enable_ssl {
        let t = tls.clone();
        if t.chain_cert.is_none() {
            usage!("-Z needs -o ssl_chain_cert=FILE (and ssl_key=FILE unless the chain file holds the key)");
        }
        if t.verify_mode > 0 && t.ca_cert.is_none() {
            usage!(
                "-o ssl_verify_mode={} needs -o ssl_ca_cert=FILE",
                t.verify_mode
            );
        }
        Some(t)
    } else {
        if tls.chain_cert.is_some() || tls.key.is_some() {
            warnings.push("-o ssl_* options accepted with no effect: TLS needs -Z".into());
        }
        None
    })
}

/// The protocol `-B` names (text and meta only are served).
fn protocol(a: &KvArgs, warnings: &mut Vec<String>) -> anyhow::Result<&'static str> {
    Ok(match a.protocol.as_deref() {
        None | Some("ascii") => "ascii",
        Some("auto") => {
            warnings.push(
                "-B auto: only the text and meta protocols are served; a binary request \
                 closes its connection"
                    .into(),
            );
            "auto-negotiate"
        }
        Some("binary") => {
            usage!("-B binary: the binary protocol is not served (text and meta only)")
        }
        Some(other) => usage!("-B {other}: should be one of auto, binary, or ascii"),
    })
}

/// memcached flags flashtier accepts without effect (a warning each) or refuses: `-S`, `-f`,
/// `-n`, `-L`, `-e`, `-N`, checked (and warned about) in this order.
fn ignored_flags(a: &KvArgs, warnings: &mut Vec<String>) -> anyhow::Result<()> {
    if a.enable_sasl {
        usage!("-S: SASL works over the binary protocol, which flashtier does not serve; use -Y FILE (ASCII authentication)");
    }
    if let Some(f) = a.slab_growth_factor {
        if f <= 1.0 {
            usage!("-f {f}: factor must be greater than 1");
        }
        warnings.push(format!(
            "-f {f} accepted with no effect: there are no slab classes (RAM is a log of segments)"
        ));
    }
    if let Some(n) = a.slab_min_size {
        if n == 0 {
            usage!("-n 0: chunk size must be greater than 0");
        }
        warnings.push(format!(
            "-n {n} accepted with no effect: there are no slab classes (RAM is a log of segments)"
        ));
    }
    if a.large_pages {
        warnings.push(
            "-L accepted with no effect: RAM segments are allocated lazily; transparent \
             huge pages apply if the kernel enables them"
                .into(),
        );
    }
    if let Some(e) = &a.memory_file {
        warnings.push(format!(
            "-e {} accepted with no effect: items are not kept in a memory file; with a \
             flash tier (-o ext_path) a restart is warm",
            e.display()
        ));
    }
    if let Some(n) = a.napi_ids {
        if n == 0 {
            usage!("-N 0: must be greater than 0");
        }
        warnings.push(format!(
            "-N {n} accepted with no effect: connections are not placed by NAPI id"
        ));
    }
    Ok(())
}

fn size(s: &str, what: &str) -> anyhow::Result<u64> {
    match parse_size(s) {
        Ok(v) => Ok(v),
        Err(e) => usage!("{what} {s}: {e}"),
    }
}

fn is_root() -> bool {
    crate::daemon::is_root()
}

fn flash_spec(v: &str, what: &str) -> anyhow::Result<String> {
    if flashtier_cache::flash::DeviceSpec::parse(v).is_err() {
        usage!("{what} {v}: expected PATH:SIZE (e.g. data/flash.bin:2GiB)");
    }
    Ok(v.to_string())
}

/// `--admin HOST:PORT`, resolved (none without the flag).
fn admin_addr(a: &KvArgs) -> anyhow::Result<Option<SocketAddr>> {
    let Some(text) = &a.admin else {
        return Ok(None);
    };
    let (host, port) = split_host_port(text, None)
        .with_context(|| Usage(format!("--admin {text}: expected HOST:PORT")))?;
    let Some(port) = port else {
        usage!("--admin {text}: expected HOST:PORT");
    };
    Ok(Some(resolve(&host, port)?[0]))
}

/// The small tier's flags, validated.
struct SmallFlags {
    /// File and size.
    small: Option<(PathBuf, u64)>,
    item_max: u64,
    log_percent: u32,
    log_merge_min: u64,
    /// Decoded log pages a merge holds at most.
    merge_pages: usize,
    /// The lookup arrays on huge pages.
    hugepages: bool,
    /// How long a write waits for staging room (ms).
    wait_ms: u64,
}

/// The bounds of `--small-merge-pages`: below 4 a merge could not hold a segment page beside
/// a set's; above 65536 (~700 MB of decoded pages) it would not be a bound.
const MERGE_PAGES: std::ops::RangeInclusive<usize> = 4..=65536;

/// `--small-flash PATH:SIZE` and `--small-item-max BYTES` (the small-object tier; a limit
/// above 0 needs the file), `--small-log-percent` (0..=90, default 10),
/// `--small-log-merge-min` (≥ 1, default 1), `--small-merge-pages` (4..=65536, default
/// 2048), `--small-wait-ms` (0..=60000, default 200), `--small-hugepages` (on/off).
fn small_flags(a: &KvArgs) -> anyhow::Result<SmallFlags> {
    let small = match &a.small_flash {
        Some(text) => {
            let Some((path, size)) = text.rsplit_once(':') else {
                usage!("--small-flash {text}: expected PATH:SIZE");
            };
            let size = parse_size(size)
                .with_context(|| Usage(format!("--small-flash {text}: bad size")))?;
            Some((PathBuf::from(path), size))
        }
        None => None,
    };
    let max = a.small_item_max.unwrap_or(0);
    if max > 0 && small.is_none() {
        usage!("--small-item-max {max} needs --small-flash PATH:SIZE");
    }
    let d = flashtier_cache::SmallSettings::flag_defaults();
    let percent = a.small_log_percent.unwrap_or(d.log_percent);
    if percent > 90 {
        usage!("--small-log-percent {percent}: expected 0 to 90");
    }
    let merge_min = a.small_log_merge_min.unwrap_or(d.merge_min as u64);
    if merge_min == 0 {
        usage!("--small-log-merge-min 0: expected at least 1");
    }
    let merge_pages = a.small_merge_pages.unwrap_or(d.merge_pages);
    if !MERGE_PAGES.contains(&merge_pages) {
        usage!(
            "--small-merge-pages {merge_pages}: expected {} to {}",
            MERGE_PAGES.start(),
            MERGE_PAGES.end()
        );
    }
    let wait = a.small_wait_ms.unwrap_or(200);
    if wait > 60_000 {
        usage!("--small-wait-ms {wait}: expected 0 to 60000");
    }
    Ok(SmallFlags {
        small,
        item_max: max,
        log_percent: percent,
        log_merge_min: merge_min,
        merge_pages,
        hugepages: a.small_hugepages.unwrap_or(d.hugepages),
        wait_ms: wait,
    })
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
