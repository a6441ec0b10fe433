//! The clean watermark W: every version at or below it is on the backing or superseded.
//! Persisted as a tiny record followed by a flash flush, and only then may reclaim evict
//! blocks at or below it (the reclaim handler reads the persisted value). When flash is full
//! the record goes to the reclaim stream, which may use the reserved segments; a lost
//! watermark record is written again on the next call even if W did not move.
use flashtier_flash::Location;

use crate::block_io::BlockIo;
use crate::durability::Durability;
use crate::meta_log::STREAM_META;
use crate::record::BlockRecord;
use crate::stats::add;

/// Persist the clean watermark if it moved: a record, then a flash flush; only then may
/// reclaim evict blocks at or below it.
pub(crate) async fn persist_watermark(io: &BlockIo, d: &Durability) {
    let w = io.blocks.locked(|index| {
        let w = index.clean_watermark();
        let rewrite = d.take_wm_lost();
        if w <= d.wm_persisted() && !rewrite {
            return None;
        }
        let rec = BlockRecord::Watermark { version: w }.write();
        // When flash is full of records newer than the persisted watermark, only a new
        // watermark lets reclaim evict them: write it into the reclaim stream, which may
        // use the reserved segments (a 64-byte record per batch at most).
        let r = match io.flash.append(STREAM_META, &rec) {
            Err(flashtier_flash::Error::NoSpace | flashtier_flash::Error::Busy(_)) => {
                io.flash.append(d.reclaim_stream(), &rec)
            }
            other => other,
        };
        match r {
            Ok(loc) => {
                if let Some(old) = index.set_wm_loc(Some(loc.pack())) {
                    io.flash.mark_dead(Location::unpack(old));
                }
            }
            Err(_) => {
                if rewrite {
                    d.set_wm_lost();
                }
                return None;
            }
        }
        Some(w)
    });
    let Some(w) = w else {
        return;
    };
    if io.flash.flush().await.is_ok() {
        d.persisted(w);
        add(&io.stats.watermark_writes, 1);
    }
}
