//! The block face's flash geometry and its capacity in blocks: how many block records the
//! engine's segments really hold, and which segment and chunk sizes waste least of a device.
//!
//! A block record is `padded_len(0, block_size)` bytes (4,144 for 4 KiB blocks: a 40-byte
//! header, 16-byte alignment) plus a 40-byte summary entry in its segment's tail; chunks are
//! written page-aligned, a segment starts with a 64-byte header and ends with its summary
//! pages, and the first 4 KiB of the device is the superblock. Reclaim keeps
//! `reserve_segments + free_high_watermark` segments free and one segment per stream may be
//! open, so those segments never count as capacity (the rule that lets reclaim always find
//! dead space, see `capacity_blocks`). Pure functions; called once at open.
use flashtier_flash::format::segment::{tail_len, SEGMENT_HEADER_LEN};
use flashtier_flash::format::superblock::SUPERBLOCK_AREA;
use flashtier_flash::location::PAGE;
use flashtier_flash::FlashConfig;

use crate::meta_log::{STREAM_DATA, STREAM_META};

/// Smallest segment the block face picks (64 KiB).
const MIN_SEGMENT_PAGES: u64 = 16;
/// Largest segment the block face picks (16 MiB, the engine's default).
const MAX_SEGMENT_PAGES: u64 = 4096;
/// Largest chunk (the engine's default): bigger ones only grow the write buffers.
const MAX_CHUNK: u64 = 1 << 20;

