//! The flash tier alone, for its unit tests: a [`FlashTier`] on a 4 MiB memory device (opened
//! by `recovery::open`, psync, no background reclaim, a handler that drops everything — the
//! tests call the policy by hand), and [`FakeRam`], a [`RamAccess`] with an index, a `Meta`
//! and a RAM tier of its own that records the copies the flash tier asks of it and answers
//! them as told. No core.
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;
use flashtier_flash::{kind, FlashConfig, IoBackend, Location, MemoryDevice, RecordMeta};
use parking_lot::Mutex;

use crate::clock::Clock;
use crate::config::{CacheConfig, FlashSettings};
use crate::flash_tier::kv_record::{FlashItem, KvRecord, Put, PutValue};
use crate::flash_tier::read::View;
use crate::flash_tier::tier::FlashTier;
use crate::flash_tier::{entry_of, recovery, CopyAt, RamAccess, STREAM};
use crate::meta::Meta;
use crate::ram::arena::{Log, RecordRef};
use crate::ram::index::{Entry, Index, Pos, Shard};
use crate::ram::lower::{CopyUp, NoLower};
use crate::ram::record::{self, Header};
use crate::ram::tier::{new_header, Env, RamTier};
use crate::ItemWrite;

/// A copy the flash tier asked RAM for.
#[derive(Clone, Debug)]
pub(crate) struct Copied {
    /// At once under the lock (`CopyAt::Now`), else later: the key's hash and the flash slot.
    pub later: Option<(u64, u64)>,
    pub key: Vec<u8>,
    pub header: Header,
    pub value: Vec<u8>,
}

/// See the module docs.
pub(crate) struct FakeRam {
    pub slots: Index,
    pub meta: Meta,
    pub ram: RamTier,
    pub copies: Mutex<Vec<Copied>>,
    /// What `copy_up` answers.
    pub answer: Mutex<CopyUp>,
    /// What `copy_fits` answers.
    pub fits: AtomicBool,
}

impl RamAccess for FakeRam {
    fn slots(&self) -> &Index {
        &self.slots
    }

    fn meta(&self) -> &Meta {
        &self.meta
    }

    fn record(&self, loc: u64) -> Option<RecordRef<'_>> {
        self.ram.record(loc)
    }

    fn find_key(&self, shard: &Shard<'_>, hash: u64, key: &[u8]) -> Option<(Pos, Entry)> {
        self.ram.find_key(shard, hash, key)
    }

    fn copy_fits(&self, _words: usize) -> bool {
        self.fits.load(Relaxed)
    }

    fn copy_up(&self, at: CopyAt<'_, '_>, key: &[u8], h: &Header, value: &[u8]) -> CopyUp {
        let later = match at {
            CopyAt::Now(..) => None,
            CopyAt::Later { hash, loc } => Some((hash, loc)),
        };
        self.copies.lock().push(Copied {
            later,
            key: key.to_vec(),
            header: *h,
            value: value.to_vec(),
        });
        *self.answer.lock()
    }
}

impl FakeRam {
    /// A RAM version of `key` (hash `hash`) with home word `home`, published in the index
    /// through the RAM tier's write path; its location.
    pub fn put_ram(&self, hash: u64, key: &[u8], value: &[u8], home: u64) -> u64 {
        let env = Env {
            slots: &self.slots,
            meta: &self.meta,
            lower: &NoLower,
        };
        let words = record::rec_words(key.len(), value.len());
        let space = self
            .ram
            .reserve(
                &env,
                Log::Small,
                words,
                crate::ram::evict::OnLater::KeepOrDrop,
            )
            .unwrap();
        let w = ItemWrite::new(Bytes::copy_from_slice(value), 0, 0);
        let mut h = new_header(&w, key.len(), self.meta.now(), 1);
        h.home = home;
        assert!(self.ram.write_record(&space, &h, key, value));
        let mut shard = self.slots.lock(hash);
        self.ram.publish(&env, &mut shard, hash, None, &space, &h);
        let loc = self.ram.find_key(&shard, hash, key).unwrap().1.loc;
        drop(shard);
        self.ram.finish(space);
        loc
    }

