//! flashtier's cache layer: what an item is, and the store that keeps items.
//!
//! # Layout
//! - [`item`]: the item model shared with the protocol crates ([`Item`], [`ItemWrite`],
//!   [`Update`]); [`store`]: the [`KvStore`] trait the protocol layer talks to.
//! - [`clock`], [`error`], [`config`] ([`CacheConfig`], every knob with default and unit),
//!   [`knobs`] (runtime knobs), `stats` (counters and memcached's `stats` sections), `dump`
//!   (listing live items for the dump commands).
//! - [`model`]: [`ModelStore`], a `HashMap` oracle for model and differential tests; never
//!   what the server runs.
//! - `engine`: [`Cache`], the real store's handle, and the state its components share.
//! - `ops/`: the operations, one two-phase file each: `get`, `update` (and SET), `delete`.
//! - `ram/`: the RAM tier: `index` (compact sharded hash index), `arena` and `record` (RAM
//!   segments and the record layout), `write` (reserve → write → publish), `evict` (S3-FIFO),
//!   `ghost`, `sweeper`.
//! - `flash_tier/`: the flash tier: `kv_record` (every on-flash record kind, one codec),
//!   `read` (phase 1: candidate reads), `promote`, `demote` (RAM evictions to flash),
//!   `writeback`, `reclaim` (the engine's reclaim handler), `recovery` (warm restart).
//!
//! # Using the real store
//! ```no_run
//! use flashtier_cache::{Cache, CacheConfig, ItemWrite, KvStore};
//! let cfg = CacheConfig::builder()
//!     .memory_limit(1 << 30)      // bytes of item memory (`-m`)
//!     .max_item_size(1 << 20)     // largest value (`-I`)
//!     .build()?;                  // validates
//! let cache = Cache::new(cfg)?;   // starts the sweeper thread
//! let cas = cache.set_now(b"k", ItemWrite::new("v".into(), 0, 0))?;
//! # let _ = cas;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//! [`Cache`] implements [`KvStore`]. Without flash its futures complete on the first poll;
//! with flash (`CacheConfig::flash`, see [`FlashSettings`]) a GET or UPDATE of a
//! flash-resident item awaits one flash read.
//!
//! # With flash
//! ```no_run
//! use flashtier_cache::{Cache, CacheConfig, FlashSettings};
//! let cfg = CacheConfig::builder()
//!     .memory_limit(64 << 20)
//!     .flash(FlashSettings::parse(&["/var/tmp/cache.flash:2GiB"])?)
//!     .build()?;
//! let cache = Cache::new(cfg)?;   // formats a blank file, or recovers what is on it
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//! `get_now`/`set_now`/`update_now`/`delete_now` are the same operations without `async`.
//! `stats_section` answers `items`, `slabs` (segments) and `settings`.
//!
//! Protocol semantics (add/replace/cas/append/incr/meta flags) live in the protocol crate and
//! are built from [`KvStore::get`], [`KvStore::set`] and [`KvStore::update`]; this crate only
//! keeps items, honours expiry, assigns CAS values and enforces memory limits.
#![deny(unsafe_code)]

pub mod clock;
pub mod config;
mod dump;
mod engine;
pub mod error;
mod flash_tier;
pub mod item;
pub mod knobs;
pub mod model;
mod ops;
mod ram;
mod stats;
pub mod store;

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
pub use store::{ItemInfo, KvStore, StoreStats};
