//! [`CacheConfig`]: every knob of the RAM tier, with its default and unit.
//!
//! Built with [`CacheConfig::builder`] (or `Default`) and checked by [`CacheConfig::validate`],
//! which [`crate::Cache::new`] calls. Read by any thread, never changed after construction.
use std::fmt;
use std::time::Duration;

use flashtier_flash::{Device, DeviceSpec, FlashConfig};

use crate::small_tier::SmallSettings;
use crate::Clock;

/// Where the flash tier lives.
#[derive(Clone)]
#[non_exhaustive]
pub enum FlashDevices {
    /// Files or block devices (`--flash PATH:SIZE`, repeatable = JBOD; `-o ext_path=PATH:SIZE`).
    Specs(Vec<DeviceSpec>),
    /// Devices already opened (tests: `MemoryDevice`, `FaultyDevice`). Keep an `Arc` to reopen
    /// the same device after a close.
    Devices(Vec<std::sync::Arc<dyn Device>>),
}

impl fmt::Debug for FlashDevices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlashDevices::Specs(s) => f.debug_tuple("Specs").field(s).finish(),
            FlashDevices::Devices(d) => {
                let names: Vec<&str> = d.iter().map(|d| d.name()).collect();
                f.debug_tuple("Devices").field(&names).finish()
            }
        }
    }
}

/// The flash tier under the RAM store (see `flash_tier`).
#[derive(Clone, Debug)]
pub struct FlashSettings {
    /// The devices. Required.
    pub devices: FlashDevices,
    /// Engine settings. Default: `None` = `FlashConfig::for_capacity(total device bytes)`.
    pub engine: Option<FlashConfig>,
    /// How long a write (SET, update, delete) may wait, holding no lock, for the flash writer's
    /// back-pressure (write buffers all in flight, no free segment) to clear before it goes on
    /// and keeps the item in RAM only (`flash_tier::backpressure`). Runtime knob
    /// `append_wait_ms`. Default: `200 ms`.
    pub append_wait: Duration,
    /// Write-back window: a stored version stays in RAM without a flash write until RAM
    /// evicts it or it has been unwritten this long (so overwrites within the window cost no
    /// flash write); `0` = write-through. After a crash, versions acknowledged within the
    /// window (plus the engine's `flush_interval`) may be lost. Runtime knob
    /// `write_back_ms`. Default: `2 s`.
    pub write_back: Duration,
    /// Values smaller than this many bytes are never written to flash: they live in RAM only
    /// and are evicted like in a RAM-only cache (memcached's `ext_item_size`). Runtime knob
    /// `item_size`. Default: `0` (every item goes to flash).
    pub item_size: u64,
    /// Repeat hits on flash items copy the item back to RAM one time in `recache_rate`,
    /// counted over all flash items (1 = every repeat hit, 0 = never). Runtime knob `recache_rate`. Default: `1`.
    pub recache_rate: u32,
    /// Free segments (beyond the engine's reserve) at or below which reclaim stops keeping
    /// unhit items (memcached's `ext_drop_under`). Runtime knob `drop_under`.
    /// Default: `None` = the engine's `free_high_watermark`.
    pub drop_under: Option<u32>,
    /// Reclaim drops items never hit even while flash has room (memcached's
    /// `ext_drop_unread`). Runtime knob `drop_unread`. Default: `false`.
    pub drop_unread: bool,
    /// A cold item (never fetched) that RAM evicts while flash refuses appends for
    /// back-pressure (write buffers in flight; with no free segment it waits) is dropped — an eviction,
    /// counted in `extstore_evictions_flash_busy` — instead of making its write wait up to
    /// `append_wait` or staying in RAM; a fetched item still waits. Runtime knob
    /// `evict_when_busy`. Default: `false` (then no item leaves while flash has room), in the
    /// `flashtier kv` server too.
    pub evict_when_busy: bool,
    /// While flash is short of room, reclaim drops the flash copy of an item RAM holds
    /// instead of rewriting it: the RAM copy loses its home and is written again when RAM
    /// evicts it, so RAM adds to capacity instead of mirroring flash. Runtime knob
    /// `ram_exclusive`. Default: `true`.
    pub ram_exclusive: bool,
    /// Reclaim compacts unhit live items (instead of dropping them) while the device bytes
    /// written stay within this many times the value bytes stored: more keeps more items on
    /// flash at the cost of more flash writes (docs/eviction.md). Runtime knob
    /// `write_budget`. Default: `1.28`.
    pub write_budget: f64,
    /// Format flash devices that hold other data (a file system, random bytes, a block
    /// cache) instead of refusing to start. Default: `false`.
    pub force_format: bool,
    /// Format flash devices whose flashtier format does not match the configuration (most
    /// often: formatted for another size) instead of refusing to start; the flash tier then
    /// starts empty. Default: `false`.
    pub reformat_on_mismatch: bool,
    /// IO lanes: io_uring rings the engine opens, one per serving thread of a
    /// thread-per-core server (`flashtier_flash::use_ring_lane`; the engine's own threads
    /// use lane 0). At least the engine configuration's `uring_rings`. Default: `1`.
    pub io_lanes: usize,
    /// The crash journal (`flashtier_flash::journal`): a delete, `flush_all` or overwrite of
    /// an item with a flash copy is journaled before it is acknowledged, so a restart after
    /// a crash never serves the version it replaced. `Write` survives `kill -9` (after a
    /// power cut the flash tier restarts empty); `Sync` also syncs each group of entries
    /// before the reply (warm after a power cut, a device flush per group); `Off` keeps the
    /// older rule (the replaced version may come back). Default: `Write`.
    pub journal: flashtier_flash::JournalMode,
}

