//! Where the block face's records go: the flash streams ([`STREAM_DATA`], [`STREAM_META`]) and
//! [`MetaLog`], the engine handle (set once it is open), the reclaim stream and the counters.
//!
//! Why a part of its own: the fence, the warm-restart records and the watermark all append
//! metadata records and count them, and [`Durability`](crate::durability::Durability) holds
//! the fence and the warm records. Giving those parts this small handle instead of the whole
//! `Durability` keeps the imports one way (durability → fence, warm → meta_log).
use std::sync::{Arc, OnceLock, Weak};

use flashtier_flash::Flash;

use crate::stats::BlockStats;

/// Flash stream of block records.
pub(crate) const STREAM_DATA: u8 = 0;
/// Flash stream of the watermark, fence and warm-restart records.
pub(crate) const STREAM_META: u8 = 2;

/// The engine (once open), its reclaim stream and the cache's counters.
pub(crate) struct MetaLog {
    /// The engine, for records reclaim appends (set once it is open).
    flash: OnceLock<Weak<Flash>>,
    /// The engine's reclaim stream (may use the reserved segments).
    reclaim_stream: u8,
    stats: Arc<BlockStats>,
}

impl MetaLog {
    pub(crate) fn new(reclaim_stream: u8, stats: Arc<BlockStats>) -> Self {
        MetaLog {
            flash: OnceLock::new(),
            reclaim_stream,
            stats,
        }
    }

    /// The engine is open: reclaim callbacks may append through it.
    pub(crate) fn set_flash(&self, flash: &Arc<Flash>) {
        let _ = self.flash.set(Arc::downgrade(flash));
    }

    /// The engine, if open and not dropped.
    pub(crate) fn flash(&self) -> Option<Arc<Flash>> {
        self.flash.get().and_then(Weak::upgrade)
    }

    /// The engine's reclaim stream.
    pub(crate) fn reclaim_stream(&self) -> u8 {
        self.reclaim_stream
    }

    /// The cache's counters.
    pub(crate) fn stats(&self) -> &Arc<BlockStats> {
        &self.stats
    }
}
