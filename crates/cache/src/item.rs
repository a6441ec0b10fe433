//! The item model: what a stored value carries, how a read-modify-write changes it, and how
//! the dump commands list a live item ([`ItemInfo`]).
use bytes::Bytes;

/// Per-item bookkeeping the meta protocol exposes (`mg` flags `h`, `l`, `W`, `X`, `Z`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ItemMeta {
    /// The item was marked stale by an invalidation (`md ... I`, `ms ... I`).
    pub stale: bool,
    /// A client already received the recache/win token for this item (`W` was returned).
    pub win_token_sent: bool,
    /// The item has been fetched at least once since it was stored (`mg ... h`).
    pub fetched: bool,
    /// Unix seconds of the last access (store or fetch), for `mg ... l`.
    pub last_access: u32,
}

/// A stored item as a reader sees it. `get` returns the meta as it was *before* this access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub value: Bytes,
    /// memcached client flags (32-bit opaque).
    pub flags: u32,
    /// Absolute unix seconds at which the item expires; 0 = never.
    pub exptime: u32,
    /// CAS unique of this version of the item.
    pub cas: u64,
    pub meta: ItemMeta,
}

/// How the CAS value of a written item is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasMode {
    /// Assign a fresh, unique CAS value (every ordinary store).
    New,
    /// Keep the CAS of the item being replaced (touch, meta-only changes). With no previous
    /// item this behaves like `New`.
    Keep,
    /// Use exactly this value (`ms`/`md`/`ma` flag `E<token>`).
    Explicit(u64),
}

/// A full item to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemWrite {
    pub value: Bytes,
    pub flags: u32,
    /// Absolute unix seconds; 0 = never. A time already in the past stores nothing visible.
    pub exptime: u32,
    pub cas: CasMode,
    /// `stale` and `win_token_sent` are stored as given; `fetched` and `last_access` are reset
    /// by the store on a write.
    pub meta: ItemMeta,
}

impl ItemWrite {
    /// An ordinary store: fresh CAS, no meta bits.
    pub fn new(value: Bytes, flags: u32, exptime: u32) -> Self {
        Self {
            value,
            flags,
            exptime,
            cas: CasMode::New,
            meta: ItemMeta::default(),
        }
    }
}

/// What an `update` closure decides to do with the current item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// Change nothing.
    Keep,
    /// Replace (or create) the item.
    Put(ItemWrite),
    /// Remove the item.
    Delete,
}

/// One live item as the dump commands (`lru_crawler metadump`, `stats cachedump`) list it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemInfo {
    pub key: bytes::Bytes,
    /// Absolute unix seconds; 0 = never.
    pub exptime: u32,
    /// Unix seconds of the last access (a flash item: when it was stored).
    pub last_access: u32,
    pub cas: u64,
    pub fetched: bool,
    /// Value bytes.
    pub value_len: u32,
    /// Bytes the item takes in its record (header, key, value).
    pub size: u32,
    /// The item is only on flash right now (its RAM copy was evicted).
    pub flash_only: bool,
}
