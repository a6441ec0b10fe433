//! The open-time scan of the on-flash log (`klog`) after a kill: which log pages are the
//! current run's, in order, and which are missing.
//!
//! The superblock records the log's window `[tail, head)` (`superblock`): every page in it was
//! written whole before `head` was recorded, and none of its slots was reused since (a slot is
//! reused only for a sequence number at or past `head`, after the tail passed the old one).
//! So each sequence number `s` of the window has exactly one place, slot `s % pages`, and the
//! page there is current only if it says so: its checksum holds, it is a log page of this
//! format and generation, and its own 64-bit sequence number is `s`. Anything else there —
//! zeros, a page of an earlier lap (same slot, smaller number), one of a later append the kill
//! cut short (a number at or past `head`), another generation, a torn or unreadable page — is
//! *lost*: the scan cannot know which sets it held objects of.
//!
//! What a lost page means (`recover` applies it): its objects may have included a delete or a
//! newer version, so no set that may have had an object on it can trust its older copies.
//! Only a set whose page's watermark (`format`) is past the lost page's number is known to
//! hold everything the lost page had for it; every other set is emptied, and its log objects
//! are not replayed. Pages after a lost one are still replayed for the sets kept: the lost
//! page is older than them, so they shadow it, never the other way round.
//!
//! # Threads
//! The opening thread, before the tier is shared.
use bytes::Bytes;

use crate::format::{self, Page, LOG_DELETE};

/// One object of a replayed log page, as the index needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Obj {
    /// The key's set.
    pub set: u32,
    /// The key's hash.
    pub hash: u64,
    /// A tombstone.
    pub delete: bool,
}

/// A current log page of the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub seq: u64,
    pub slot: u32,
    /// Its objects in page order (position = index).
    pub objs: Vec<Obj>,
}

/// What the scan of a window found, in sequence order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    /// The window's current pages, oldest first.
    pub pages: Vec<Found>,
    /// Sequence numbers of the window whose page is lost.
    pub lost: Vec<u64>,
}

impl Scan {
    /// Take the page read for sequence number `seq` (`None`: unreadable); call in sequence
    /// order over the window.
    pub(crate) fn add(
        &mut self,
        seq: u64,
        slot: u32,
        page: Option<&Bytes>,
        generation: u64,
        set_of: impl Fn(u64) -> u32,
    ) {
        let entries = match page.map(|p| format::decode_log(p, seq, generation)) {
            Some(Page::Valid(es)) => es,
            _ => {
                self.lost.push(seq);
                return;
            }
        };
        let objs = entries
            .iter()
            .map(|e| {
                let hash = crate::inner::key_hash(&e.key);
                Obj {
                    set: set_of(hash),
                    hash,
                    delete: e.rrip == LOG_DELETE,
                }
            })
            .collect();
        self.pages.push(Found { seq, slot, objs });
    }

    /// The newest lost page: every set whose watermark is not past it is emptied.
    pub(crate) fn newest_lost(&self) -> Option<u64> {
        self.lost.last().copied()
    }

    /// Objects on the current pages.
    #[cfg(test)]
    pub(crate) fn objects(&self) -> u64 {
        self.pages.iter().map(|p| p.objs.len() as u64).sum()
    }
}

