//! Command-line flags.
//!
//! `flashtier kv` takes its native long flags and memcached 1.6's whole command line (every
//! short flag and long option `memcached -h` lists), so `flashtier kv -p 11211 -m 1024` drops
//! in where `memcached -p 11211 -m 1024` ran. Installed (or linked) under the name
//! `memcached`, the binary *is* `flashtier kv` with memcached's defaults ([`invoked_as_memcached`]):
//! Debian's `/etc/memcached.conf` and its systemd wrapper start it unchanged. What each
//! memcached flag and `-o` option does here is decided in `kv::config` and listed in
//! `docs/compat.md`.
//!
//! Bad command lines are usage errors ([`Usage`]): one line on stderr, exit status 64
//! (`EX_USAGE`, as memcached), nothing touched on disk.
use clap::{ArgAction, Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "flashtier",
    version,
    about = "A cache that extends caching beyond RAM onto flash"
)]
pub struct Cli {
    /// Log line format on stderr: text (timestamp, level, target, message) or json (one
    /// object per line).
    #[arg(long, global = true, value_enum, default_value_t = crate::logging::LogFormat::Text)]
    pub log_format: crate::logging::LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the memcached-compatible key-value cache server.
    Kv(Box<KvArgs>),
    /// Serve a backing block device through a flash cache over NBD.
    Block(Box<BlockArgs>),
    /// Control a running `flashtier block` through its admin endpoint.
    Ctl(crate::ctl::CtlArgs),
    /// Write man pages and shell completions generated from this CLI into DIR (packaging).
    #[command(hide = true)]
    Assets {
        /// Output directory (created): man/*.1, completions/{flashtier.bash,_flashtier,flashtier.fish}.
        dir: std::path::PathBuf,
    },
}

/// The binary run under the name `memcached`: `flashtier kv` with memcached's defaults.
#[derive(Debug, Parser)]
#[command(
    name = "memcached",
    about = "flashtier kv, started as memcached (memcached 1.6 command line)",
    disable_version_flag = true
)]
pub struct MemcachedCli {
    #[command(flatten)]
    pub args: KvArgs,
}

/// True when argv[0]'s file name is `memcached` (an installed copy, a symlink, a bind mount
/// over `/usr/bin/memcached`).
pub fn invoked_as_memcached(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == "memcached")
}

/// A bad command line or configuration: exit status 64 (`EX_USAGE`).
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// `anyhow::bail!` for usage errors.
#[macro_export]
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::cli::Usage(format!($($t)*))))
    };
}

/// The configuration does not fit the machine as it is: a flash or cache device formatted
/// for another size or set, or holding other data; a flash or cache directory that does not
/// exist. Exit status 78 (`EX_CONFIG`): as after a usage error, starting again unchanged
/// cannot succeed, so the packaged units do not restart on either
/// (`RestartPreventExitStatus=64 78`). The message says what to change.
#[derive(Debug)]
pub struct Conflict(pub String);

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Conflict {}

/// `anyhow::bail!` for [`Conflict`]s.
#[macro_export]
macro_rules! conflict {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::cli::Conflict(format!($($t)*))))
    };
}

#[derive(Clone, Debug, Default, Args)]
pub struct KvArgs {
    /// TOML configuration file (keys: listen, memory, max_item_size, threads,
    /// max_connections, flash, ram_only, reformat_on_mismatch, admin, and a [knobs] table).
    /// Flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    /// Address(es) to listen on: ADDR or ADDR:PORT, a comma-separated list, repeatable
    /// (memcached -l; `[v6]:port`; `notls:` serves that address without TLS under -Z).
    /// Default: 127.0.0.1 (as `memcached`: every interface).
    #[arg(short = 'l', long = "listen", value_name = "ADDR[:PORT]", action = ArgAction::Append)]
    pub listen: Vec<String>,

    /// TCP port for addresses given without one (memcached -p). Default: 11211.
    #[arg(short = 'p', long = "port", value_name = "PORT")]
    pub port: Option<u16>,

    /// RAM for items, e.g. 64M, 64MiB, 1G or plain bytes. Default: 64MiB.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,

    /// memcached -m: item memory in megabytes. Default: 64.
    #[arg(short = 'm', long = "memory-limit", value_name = "MB")]
    pub memory_mb: Option<u64>,

    /// Largest value a single item may hold, e.g. 1m, 512k (memcached -I). Default: 1MiB.
    #[arg(short = 'I', long = "max-item-size", value_name = "SIZE")]
    pub max_item_size: Option<String>,

