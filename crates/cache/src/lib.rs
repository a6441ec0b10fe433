//! flashtier's cache layer: what an item is, and the store that keeps items.
//!
//! # Layout
//! - [`item`]: the item model shared with the protocol crates ([`Item`], [`ItemWrite`],
//!   [`Update`]).
//! - [`store`]: the [`KvStore`] trait, the one interface the protocol layer talks to.
//! - [`clock`]: server time in whole seconds, replaceable in tests.
//! - [`error`]: the crate's typed error, classified client vs server.
//! - [`model`]: [`ModelStore`], a deliberately simple `HashMap` store used as the oracle in
//!   model-based and differential tests. It is never what the server binary runs.
//! - [`config`]: [`CacheConfig`], every knob of the real store with default and unit.
//! - [`cache`]: [`Cache`], the real store: GET/SET/UPDATE paths and stats.
//! - [`index`]: the compact sharded hash index (tag + location, no key; ≤ 16 B/entry).
//! - `record`: the byte layout of an item in a RAM segment.
//! - `arena`: RAM segments, write heads, the byte budget and the reuse invariants.
//! - `dump`: listing live items (RAM and flash) for the dump commands.
//! - `evict`: S3-FIFO over segments, the ghost set use, the drain shared with the sweeper.
//! - `ghost`: S3-FIFO's ghost set.
//! - `sweeper`: the background thread freeing expired and dead space.
//! - [`tier`]: the seam where the flash tier takes RAM evictions (demotion to the flash home).
//! - `flash_tier`: the flash tier: write-through appends, the value prefix, flash counters.
//! - [`knobs`]: the runtime knobs (`KvStore::set_knob`): tiering settings and the engine's.
//! - `hybrid`: GET/UPDATE/SET over both tiers (phase 1 reads flash, phase 2 commits).
//! - `reclaim`: the flash engine's reclaim handler (which flash records survive reclaim).
//! - `recovery`: warm restart, rebuilding the index from the records on flash.
//! - `stats`: counters and how they map to memcached's `stats` sections.
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

mod arena;
pub mod cache;
pub mod clock;
pub mod config;
mod dump;
pub mod error;
mod evict;
mod flash_tier;
mod ghost;
mod hybrid;
pub mod index;
pub mod item;
pub mod knobs;
mod kv_record;
pub mod model;
mod publish;
mod reclaim;
mod record;
mod recovery;
mod stats;
pub mod store;
mod sweeper;
pub mod tier;
mod writeback;

pub use cache::Cache;
pub use clock::Clock;
pub use config::{
    CacheConfig, CacheConfigBuilder, ConfigError, EvictionPolicy, FlashDevices, FlashSettings,
    StartError,
};
pub use error::Error;
pub use flashtier_flash as flash;
pub use item::{CasMode, Item, ItemMeta, ItemWrite, Update};
pub use model::ModelStore;
pub use store::{ItemInfo, KvStore, StoreStats};
