//! Golden bytes of every on-flash struct: a change to the format (field order, width,
//! endianness, checksum seeding) fails here and must come with a format version bump and a
//! `docs/format.md` update.
use flashtier_flash::format::record::{encode, RecordHeader};
use flashtier_flash::format::segment::{encode_tail, Footer, SegmentHeader, SummaryEntry};
use flashtier_flash::format::segment_seed;
use flashtier_flash::format::superblock::Superblock;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

const UUID: [u8; 16] = *b"0123456789abcdef";

#[test]
fn golden_bytes() {
    let seed = segment_seed(&UUID, 7);
    let sb = Superblock {
        version: 1,
        device_index: 1,
        device_count: 2,
        segment_size: 0x0010_0000,
        device_size: 0x0400_0000,
        segments: 63,
        first_segment: 63,
        uuid: UUID,
        hash_seed: 0x1122_3344_5566_7788,
        created: 0x6000_0000,
        tier: 2,
        role: 0,
        journal: 0,
    };
    let h = SegmentHeader {
        seq: 7,
        uuid: UUID,
        segment: 3,
        stream: 1,
        created: 0x6000_0001,
    };
    let rh = RecordHeader {
        kind: 1,
        key_len: 3,
        value_len: 5,
        flags: 0xAABB_CCDD,
        exptime: 0x6000_1000,
        time: 0x6000_0002,
        version: 9,
        key_id: 0x0102_0304_0506_0708,
    };
    let mut rec = vec![0u8; 48];
    encode(&mut rec, &rh, b"key", b"value", seed).unwrap();
    let entry = SummaryEntry {
        key_id: 1,
        version: 2,
        offset: 64,
        len: 48,
        exptime: 0,
        flags: 3,
        kind: 1,
    };
    let footer = Footer {
        seq: 7,
        records: 1,
        summary_offset: 0x000F_F000,
        data_end: 4096,
        max_exptime: 0,
        summary_crc: 0,
    };
    let tail = encode_tail(&[entry], footer, seed);
    let got = format!(
        "seed={seed:08x}\nsb={}\nhdr={}\nrec={}\nentry={}\nfooter={}\n",
        hex(&sb.encode()),
        hex(&h.encode()),
        hex(&rec),
        hex(&tail[..40]),
        hex(&tail[tail.len() - 64..])
    );
    let want = include_str!("fixtures/format_v1.txt");
    if std::env::var_os("FLASH_BLESS").is_some() {
        std::fs::write(
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/format_v1.txt"),
            &got,
        )
        .unwrap();
    }
    assert_eq!(
        got, want,
        "on-flash format changed: bump FORMAT_VERSION and update docs/format.md"
    );
}