impl FlashSettings {
    /// Flash on `PATH:SIZE` specs with default engine settings.
    pub fn specs(specs: Vec<DeviceSpec>) -> Self {
        Self::with_defaults(FlashDevices::Specs(specs))
    }

    /// Flash on already-opened devices with default engine settings.
    pub fn devices(devices: Vec<std::sync::Arc<dyn Device>>) -> Self {
        Self::with_defaults(FlashDevices::Devices(devices))
    }

    /// `devices` with every tiering setting at its default.
    fn with_defaults(devices: FlashDevices) -> Self {
        Self {
            devices,
            engine: None,
            append_wait: Duration::from_millis(200),
            write_back: Duration::from_millis(2000),
            item_size: 0,
            recache_rate: 1,
            drop_under: None,
            drop_unread: false,
            evict_when_busy: false,
            ram_exclusive: true,
            write_budget: crate::flash_tier::WRITE_BUDGET,
            force_format: false,
            reformat_on_mismatch: false,
            io_lanes: 1,
            journal: flashtier_flash::JournalMode::Write,
        }
    }

    /// Parse `PATH:SIZE` strings (each as `--flash` or memcached's `ext_path` takes it).
    pub fn parse(specs: &[&str]) -> Result<Self, flashtier_flash::Error> {
        let specs = specs
            .iter()
            .map(|s| DeviceSpec::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::specs(specs))
    }

    /// Total bytes of the devices (0 for a spec meaning "the whole file").
    pub(crate) fn capacity(&self) -> u64 {
        match &self.devices {
            FlashDevices::Specs(s) => s.iter().map(|d| d.size).sum(),
            FlashDevices::Devices(d) => d.iter().map(|d| d.len()).sum(),
        }
    }

    /// The engine configuration in force: the kv role (a block cache device is refused),
    /// and `force_format` and `reformat_on_mismatch` if asked for here.
    pub(crate) fn engine_config(&self) -> FlashConfig {
        let mut cfg = self.engine.clone().unwrap_or_else(|| {
            // 256 segments: the free reserve and watermarks keep ~2 % of the flash empty,
            // not the 8 % of 64 (docs/eviction.md, "Flash at steady state").
            let base = FlashConfig::for_capacity_with(self.capacity(), 256);
            FlashConfig {
                // Overwritten versions leave dead records spread over the log: pick old,
                // mostly dead segments (docs/eviction.md).
                reclaim_policy: flashtier_flash::ReclaimPolicy::CostBenefit,
                // Smaller chunks, as many bytes in flight per stream (4 MiB): fewer chunks
                // in flight refused appends under a fast load.
                max_chunks_in_flight: ((8 << 20) / base.chunk_size).clamp(8, 16) as usize,
                ..base
            }
        });
        cfg.role = flashtier_flash::Role::Kv;
        cfg.force_format |= self.force_format;
        cfg.reformat_on_mismatch |= self.reformat_on_mismatch;
        cfg.uring_rings = cfg.uring_rings.max(self.io_lanes);
        cfg.journal = self.journal;
        cfg
    }
}

