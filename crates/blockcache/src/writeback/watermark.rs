//! The clean watermark W: every version at or below it is on the backing or superseded.
//! Persisted as a tiny record followed by a flash flush, and only then may reclaim evict
//! blocks at or below it (the reclaim handler reads the persisted value). When flash is full
//! the record goes to the reclaim stream, which may use the reserved segments; a lost
//! watermark record is written again on the next call even if W did not move.
use std::sync::atomic::Ordering;

use flashtier_flash::Location;

use crate::block_io::BlockIo;
use crate::cache::STREAM_META;
use crate::record::BlockRecord;
use crate::stats::add;

/// Persist the clean watermark if it moved: a record, then a flash flush; only then may
/// reclaim evict blocks at or below it.
pub(crate) async fn persist_watermark(io: &BlockIo) {
    let w = {
        let mut index = io.shared.index.lock();
        let w = index.clean_watermark();
        let rewrite = io.shared.wm_lost.swap(false, Ordering::AcqRel);
        if w <= io.shared.wm_persisted.load(Ordering::Acquire) && !rewrite {
            return;
        }
        let rec = BlockRecord::Watermark { version: w }.write();
        // When flash is full of records newer than the persisted watermark, only a new
        // watermark lets reclaim evict them: write it into the reclaim stream, which may
        // use the reserved segments (a 64-byte record per batch at most).
        let r = match io.flash.append(STREAM_META, &rec) {
            Err(flashtier_flash::Error::NoSpace | flashtier_flash::Error::Busy(_)) => {
                io.flash.append(io.shared.reclaim_stream, &rec)
            }
            other => other,
        };
        match r {
            Ok(loc) => {
                if let Some(old) = index.wm_loc.replace(loc.pack()) {
                    io.flash.mark_dead(Location::unpack(old));
                }
            }
            Err(_) => {
                if rewrite {
                    io.shared.wm_lost.store(true, Ordering::Release);
                }
                return;
            }
        }
        w
    };
    if io.flash.flush().await.is_ok() {
        io.shared.wm_persisted.fetch_max(w, Ordering::AcqRel);
        add(&io.shared.stats.watermark_writes, 1);
    }
}
