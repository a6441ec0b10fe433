//! Engine configuration and the `PATH:SIZE` device spec parser.
//!
//! [`FlashConfig`] has public fields with documented defaults (use struct update syntax on
//! `FlashConfig::default()`) and [`FlashConfig::validate`], which [`crate::Flash::open`] calls.
//! `flush_interval`, `max_chunks_in_flight`, `read_queue_limit`, the free watermarks,
//! `reclaim_policy`, `keep_limit` and `reclaim_rate` are only initial values: they can be
//! changed while running with [`crate::Flash::set_knob`] (see [`crate::knobs`]).
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::format::record::RECORD_HEADER_LEN;
use crate::format::segment::{tail_len, SEGMENT_HEADER_LEN};
use crate::format::superblock::Role;
use crate::location::{MAX_BYTES, PAGE};
pub use crate::size::format_size;

/// One device to open: `PATH:SIZE` on the command line (`--flash PATH:SIZE`, memcached's
/// `-o ext_path=PATH:SIZE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSpec {
    /// File or block device path.
    pub path: PathBuf,
    /// Bytes to use; 0 = the whole existing file or device.
    pub size: u64,
    /// Tier of the device (streams can prefer a tier). Default: 0.
    pub tier: u8,
    /// Create and size the file if missing or short. Default: true.
    pub create: bool,
}

impl DeviceSpec {
    /// Parse `PATH:SIZE` or `PATH:SIZE:TIER` (SIZE as in [`parse_size`]). The path may itself
    /// contain `:`; the size is taken after the last `:` (or the one before a numeric tier).
    pub fn parse(s: &str) -> Result<Self> {
        let (rest, last) = s
            .rsplit_once(':')
            .ok_or_else(|| Error::Spec(format!("{s:?}: expected PATH:SIZE")))?;
        let (path, size, tier) = match rest.rsplit_once(':') {
            Some((p, sz)) if parse_size(sz).is_ok() && last.parse::<u8>().is_ok() => {
                (p, parse_size(sz)?, last.parse::<u8>().unwrap_or(0))
            }
            _ => (rest, parse_size(last)?, 0),
        };
        if path.is_empty() {
            return Err(Error::Spec(format!("{s:?}: empty path")));
        }
        Ok(Self {
            path: PathBuf::from(path),
            size,
            tier,
            create: true,
        })
    }
}

/// Parse a size: plain bytes (`4096`), or a number with a unit: `K`/`M`/`G`/`T`,
/// `KiB`/`MiB`/`GiB`/`TiB` or `KB`/`MB`/`GB`/`TB`, all powers of 1024 as memcached means them
/// (`-I 1m` = 1 MiB, `ext_path=/f:2G` = 2 GiB), optional trailing `B`. Case-insensitive. The
/// one size parser of the project: the server's flags use it too.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| Error::Spec(format!("{s:?}: not a size")))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(Error::Spec(format!("{s:?}: unknown unit {unit:?}"))),
    };
    n.checked_mul(mult)
        .ok_or_else(|| Error::Spec(format!("{s:?}: too large")))
}

/// Which IO executor to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoBackend {
    /// io_uring if every device has a file descriptor and the kernel allows it, else psync.
    Auto,
    /// io_uring or fail at open.
    Uring,
    /// Thread pool with pread/pwrite.
    Psync,
}

/// How the reclaimer picks a victim among sealed segments (segments whose records have all
/// expired always go first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReclaimPolicy {
    /// Oldest (lowest seq) first: FIFO over the log.
    Fifo,
    /// Most dead records (by `mark_dead`) first, oldest on ties.
    Greedy,
    /// LFS cost-benefit: the largest `(1 - u) * age / (1 + u)` first, `u` the segment's live
    /// fraction (1 - dead bytes / data bytes) and `age` how many segments were opened since
    /// it (so old, mostly dead segments go first; young ones get time to die).
    CostBenefit,
}