    /// Network worker threads (memcached -t). Default: the number of CPU cores (as
    /// `memcached`: 4).
    #[arg(short = 't', long = "threads", value_name = "N")]
    pub threads: Option<usize>,

    /// Most simultaneous client connections; more are refused (memcached -c).
    /// Default: 1024.
    #[arg(
        short = 'c',
        long = "conn-limit",
        visible_alias = "max-connections",
        value_name = "N"
    )]
    pub conn_limit: Option<usize>,

    /// Flash tier device or file as PATH:SIZE (e.g. data/flash.bin:2GiB; SIZE 0 = the whole
    /// existing file or device); repeat for JBOD. A missing file is created, a missing
    /// directory is refused. memcached's `-o ext_path=PATH:SIZE` is the same. Default:
    /// data/flash.bin:1GiB under the current directory (created, `data/` too), unless
    /// --ram-only (as `memcached`: RAM only unless -o ext_path).
    #[arg(long, value_name = "PATH:SIZE", action = ArgAction::Append)]
    pub flash: Vec<String>,

    /// Small-object flash tier (issue 28) as PATH:SIZE: values of at most --small-item-max
    /// bytes leave RAM for this file (a small log of pages, then 4 KiB set pages) instead of
    /// the main flash log (--flash), with no RAM index entry each (docs/eviction.md, "Small objects"). Kept across a clean stop; after
    /// kill -9 its on-flash log is replayed and only the sets with changes still staged in RAM
    /// are emptied, the rest kept. Default: none.
    #[arg(long, value_name = "PATH:SIZE")]
    pub small_flash: Option<String>,

    /// Largest value in bytes the small-object tier keeps (at most 2048); 0 turns it off.
    /// Needs --small-flash. Default: 0 (off).
    #[arg(long, value_name = "BYTES")]
    pub small_item_max: Option<u64>,

    /// Percent of the --small-flash file for the on-flash log in front of its sets
    /// (Kangaroo's KLog: inserts are appended there and merged into sets grouped by set).
    /// 0 turns the log off; at most 90. A changed value starts the file empty. Default: 10.
    #[arg(long, value_name = "PERCENT")]
    pub small_log_percent: Option<u32>,

    /// Kangaroo's admission threshold for the small tier's log: a merge rewrites a set only
    /// when it gains at least N objects, else drops them (never when that could uncover an
    /// older version). Default: 1 (always rewrite).
    #[arg(long, value_name = "N")]
    pub small_log_merge_min: Option<u64>,

    /// Decoded log pages one merge of the small tier's log holds at most (4 KiB each plus
    /// their entries, ~7–11 KiB a page): bounds the merge's memory whatever the log's size;
    /// a smaller bound re-reads more log pages (`small_log_page_reads`). 4 to 65536.
    /// Default: 2048.
    #[arg(long, value_name = "PAGES")]
    pub small_merge_pages: Option<usize>,

    /// Put the small tier's fixed lookup arrays (set summaries, log index heads and links)
    /// on transparent huge pages (`madvise`; the rest of the heap keeps 4 KiB pages):
    /// fewer TLB misses per small GET, RSS up by less than the arrays' size (stat
    /// `small_hugepage_bytes`). on or off. Default: off.
    #[arg(long, value_name = "on|off", value_parser = clap::builder::BoolishValueParser::new())]
    pub small_hugepages: Option<bool>,

    /// How long a write waits, holding no lock, for the small tier's flusher when its
    /// staging buffer is full, so RAM's evictions go to the tier rather than the flash log
    /// with a RAM index entry each (0: never wait; at most 60000). Default: 200.
    #[arg(long, value_name = "MS")]
    pub small_wait_ms: Option<u64>,

    /// Run with no flash tier (RAM only, like plain memcached). Conflicts with --flash and
    /// -o ext_path.
    #[arg(long)]
    pub ram_only: bool,

    /// Set a flash-tier runtime knob at startup, NAME=VALUE (e.g. item_size=512); repeatable.
    /// The same knobs `extstore <knob> <value>` and the admin endpoint change at run time.
    #[arg(long, value_name = "NAME=VALUE", action = ArgAction::Append)]
    pub knob: Vec<String>,

    /// Admin HTTP endpoint, HOST:PORT: GET /metrics (Prometheus), /stats, /knobs; POST
    /// /knobs?NAME=VALUE. Default: none.
    #[arg(long, value_name = "HOST:PORT")]
    pub admin: Option<String>,

    /// Validate the configuration, print it and exit.
    #[arg(long)]
    pub check_config: bool,

    /// Format flash files or devices that hold other data (a file system, a partition
    /// table, random bytes, a block cache) instead of refusing to start. What they hold is
    /// lost. Default: off (only all-zero devices and flashtier's own kv flash are used).
    #[arg(long)]
    pub force_format: bool,

    /// Start on a kv flash file or device formatted for another size or set (after
    /// --flash PATH:SIZE changed) by formatting it as configured: the flash tier starts
    /// empty. Also `reformat_on_mismatch = true` in --config. Default: off (the start is
    /// refused, exit 78, naming the size that keeps the cached items).
    #[arg(long)]
    pub reformat_on_mismatch: bool,

    /// Verbosity: -v errors and warnings, -vv also every command and reply (debug),
    /// -vvv also connection state (trace). memcached -v.
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    pub verbose: u8,

    /// Print the version and exit (memcached -V).
    #[arg(short = 'V', long = "version")]
    pub version: bool,

    /// Print the license and exit (memcached -i).
    #[arg(short = 'i', long = "license")]
    pub license: bool,

    /// memcached -U: UDP port. Only 0 (UDP off, the default) is accepted.
    #[arg(short = 'U', long = "udp-port", value_name = "PORT")]
    pub udp_port: Option<u16>,

    /// Listen on a unix socket at PATH instead of TCP (memcached -s); text and meta
    /// protocols, as on TCP.
    #[arg(short = 's', long = "unix-socket", value_name = "PATH")]
    pub unix_socket: Option<std::path::PathBuf>,

    /// Access mask of the unix socket, octal (memcached -a). Default: 700.
    #[arg(short = 'a', long = "unix-mask", value_name = "MASK")]
    pub unix_mask: Option<String>,

    /// Enable the `shutdown` command (memcached -A).
    #[arg(short = 'A', long = "enable-shutdown")]
    pub enable_shutdown: bool,

    /// Run as a daemon: the command returns once the server serves (memcached -d).
    #[arg(short = 'd', long = "daemon")]
    pub daemon: bool,

    /// Raise the core file size limit to its maximum (memcached -r).
    #[arg(short = 'r', long = "enable-coredumps")]
    pub enable_coredumps: bool,

    /// Run as USER once the sockets and flash files are open (memcached -u; only as root).
    #[arg(short = 'u', long = "user", value_name = "USER")]
    pub user: Option<String>,

    /// Return an error when memory is full instead of evicting (memcached -M).
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,

    /// Lock all paged memory (mlockall; memcached -k).
    #[arg(short = 'k', long = "lock-memory")]
    pub lock_memory: bool,

    /// Write the process id to FILE (memcached -P); removed at exit.
    #[arg(short = 'P', long = "pidfile", value_name = "FILE")]
    pub pidfile: Option<std::path::PathBuf>,

    /// memcached -f: slab growth factor. No slab classes here: accepted, with a warning.
    #[arg(short = 'f', long = "slab-growth-factor", value_name = "FACTOR")]
    pub slab_growth_factor: Option<f64>,

    /// memcached -n: smallest slab chunk. No slab classes here: accepted, with a warning.
    #[arg(short = 'n', long = "slab-min-size", value_name = "BYTES")]
    pub slab_min_size: Option<u32>,

    /// Key prefix delimiter for `stats detail` (memcached -D); turns detail stats on.
    #[arg(short = 'D', value_name = "CHAR")]
    pub prefix_delimiter: Option<String>,

    /// memcached -L: large memory pages. Accepted, with a warning.
    #[arg(short = 'L', long = "enable-largepages")]
    pub large_pages: bool,

    /// Requests one connection runs before yielding to others (memcached -R). Default: 20.
    #[arg(short = 'R', long = "max-reqs-per-event", value_name = "N")]
    pub reqs_per_event: Option<u32>,

    /// Disable CAS: `gets` answers 0 and `cas` always matches (memcached -C).
    #[arg(short = 'C', long = "disable-cas")]
    pub disable_cas: bool,

    /// Listen backlog (memcached -b). Default: 1024.
    #[arg(short = 'b', long = "listen-backlog", value_name = "N")]
    pub backlog: Option<u32>,

    /// Protocol: ascii or auto (memcached -B); binary is not served.
    #[arg(short = 'B', long = "protocol", value_name = "NAME")]
    pub protocol: Option<String>,

    /// memcached -S: SASL needs the binary protocol, which flashtier does not serve; refused
    /// (use -Y).
    #[arg(short = 'S', long = "enable-sasl")]
    pub enable_sasl: bool,

    /// Disable `flush_all` (memcached -F).
    #[arg(short = 'F', long = "disable-flush-all")]
    pub disable_flush_all: bool,

    /// Disable `stats cachedump` and `lru_crawler metadump` (memcached -X).
    #[arg(short = 'X', long = "disable-dumping")]
    pub disable_dumping: bool,

    /// Disable `watch` (memcached -W; flashtier has no `watch`).
    #[arg(short = 'W', long = "disable-watch")]
    pub disable_watch: bool,

    /// ASCII authentication from FILE of `user:password` lines (memcached -Y); SIGHUP
    /// reloads it (after -u, through the descriptor opened as root: edit it in place).
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    pub auth_file: Option<std::path::PathBuf>,

    /// memcached -e: restartable memory file. Accepted, with a warning (a flash tier
    /// restarts warm by itself).
    #[arg(short = 'e', long = "memory-file", value_name = "FILE")]
    pub memory_file: Option<std::path::PathBuf>,

    /// Serve TLS (memcached -Z); certificate and key from -o ssl_chain_cert, ssl_key.
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,

    /// memcached -N: NAPI ids. Accepted, with a warning.
    #[arg(
        short = 'N',
        long = "napi-ids",
        visible_alias = "napi_ids",
        value_name = "N"
    )]
    pub napi_ids: Option<u32>,

    /// memcached -o: comma-separated extended options (e.g. ext_path=PATH:SIZE,
    /// idle_timeout=600); repeatable. See docs/compat.md for each.
    #[arg(short = 'o', long = "extended", value_name = "OPTS", action = ArgAction::Append)]
    pub extended: Vec<String>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    #[test]
    fn command_lines_are_consistent() {
        // clap's own checks (duplicate short flags, bad defaults), in every build profile.
        super::Cli::command().debug_assert();
        super::MemcachedCli::command().debug_assert();
        assert!(super::invoked_as_memcached("/usr/bin/memcached".as_ref()));
        assert!(super::invoked_as_memcached("memcached".as_ref()));
        assert!(!super::invoked_as_memcached("/usr/bin/flashtier".as_ref()));
        assert!(!super::invoked_as_memcached("memcached-tool".as_ref()));
    }
}

