//! Command-line flags.
//!
//! `flashtier kv` takes native long flags and the memcached short flags users' scripts
//! already pass (`-p -l -m -c -t -I -U -u -v -o`), so `flashtier kv -p 11211 -m 1024` drops
//! in where `memcached -p 11211 -m 1024` ran. Where both forms are given, the memcached flag
//! refines the native one (`-l` replaces the host of `--listen`, `-p` its port).
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
    Kv(KvArgs),
    /// Serve a backing block device through a flash cache over NBD.
    Block(crate::block::BlockArgs),
    /// Control a running `flashtier block` through its admin endpoint.
    Ctl(crate::ctl::CtlArgs),
    /// Write man pages and shell completions generated from this CLI into DIR (packaging).
    #[command(hide = true)]
    Assets {
        /// Output directory (created): man/*.1, completions/{flashtier.bash,_flashtier,flashtier.fish}.
        dir: std::path::PathBuf,
    },
}

#[derive(Clone, Debug, Default, Args)]
pub struct KvArgs {
    /// TOML configuration file (keys: listen, memory, max_item_size, threads,
    /// max_connections, flash, ram_only, admin, and a [knobs] table). Flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    /// Address to listen on, HOST:PORT. Default: 127.0.0.1:11211.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,

    /// RAM for items, e.g. 64M, 64MiB, 1G or plain bytes. Default: 64MiB.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,

    /// Largest value a single item may hold. Default: 1MiB.
    #[arg(long, value_name = "SIZE")]
    pub max_item_size: Option<String>,

    /// Worker threads. Default: the number of CPU cores.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// Most simultaneous client connections. Default: 1024.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,

    /// Flash tier device or file as PATH:SIZE (e.g. data/flash.bin:2GiB); repeat for JBOD.
    /// memcached's `-o ext_path=PATH:SIZE` is the same. Default: data/flash.bin:1GiB under
    /// the current directory (created), unless --ram-only.
    #[arg(long, value_name = "PATH:SIZE", action = ArgAction::Append)]
    pub flash: Vec<String>,

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

    /// Verbose logging to stderr (-v, -vv). memcached's -v.
    #[arg(short = 'v', action = ArgAction::Count)]
    pub verbose: u8,

    /// memcached -p: TCP port.
    #[arg(short = 'p', value_name = "PORT")]
    pub port: Option<u16>,

    /// memcached -l: address to listen on.
    #[arg(short = 'l', value_name = "ADDR")]
    pub listen_addr: Option<String>,

    /// memcached -m: item memory in megabytes.
    #[arg(short = 'm', value_name = "MB")]
    pub memory_mb: Option<u64>,

    /// memcached -c: max simultaneous connections.
    #[arg(short = 'c', value_name = "N")]
    pub conn_limit: Option<usize>,

    /// memcached -t: worker threads.
    #[arg(short = 't', value_name = "N")]
    pub thread_count: Option<usize>,

    /// memcached -I: max item size (e.g. 1m, 512k).
    #[arg(short = 'I', value_name = "SIZE")]
    pub item_size: Option<String>,

    /// memcached -U: UDP port. Only 0 (UDP off) is supported.
    #[arg(short = 'U', value_name = "PORT")]
    pub udp_port: Option<u16>,

    /// memcached -u: user to run as. Accepted for compatibility; flashtier does not switch users.
    #[arg(short = 'u', value_name = "USER")]
    pub user: Option<String>,

    /// memcached -o: comma-separated extended options (e.g. ext_path=PATH:SIZE).
    #[arg(short = 'o', value_name = "OPTS", action = ArgAction::Append)]
    pub extended: Vec<String>,
}