/// Which eviction policy the RAM arena runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvictionPolicy {
    /// S3-FIFO at segment granularity: a small FIFO log (≈10% of memory) for new items, a main
    /// log, and a ghost set (see `evict`). Default: chosen by `benches/hit_ratio.rs`, numbers
    /// in `docs/eviction.md`.
    S3Fifo,
    /// Plain FIFO over segments: evict the oldest segment, keep nothing. For comparison.
    Fifo,
}

/// Configuration of a [`crate::Cache`].
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// Bytes of RAM for items (record headers, keys, values), rounded down to whole
    /// segments. Segment memory is allocated lazily up to this and then recycled, never
    /// freed. The index (≈ 12–15 bytes per item held) and the ghost set are extra, like
    /// memcached's hash table is extra to `-m`; see `docs/eviction.md` for measured RSS.
    /// One exception: a single item larger than the whole limit (possible when
    /// `max_item_size` equals the limit) may use one spare segment beyond it.
    /// Default: `64 MiB`.
    pub memory_limit: usize,
    /// Largest value in bytes a single item may carry. Must not exceed `memory_limit`.
    /// Default: `1 MiB`. Large-item path: a record bigger than half a segment is stored
    /// alone in as many whole segments as it needs (header and key in the first, the value
    /// continuing through the others), so this can go up to `memory_limit`; such an item
    /// wastes at most one segment's worth of its last chunk.
    pub max_item_size: usize,
    /// Bytes per RAM segment, a power of two between 64 KiB and 64 MiB. Default: `1 MiB`.
    pub segment_size: usize,
    /// Index shards (a power of two). Default: `1024`.
    pub index_shards: usize,
    /// Location bits of an index slot, or `None` (the default) for as few as the RAM limit
    /// and the flash devices need: the location field's other bits then hold check bits,
    /// more of the key's hash compared on every lookup (`ram/index.rs`). `Some(40)` keeps no
    /// check bits (the tests of the checked write path use it).
    pub index_loc_bits: Option<u32>,
    /// Hash seed. Default: `0x666c_6173_6874_6965` ("flashtie"). It will be stored on flash so
    /// a restart hashes the same way; settable for that reason.
    pub hash_seed: u64,
    /// Eviction policy. Default: [`EvictionPolicy::S3Fifo`].
    pub eviction: EvictionPolicy,
    /// Share of memory given to S3-FIFO's small log, in percent. Default: `10`.
    pub small_percent: u8,
    /// Ghost set entries (4 bytes each, fixed). Default: `memory_limit / 512` (so 0.8% of the
    /// memory limit), at least 1024.
    pub ghost_entries: Option<usize>,
    /// Period of the background sweeper that frees expired and dead space, or `None` for no
    /// sweeper thread (tests call [`crate::Cache::sweep`] directly). Default: `1 s`.
    pub sweep_interval: Option<Duration>,
    /// The clock items' expiry is judged by. Default: [`Clock::system`].
    pub clock: Clock,
    /// Evict live items to make room (memcached's default). `false` (memcached -M): a RAM-only
    /// cache refuses a write with `Error::OutOfMemory` instead of evicting a segment that
    /// still holds live items; with flash, RAM evictions still move items to flash (nothing
    /// is lost), and flash reclaim still drops the coldest items when flash is full.
    /// Default: `true`.
    pub evict_to_free: bool,
    /// The flash tier, or `None` for a RAM-only cache (exactly the RAM tier's behaviour).
    /// With flash, `hash_seed` is replaced by the seed stored on flash. Default: `None`.
    pub flash: Option<FlashSettings>,
    /// The small-object tier (issue 28; `crate::small_tier`), or `None`. Off unless its
    /// `item_max` > 0. Default: `None`.
    pub small: Option<SmallSettings>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            memory_limit: 64 << 20,
            max_item_size: 1 << 20,
            segment_size: 1 << 20,
            index_shards: 1024,
            index_loc_bits: None,
            hash_seed: 0x666c_6173_6874_6965,
            eviction: EvictionPolicy::S3Fifo,
            small_percent: 10,
            ghost_entries: None,
            sweep_interval: Some(Duration::from_secs(1)),
            clock: Clock::system(),
            evict_to_free: true,
            flash: None,
            small: None,
        }
    }
}

