//! flashtier's cache layer: what an item is, and the store that keeps items.
//!
//! Layout (file by file in ARCHITECTURE.md): [`item`] and [`store`] ([`KvStore`], the trait
//! the protocol layer talks to); `engine` ([`Cache`], the handle, and `Core`, the composition
//! of the parts below); `ops/` (get, update and SET, delete: phase 2 of each); `ram/`
//! (`RamTier`: index, arena, records, S3-FIFO, sweeper — no flash, no core); `lower`
//! (`Lower`: none or the flash tier); `flash_tier/` (`FlashTier` and the components over it:
//! record codec, reads, promotion, demotion, write-back, reclaim, recovery, journal,
//! back-pressure; RAM reached through `RamAccess`); `meta` (CAS, flush time, ledger,
//! counters); `small_tier` (`Small`: the small-object tier of issue 28, off by default, and
//! the core as RAM's `LowerTier`); [`model`] ([`ModelStore`], the test oracle); [`config`], [`knobs`], stats.
//!
//! Protocol semantics (add/replace/cas/append/incr/meta flags) live in the protocol crate and
//! are built from [`KvStore::get`], [`KvStore::set`] and [`KvStore::update`]; this crate only
//! keeps items, honours expiry, assigns CAS values and enforces memory limits.
#![deny(unsafe_code)]

mod block;
pub mod clock;
pub mod config;
mod dump;
mod engine;
pub mod error;
mod flash_tier;
pub mod item;
pub mod knobs;
mod ledger;
mod lower;
mod meta;
pub mod model;
mod ops;
mod ram;
mod small_tier;
mod stats;
pub mod store;
#[cfg(test)]
mod tests;

pub use clock::Clock;
pub use config::{
    CacheConfig, CacheConfigBuilder, ConfigError, EvictionPolicy, FlashDevices, FlashSettings,
    StartError,
};
pub use engine::Cache;
pub use error::Error;
pub use flashtier_flash as flash;
pub use item::{CasMode, Item, ItemMeta, ItemWrite, Update};
pub use model::ModelStore;
pub use small_tier::{FlagDefaults, SmallDevice, SmallSettings};
pub use store::{GetNow, ItemInfo, KvStore, StoreStats};
