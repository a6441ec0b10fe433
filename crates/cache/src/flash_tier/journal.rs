//! What the key-value face journals, and how an operation waits for it before its reply.
//!
//! Rule (docs/eviction.md, "The crash rule"): after a crash, a key whose last acknowledged
//! write may not be on flash is a miss, never an older version. Every write that supersedes
//! a version with a flash copy — a delete, an overwrite (SET, append, incr, touch, cas …
//! whose new version waits in RAM for write-back), a `flush_all` — appends a header-only
//! record (a tombstone with a fresh version, a flush marker) and commits it to the engine's
//! crash journal (`flashtier_flash::journal`) in the same call. An operation then *settles*
//! before it returns: in `journal_mode=sync` it awaits the group sync of its entry; if the
//! journal could not take the entry it awaits a flush of the log instead (the record itself
//! is then durable), or fails. A write whose new value is lost in a crash is therefore a
//! miss (the tombstone hides the old value), never the old value.
//!
//! What an operation owes is kept in a thread-local between its phase 2 (synchronous, where
//! the append and commit happen) and its settle (right after, with no await in between), so
//! no lock or signature carries it.
//!
//! # Threads
//! The thread running the operation; the journal's own locks are leaves.
use std::cell::Cell;

use flashtier_flash::journal::Journal;
use flashtier_flash::{Flash, RecordWrite, Ticket};

/// What the operation running on this thread must await before it replies.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Owed {
    /// The newest journal entry committed whose sync is awaited (sync mode).
    ticket: Option<Ticket>,
    /// An entry the journal could not take: flush the log instead.
    flush: bool,
}

thread_local! {
    static OWED: Cell<Owed> = const { Cell::new(Owed { ticket: None, flush: false }) };
}

/// Take (and clear) what this thread's operation owes. Call it right before phase 2 (to drop
/// what an earlier operation left) and right after it, before any await; settle it
/// (`FlashTier::settle`) before replying.
pub(crate) fn take_owed() -> Owed {
    OWED.with(Cell::take)
}

fn owe(f: impl FnOnce(&mut Owed)) {
    OWED.with(|c| {
        let mut o = c.get();
        f(&mut o);
        c.set(o);
    });
}

/// Commit header-only record `w` — just appended to the log (`covered`), or refused by it
/// (the engine appends it again) — to `journal`, noting what the operation owes. False (the
/// operation will flush the log instead) when the journal could not take it.
pub(crate) fn commit(journal: &Journal, w: &RecordWrite<'_>, covered: bool) -> bool {
    match journal.commit(flashtier_flash::journal::entry_of(w), covered) {
        Ok(Some(t)) => owe(|o| o.ticket = Some(t)),
        Ok(None) => {}
        Err(e) => {
            log::warn!("flash journal: entry not written ({e}); flushing the log instead");
            owe(|o| o.flush = true);
            return false;
        }
    }
    true
}

/// Await what `owed` names: the sync of its journal entry, or a flush of the log.
pub(crate) async fn settle(flash: &Flash, owed: Owed) -> Result<(), flashtier_flash::Error> {
    if let (Some(t), Some(j)) = (owed.ticket, flash.journal()) {
        j.synced(t).await;
    }
    if owed.flush {
        flash.flush().await?;
    }
    Ok(())
}