/// Engine settings. Defaults suit a multi-GiB cache; tiny caches need smaller segments.
#[derive(Clone, Debug)]
pub struct FlashConfig {
    /// Segment size in bytes, a multiple of 4 KiB, at least 2 pages more than `chunk_size`.
    /// Default: `16 MiB`.
    pub segment_size: u64,
    /// Write chunk (RAM write buffer) size in bytes, a multiple of 4 KiB. The largest record
    /// is `chunk_size - 64` bytes encoded. Default: `1 MiB`.
    pub chunk_size: u64,
    /// Number of streams (separate write buffers and open segments). Default: `4`.
    pub streams: u8,
    /// The stream reclaim rewrites into; it alone may use the reserved segments. Default: `1`.
    pub reclaim_stream: u8,
    /// Preferred device tier per stream (index = stream id); missing or `None` = any tier.
    /// Default: empty.
    pub stream_tiers: Vec<Option<u8>>,
    /// Tier of each device (index = device); missing = tier 0. `Flash::open_specs` fills it
    /// from the specs. Default: empty.
    pub device_tiers: Vec<u8>,
    /// A partly filled write buffer older than this is written (not synced). `None` = only
    /// when full or on `flush()`. Default: `1 s`.
    pub flush_interval: Option<Duration>,
    /// Chunk writes in flight per stream before `append` returns `Busy`. Default: `4`.
    pub max_chunks_in_flight: usize,
    /// Write chunk buffers the engine may hold in all (open, in flight, pooled) before an
    /// `append` that needs a new one returns `Busy`; `0` = `streams + max_chunks_in_flight`.
    /// At least `streams + 1` is used. Bounds the engine's working memory
    /// ([`FlashConfig::work_limit`]). Default: `0`.
    pub max_chunk_buffers: usize,
    /// Record reads at the device at once; more wait in the engine, in arrival order, and
    /// start as earlier ones finish (never refused). Default: `1024`.
    pub read_queue_limit: usize,
    /// Segments kept free for the reclaim stream only. Default: `2`.
    pub reserve_segments: u32,
    /// Reclaim starts when free segments fall below this (counted after the reserve).
    /// Default: `2`.
    pub free_low_watermark: u32,
    /// Reclaim stops when this many segments are free (after the reserve). Default: `3`.
    pub free_high_watermark: u32,
    /// Segments the background reclaimer frees beyond `free_high_watermark` while a sealed
    /// segment has at least a quarter of its value records dead ([`crate::Flash`]'s
    /// reclaim "ahead"): writers find free segments after a burst instead of waiting for a
    /// pass, and such a victim copies at most three records per record it frees. Not kept
    /// free: when no victim is that cheap reclaim stops at the high watermark. Default: `0`.
    pub free_ahead: u32,
    /// Victim choice. Default: `Fifo`.
    pub reclaim_policy: ReclaimPolicy,
    /// Largest fraction of a victim's record bytes that may be rewritten; beyond it records
    /// the user wants to keep are evicted, so reclaim always frees space. Default: `0.75`.
    pub keep_limit: f64,
    /// Reclaim throughput cap in bytes per second of segment processed; 0 = unlimited.
    /// Default: `0`.
    pub reclaim_rate: u64,
    /// Run a background reclaimer thread. Default: `true`. (Tests drive reclaim by hand.)
    pub background_reclaim: bool,
    /// Executor. Default: `Auto`.
    pub io_backend: IoBackend,
    /// io_uring ring entries (per ring). Default: `256`.
    pub uring_entries: u32,
    /// io_uring rings, one per lane (`use_ring_lane`): a thread-per-core server asks for one
    /// per event-loop thread. Default: `1`.
    pub uring_rings: usize,
    /// How each ring is set up (registered files, cooperative task work, a kernel poller):
    /// [`crate::io::uring_setup::UringSetup`]. Default: none of them (none lowered the server
    /// CPU per flash GET measurably on the 2-vCPU VM; docs/serving.md, "eighth sitting").
    pub uring_setup: crate::io::uring_setup::UringSetup,
    /// psync pool threads. Default: `2`.
    pub psync_threads: usize,
    /// Open files with `O_DIRECT`. Default: `true`.
    pub direct_io: bool,
    /// At open, wipe devices whose format does not match instead of failing. Default: `false`.
    pub reformat_on_mismatch: bool,
    /// Which face this engine serves; written into the superblock at format, and a device
    /// formatted by another face is refused (see [`crate::probe`]). Default: `Role::Any`.
    pub role: Role,
    /// Format devices that are not blank (a file system, other data, another face's device)
    /// instead of refusing them with `Error::NotBlank`. A valid flashtier set of this role is
    /// still opened, not wiped. Default: `false`.
    pub force_format: bool,
    /// Recovery verifies every record by scanning whole segments instead of trusting sealed
    /// summaries (slower; reads all of flash). Default: `false`.
    pub recovery_full_scan: bool,
    /// Longest wait between probes of a failing or offline device (the waits double from
    /// 100 ms up to this; see [`crate::health`]). Default: `10 s`.
    pub device_retry_max: Duration,
    /// A device set already formatted with other segment and chunk sizes keeps its own
    /// instead of being refused as a mismatch (set by [`FlashConfig::for_capacity`], whose
    /// sizes are a default, not a choice). Default: `false`.
    pub adopt_geometry: bool,
    /// The crash journal (`crate::journal`): off, or global segment 0 kept as a ring that
    /// makes header-only records survive a crash before the log's next flush (written
    /// before the user replies, or also synced). A set formatted without it opened with it
    /// is a mismatch. Default: `Off`.
    pub journal: crate::journal::JournalMode,
}

