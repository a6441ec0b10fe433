//! A parsed request: what the codec hands to the command layer.
//!
//! Requests own their bytes (`Bytes`, cut from the connection's read buffer without copying
//! values), so the read buffer can keep filling while a request is executed. Numbers are kept
//! as memcached parsed them (exptimes still relative/absolute/negative); the command layer
//! converts them with the store's clock.
use bytes::Bytes;

/// The six storage commands, plus `ms` modes mapped onto them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// `set`/`add`/`replace`/`append`/`prepend`/`cas` with its data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Storage {
    pub mode: StoreMode,
    pub key: Bytes,
    pub flags: u32,
    pub exptime: i32,
    /// The compare value of `cas` (0 for the other commands).
    pub cas: u64,
    pub noreply: bool,
    pub value: Bytes,
}

/// A retrieval's keys, in order.
pub type KeyList = smallvec::SmallVec<[Bytes; 1]>;

/// `get`/`gets`/`gat`/`gats` (and the ancient `bget`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retrieval {
    /// Inline up to one key: a one-key `get` (nearly every request) allocates no list.
    pub keys: KeyList,
    /// Return the CAS unique (`gets`, `gats`).
    pub with_cas: bool,
    /// New exptime for `gat`/`gats`.
    pub touch: Option<i32>,
    /// A key over 250 bytes followed `keys`: memcached still reads (and for `gat` touches)
    /// the keys before it, in order, then answers only `CLIENT_ERROR bad command line format`.
    pub key_too_long: bool,
}

/// One meta flag as sent: its letter and its token (the bytes after the letter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaFlag {
    pub letter: u8,
    pub token: Bytes,
}

/// Meta flags after memcached's pre-parse (`_meta_flag_preparse`): every flag letter appears
/// at most once; numeric tokens are already checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaOpts {
    /// The flags in request order (replies echo `O`, `k`, `c`, `t`, ... in this order).
    pub flags: Vec<MetaFlag>,
    /// `b`: the key was base64 and has been decoded.
    pub key_binary: bool,
    /// `q`: suppress the nominal reply (`EN` for mg, `HD` for ms/md/ma).
    pub quiet: bool,
    /// `v`: return the value.
    pub value: bool,
    /// `u`: do not record the access.
    pub no_update: bool,
    /// `I`: invalidate / mark stale.
    pub invalidate: bool,
    /// `C(token)`: compare CAS.
    pub compare_cas: Option<u64>,
    /// `T(token)`: new TTL, as sent.
    pub ttl: Option<i32>,
    /// `N(token)`: vivify on miss with this TTL, as sent.
    pub vivify: Option<i32>,
    /// `R(token)`: recache threshold, as sent.
    pub recache: Option<i32>,
    /// `F(token)`: client flags (ms).
    pub client_flags: u32,
    /// `M(token)`: mode character (ms, ma).
    pub mode: Option<u8>,
    /// `D(token)`: delta (ma, default 1).
    pub delta: u64,
    /// `J(token)`: initial value (ma, default 0).
    pub initial: u64,
}

impl MetaOpts {
    /// True when the flag letter was sent.
    pub fn has(&self, letter: u8) -> bool {
        self.flags.iter().any(|f| f.letter == letter)
    }
}

/// A meta command's key and flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The key as stored (decoded when `b` was given).
    pub key: Bytes,
    pub opts: MetaOpts,
}

/// Which general `stats` section was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatsArg {
    General,
    Reset,
    /// `stats detail on|off|dump` (`None`: missing or other argument).
    Detail(Option<Bytes>),
    /// `stats cachedump <class> <limit>` (arguments already validated; limit 0 = all).
    CacheDump {
        class: u32,
        limit: u32,
    },
    /// Any other sub-command (`settings`, `items`, `slabs`, `conns`, ...).
    Section(Bytes),
}

/// `shutdown [graceful]` (memcached -A).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownArg {
    /// `shutdown`.
    Now,
    /// `shutdown graceful`.
    Graceful,
    /// Any other argument.
    Invalid,
}

/// `lru_crawler <sub-command>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LruCrawler {
    /// `metadump all|hash|<class>[,<class>...]`: every live item's metadata.
    Metadump(Bytes),
    /// `crawl`, `enable`, `disable`, `tocrawl <n>`, `sleep <us>` with a valid argument.
    Accepted,
    /// A reply decided while parsing.
    Reply(&'static str),
}

/// A request the command layer executes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Storage(Storage),
    Retrieval(Retrieval),
    Delete {
        key: Bytes,
        noreply: bool,
    },
    Arith {
        key: Bytes,
        incr: bool,
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: Bytes,
        exptime: i32,
        noreply: bool,
    },
    FlushAll {
        delay: i32,
        noreply: bool,
    },
    Version,
    Verbosity {
        level: u32,
        noreply: bool,
    },
    /// `cache_memlimit <megabytes>` (at least 8, at most 10^9: checked by the codec).
    MemLimit {
        megabytes: u32,
        noreply: bool,
    },
    /// `extstore <knob> <value>`: change a runtime knob of the store (memcached 1.6's
    /// extstore command; extra tokens are ignored, as memcached does).
    Extstore {
        name: String,
        value: String,
        noreply: bool,
    },
    Quit,
    Shutdown(ShutdownArg),
    LruCrawler(LruCrawler),
    Stats(StatsArg),
    MetaGet(Meta),
    /// `ms`: the mode (already mapped, incl. the CAS upgrade) and the data block.
    MetaSet {
        meta: Meta,
        mode: StoreMode,
        value: Bytes,
    },
    MetaDelete(Meta),
    MetaArith {
        meta: Meta,
        incr: bool,
    },
    MetaNoop,
    MetaDebug {
        key: Bytes,
        binary: bool,
    },
    /// The value is larger than the store accepts: reply `SERVER_ERROR object too large for
    /// cache` (unless `noreply`); with `drop_existing` (text `set`, every `ms`) also remove
    /// the existing item, as memcached does so stale data does not outlive a failed set.
    /// The codec has already arranged for the data block to be swallowed.
    TooLarge {
        key: Bytes,
        noreply: bool,
        drop_existing: bool,
    },
    /// A reply decided while parsing (an error line). `noreply` suppresses it where
    /// memcached would (text commands parse `noreply` before validating).
    Reply {
        line: &'static str,
        noreply: bool,
    },
}
