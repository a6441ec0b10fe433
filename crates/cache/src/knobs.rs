//! Runtime knobs of the flash tier: one name space for the settings an operator may change
//! while the cache runs (memcached's `extstore <knob> <value>`, the admin endpoint's
//! `/knobs`), mapped onto the cache's own tiering settings ([`Tiering`]) and the flash
//! engine's knobs (`flashtier_flash::Flash::set_knob`).
//!
//! Names: the cache's tiering knobs here ([`Tiering`]), the engine's by their own names
//! (`flashtier_flash::knobs::KNOB_NAMES`, plus memcached's `compact_under`); memcached knobs
//! with no meaning here are refused with the reason. Meanings and ranges: docs/stats.md
//! ("Runtime knobs").
//!
//! # Threads
//! Values are relaxed atomics: any connection or admin task writes them, the request paths
//! and the engine's reclaimer read them on each use. A change takes effect on the next use;
//! no two knobs are changed atomically together.
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::config::FlashSettings;
use crate::Error;

/// The cache's own knob names, in the order `list` gives them.
pub const TIERING_KNOBS: &[&str] = &[
    "item_size",
    "recache_rate",
    "recache_adaptive",
    "drop_under",
    "drop_unread",
    "ram_exclusive",
    "append_wait_ms",
    "write_back_ms",
    "write_budget",
    "evict_when_busy",
];

/// memcached `extstore` knobs flashtier refuses, with why.
const NO_MEANING: &[(&str, &str)] = &[
    (
        "item_age",
        "items reach flash when RAM evicts them or after write_back_ms unwritten; use write_back_ms",
    ),
    (
        "low_ttl",
        "flash segments are not split by TTL; reclaim drops wholly expired segments unread",
    ),
    (
        "max_frag",
        "reclaim picks victims by policy (reclaim_policy fifo|greedy) and keep_limit",
    ),
    (
        "max_sleep",
        "the reclaimer is paced by reclaim_rate (bytes per second)",
    ),
    ("free_memchunks", "flashtier has no slab chunks"),
];

/// The cache's runtime tiering settings (see the module docs for each).
#[derive(Debug)]
pub struct Tiering {
    item_size: AtomicU64,
    recache_rate: AtomicU64,
    /// Promotion's sampling follows its measured payback (`flash_tier::payback`).
    recache_adaptive: AtomicBool,
    drop_under: AtomicU32,
    drop_unread: AtomicBool,
    ram_exclusive: AtomicBool,
    append_wait_us: AtomicU64,
    write_back_ms: AtomicU64,
    /// `write_budget` in millionths.
    write_budget_ppm: AtomicU64,
    evict_when_busy: AtomicBool,
}

/// The largest `write_budget` accepted.
const WRITE_BUDGET_MAX: f64 = 10.0;

impl Tiering {
    /// Initial values: from `settings`, `drop_under` = the engine's high watermark (`high`).
    pub fn new(settings: &FlashSettings, high: u32) -> Self {
        Self {
            item_size: AtomicU64::new(settings.item_size),
            recache_rate: AtomicU64::new(u64::from(settings.recache_rate)),
            recache_adaptive: AtomicBool::new(true),
            drop_under: AtomicU32::new(settings.drop_under.unwrap_or(high)),
            drop_unread: AtomicBool::new(settings.drop_unread),
            ram_exclusive: AtomicBool::new(settings.ram_exclusive),
            append_wait_us: AtomicU64::new(settings.append_wait.as_micros() as u64),
            write_back_ms: AtomicU64::new(settings.write_back.as_millis() as u64),
            write_budget_ppm: AtomicU64::new(
                (settings.write_budget.clamp(0.0, WRITE_BUDGET_MAX) * 1e6) as u64,
            ),
            evict_when_busy: AtomicBool::new(settings.evict_when_busy),
        }
    }

    /// Values below this many bytes are not written to flash.
    pub fn item_size(&self) -> u64 {
        self.item_size.load(Relaxed)
    }
    pub fn recache_rate(&self) -> u64 {
        self.recache_rate.load(Relaxed)
    }
    /// Of the `recache_rate` candidates, promote the share the measured payback sets
    /// (default); off: every candidate.
    pub fn recache_adaptive(&self) -> bool {
        self.recache_adaptive.load(Relaxed)
    }
    pub fn drop_under(&self) -> u32 {
        self.drop_under.load(Relaxed)
    }
    pub fn drop_unread(&self) -> bool {
        self.drop_unread.load(Relaxed)
    }
    pub fn ram_exclusive(&self) -> bool {
        self.ram_exclusive.load(Relaxed)
    }
    pub fn append_wait(&self) -> Duration {
        Duration::from_micros(self.append_wait_us.load(Relaxed))
    }

