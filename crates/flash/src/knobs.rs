//! Settings that can change while the engine runs (memcached's `extstore <knob> <value>`,
//! the admin endpoint): stored in atomics, read by every engine thread on each use, written
//! by [`crate::Flash::set_knob`]. Their initial values come from [`FlashConfig`].
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::config::{parse_size, FlashConfig, ReclaimPolicy};
use crate::error::{Error, Result};
use crate::journal::JournalMode;

fn journal_byte(m: JournalMode) -> u64 {
    match m {
        JournalMode::Off => 0,
        JournalMode::Write => 1,
        JournalMode::Sync => 2,
    }
}

/// Names accepted by `set_knob`, in the order `knobs()` lists them.
pub const KNOB_NAMES: &[&str] = &[
    "flush_interval_ms",
    "max_chunks_in_flight",
    "read_queue_limit",
    "free_low_watermark",
    "free_high_watermark",
    "free_ahead",
    "reclaim_policy",
    "keep_limit",
    "reclaim_rate",
    "device_retry_max_ms",
    "journal_mode",
];

/// Check knob changes against a configuration without an engine (a `--check-config`
/// validates what a start would apply): the same parsing and limits as
/// [`crate::Flash::set_knob`], applied in order to a scratch copy of the knobs `cfg`
/// starts with.
pub fn validate_knobs(cfg: &FlashConfig, changes: &[(String, String)]) -> Result<()> {
    let k = Knobs::new(cfg);
    changes.iter().try_for_each(|(n, v)| k.set(n, v))
}

pub(crate) struct Knobs {
    /// Microseconds; 0 = no interval flush.
    flush_interval_us: AtomicU64,
    max_chunks_in_flight: AtomicU64,
    read_queue_limit: AtomicU64,
    free_low: AtomicU64,
    free_high: AtomicU64,
    free_ahead: AtomicU64,
    /// 0 fifo, 1 greedy, 2 cost-benefit.
    policy: AtomicU64,
    /// keep_limit * 1_000_000.
    keep_limit_ppm: AtomicU64,
    reclaim_rate: AtomicU64,
    device_retry_max_ms: AtomicU64,
    /// The crash journal's mode (0 off, 1 write, 2 sync; `crate::journal`); applied to the
    /// journal by `Flash::set_knob`. `None`: the engine has no journal.
    journal_mode: Option<AtomicU64>,
}

