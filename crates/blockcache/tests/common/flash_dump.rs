//! What a flash image holds about one key: every segment's header and, for the segments
//! that name the key, its summary entries (with whether the bytes at each entry's offset
//! decode as that record) and the records a scan of the segment finds. A crash test prints
//! this when a block reads wrong, so the cause (a summary naming bytes that are not there,
//! a stale generation, ...) is visible in the failing output instead of guessed at.
use std::fmt::Write;

use flashtier_flash::format::record::{self, DecodeError};
use flashtier_flash::format::segment::{
    decode_summary, Footer, SegmentHeader, FOOTER_LEN, SEGMENT_HEADER_LEN,
};
use flashtier_flash::format::segment_seed;
use flashtier_flash::format::superblock::{Superblock, SUPERBLOCK_AREA};

const PAGE: usize = 4096;

/// Records naming `key` in `image` (a one-device set), one line each, as text.
pub fn records_naming(image: &[u8], key: u64) -> String {
    let mut out = String::new();
    let sb = match Superblock::decode(image) {
        Ok(sb) => sb,
        Err(e) => return format!("no superblock: {e:?}"),
    };
    let seg_size = sb.segment_size as usize;
    let _ = writeln!(out, "segment size {seg_size}, {} segments", sb.segments);
    for seg in 0..sb.segments as usize {
        let base = SUPERBLOCK_AREA as usize + seg * seg_size;
        let Some(area) = image.get(base..base + seg_size) else {
            break;
        };
        let Some(h) = SegmentHeader::decode(area).filter(|h| h.uuid == sb.uuid) else {
            continue;
        };
        let seed = segment_seed(&sb.uuid, h.seq);
        let footer = Footer::decode(&area[seg_size - FOOTER_LEN..], seed)
            .filter(|f| f.seq == h.seq && (f.summary_offset as usize) < seg_size);
        let summary = footer.and_then(|f| {
            decode_summary(&area[f.summary_offset as usize..], &f, seed).map(|e| (f, e))
        });
        let scanned = scan(area, seed);
        let mut lines = String::new();
        if let Some((f, entries)) = &summary {
            for e in entries.iter().filter(|e| e.key_id == key) {
                let at = match record::decode(&area[e.offset as usize..], seed) {
                    Ok(r) if r.key_id == key && r.version == e.version => "record there".into(),
                    Ok(r) => format!("another record there (key {} v{})", r.key_id, r.version),
                    Err(err) => format!("NOT THERE ({err:?})"),
                };
                let _ = writeln!(
                    lines,
                    "    summary: kind {} v{} flags {:#x} at {:#x} (data_end {:#x}): {at}",
                    e.kind,
                    e.version,
                    e.flags,
                    seg * seg_size + e.offset as usize,
                    f.data_end
                );
            }
        }
        for r in scanned.iter().filter(|r| r.key == key) {
            let _ = writeln!(
                lines,
                "    scan: kind {} v{} flags {:#x} at {:#x}",
                r.kind,
                r.version,
                r.flags,
                seg * seg_size + r.off
            );
        }
        if !lines.is_empty() {
            let _ = writeln!(
                out,
                "  segment {seg}: seq {} stream {} footer {} summary {} scan {} records \
                 (scan end {:#x})",
                h.seq,
                h.stream,
                footer.is_some(),
                summary.as_ref().map_or(0, |s| s.1.len()),
                scanned.len(),
                scanned.last().map_or(0, |r| r.end)
            );
            out.push_str(&lines);
        }
    }
    out
}

/// A record a scan verified.
struct Scanned {
    key: u64,
    kind: u8,
    off: usize,
    version: u64,
    flags: u32,
    end: usize,
}

/// Records a scan from the segment start verifies (block records and the cache's metadata
/// records alike: `kind` tells them apart).
fn scan(area: &[u8], seed: u32) -> Vec<Scanned> {
    let mut found = Vec::new();
    let mut off = SEGMENT_HEADER_LEN;
    while let Some(rest) = area.get(off..).filter(|r| !r.is_empty()) {
        match record::decode(rest, seed) {
            Ok(h) => {
                let end = off + h.padded_len();
                found.push(Scanned {
                    key: h.key_id,
                    kind: h.kind,
                    off,
                    version: h.version,
                    flags: h.flags,
                    end,
                });
                off = end;
            }
            Err(DecodeError::Padding) if !off.is_multiple_of(PAGE) => {
                off = off.div_ceil(PAGE) * PAGE
            }
            Err(_) => break,
        }
    }
    found
}