impl Default for FlashConfig {
    fn default() -> Self {
        Self {
            segment_size: 16 << 20,
            chunk_size: 1 << 20,
            streams: 4,
            reclaim_stream: 1,
            stream_tiers: Vec::new(),
            device_tiers: Vec::new(),
            flush_interval: Some(Duration::from_secs(1)),
            max_chunks_in_flight: 4,
            max_chunk_buffers: 0,
            read_queue_limit: 1024,
            reserve_segments: 2,
            free_low_watermark: 2,
            free_high_watermark: 3,
            free_ahead: 0,
            reclaim_policy: ReclaimPolicy::Fifo,
            keep_limit: 0.75,
            reclaim_rate: 0,
            background_reclaim: true,
            io_backend: IoBackend::Auto,
            uring_entries: 256,
            uring_rings: 1,
            uring_setup: crate::io::uring_setup::UringSetup::default(),
            psync_threads: 2,
            direct_io: true,
            reformat_on_mismatch: false,
            role: Role::Any,
            force_format: false,
            recovery_full_scan: false,
            device_retry_max: Duration::from_secs(10),
            adopt_geometry: false,
            journal: crate::journal::JournalMode::Off,
        }
    }
}

impl FlashConfig {
    /// A config for small caches (a few MiB): 256 KiB segments, 64 KiB chunks.
    pub fn small() -> Self {
        Self {
            segment_size: 256 << 10,
            chunk_size: 64 << 10,
            ..Self::default()
        }
    }

    /// Defaults scaled to a device set of `capacity` bytes: [`Self::for_capacity_with`] at
    /// 64 segments (the block face's choice). A 4 MiB cache gets 256 KiB segments and 64 KiB
    /// chunks; 1 GiB and up get the defaults.
    pub fn for_capacity(capacity: u64) -> Self {
        Self::for_capacity_with(capacity, 64)
    }

    /// Segment size a power of two between 256 KiB and 16 MiB aiming at >= `segments`
    /// segments, chunk = min(1 MiB, segment / 4). More segments keep less of the flash empty
    /// (the free reserve and watermarks are counted in segments): the KV face asks for 256
    /// (docs/eviction.md). A set formatted with other sizes keeps them (`adopt_geometry`).
    pub fn for_capacity_with(capacity: u64, segments: u64) -> Self {
        let mut seg: u64 = 16 << 20;
        while seg > 256 << 10 && capacity / seg < segments {
            seg /= 2;
        }
        Self {
            segment_size: seg,
            chunk_size: Self::chunk_for(seg),
            adopt_geometry: true,
            ..Self::default()
        }
    }

    /// The chunk size the defaults pair with a segment size: a quarter of it, at most 1 MiB.
    pub fn chunk_for(segment_size: u64) -> u64 {
        (segment_size / 4).min(1 << 20)
    }

    /// Write chunk buffers the engine holds at most (see `max_chunk_buffers`): appends
    /// wait for one, a chunk submitted at the limit leaves its stream without one.
    pub fn chunk_buffer_limit(&self) -> usize {
        let streams = usize::from(self.streams);
        match self.max_chunk_buffers {
            0 => streams + self.max_chunks_in_flight,
            n => n,
        }
        .max(streams + 1)
    }

    /// Bound on the engine's working memory (`flash_work_bytes`): the chunk buffers
    /// ([`Self::chunk_buffer_limit`]) and reclaim's read window (one chunk), times
    /// `chunk_size`. A segment without a readable summary is the exception: reclaim scans it
    /// whole (`segment_size` bytes).
    pub fn work_limit(&self) -> u64 {
        let chunks = self.chunk_buffer_limit() + 1;
        chunks as u64 * self.chunk_size
    }

    /// Largest encoded record (padding included).
    pub fn max_record_len(&self) -> usize {
        self.chunk_size as usize - SEGMENT_HEADER_LEN
    }

    /// Largest value for a key of `key_len` bytes.
    pub fn max_value_len(&self, key_len: usize) -> usize {
        // max_record_len is a multiple of 16, so padding never pushes a record that fits
        // unpadded over it.
        self.max_record_len()
            .saturating_sub(RECORD_HEADER_LEN + key_len)
    }