    /// The slot of `hash` whatever its tier (tests use one key per hash).
    pub fn slot(&self, hash: u64) -> Option<Entry> {
        self.slots.lock(hash).find(hash, |_| true).map(|(_, e)| e)
    }

    /// Phase 1 of a GET of `key` (hash `hash`) on `tier`.
    pub fn view(&self, tier: &FlashTier, key: &[u8], hash: u64) -> View {
        crate::block::block_on(tier.view(self, key, hash, true))
    }
}

/// The flash tier on a fresh memory device named `name`, settings changed by `tune`, and a
/// [`FakeRam`] whose index the tier was recovered into.
pub(crate) fn open(name: &str, tune: impl FnOnce(&mut FlashSettings)) -> (FlashTier, FakeRam) {
    let device = Arc::new(MemoryDevice::new(name, 4 << 20));
    let mut settings = FlashSettings::devices(vec![device]);
    settings.engine = Some(FlashConfig {
        io_backend: IoBackend::Psync,
        background_reclaim: false,
        ..FlashConfig::small()
    });
    tune(&mut settings);
    let clock = Clock::system();
    let handler = Arc::new(flashtier_flash::DropAll);
    let cfg = CacheConfig::builder()
        .memory_limit(4 << 16)
        .segment_size(1 << 16)
        .max_item_size(1 << 16)
        .index_shards(4)
        .clock(clock.clone())
        .build()
        .unwrap();
    let opened = recovery::open(&settings, &cfg, handler).unwrap();
    recovery::replay(&opened.tier, &opened.replay).unwrap();
    let ram = FakeRam {
        slots: opened.slots,
        meta: Meta::new(clock, 1024, opened.last_cas, None),
        ram: RamTier::new(&cfg),
        copies: Mutex::default(),
        answer: Mutex::new(CopyUp::Done),
        fits: AtomicBool::new(true),
    };
    (opened.tier, ram)
}

/// Append a PUT of `key` = `value` to `tier` and give it a flash slot with frequency `freq`
/// in `ram`'s index; its location and the engine's metadata of it (as reclaim sees it).
pub(crate) fn put_flash(
    tier: &FlashTier,
    ram: &FakeRam,
    key: &[u8],
    value: &[u8],
    freq: u8,
) -> (Location, RecordMeta) {
    let key_id = ram.slots.hash(key);
    let loc = append_put(tier, key_id, key, value);
    ram.slots.lock(key_id).insert(key_id, entry_of(loc, freq));
    (loc, meta_of(tier, key_id, loc, value.len()))
}

/// Append a PUT of `key` (hash `key_id`) to `tier` only; its location.
pub(crate) fn append_put(tier: &FlashTier, key_id: u64, key: &[u8], value: &[u8]) -> Location {
    let put = Put {
        key_id,
        key,
        value: PutValue::Bytes(value),
        flags: 0,
        exptime: 0,
        cas: 1,
        stored: 1,
        rflags: 0,
    };
    tier.append(STREAM, &KvRecord::Put(put)).unwrap()
}

/// The metadata reclaim would be given for the PUT just appended at `loc`.
pub(crate) fn meta_of(tier: &FlashTier, key_id: u64, loc: Location, vlen: usize) -> RecordMeta {
    RecordMeta {
        location: loc,
        key_id,
        version: tier.current_version(),
        kind: kind::PUT,
        exptime: 0,
        flags: 0,
        len: (vlen + 64) as u32,
        seq: 1,
    }
}

/// The item phase 1 reads for `key` (its flash slot must exist).
pub(crate) fn read_item(tier: &FlashTier, ram: &FakeRam, key: &[u8]) -> (u64, FlashItem) {
    let hash = ram.slots.hash(key);
    ram.view(tier, key, hash)
        .found
        .expect("the key is on flash")
}
