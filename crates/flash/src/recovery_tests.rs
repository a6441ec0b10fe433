//! Unit tests of `recovery`.
use super::*;
use crate::format::record::{encode, RecordHeader};
use crate::format::superblock::Superblock;
use proptest::prelude::*;

proptest! {
    /// Recovery parsers read untrusted bytes: arbitrary input never panics, and whatever
    /// a scan accepts lies inside the image.
    #[test]
    fn parsers_never_panic_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..9000),
                                      seed in any::<u32>()) {
        let (entries, end, _) = scan(&bytes, seed);
        prop_assert!(end as usize <= bytes.len().div_ceil(4096) * 4096);
        for e in entries {
            prop_assert!((e.offset + e.len) as usize <= bytes.len());
        }
        let _ = SegmentHeader::decode(&bytes);
        let _ = Superblock::decode(&bytes);
        if let Some(f) = Footer::decode(&bytes, seed) {
            let _ = decode_summary(&bytes, &f, seed);
        }
        let _ = record::decode_record(&bytes, seed);
        let _ = record::peek_len(&bytes);
    }

    /// A scan finds exactly the records written, in order, whatever their sizes, with
    /// page padding between early-flushed chunks.
    #[test]
    fn scan_finds_what_was_written(lens in proptest::collection::vec((0usize..3000, any::<bool>()), 1..40)) {
        let seed = 99;
        let mut img = vec![0u8; 256 << 10];
        let mut off = SEGMENT_HEADER_LEN;
        let mut want = Vec::new();
        for (i, (len, pad_after)) in lens.iter().enumerate() {
            let v = vec![i as u8; *len];
            let h = RecordHeader { kind: 1, key_len: 0, value_len: *len as u32, key_id: i as u64, ..Default::default() };
            if off + h.padded_len() > img.len() {
                break;
            }
            let n = encode(&mut img[off..], &h, b"", &v, seed).unwrap();
            want.push((i as u64, off as u32));
            off += n;
            if *pad_after {
                off = off.div_ceil(4096) * 4096;
            }
        }
        let (entries, _, damaged) = scan(&img, seed);
        prop_assert!(!damaged);
        let got: Vec<_> = entries.iter().map(|e| (e.key_id, e.offset)).collect();
        prop_assert_eq!(got, want);
    }
}