    /// Check every setting; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.chunk_size < 2 * PAGE || !self.chunk_size.is_multiple_of(PAGE) {
            return bad(format!(
                "chunk_size {} must be a multiple of 4096, >= 8192",
                self.chunk_size
            ));
        }
        if !self.segment_size.is_multiple_of(PAGE) || self.segment_size > u64::from(u32::MAX) {
            return bad(format!(
                "segment_size {} must be a multiple of 4096 and < 4 GiB",
                self.segment_size
            ));
        }
        if self.segment_size < self.chunk_size + tail_len(1) {
            return bad(format!(
                "segment_size {} must be at least chunk_size {} + 4096",
                self.segment_size, self.chunk_size
            ));
        }
        if self.streams == 0 || self.reclaim_stream >= self.streams {
            return bad(format!(
                "streams {} must be > 0 and reclaim_stream {} < streams",
                self.streams, self.reclaim_stream
            ));
        }
        if self.max_chunks_in_flight == 0 || self.read_queue_limit == 0 {
            return bad("max_chunks_in_flight and read_queue_limit must be > 0".into());
        }
        if self.reserve_segments == 0 {
            return bad("reserve_segments must be >= 1 so reclaim can always rewrite".into());
        }
        if self.free_high_watermark < self.free_low_watermark {
            return bad("free_high_watermark must be >= free_low_watermark".into());
        }
        if !(0.0..=1.0).contains(&self.keep_limit) {
            return bad(format!(
                "keep_limit {} must be within 0..=1",
                self.keep_limit
            ));
        }
        if self.uring_entries == 0 || self.psync_threads == 0 {
            return bad("uring_entries and psync_threads must be > 0".into());
        }
        Ok(())
    }

    /// Check the device set against the config: enough segments, addressable size.
    pub(crate) fn validate_total(&self, total_segments: u64) -> Result<()> {
        let need = u64::from(self.reserve_segments) + u64::from(self.free_high_watermark) + 2;
        if total_segments < need {
            return Err(Error::Config(format!(
                "devices hold {total_segments} segments of {} bytes; need at least {need} \
                 (reserve + high watermark + 2): use smaller segments or larger devices",
                self.segment_size
            )));
        }
        if total_segments * self.segment_size > MAX_BYTES {
            return Err(Error::Config(
                "device set exceeds the 16 TiB address space".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::record::padded_len;

    #[test]
    fn sizes_and_specs() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1gb").unwrap(), 1 << 30);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("2kb").unwrap(), 2048);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert!(parse_size("").is_err());
        for (n, text) in [
            (64 << 20, "64MiB"),
            (1536 << 20, "1536MiB"),
            (2 << 30, "2GiB"),
            (4096, "4KiB"),
            (1000, "1000"),
            (0, "0"),
        ] {
            assert_eq!(format_size(n), text);
            assert_eq!(parse_size(text).unwrap(), n, "{text} reads back");
        }
        let d = DeviceSpec::parse("/var/tmp/f:2GiB").unwrap();
        assert_eq!(
            (d.path.to_str().unwrap(), d.size, d.tier),
            ("/var/tmp/f", 2 << 30, 0)
        );
        let d = DeviceSpec::parse("/a:b/f:64M:1").unwrap();
        assert_eq!(
            (d.path.to_str().unwrap(), d.size, d.tier),
            ("/a:b/f", 64 << 20, 1)
        );
        assert!(DeviceSpec::parse("/nosize").is_err());
        assert!(DeviceSpec::parse(":4G").is_err());
    }

    #[test]
    fn validation() {
        FlashConfig::default().validate().unwrap();
        FlashConfig::small().validate().unwrap();
        let c = FlashConfig {
            segment_size: 1 << 20,
            chunk_size: 1 << 20,
            ..Default::default()
        };
        assert!(c.validate().is_err());
        let c = FlashConfig {
            chunk_size: 5000,
            ..Default::default()
        };
        assert!(c.validate().is_err());
        let c = FlashConfig::small();
        assert!(c.validate_total(3).is_err());
        assert!(c.validate_total(15).is_ok());
        assert!(c.max_value_len(10) + 10 + 40 <= c.max_record_len());
        assert_eq!(padded_len(10, c.max_value_len(10)), c.max_record_len());
        assert!(padded_len(10, c.max_value_len(10) + 1) > c.max_record_len());
        for cap in [4u64 << 20, 64 << 20, 1 << 30, 1 << 40] {
            let c = FlashConfig::for_capacity(cap);
            c.validate().unwrap();
            c.validate_total((cap - 4096) / c.segment_size).unwrap();
        }
        assert_eq!(FlashConfig::for_capacity(4 << 20).segment_size, 256 << 10);
        assert_eq!(FlashConfig::for_capacity(1 << 30).segment_size, 16 << 20);
    }
}
