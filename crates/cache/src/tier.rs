//! The seam between the RAM tier and a lower tier (flash, issue 4).
//!
//! When the RAM arena evicts a live item that S3-FIFO does not keep in RAM, it asks
//! [`LowerTier::offer`] what to do. Today there is no lower tier, so the only answer is
//! [`Demotion::Drop`] and the item is evicted. The flash tier plugs in here:
//!
//! - a `LowerTier::Flash(..)` variant holding the flash engine's writer;
//! - `offer` copies the record (already a self-describing byte run: header, key, value) into a
//!   flash write buffer and answers `Demotion::Moved { loc }`;
//! - the evictor then rewrites the index slot in place with `Tier::Flash` and `loc` (in 16-byte
//!   flash units) instead of removing it, under the same shard lock, so readers never see the
//!   item missing.
//!
//! No slot is ever created with `Tier::Flash` today, and the RAM paths only match `Tier::Ram`
//! slots (a flash slot would read as a miss). Issue 4 adds the flash read behind the same
//! lookup: match the tag, read the record from flash, compare the key there.

/// What to do with a live item the RAM tier is evicting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Demotion {
    /// Evict it: remove the index slot.
    Drop,
}

/// The tier below RAM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LowerTier {
    /// No lower tier: RAM evictions drop items.
    #[default]
    None,
}

impl LowerTier {
    /// Decide the fate of an evicted live record of `words` words.
    pub fn offer(&self, _words: usize) -> Demotion {
        match self {
            LowerTier::None => Demotion::Drop,
        }
    }
}
