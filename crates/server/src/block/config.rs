//! `flashtier block`'s configuration: flags, the optional TOML file and the validation a
//! start (and `--check-config`) does before anything is opened.
use super::*;

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
    pub trace: Option<PathBuf>,
    /// `--reformat-on-mismatch`.
    pub reformat_on_mismatch: Option<bool>,
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
        threads,
        trace
    );
    a.no_direct_io |= f.no_direct_io.unwrap_or(false);
    a.reformat_on_mismatch |= f.reformat_on_mismatch.unwrap_or(false);
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
    /// `--reformat-on-mismatch`: a cache formatted for another size is written back, then
    /// formatted at the new size (`block::reformat`).
    pub reformat_on_mismatch: bool,
    pub threads: Option<usize>,
    /// `--trace FILE`: record every NBD request into FILE (`None`: off).
    pub trace: Option<PathBuf>,
    /// Cache tunables in the order they are applied, then `flash.*` engine knobs.
    pub tunables: Vec<(String, String)>,
    pub flash_knobs: Vec<(String, String)>,
    /// Every tunable's effective value (defaults with the changes applied).
    pub effective: Vec<(String, String)>,
    /// The mode is given at start (`--mode`, `mode` in --config, `--set mode=`, `[set]
    /// mode`): it wins over the mode last set at run time, which the start forgets.
    pub mode_explicit: bool,
    /// Where the mode in force comes from, for `--check-config` and the start log.
    pub mode_source: String,
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
        let mut cache =
            DeviceSpec::parse(&cache_text).with_context(|| format!("--cache {cache_text:?}"))?;
        // As on the kv face: 0 = the whole existing file or device.
        if cache.size == 0 {
            cache.size = crate::startup::whole_size(&cache.path, "--cache", &cache_text)?;
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
        let mode_explicit = tun.iter().any(|(k, _)| k == "mode");
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
            reformat_on_mismatch: args.reformat_on_mismatch,
            threads: args.threads,
            trace: args.trace.clone(),
            tunables: tun,
            flash_knobs,
            effective,
            mode_explicit,
            mode_source: if mode_explicit {
                "given at start"
            } else {
                "default"
            }
            .to_string(),
        })
    }

    /// Start in the mode last set at run time (`saved`), as the first tunable (so `--set`
    /// keys after it are checked against it), unless a mode is given at start.
    pub fn use_saved_mode(&mut self, saved: &crate::rundir::SavedMode) {
        if self.mode_explicit {
            return;
        }
        self.tunables
            .insert(0, ("mode".to_string(), saved.mode.clone()));
        if let Some((_, v)) = self.effective.iter_mut().find(|(k, _)| k == "mode") {
            v.clone_from(&saved.mode);
        }
        self.mode_source = format!(
            "set at run time {} ({})",
            saved.set_at,
            saved.path.display()
        );
    }

    /// What `--check-config` adds to [`Self::from_args`]: the paths a start would use, read
    /// without being created or changed, and the TCP ports (bound and released at once).
    /// The cache and the backing reach different bytes (through symlinks, hard links, loop
    /// devices): checked before anything else is touched, the run dir included.
    pub fn check_cache_is_not_backing(&self) -> anyhow::Result<()> {
        if flashtier_nbd::is_nbd_uri(&self.backing) {
            return Ok(());
        }
        let cache = &self.cache.path;
        let same = flashtier_flash::probe::same_storage(Path::new(&self.backing), cache)
            .with_context(|| format!("--backing {}", self.backing))?;
        if let Some(why) = same {
            crate::conflict!(
                "--cache {} is the backing: {why}; the cache must be another device",
                cache.display()
            );
        }
        Ok(())
    }

    /// A cache file to create goes in an existing directory (`startup::check_parent`):
    /// checked before anything is created, the run dir included.
    pub fn check_cache_dir(&self) -> anyhow::Result<()> {
        if self.cache.path.exists() {
            return Ok(());
        }
        crate::startup::check_parent(&self.cache.path, "--cache", &self.cache_text)
    }

    pub fn check_paths(&self) -> anyhow::Result<()> {
        if !flashtier_nbd::is_nbd_uri(&self.backing) {
            let m = std::fs::metadata(&self.backing)
                .with_context(|| format!("--backing {}", self.backing))?;
            if m.is_dir() {
                bail!("--backing {}: is a directory", self.backing);
            }
        }
        let cache = &self.cache.path;
        self.check_cache_is_not_backing()?;
        crate::startup::check_contents(cache, "--cache", self.force_format)?;
        crate::startup::check_formatted_size(
            cache,
            self.cache.size,
            crate::startup::Face::Block,
            self.force_format || self.reformat_on_mismatch,
        )?;
        match std::fs::metadata(cache) {
            Ok(m) if m.is_dir() => bail!("--cache {}: is a directory", cache.display()),
            Ok(_) => {}
            Err(_) => {
                self.check_cache_dir()?;
                writable_dir(parent_of(cache))
                    .with_context(|| format!("--cache {}: cannot be created", cache.display()))?
            }
        }
        writable_dir(existing_ancestor(&self.run_dir))
            .with_context(|| format!("--run-dir {}", self.run_dir.display()))?;
        if let Some(t) = &self.trace {
            writable_dir(parent_of(t)).with_context(|| format!("--trace {}", t.display()))?;
        }
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
             block_size={}\ndirect_io={}\nreformat_on_mismatch={}\n",
            self.backing,
            self.cache.path.display(),
            self.cache.size,
            self.listen_text,
            self.export,
            self.admin.map_or("none".to_string(), |a| a.to_string()),
            self.run_dir.display(),
            self.block_size,
            self.direct_io,
            self.reformat_on_mismatch
        );
        if let Some(t) = &self.trace {
            s.push_str(&format!("trace={}\n", t.display()));
        }
        s.push_str(&format!("mode_source={}\n", self.mode_source));
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
