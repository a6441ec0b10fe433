//! [`SmallSettings`]: the small-object tier's settings (`CacheConfig::small`). The tier is
//! off unless `item_max` > 0 (the default is 0, so the product path is unchanged).
use std::path::PathBuf;
use std::sync::Arc;

use flashtier_flash::Device;

/// The largest `item_max` accepted: a 250-byte key and the value must fit one set page
/// with room for others.
pub const ITEM_MAX_LIMIT: usize = 2048;

/// Where the small tier's set pages live.
#[derive(Clone)]
pub enum SmallDevice {
    /// A file (created if missing, grown to `size`), opened with `O_DIRECT`.
    File { path: PathBuf, size: u64 },
    /// A device given directly (tests: a `MemoryDevice`).
    Device(Arc<dyn Device>),
}

impl std::fmt::Debug for SmallDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SmallDevice::File { path, size } => write!(f, "{}:{size}", path.display()),
            SmallDevice::Device(d) => write!(f, "device {}", d.name()),
        }
    }
}

/// Settings of the small-object tier.
#[derive(Clone, Debug)]
pub struct SmallSettings {
    /// Values of at most this many bytes leave RAM for the small tier instead of the flash
    /// log; 0 turns the tier off. At most [`ITEM_MAX_LIMIT`]. Default: `0` (off).
    pub item_max: usize,
    /// The tier's device (its size / 4 KiB is the number of sets).
    pub device: SmallDevice,
    /// RAM for staged inserts and deletes, in bytes; inserts are refused past twice this.
    /// Default: `16 MiB`.
    pub staging_bytes: u64,
    /// Fraction of the device for the on-flash log in front of the sets (Kangaroo's KLog,
    /// `flashtier_smallset::SmallConfig::log_fraction`); 0 turns it off. At most 0.9.
    /// Default: `0.10`.
    pub log_fraction: f64,
    /// Kangaroo's admission threshold: a log merge rewrites a set only when it gains at
    /// least this many objects (`SmallConfig::merge_min`). Default: 1 (always).
    pub merge_min: usize,
    /// Decoded log pages a log merge holds at most (`SmallConfig::merge_pages`; the server's
    /// `--small-merge-pages`). Default: 2048.
    pub merge_pages: usize,
    /// The tier's fixed lookup arrays (set summaries, log index heads and links) on huge
    /// pages (`SmallConfig::hugepages`; the server's `--small-hugepages`). Default: off.
    pub hugepages: bool,
    /// Serving threads that read the tier on their own io_uring ring (one ring each, plus
    /// one for the tier's flusher; `SmallConfig::io_lanes`); the server sets its worker
    /// count. Default: 1.
    pub io_lanes: usize,
    /// How long a write awaits room in the tier's staging buffer, holding no lock, when
    /// the flusher is behind (`--small-wait-ms`; the cache's `small_tier` back-pressure):
    /// past it the write goes on and an eviction the tier refuses goes to the flash log as
    /// before. Zero never waits. Default: `200 ms` (the flash log's `append_wait_ms`).
    pub wait: std::time::Duration,
    /// Called on the tier's flusher thread when it goes idle after work, to return the
    /// pages a merge freed to the OS (`SmallConfig::release_memory`). Default: none.
    pub release_memory: Option<fn()>,
}

/// [`SmallSettings::flag_defaults`]: the tier's defaults a front end shows as flag defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlagDefaults {
    /// The log's share of the device, in per cent.
    pub log_percent: u32,
    /// Objects a log merge must gain for a set to be rewritten.
    pub merge_min: usize,
    /// Decoded log pages a merge holds at most.
    pub merge_pages: usize,
    /// The fixed lookup arrays on huge pages.
    pub hugepages: bool,
}

impl SmallSettings {
    /// The tier on `device` for values up to `item_max` bytes, other settings default (the
    /// tier's own defaults, `flashtier_smallset::SmallConfig::default`: one place).
    pub fn new(device: SmallDevice, item_max: usize) -> Self {
        let d = flashtier_smallset::SmallConfig::default();
        Self {
            item_max,
            device,
            staging_bytes: d.staging_bytes,
            log_fraction: d.log_fraction,
            merge_min: d.merge_min,
            merge_pages: d.merge_pages,
            hugepages: d.hugepages,
            io_lanes: d.io_lanes,
            wait: std::time::Duration::from_millis(200),
            release_memory: None,
        }
    }

    /// The tier's defaults for the settings a front end exposes as flags, from
    /// `SmallConfig::default` (one place).
    pub fn flag_defaults() -> FlagDefaults {
        let d = flashtier_smallset::SmallConfig::default();
        FlagDefaults {
            log_percent: (d.log_fraction * 100.0).round() as u32,
            merge_min: d.merge_min,
            merge_pages: d.merge_pages,
            hugepages: d.hugepages,
        }
    }

    /// Why these settings are refused, if they are.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.item_max > ITEM_MAX_LIMIT {
            return Err(format!(
                "small_item_max {} is above {ITEM_MAX_LIMIT} bytes",
                self.item_max
            ));
        }
        if self.staging_bytes < 64 << 10 {
            return Err("small staging below 64 KiB".into());
        }
        if !(0.0..=0.9).contains(&self.log_fraction) {
            return Err(format!(
                "small log fraction {} is outside 0..=0.9",
                self.log_fraction
            ));
        }
        if self.wait > std::time::Duration::from_secs(60) {
            return Err(format!(
                "small wait {} ms is above 60000",
                self.wait.as_millis()
            ));
        }
        if self.merge_min == 0 {
            return Err("small log merge minimum must be at least 1".into());
        }
        if let SmallDevice::File { size, .. } = &self.device {
            if *size < 1 << 20 {
                return Err(format!("small tier device size {size} is below 1 MiB"));
            }
        }
        Ok(())
    }
}