fn rel(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl Knobs {
    pub(crate) fn new(cfg: &FlashConfig) -> Self {
        Self {
            flush_interval_us: AtomicU64::new(
                cfg.flush_interval
                    .map_or(0, |d| d.as_micros().max(1) as u64),
            ),
            max_chunks_in_flight: AtomicU64::new(cfg.max_chunks_in_flight as u64),
            read_queue_limit: AtomicU64::new(cfg.read_queue_limit as u64),
            free_low: AtomicU64::new(u64::from(cfg.free_low_watermark)),
            free_high: AtomicU64::new(u64::from(cfg.free_high_watermark)),
            free_ahead: AtomicU64::new(u64::from(cfg.free_ahead)),
            policy: AtomicU64::new(match cfg.reclaim_policy {
                ReclaimPolicy::Fifo => 0,
                ReclaimPolicy::Greedy => 1,
                ReclaimPolicy::CostBenefit => 2,
            }),
            keep_limit_ppm: AtomicU64::new((cfg.keep_limit * 1e6) as u64),
            reclaim_rate: AtomicU64::new(cfg.reclaim_rate),
            device_retry_max_ms: AtomicU64::new((cfg.device_retry_max.as_millis() as u64).max(1)),
            journal_mode: (cfg.journal != JournalMode::Off)
                .then(|| AtomicU64::new(journal_byte(cfg.journal))),
        }
    }

    /// The journal mode the knob holds (`Off` without a journal).
    pub(crate) fn journal_mode(&self) -> JournalMode {
        match self.journal_mode.as_ref().map(rel) {
            Some(1) => JournalMode::Write,
            Some(2) => JournalMode::Sync,
            _ => JournalMode::Off,
        }
    }

    pub(crate) fn flush_interval(&self) -> Option<Duration> {
        match rel(&self.flush_interval_us) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }
    pub(crate) fn max_chunks_in_flight(&self) -> usize {
        rel(&self.max_chunks_in_flight) as usize
    }
    pub(crate) fn read_queue_limit(&self) -> u64 {
        rel(&self.read_queue_limit)
    }
    pub(crate) fn free_low(&self) -> u32 {
        rel(&self.free_low) as u32
    }
    pub(crate) fn free_high(&self) -> u32 {
        rel(&self.free_high) as u32
    }
    pub(crate) fn free_ahead(&self) -> u32 {
        rel(&self.free_ahead) as u32
    }
    pub(crate) fn policy(&self) -> ReclaimPolicy {
        match rel(&self.policy) {
            0 => ReclaimPolicy::Fifo,
            1 => ReclaimPolicy::Greedy,
            _ => ReclaimPolicy::CostBenefit,
        }
    }
    pub(crate) fn keep_limit(&self) -> f64 {
        rel(&self.keep_limit_ppm) as f64 / 1e6
    }
    pub(crate) fn reclaim_rate(&self) -> u64 {
        rel(&self.reclaim_rate)
    }
    pub(crate) fn device_retry_max(&self) -> Duration {
        Duration::from_millis(rel(&self.device_retry_max_ms))
    }

    /// Current values as text, in [`KNOB_NAMES`] order.
    pub(crate) fn list(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "flush_interval_ms",
                (rel(&self.flush_interval_us) / 1000).to_string(),
            ),
            (
                "max_chunks_in_flight",
                self.max_chunks_in_flight().to_string(),
            ),
            ("read_queue_limit", self.read_queue_limit().to_string()),
            ("free_low_watermark", self.free_low().to_string()),
            ("free_high_watermark", self.free_high().to_string()),
            ("free_ahead", self.free_ahead().to_string()),
            (
                "reclaim_policy",
                match self.policy() {
                    ReclaimPolicy::Fifo => "fifo".to_string(),
                    ReclaimPolicy::Greedy => "greedy".to_string(),
                    ReclaimPolicy::CostBenefit => "cost-benefit".to_string(),
                },
            ),
            ("keep_limit", format!("{}", self.keep_limit())),
            ("reclaim_rate", self.reclaim_rate().to_string()),
            (
                "device_retry_max_ms",
                rel(&self.device_retry_max_ms).to_string(),
            ),
            ("journal_mode", self.journal_mode().name().to_string()),
        ]
    }

    /// Parse and apply one knob; the error says what is accepted.
    pub(crate) fn set(&self, name: &str, value: &str) -> Result<()> {
        let bad = |why: &str| Error::Config(format!("knob {name}={value:?}: {why}"));
        let int = || {
            value
                .trim()
                .parse::<u64>()
                .map_err(|_| bad("expected an integer"))
        };
        match name {
            "flush_interval_ms" => self
                .flush_interval_us
                .store(int()?.saturating_mul(1000), Ordering::Relaxed),
            "max_chunks_in_flight" => match int()? {
                0 => return Err(bad("must be > 0")),
                n => self.max_chunks_in_flight.store(n, Ordering::Relaxed),
            },
            "read_queue_limit" => match int()? {
                0 => return Err(bad("must be > 0")),
                n => self.read_queue_limit.store(n, Ordering::Relaxed),
            },
            "free_low_watermark" => {
                let n = int()?;
                if n > rel(&self.free_high) {
                    return Err(bad("must be <= free_high_watermark"));
                }
                self.free_low.store(n, Ordering::Relaxed);
            }
            "free_high_watermark" => {
                let n = int()?;
                if n < rel(&self.free_low) {
                    return Err(bad("must be >= free_low_watermark"));
                }
                self.free_high.store(n, Ordering::Relaxed);
            }
            "free_ahead" => match int()? {
                n @ 0..=65536 => self.free_ahead.store(n, Ordering::Relaxed),
                _ => return Err(bad("must be 0..=65536")),
            },
            "reclaim_policy" => match value.trim().to_ascii_lowercase().as_str() {
                "fifo" => self.policy.store(0, Ordering::Relaxed),
                "greedy" => self.policy.store(1, Ordering::Relaxed),
                "cost-benefit" | "cb" => self.policy.store(2, Ordering::Relaxed),
                _ => return Err(bad("expected fifo, greedy or cost-benefit")),
            },
            "keep_limit" => {
                let f: f64 = value.trim().parse().map_err(|_| bad("expected a number"))?;
                if !(0.0..=1.0).contains(&f) {
                    return Err(bad("must be within 0..=1"));
                }
                self.keep_limit_ppm
                    .store((f * 1e6) as u64, Ordering::Relaxed);
            }
            "reclaim_rate" => self
                .reclaim_rate
                .store(parse_size(value)?, Ordering::Relaxed),
            "device_retry_max_ms" => match int()? {
                0 => return Err(bad("must be > 0")),
                n => self.device_retry_max_ms.store(n, Ordering::Relaxed),
            },
            "journal_mode" => {
                let Some(k) = &self.journal_mode else {
                    return Err(bad("this engine has no crash journal (block face)"));
                };
                let m = JournalMode::parse(value.trim())
                    .ok_or_else(|| bad("expected off, write or sync"))?;
                k.store(journal_byte(m), Ordering::Relaxed);
            }
            _ => {
                return Err(bad(&format!(
                    "unknown knob; known: {}",
                    KNOB_NAMES.join(", ")
                )))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_list() {
        let k = Knobs::new(&FlashConfig::default());
        let names: Vec<_> = k.list().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, KNOB_NAMES);
        k.set("flush_interval_ms", "0").unwrap();
        assert_eq!(k.flush_interval(), None);
        k.set("flush_interval_ms", "250").unwrap();
        assert_eq!(k.flush_interval(), Some(Duration::from_millis(250)));
        k.set("reclaim_policy", "greedy").unwrap();
        assert_eq!(k.policy(), ReclaimPolicy::Greedy);
        k.set("keep_limit", "0.5").unwrap();
        assert_eq!(k.keep_limit(), 0.5);
        k.set("reclaim_rate", "64M").unwrap();
        assert_eq!(k.reclaim_rate(), 64 << 20);
        assert!(k.set("keep_limit", "2").is_err());
        assert!(k.set("free_low_watermark", "100").is_err());
        assert!(k.set("max_chunks_in_flight", "0").is_err());
        assert!(k
            .set("nope", "1")
            .unwrap_err()
            .to_string()
            .contains("known"));
    }
}
