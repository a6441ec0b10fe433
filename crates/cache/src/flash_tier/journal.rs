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

use flashtier_flash::{RecordWrite, Ticket};

use crate::flash_tier::{flash_err, FlashTier};
use crate::meta::Counters;
use crate::Error;

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

/// Take (and clear) what this thread's operation owes. Call it right after phase 2, before
/// any await; [`FlashTier::settle`] it before replying.
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

impl FlashTier {
    /// Commit header-only record `w` — just appended to the log (`covered`), or refused by
    /// it (the engine appends it again) — to the crash journal, noting what the operation
    /// owes. Without a journal, does nothing.
    pub(crate) fn journal_commit(&self, w: &RecordWrite<'_>, covered: bool) {
        let Some(j) = self.flash.journal() else {
            return;
        };
        match j.commit(flashtier_flash::journal::entry_of(w), covered) {
            Ok(Some(t)) => owe(|o| o.ticket = Some(t)),
            Ok(None) => {}
            Err(e) => {
                Counters::add(&self.counters.journal_errors, 1);
                log::warn!("flash journal: entry not written ({e}); flushing the log instead");
                owe(|o| o.flush = true);
            }
        }
    }

    /// True when a header-only record that could not go to the log still holds: the
    /// journal took it and appends it to the log again.
    pub(crate) fn journaled(&self) -> bool {
        self.flash.journal().is_some()
    }

    /// Await what `owed` names: the sync of its journal entry, or a flush of the log.
    pub(crate) async fn settle(&self, owed: Owed) -> Result<(), Error> {
        if let (Some(t), Some(j)) = (owed.ticket, self.flash.journal()) {
            j.synced(t).await;
        }
        if owed.flush {
            self.flash.flush().await.map_err(|e| {
                Counters::add(&self.counters.errors, 1);
                flash_err(&e)
            })?;
        }
        Ok(())
    }
}
