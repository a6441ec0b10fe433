//! Fuzz the on-flash format decoders (record, segment header, footer, summary, superblock):
//! arbitrary bytes must decode to an error or to a value, never panic.
#![no_main]

use flashtier_flash::format::{record, segment, superblock};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let seed = data
        .get(..4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]));
    let _ = record::decode(data, seed);
    let _ = record::decode_record(data, seed);
    let _ = segment::SegmentHeader::decode(data);
    if let Some(footer) = segment::Footer::decode(data, seed) {
        let _ = segment::decode_summary(data, &footer, seed);
    }
    let _ = superblock::Superblock::decode(data);
});