    /// The write-back window in milliseconds (0 = write-through).
    pub fn write_back_ms(&self) -> u64 {
        self.write_back_ms.load(Relaxed)
    }

    /// Device bytes written per value byte stored up to which reclaim compacts unhit items.
    pub fn write_budget(&self) -> f64 {
        self.write_budget_ppm.load(Relaxed) as f64 / 1e6
    }

    /// A cold item RAM evicts while flash refuses appends for back-pressure is dropped (an
    /// eviction) instead of waited for.
    pub fn evict_when_busy(&self) -> bool {
        self.evict_when_busy.load(Relaxed)
    }

    /// Current values as text, in [`TIERING_KNOBS`] order.
    pub fn list(&self) -> Vec<(String, String)> {
        vec![
            ("item_size".into(), self.item_size().to_string()),
            ("recache_rate".into(), self.recache_rate().to_string()),
            (
                "recache_adaptive".into(),
                u8::from(self.recache_adaptive()).to_string(),
            ),
            ("drop_under".into(), self.drop_under().to_string()),
            (
                "drop_unread".into(),
                u8::from(self.drop_unread()).to_string(),
            ),
            (
                "ram_exclusive".into(),
                u8::from(self.ram_exclusive()).to_string(),
            ),
            (
                "append_wait_ms".into(),
                self.append_wait().as_millis().to_string(),
            ),
            ("write_back_ms".into(), self.write_back_ms().to_string()),
            ("write_budget".into(), self.write_budget().to_string()),
            (
                "evict_when_busy".into(),
                u8::from(self.evict_when_busy()).to_string(),
            ),
        ]
    }

    /// Apply one of [`TIERING_KNOBS`]; `None` if `name` is not one of them.
    fn set(&self, name: &str, value: &str) -> Option<Result<(), Error>> {
        let bad = |why: &str| Error::Knob(format!("{name} {value}: {why}"));
        let int = || {
            value
                .parse::<u64>()
                .map_err(|_| bad("expected a non-negative integer"))
        };
        let r = match name {
            "item_size" => flashtier_flash::config::parse_size(value)
                .map_err(|_| bad("expected a size in bytes (e.g. 512, 4k)"))
                .map(|n| self.item_size.store(n, Relaxed)),
            "recache_rate" => int().map(|n| self.recache_rate.store(n, Relaxed)),
            "recache_adaptive" => int().map(|n| self.recache_adaptive.store(n != 0, Relaxed)),
            "drop_under" => int().and_then(|n| {
                let n = u32::try_from(n).map_err(|_| bad("too large"))?;
                self.drop_under.store(n, Relaxed);
                Ok(())
            }),
            // memcached: any non-zero integer is "on".
            "drop_unread" => int().map(|n| self.drop_unread.store(n != 0, Relaxed)),
            "ram_exclusive" => int().map(|n| self.ram_exclusive.store(n != 0, Relaxed)),
            "evict_when_busy" => int().map(|n| self.evict_when_busy.store(n != 0, Relaxed)),
            "append_wait_ms" => int().and_then(|n| {
                if n > 60_000 {
                    return Err(bad("at most 60000"));
                }
                self.append_wait_us.store(n * 1000, Relaxed);
                Ok(())
            }),
            "write_back_ms" => int().and_then(|n| {
                if n > 600_000 {
                    return Err(bad("at most 600000"));
                }
                self.write_back_ms.store(n, Relaxed);
                Ok(())
            }),
            "write_budget" => match value.parse::<f64>() {
                Ok(b) if (0.0..=WRITE_BUDGET_MAX).contains(&b) => {
                    self.write_budget_ppm.store((b * 1e6) as u64, Relaxed);
                    Ok(())
                }
                _ => Err(bad("expected a number from 0 to 10 (e.g. 1.2)")),
            },
            _ => return None,
        };
        Some(r)
    }
}