/// Scan the window `[tail, head)` of a log of `slots` pages, `page_at(slot)` giving a slot's
/// page as read (`None`: unreadable).
#[cfg(test)]
pub(crate) fn scan(
    tail: u64,
    head: u64,
    slots: u32,
    generation: u64,
    mut page_at: impl FnMut(u32) -> Option<Bytes>,
    set_of: impl Fn(u64) -> u32 + Copy,
) -> Scan {
    let mut s = Scan::default();
    for seq in tail..head {
        let slot = (seq % u64::from(slots)) as u32;
        let page = page_at(slot);
        s.add(seq, slot, page.as_ref(), generation, set_of);
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::format::{Entry, ItemMeta, LOG_PUT, SET_BYTES};

    const GEN: u64 = 77;

    fn page(seq: u64, gen: u64, keys: &[&[u8]], delete: bool) -> Bytes {
        let es: Vec<Entry> = keys
            .iter()
            .map(|k| Entry {
                key: Bytes::copy_from_slice(k),
                value: if delete {
                    Bytes::new()
                } else {
                    Bytes::from_static(b"value")
                },
                meta: ItemMeta::default(),
                rrip: if delete { LOG_DELETE } else { LOG_PUT },
            })
            .collect();
        let mut p = vec![0u8; SET_BYTES];
        format::encode_log(&mut p, seq, gen, &es).unwrap();
        Bytes::from(p)
    }

    fn set_of(h: u64) -> u32 {
        (h % 16) as u32
    }

    fn seqs(s: &Scan) -> Vec<u64> {
        s.pages.iter().map(|p| p.seq).collect()
    }

    #[test]
    fn an_all_empty_log_and_an_empty_window() {
        let ring = vec![Bytes::from(vec![0u8; SET_BYTES]); 8];
        let s = scan(5, 5, 8, GEN, |i| Some(ring[i as usize].clone()), set_of);
        assert_eq!(s, Scan::default(), "an empty window reads nothing");
        // A window over zero pages: every page lost (the record says they were written).
        let s = scan(0, 3, 8, GEN, |i| Some(ring[i as usize].clone()), set_of);
        assert!(s.pages.is_empty());
        assert_eq!(s.lost, vec![0, 1, 2]);
        assert_eq!(s.newest_lost(), Some(2));
    }

    /// The window wraps the ring: pages come back in sequence order, not slot order, and
    /// the objects keep their page positions.
    #[test]
    fn wrap_around_reads_in_sequence_order() {
        let mut ring = vec![Bytes::from(vec![0u8; SET_BYTES]); 4];
        for seq in 0..11u64 {
            let key = format!("k{seq}");
            ring[(seq % 4) as usize] = page(seq, GEN, &[key.as_bytes(), b"x"], seq == 10);
        }
        let s = scan(7, 11, 4, GEN, |i| Some(ring[i as usize].clone()), set_of);
        assert_eq!(seqs(&s), vec![7, 8, 9, 10]);
        assert_eq!(s.pages[0].slot, 3);
        assert_eq!(s.pages[1].slot, 0);
        assert!(s.lost.is_empty());
        assert_eq!(s.objects(), 8);
        let first = &s.pages[3].objs[0];
        assert!(first.delete);
        assert_eq!(first.hash, crate::inner::key_hash(b"k10"));
        assert_eq!(first.set, set_of(first.hash));
        assert!(!s.pages[0].objs[1].delete);
    }

    /// A slot still holding an earlier lap's page (its rewrite was cut short), another
    /// generation's page, or a page of a later append than the window are lost, not read as
    /// this lap's.
    #[test]
    fn a_stale_page_from_an_earlier_lap_is_lost() {
        let mut ring: Vec<Bytes> = (0..4u64)
            .map(|s| page(s + 4, GEN, &[b"a"], false))
            .collect();
        ring[2] = page(2, GEN, &[b"old"], false); // seq 6's slot kept lap 0's page
        let s = scan(4, 8, 4, GEN, |i| Some(ring[i as usize].clone()), set_of);
        assert_eq!(seqs(&s), vec![4, 5, 7]);
        assert_eq!(s.lost, vec![6]);
        ring[2] = page(6, GEN + 2, &[b"a"], false);
        let s = scan(4, 8, 4, GEN, |i| Some(ring[i as usize].clone()), set_of);
        assert_eq!(s.lost, vec![6], "another generation");
        ring[2] = page(10, GEN, &[b"a"], false);
        let s = scan(4, 8, 4, GEN, |i| Some(ring[i as usize].clone()), set_of);
        assert_eq!(s.lost, vec![6], "a later lap the kill cut short");
    }

    /// A torn or unreadable page in the middle is lost; the pages after it are still read
    /// (`recover` empties every set not known to hold what the lost page had).
    #[test]
    fn a_torn_page_in_the_middle_is_lost_and_the_rest_is_read() {
        let mut ring: Vec<Bytes> = (0..8u64).map(|s| page(s, GEN, &[b"a"], false)).collect();
        let mut torn = ring[3].to_vec();
        torn[36..].fill(0x77);
        ring[3] = Bytes::from(torn);
        let s = scan(
            1,
            8,
            8,
            GEN,
            |i| (i != 5).then(|| ring[i as usize].clone()),
            set_of,
        );
        assert_eq!(seqs(&s), vec![1, 2, 4, 6, 7]);
        assert_eq!(s.lost, vec![3, 5]);
        assert_eq!(s.newest_lost(), Some(5));
    }
}
