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
//!
//! Protocol semantics (add/replace/cas/append/incr/meta flags) live in the protocol crate and
//! are built from [`KvStore::get`], [`KvStore::set`] and [`KvStore::update`]; this crate only
//! keeps items, honours expiry, assigns CAS values and enforces memory limits.
#![deny(unsafe_code)]

pub mod clock;
pub mod error;
pub mod item;
pub mod model;
pub mod store;

pub use clock::Clock;
pub use error::Error;
pub use item::{CasMode, Item, ItemMeta, ItemWrite, Update};
pub use model::ModelStore;
pub use store::{KvStore, StoreStats};