/// Check knob changes against `settings` without opening anything (a `--check-config` validates
/// what a start would apply): the same names, parsing and limits as `Cache::set_knob` on a
/// cache opened with `settings`, applied in order to scratch copies of the knobs.
pub fn validate_knobs(settings: &FlashSettings, changes: &[(String, String)]) -> Result<(), Error> {
    let engine = settings.engine_config();
    let tiering = Tiering::new(settings, engine.free_high_watermark);
    let mut engine_changes: Vec<(String, String)> = Vec::new();
    for (name, value) in changes {
        let value = value.trim();
        if let Some(r) = tiering.set(name, value) {
            r?;
            continue;
        }
        if let Some((_, why)) = NO_MEANING.iter().find(|(n, _)| n == name) {
            return Err(Error::Knob(format!("{name} is not supported: {why}")));
        }
        let engine_name = if name == "compact_under" {
            "free_low_watermark"
        } else {
            name.as_str()
        };
        if !flashtier_flash::knobs::KNOB_NAMES.contains(&engine_name) {
            return Err(Error::Knob(format!(
                "unknown knob {name}; known: {}, {}, compact_under",
                TIERING_KNOBS.join(", "),
                flashtier_flash::knobs::KNOB_NAMES.join(", ")
            )));
        }
        engine_changes.push((engine_name.to_string(), value.to_string()));
        flashtier_flash::knobs::validate_knobs(&engine, &engine_changes).map_err(|e| {
            let text = e.to_string();
            let text = text
                .split_once("knob ")
                .map_or(text.as_str(), |(_, rest)| rest);
            Error::Knob(text.to_string())
        })?;
    }
    Ok(())
}

/// Every knob with its current value: the tiering knobs, then the engine's (`flash`).
pub(crate) fn list(tiering: &Tiering, flash: &flashtier_flash::Flash) -> Vec<(String, String)> {
    let mut v = tiering.list();
    v.extend(
        flash
            .knobs()
            .into_iter()
            .map(|(k, val)| (k.to_string(), val)),
    );
    v
}

/// Change one knob by name (see the module docs): a tiering knob, or the engine's (`flash`).
pub(crate) fn set(
    tiering: &Tiering,
    flash: &flashtier_flash::Flash,
    name: &str,
    value: &str,
) -> Result<(), Error> {
    let value = value.trim();
    if let Some(r) = tiering.set(name, value) {
        return r;
    }
    if let Some((_, why)) = NO_MEANING.iter().find(|(n, _)| *n == name) {
        return Err(Error::Knob(format!("{name} is not supported: {why}")));
    }
    let engine_name = if name == "compact_under" {
        "free_low_watermark"
    } else {
        name
    };
    if flashtier_flash::knobs::KNOB_NAMES.contains(&engine_name) {
        return flash.set_knob(engine_name, value).map_err(|e| {
            let text = e.to_string();
            // The engine says "invalid configuration: knob ...": keep the knob part.
            let text = text
                .split_once("knob ")
                .map_or(text.as_str(), |(_, rest)| rest);
            Error::Knob(text.to_string())
        });
    }
    Err(Error::Knob(format!(
        "unknown knob {name}; known: {}, {}, compact_under",
        TIERING_KNOBS.join(", "),
        flashtier_flash::knobs::KNOB_NAMES.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiering() -> Tiering {
        let settings = FlashSettings::devices(Vec::new());
        Tiering::new(&settings, 3)
    }

    #[test]
    fn validation_without_a_cache() {
        let settings = FlashSettings::devices(Vec::new());
        let ok = |k: &str, v: &str| validate_knobs(&settings, &[(k.into(), v.into())]);
        assert!(ok("item_size", "4k").is_ok());
        assert!(ok("compact_under", "1").is_ok());
        assert!(ok("reclaim_policy", "greedy").is_ok());
        assert!(ok("foo", "1")
            .unwrap_err()
            .to_string()
            .contains("unknown knob foo"));
        assert!(ok("item_age", "1").is_err());
        assert!(ok("append_wait_ms", "60001").is_err());
        assert!(ok("write_budget", "1.3").is_ok());
        assert!(ok("write_budget", "11").is_err());
        assert!(ok("write_budget", "-1").is_err());
        assert!(ok("keep_limit", "2").is_err());
    }

    #[test]
    fn set_and_list() {
        let t = tiering();
        let names: Vec<String> = t.list().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, TIERING_KNOBS);
        assert_eq!(t.drop_under(), 3);
        assert_eq!(t.recache_rate(), 1);
        t.set("item_size", "4k").unwrap().unwrap();
        assert_eq!(t.item_size(), 4096);
        t.set("drop_unread", "5").unwrap().unwrap();
        assert!(t.drop_unread());
        t.set("append_wait_ms", "7").unwrap().unwrap();
        assert_eq!(t.append_wait(), Duration::from_millis(7));
        assert!(t.set("recache_rate", "-1").unwrap().is_err());
        assert!(t.set("append_wait_ms", "99999999").unwrap().is_err());
        assert!(t.set("drop_under", "x").unwrap().is_err());
        assert!(t.set("nope", "1").is_none());
        assert_eq!(t.write_budget(), crate::flash_tier::WRITE_BUDGET);
        t.set("write_budget", "1.35").unwrap().unwrap();
        assert_eq!(t.write_budget(), 1.35);
        assert!(t.set("write_budget", "x").unwrap().is_err());
        assert_eq!(t.write_budget(), 1.35);
    }
}