/// `flashtier block`'s flags (the `--config` TOML file and validation: `crate::block`).
#[derive(Clone, Debug, Args)]
pub struct BlockArgs {
    /// The slow device: a file or block device path, `nbd://HOST[:PORT]/EXPORT` or
    /// `nbd+unix:///EXPORT?socket=PATH`.
    #[arg(long, value_name = "PATH|URI")]
    pub backing: Option<String>,

    /// The cache device, PATH:SIZE (created and sized if missing, in a directory that must
    /// exist; SIZE 0 = the whole existing file or device), e.g. /var/cache/ft.img:4G.
    #[arg(long, value_name = "PATH:SIZE")]
    pub cache: Option<String>,

    /// writeback | writethrough | writearound. Given (or `mode` in --config), it wins at
    /// start and forgets the mode set at run time; not given, a restart keeps the mode last
    /// set at run time (`ctl set mode=`, kept in <run-dir>/<export>.mode). Default: writeback.
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
    pub run_dir: Option<std::path::PathBuf>,

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

    /// Record every NBD request (time, read/write/..., offset, length) into FILE, 24 bytes
    /// each, for offline analysis (scripts/bench/trace_sim.py). Bounded buffer: records are
    /// dropped, never waited for, when the disk falls behind. Default: off.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,

    /// Format a cache device that holds other data (a file system, a partition table,
    /// random bytes, a kv flash file) instead of refusing to start. What it holds is lost.
    /// Default: off (only all-zero devices and flashtier's own block caches are used).
    #[arg(long)]
    pub force_format: bool,

    /// Start on a cache device formatted for another size (after --cache PATH:SIZE
    /// changed): first open it at the size it was formatted for and write every dirty block
    /// back to the backing, then format it empty at the new size. Refused (nothing
    /// formatted) if a dirty block cannot be written back. Also `reformat_on_mismatch =
    /// true` in --config. Default: off (the start is refused, exit 78, naming the size that
    /// keeps the cache).
    #[arg(long)]
    pub reformat_on_mismatch: bool,

    /// TOML configuration file: the flags' names as keys (backing, cache, mode, listen,
    /// export, admin, run_dir, block_size, no_direct_io, threads, reformat_on_mismatch,
    /// dirty_high_pct, ...) and a
    /// [set] table of tunables (`"flash.reclaim_policy" = "greedy"`). Flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    /// Validate everything a start validates (tunables, addresses, sizes, paths; creating
    /// and changing nothing), print the effective configuration and exit.
    #[arg(long)]
    pub check_config: bool,
}
