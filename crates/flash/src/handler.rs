//! What the engine and its user say to each other about records: a record to append
//! ([`RecordWrite`]), what recovery and reclaim report of one ([`RecordMeta`]), the user's
//! verdict in reclaim ([`Decision`]) and the callbacks ([`ReclaimHandler`]). The engine
//! knows keys only as `key_id`s and versions; what they mean is the user's.
use crate::format::record::Record;
use crate::location::Location;

/// A stream id (0..`FlashConfig::streams`).
pub type StreamId = u8;

/// A record to append. The engine stores the fields as given (plus the append time).
#[derive(Clone, Copy, Debug)]
pub struct RecordWrite<'a> {
    /// Non-zero kind ([`crate::kind::PUT`], [`crate::kind::TOMBSTONE`], or a user kind >= 3).
    pub kind: u8,
    /// User key id (key hash for the kv face, LBA for the block face).
    pub key_id: u64,
    /// User version (CAS, write sequence).
    pub version: u64,
    /// User flags.
    pub flags: u32,
    /// Absolute unix seconds; 0 = never expires.
    pub exptime: u32,
    /// Key bytes (<= 65535), may be empty.
    pub key: &'a [u8],
    /// Value bytes.
    pub value: &'a [u8],
}

/// The rest of a record's value after [`RecordWrite::value`], written by `fill` straight
/// into the stream's write chunk under the engine's lock ([`crate::Flash::append_with`]):
/// a caller whose value is not a byte slice (the cache's RAM arena words) copies it once,
/// into its place on flash, with no buffer of its own. `fill` is given exactly `len` bytes
/// and must write every one (the chunk buffer is reused: a byte left alone keeps older data,
/// which the checksum then covers). It runs under the engine's state lock, so it must take
/// no lock of the engine and nothing that waits.
#[derive(Clone, Copy)]
pub struct ValueFill<'a> {
    /// Bytes `fill` writes.
    pub len: usize,
    /// Writes the bytes into the slice it is given (`len` long).
    pub fill: &'a dyn Fn(&mut [u8]),
}

impl std::fmt::Debug for ValueFill<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueFill").field("len", &self.len).finish()
    }
}

/// What recovery and reclaim tell the user about a record, without its key or value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordMeta {
    /// Where it is.
    pub location: Location,
    /// User key id.
    pub key_id: u64,
    /// User version.
    pub version: u64,
    /// Record kind.
    pub kind: u8,
    /// Absolute unix seconds, 0 = never.
    pub exptime: u32,
    /// User flags.
    pub flags: u32,
    /// Unpadded record length in bytes (header + key + value).
    pub len: u32,
    /// Sequence number of the segment holding it (recovery yields records in seq order).
    pub seq: u64,
}

/// The user's verdict on a record in a segment being reclaimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Rewrite it into the reclaim stream, then call [`ReclaimHandler::relocated`].
    Keep,
    /// Keep it only if the victim's keep limit has room left once every `Keep` of the victim
    /// is counted (else evicted, as a `Keep` over the limit is): what the user would keep
    /// only because flash has room or budget for it, so that the limit never drops a record
    /// it wants more (a read one, a small one) to keep one it wants less.
    KeepIfRoom,
    /// Forget it. The user has already removed any index entry pointing at it.
    Drop,
    /// Forget it, but the user had it indexed (an eviction): the engine appends a *drop
    /// note* — a [`crate::kind::TOMBSTONE`] record with its key id and version, flags = the
    /// newest segment seq so far (the note's *horizon*), empty key and value — into the
    /// reclaim stream and makes it durable before the victim is erased, so recovery never
    /// brings back an older version of the key from another segment. The user has already
    /// removed the index entry.
    Forget,
}

/// The engine's callbacks to its user about records it holds: the reclaimer's questions
/// (`decide`, `relocated`, `evicted`, on the reclaimer thread) and records lost to a failed
/// write (`lost`, on the flusher thread). Called with no engine lock held; the handler may
/// call the engine.
pub trait ReclaimHandler: Send + Sync + 'static {
    /// Decide for a record of the victim (also an expired one: the user may still index it
    /// and answer `Forget`; `Keep` for an expired record is treated as an eviction).
    fn decide(&self, rec: &RecordMeta) -> Decision;
    /// A kept record now also lives at `new`. Swap the index entry only if it still points at
    /// `rec.location`, and return whether it did; `false` makes the engine count the new
    /// copy dead.
    fn relocated(&self, rec: &RecordMeta, new: Location) -> bool;
    /// The record is gone (expired, or the engine could not keep it: keep limit, no space,
    /// unreadable). Remove the index entry if it still points at `rec.location`.
    fn evicted(&self, rec: &RecordMeta);
    /// Whether PUT records the engine drops after `decide` said `Keep` (keep limit,
    /// unreadable, expired, a failed copy) get a drop note, as [`Decision::Forget`] does.
    /// Default: no.
    fn notes_on_eviction(&self) -> bool {
        false
    }
    /// Records whose write to flash failed for good (after retries): they were readable from
    /// the write buffer since `append` returned, and their locations no longer hold them (a
    /// read fails, never returns other data). Each comes with its content, decoded from the
    /// buffer, so the user may append it again. Remove or repoint index entries that still
    /// point at `location`; do not `mark_dead` these locations (the engine counted them).
    /// Called once per failed write, in write order, before the device's next write is
    /// reported as failed.
    fn lost(&self, recs: &[LostRecord]);
    /// A reclaimed segment is about to be erased (its header zeroed, after the copies of its
    /// kept records were made durable): the user's last chance to make durable what must
    /// outlive the dropped records. An error leaves the segment sealed (nothing erased).
    fn before_erase(&self) -> std::result::Result<(), String> {
        Ok(())
    }
    /// Reclaim freed `n` segments (0: a batch that partly failed freed an unknown number):
    /// an append refused with `NoSpace` may now succeed. Called on the reclaiming thread
    /// with no engine lock held; it must not block.
    fn segments_freed(&self, _n: u32) {}
}

/// A record whose write failed (see [`ReclaimHandler::lost`]).
#[derive(Clone, Debug)]
pub struct LostRecord {
    /// Where it was appended.
    pub meta: RecordMeta,
    /// Its content, from the write buffer (`None` only if the buffer did not decode, which
    /// would be an engine bug).
    pub record: Option<Record>,
}

/// A handler that drops everything (tests, or a user with no index).
pub struct DropAll;

impl ReclaimHandler for DropAll {
    fn decide(&self, _: &RecordMeta) -> Decision {
        Decision::Drop
    }
    fn relocated(&self, _: &RecordMeta, _: Location) -> bool {
        false
    }
    fn evicted(&self, _: &RecordMeta) {}
    fn lost(&self, _: &[LostRecord]) {}
}