fn round_page(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

/// Records of `record` bytes (padded) one sealed segment of `segment` bytes holds when
/// written in chunks of `chunk` bytes, the way the engine's writer fills it: records never
/// cross a chunk, each chunk starts on a page, the summary (40 bytes a record) and footer
/// take the tail pages.
pub(crate) fn records_per_segment(segment: u64, chunk: u64, record: u64) -> u64 {
    let (mut chunk_start, mut fill, mut n) = (0u64, SEGMENT_HEADER_LEN as u64, 0u64);
    loop {
        let end = round_page(chunk_start + fill + record);
        let fits_seg = end + tail_len(n as usize + 1) <= segment;
        if !fits_seg {
            return n;
        }
        if fill + record <= chunk {
            // As many more as fit in this chunk and in the segment, then check again.
            let room = (chunk - fill) / record;
            let mut k = room.max(1);
            while k > 1
                && round_page(chunk_start + fill + k * record) + tail_len((n + k) as usize)
                    > segment
            {
                k -= 1;
            }
            fill += k * record;
            n += k;
        } else {
            chunk_start = round_page(chunk_start + fill);
            fill = 0;
            if record > chunk {
                return n;
            }
        }
    }
}

/// Segments a device set of `capacity` bytes holds at `segment` bytes each.
fn segments(capacity: u64, segment: u64) -> u64 {
    capacity.saturating_sub(SUPERBLOCK_AREA) / segment
}

/// Segments that never count as capacity: reclaim's reserve and free target, and one open
/// segment per stream the block face writes. The engine opens a stream's segment at its
/// first append, and the block face appends only to its data and meta streams and reclaim's
/// (`meta_log.rs`), so a configured stream it never writes (the default's fourth) holds no
/// open segment and costs no capacity.
pub(crate) fn kept_free(fc: &FlashConfig) -> u64 {
    let written: std::collections::BTreeSet<u8> = [STREAM_DATA, STREAM_META, fc.reclaim_stream]
        .into_iter()
        .filter(|s| *s < fc.streams)
        .collect();
    let open = written.len() as u64;
    u64::from(fc.reserve_segments) + u64::from(fc.free_high_watermark) + open
}

/// Blocks the cache may hold: records that fit in every segment but the kept-free ones.
pub(crate) fn capacity_blocks(segments: u64, per_segment: u64, kept_free: u64) -> u64 {
    segments.saturating_sub(kept_free) * per_segment
}

/// The chunk the block face pairs with a segment: one chunk fills the segment but its last
/// page (kept for the summary), at most 1 MiB.
fn chunk_for(segment: u64) -> u64 {
    (segment - PAGE).min(MAX_CHUNK)
}

/// Segment and chunk sizes for a block cache of `capacity` bytes and records of `record`
/// bytes: the sizes that give most blocks of capacity (`kept_free` segments excluded),
/// preferring the largest segment within 0.1 % of the best. `None` if no size fits.
pub(crate) fn choose(capacity: u64, record: u64, kept_free: u64) -> Option<(u64, u64)> {
    let mut cands = Vec::new();
    for pages in MIN_SEGMENT_PAGES..=MAX_SEGMENT_PAGES {
        let segment = pages * PAGE;
        let n = segments(capacity, segment);
        if n < kept_free + 2 {
            break;
        }
        let chunk = chunk_for(segment);
        let blocks = capacity_blocks(n, records_per_segment(segment, chunk, record), kept_free);
        cands.push((blocks, segment, chunk));
    }
    let best = cands.iter().map(|c| c.0).max().filter(|b| *b > 0)?;
    cands
        .into_iter()
        .filter(|c| c.0 * 1000 >= best * 999)
        .max_by_key(|c| c.1)
        .map(|c| (c.1, c.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    const REC_4K: u64 = 4144;

    #[test]
    fn records_per_segment_follows_the_writer() {
        // 512 KiB segments of 128 KiB chunks: 31 records a chunk (the first after the
        // segment header), the last chunk short of the two summary pages.
        assert_eq!(
            records_per_segment(512 << 10, 128 << 10, REC_4K),
            31 * 3 + 29
        );
        // 64 KiB chunks waste 5 % to page padding: 15 records each.
        assert_eq!(
            records_per_segment(256 << 10, 64 << 10, REC_4K),
            15 * 3 + 14
        );
        // One chunk per segment.
        assert_eq!(records_per_segment(45 * PAGE, 44 * PAGE, REC_4K), 43);
        assert_eq!(records_per_segment(1 << 20, 1 << 20, 2 << 20), 0);
    }

    #[test]
    fn chosen_geometry_uses_at_least_95_percent_from_512_mib() {
        let fc = FlashConfig::default();
        let kept = kept_free(&fc);
        for (cap, min_pct) in [(32u64 << 20, 90), (512 << 20, 96), (64 << 30, 97)] {
            let (seg, chunk) = choose(cap, REC_4K, kept).expect("a geometry");
            let blocks = capacity_blocks(
                segments(cap, seg),
                records_per_segment(seg, chunk, REC_4K),
                kept,
            );
            assert!(
                blocks * 100 >= (cap / 4096) * min_pct,
                "{cap}: {blocks} blocks"
            );
        }
    }

    /// What each kept-free segment costs, device by device: `capacity_blocks` (and % of the
    /// device's 4 KiB blocks) with the chosen geometry for 9 kept free (reserve 2, high
    /// watermark 3 and 4 streams, as counted before the twelfth sitting) down to 1. Prints
    /// the table docs/block-cache.md "Capacity" quotes (`--nocapture`); asserts fewer kept
    /// free never gives fewer blocks.
    #[test]
    fn capacity_by_kept_free() {
        for cap in [32u64 << 20, 64 << 20, 128 << 20, 512 << 20] {
            let mut last = 0;
            let mut row = format!("{:>4} MiB", cap >> 20);
            for kept in (1..=9u64).rev() {
                let (seg, chunk) = choose(cap, REC_4K, kept).expect("a geometry");
                let blocks = capacity_blocks(
                    segments(cap, seg),
                    records_per_segment(seg, chunk, REC_4K),
                    kept,
                );
                assert!(blocks >= last, "{cap}: kept {kept} gives fewer blocks");
                last = blocks;
                let pct = blocks as f64 * 100.0 / (cap / 4096) as f64;
                row += &format!(" | k{kept}: {blocks} {pct:.1}% ({}K)", seg >> 10);
            }
            eprintln!("{row}");
        }
    }
}
