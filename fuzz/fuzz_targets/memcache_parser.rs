//! Fuzz the memcached request decoder: arbitrary bytes, fed in arbitrary chunk sizes, must
//! never panic, never consume bytes while `Incomplete`, and never buffer past the limits.
#![no_main]

use bytes::BytesMut;
use flashtier_memcache::codec::{Decoded, Decoder, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, input)) = data.split_first() else {
        return;
    };
    let limits = Limits {
        max_item_size: 256,
        max_line: 128,
        max_get_line: 512,
        max_buffered_line: 1024,
    };
    let mut decoder = Decoder::new(limits);
    let mut buf = BytesMut::new();
    let mut swallow = 0usize;
    for piece in input.chunks(usize::from(chunk).max(1)) {
        buf.extend_from_slice(piece);
        loop {
            if swallow > 0 {
                let n = swallow.min(buf.len());
                let _ = buf.split_to(n);
                swallow -= n;
                if swallow > 0 {
                    break;
                }
            }
            let before = buf.len();
            match decoder.decode(&mut buf) {
                Decoded::Incomplete => {
                    assert_eq!(buf.len(), before);
                    assert!(buf.len() <= 512 + 256 + 2 + 255 + 512);
                    break;
                }
                Decoded::Close(_) => return,
                Decoded::Request { swallow: s, .. } => {
                    assert!(buf.len() < before);
                    swallow = s;
                }
            }
        }
    }
});
