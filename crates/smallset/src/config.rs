//! [`SmallConfig`]: the small tier's settings (a leaf, so the tier's parts can read them
//! without importing the handle).

/// Settings of the small tier.
#[derive(Clone, Debug)]
pub struct SmallConfig {
    /// The staging buffer's budget in bytes: the flusher merges while more is staged.
    /// Inserts are refused past twice this. Default: `16 MiB`.
    pub staging_bytes: u64,
    /// Sets merged per flusher batch (their reads, then their writes, in flight at once).
    /// Default: 512.
    pub batch_sets: usize,
}

impl Default for SmallConfig {
    fn default() -> Self {
        Self {
            staging_bytes: 16 << 20,
            batch_sets: 512,
        }
    }
}