/// A configuration [`CacheConfig::validate`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `segment_size` is not a power of two in [64 KiB, 64 MiB].
    SegmentSize(usize),
    /// `memory_limit` is below four segments.
    MemoryTooSmall { limit: usize, min: usize },
    /// `max_item_size` is zero or above `memory_limit`.
    MaxItemSize { size: usize, limit: usize },
    /// `index_shards` is not a power of two in [1, 65536].
    Shards(usize),
    /// `small_percent` is not in [1, 90].
    SmallPercent(u8),
    /// The memory limit needs more segment ids than a 40-bit location can address.
    TooManySegments,
    /// Flash is configured with no device.
    NoFlashDevices,
    /// The small-object tier's settings are out of range (the message says which).
    Small(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::SegmentSize(s) => {
                write!(
                    f,
                    "segment size {s} must be a power of two between 64 KiB and 64 MiB"
                )
            }
            ConfigError::MemoryTooSmall { limit, min } => {
                write!(
                    f,
                    "memory limit {limit} bytes is below the minimum {min} (4 segments)"
                )
            }
            ConfigError::MaxItemSize { size, limit } => {
                write!(
                    f,
                    "max item size {size} must be between 1 and the memory limit {limit}"
                )
            }
            ConfigError::Shards(n) => write!(f, "index shards {n} must be a power of two ≤ 65536"),
            ConfigError::SmallPercent(p) => write!(f, "small log share {p}% must be in 1..=90"),
            ConfigError::TooManySegments => {
                write!(f, "memory limit too large for 40-bit locations")
            }
            ConfigError::NoFlashDevices => write!(f, "flash configured without a device"),
            ConfigError::Small(m) => write!(f, "small-object tier: {m}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why [`crate::Cache::new`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration is invalid.
    Config(ConfigError),
    /// The sweeper thread could not be started.
    Sweeper(std::io::Error),
    /// The flash tier could not be opened (missing device, format mismatch, I/O error).
    Flash(flashtier_flash::Error),
    /// The small-object tier could not be opened.
    Small(flashtier_smallset::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "invalid cache configuration: {e}"),
            StartError::Sweeper(e) => write!(f, "cannot start the sweeper thread: {e}"),
            StartError::Flash(e) => write!(f, "cannot open the flash tier: {e}"),
            StartError::Small(e) => write!(f, "cannot open the small-object tier: {e}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Config(e) => Some(e),
            StartError::Sweeper(e) => Some(e),
            StartError::Flash(e) => Some(e),
            StartError::Small(e) => Some(e),
        }
    }
}

impl CacheConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> CacheConfigBuilder {
        CacheConfigBuilder {
            cfg: Self::default(),
        }
    }

    /// RAM arena locations are below this (segment ids × words a segment; `validate` keeps it
    /// within the index's 40 location bits).
    pub(crate) fn ram_loc_bound(&self) -> u64 {
        let s = self.segment_size;
        (2 * (self.memory_limit / s) + 4) as u64 * (s as u64 / 8)
    }

    /// The index for locations below `loc_bound` (RAM's and, with flash, the devices'):
    /// `index_loc_bits` if set, else as few location bits as the bound needs.
    pub(crate) fn index(&self, seed: u64, loc_bound: u64) -> crate::ram::index::Index {
        use crate::ram::index::Index;
        // Index tables start at 2 buckets per shard (staggered up to 2.5).
        match self.index_loc_bits {
            Some(bits) => Index::with_loc_bits(self.index_shards, seed, 2, bits),
            None => Index::for_locations(self.index_shards, seed, 2, loc_bound),
        }
    }

    /// Check every setting; see [`ConfigError`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        let s = self.segment_size;
        if !s.is_power_of_two() || !(64 << 10..=64 << 20).contains(&s) {
            return Err(ConfigError::SegmentSize(s));
        }
        if self.memory_limit < 4 * s {
            return Err(ConfigError::MemoryTooSmall {
                limit: self.memory_limit,
                min: 4 * s,
            });
        }
        if self.max_item_size == 0 || self.max_item_size > self.memory_limit {
            return Err(ConfigError::MaxItemSize {
                size: self.max_item_size,
                limit: self.memory_limit,
            });
        }
        let n = self.index_shards;
        if !n.is_power_of_two() || n > 65536 {
            return Err(ConfigError::Shards(n));
        }
        if !(1..=90).contains(&self.small_percent) {
            return Err(ConfigError::SmallPercent(self.small_percent));
        }
        if self.ram_loc_bound() > crate::ram::index::MAX_LOC {
            return Err(ConfigError::TooManySegments);
        }
        if let Some(sm) = &self.small {
            sm.check().map_err(ConfigError::Small)?;
        }
        if let Some(fl) = &self.flash {
            let empty = match &fl.devices {
                FlashDevices::Specs(s) => s.is_empty(),
                FlashDevices::Devices(d) => d.is_empty(),
            };
            if empty {
                return Err(ConfigError::NoFlashDevices);
            }
        }
        Ok(())
    }

    /// Ghost entries actually used.
    pub(crate) fn ghost_len(&self) -> usize {
        self.ghost_entries
            .unwrap_or(self.memory_limit / 512)
            .max(1024)
    }
}

/// Builder for [`CacheConfig`]; each method documents nothing new, see the field docs.
#[derive(Clone, Debug)]
pub struct CacheConfigBuilder {
    cfg: CacheConfig,
}

impl CacheConfigBuilder {
    pub fn memory_limit(mut self, bytes: usize) -> Self {
        self.cfg.memory_limit = bytes;
        self
    }
    pub fn max_item_size(mut self, bytes: usize) -> Self {
        self.cfg.max_item_size = bytes;
        self
    }
    pub fn segment_size(mut self, bytes: usize) -> Self {
        self.cfg.segment_size = bytes;
        self
    }
    pub fn index_shards(mut self, n: usize) -> Self {
        self.cfg.index_shards = n;
        self
    }
    pub fn index_loc_bits(mut self, bits: u32) -> Self {
        self.cfg.index_loc_bits = Some(bits);
        self
    }
    pub fn hash_seed(mut self, seed: u64) -> Self {
        self.cfg.hash_seed = seed;
        self
    }
    pub fn eviction(mut self, p: EvictionPolicy) -> Self {
        self.cfg.eviction = p;
        self
    }
    pub fn small_percent(mut self, p: u8) -> Self {
        self.cfg.small_percent = p;
        self
    }
    pub fn ghost_entries(mut self, n: usize) -> Self {
        self.cfg.ghost_entries = Some(n);
        self
    }
    pub fn sweep_interval(mut self, every: Option<Duration>) -> Self {
        self.cfg.sweep_interval = every;
        self
    }
    pub fn clock(mut self, clock: Clock) -> Self {
        self.cfg.clock = clock;
        self
    }
    /// See [`CacheConfig::evict_to_free`].
    pub fn evict_to_free(mut self, on: bool) -> Self {
        self.cfg.evict_to_free = on;
        self
    }
    pub fn small(mut self, small: SmallSettings) -> Self {
        self.cfg.small = Some(small);
        self
    }

    pub fn flash(mut self, flash: FlashSettings) -> Self {
        self.cfg.flash = Some(flash);
        self
    }
    /// Validate and return the configuration.
    pub fn build(self) -> Result<CacheConfig, ConfigError> {
        self.cfg.validate()?;
        Ok(self.cfg)
    }
}

/// The flash-tier unit tests' cache: `memory` bytes of RAM in 64 KiB segments, a 64 KiB item
/// limit, no sweeper, over one 16 MiB memory device named `name` run with `engine`.
/// Returned as settings and builder so a test can change either before building.
#[cfg(test)]
pub(crate) fn test_flash(
    name: &str,
    memory: usize,
    engine: FlashConfig,
) -> (FlashSettings, CacheConfigBuilder) {
    let device: std::sync::Arc<dyn Device> =
        std::sync::Arc::new(flashtier_flash::MemoryDevice::new(name, 16 << 20));
    let mut settings = FlashSettings::devices(vec![device]);
    settings.engine = Some(engine);
    let builder = CacheConfig::builder()
        .memory_limit(memory)
        .segment_size(64 << 10)
        .max_item_size(64 << 10)
        .sweep_interval(None);
    (settings, builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_values_do_not() {
        assert!(CacheConfig::default().validate().is_ok());
        assert!(CacheConfig::builder().segment_size(3000).build().is_err());
        assert!(CacheConfig::builder()
            .memory_limit(1 << 20)
            .build()
            .is_err());
        assert!(CacheConfig::builder()
            .max_item_size(128 << 20)
            .build()
            .is_err());
        assert!(CacheConfig::builder().index_shards(1000).build().is_err());
        let big = CacheConfig::builder()
            .memory_limit(64 << 20)
            .max_item_size(64 << 20)
            .build();
        assert!(big.is_ok());
    }
}
