//! What a device holds before the engine formats it, and whether two paths are one storage.
//!
//! Invariant: the engine formats only a device that is *blank* — zero wherever the probe
//! looks — or one that already carries a flashtier superblock (then checked by the superblock
//! rules); anything else is named (a known signature, or the first non-zero byte) and refused
//! unless the user forces the format. What is read: [`inspect`]; signatures: [`signature`].
//! [`same_storage`] tells whether two paths reach the same bytes.
//!
//! Pure logic over a read callback (no engine state); runs on the caller's thread at open.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::format::superblock::MAGIC;

/// Bytes read at each end of the device.
pub const EDGE: u64 = 1 << 20;
/// 4 KiB pages sampled between the two ends.
pub const SAMPLES: u64 = 62;
const PAGE: u64 = 4096;

/// What the probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// Zero bytes wherever it looked (or no bytes at all).
    Blank,
    /// A flashtier superblock magic at byte 0 (the superblock itself is checked later).
    Flashtier,
    /// Something else, described ("an ext4 file system", "non-zero data at byte 4096 ...").
    Foreign(String),
}

/// Probe `len` bytes through `read(offset, buf)`, which fills `buf` from `offset` and returns
/// the bytes read (short only at the end of the data). Offsets and lengths are multiples of
/// 4 KiB when `len` is.
///
/// Reads the first and the last MiB ([`EDGE`]) of the bytes that existed before the open (a
/// file the engine created is empty; one it is about to grow is probed at its old length)
/// and [`SAMPLES`] evenly spaced 4 KiB pages in between.
pub fn inspect(
    len: u64,
    read: &mut dyn FnMut(u64, &mut [u8]) -> io::Result<usize>,
) -> io::Result<Content> {
    if len == 0 {
        return Ok(Content::Blank);
    }
    // A flashtier device is known by its first page alone: the rest of it (segment headers,
    // records) is the superblock rules' business, and reading no more keeps an open of a
    // device with an unreadable page elsewhere going.
    let first = read_span(read, 0, len.min(PAGE))?;
    if first.starts_with(MAGIC) {
        return Ok(Content::Flashtier);
    }
    let head_len = len.min(EDGE);
    let head = read_span(read, 0, head_len)?;
    let tail_start = len.saturating_sub(EDGE).max(head_len);
    let tail = read_span(read, tail_start, len - tail_start)?;
    if let Some(name) = signature(&head, &tail, tail_start, len) {
        return Ok(Content::Foreign(name));
    }
    if let Some(at) = first_nonzero(&head, 0).or_else(|| first_nonzero(&tail, tail_start)) {
        return Ok(Content::Foreign(non_zero(at)));
    }
    let middle = tail_start - head_len;
    if middle > 0 {
        for k in 0..SAMPLES {
            let off = (head_len + middle * k / SAMPLES) / PAGE * PAGE;
            let n = PAGE.min(tail_start - off);
            let page = read_span(read, off, n)?;
            if let Some(at) = first_nonzero(&page, off) {
                return Ok(Content::Foreign(non_zero(at)));
            }
        }
    }
    Ok(Content::Blank)
}

fn non_zero(at: u64) -> String {
    format!("non-zero data at byte {at} (no known signature)")
}

fn read_span(
    read: &mut dyn FnMut(u64, &mut [u8]) -> io::Result<usize>,
    off: u64,
    len: u64,
) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    let mut done = 0usize;
    while done < buf.len() {
        let n = read(off + done as u64, &mut buf[done..])?;
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    Ok(buf)
}

fn first_nonzero(buf: &[u8], base: u64) -> Option<u64> {
    buf.iter().position(|&b| b != 0).map(|i| base + i as u64)
}

fn at(buf: &[u8], off: usize, want: &[u8]) -> bool {
    buf.get(off..off + want.len()) == Some(want)
}

fn le32(buf: &[u8], off: usize) -> u32 {
    buf.get(off..off + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

const BCACHE_MAGIC: [u8; 16] = [
    0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81,
];
const MD_MAGIC: u32 = 0xa92b_4efc;

/// The known signature in `head` (the first bytes of the device) or `tail` (the bytes from
/// `tail_start` to `len`), if any. Checked most specific first: a GPT disk also carries a
/// protective MBR, a FAT or NTFS boot sector the MBR's 0x55AA.
///
/// Known: ext2/3/4, XFS, btrfs, LVM, GPT, MBR, swap, bcache, LUKS, md RAID, FAT, NTFS,
/// ISO 9660, squashfs, f2fs, ZFS.
pub fn signature(head: &[u8], tail: &[u8], tail_start: u64, len: u64) -> Option<String> {
    let found = |s: &str| Some(s.to_string());
    if at(head, 0, b"LUKS\xba\xbe") || at(head, 0x4000, b"SKUL\xba\xbe") {
        return found("a LUKS encrypted volume");
    }
    if at(head, 1080, &0xEF53u16.to_le_bytes()) {
        return found(ext_kind(head));
    }
    if at(head, 0, b"XFSB") {
        return found("an XFS file system");
    }
    if at(head, 0x10040, b"_BHRfS_M") {
        return found("a btrfs file system");
    }
    for sector in 0..4 {
        let o = sector * 512;
        if at(head, o, b"LABELONE") && at(head, o + 24, b"LVM2 001") {
            return found("an LVM physical volume");
        }
    }
    if at(head, 4096 + 24, &BCACHE_MAGIC) {
        return found("a bcache device");
    }
    for page in [4096usize, 8192, 16384, 65536] {
        if at(head, page - 10, b"SWAPSPACE2") || at(head, page - 10, b"SWAP-SPACE") {
            return found("a swap area");
        }
    }
    if le32(head, 4096) == MD_MAGIC || le32(head, 0) == MD_MAGIC {
        return found("a Linux md RAID member");
    }
    if at(head, 1024, &0xF2F5_2010u32.to_le_bytes()) {
        return found("an f2fs file system");
    }
    if at(head, 0, b"hsqs") {
        return found("a squashfs image");
    }
    if at(head, 32769, b"CD001") {
        return found("an ISO 9660 image");
    }
    if at(head, 512, b"EFI PART") || at(head, 4096, b"EFI PART") {
        return found("a GPT partition table");
    }
    if at(head, 3, b"NTFS    ") {
        return found("an NTFS file system");
    }
    if at(head, 54, b"FAT1") || at(head, 82, b"FAT32   ") {
        return found("a FAT file system");
    }
    if at(head, 510, &[0x55, 0xAA]) {
        return found("an MBR partition table or boot sector");
    }
    // At the end: a GPT backup header (last sector), an md 0.90/1.0 superblock, ZFS labels.
    let rel = |off: u64| off.checked_sub(tail_start).map(|o| o as usize);
    if let Some(o) = len.checked_sub(512).and_then(rel) {
        if at(tail, o, b"EFI PART") {
            return found("a GPT partition table (backup header)");
        }
    }
    if let Some(o) = (len & !0xFFFF).checked_sub(0x10000).and_then(rel) {
        if le32(tail, o) == MD_MAGIC {
            return found("a Linux md RAID member");
        }
    }
    if let Some(o) = len.checked_sub(8192).map(|v| v & !4095).and_then(rel) {
        if le32(tail, o) == MD_MAGIC {
            return found("a Linux md RAID member");
        }
    }
    let zfs = 0x00ba_b10c_u64.to_le_bytes();
    if (0..128).any(|i| at(head, 0x20000 + i * 1024, &zfs)) {
        return found("a ZFS pool member");
    }
    None
}

/// ext2, ext3 or ext4, from the superblock's feature flags (as libblkid tells them apart).
fn ext_kind(head: &[u8]) -> &'static str {
    let sb = 1024;
    let compat = le32(head, sb + 92);
    let incompat = le32(head, sb + 96);
    let ro_compat = le32(head, sb + 100);
    // Features ext3 knows: incompat filetype, recover, journal_dev, meta_bg; ro_compat
    // sparse_super, large_file, btree_dir.
    let ext4 = incompat & !0x1E != 0 || ro_compat & !0x7 != 0;
    if ext4 {
        "an ext4 file system"
    } else if compat & 0x4 != 0 {
        "an ext3 file system"
    } else {
        "an ext2 file system"
    }
}

/// Why `a` and `b` reach the same bytes, or `None` if they do not. Paths that do not exist
/// are distinct from everything.
///
/// The same file (through symlinks and hard links), the same block device, a disk and one of
/// its partitions, or a loop device and the file behind it.
pub fn same_storage(a: &Path, b: &Path) -> io::Result<Option<String>> {
    let (na, nb) = (a.display(), b.display());
    let (Some(ia), Some(ib)) = (identity(a)?, identity(b)?) else {
        // Not there yet (a file the engine would create): the same path after symlinks?
        let same = resolved(a).is_some_and(|x| Some(x) == resolved(b));
        return Ok(same.then(|| format!("{na} and {nb} are the same file")));
    };
    let why = match (&ia, &ib) {
        (Ident::File(x), Ident::File(y)) if x == y => {
            format!("{na} and {nb} are the same file")
        }
        (Ident::Block(x), Ident::Block(y)) => {
            if x.rdev == y.rdev {
                format!("{na} and {nb} are the same block device")
            } else if x.parent == Some(y.rdev) || y.parent == Some(x.rdev) {
                format!("{na} and {nb} overlap (a disk and one of its partitions)")
            } else if x.loop_file.is_some() && x.loop_file == y.loop_file {
                format!("{na} and {nb} are loop devices of the same file")
            } else {
                return Ok(None);
            }
        }
        (Ident::Block(x), Ident::File(f)) | (Ident::File(f), Ident::Block(x))
            if x.loop_file == Some(*f) =>
        {
            format!("{na} and {nb} are the same file (one is a loop device over it)")
        }
        _ => return Ok(None),
    };
    Ok(Some(why))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

#[derive(Debug)]
struct BlockId {
    rdev: u64,
    /// The whole disk's device number, for a partition.
    parent: Option<u64>,
    /// The file behind a loop device.
    loop_file: Option<FileId>,
}

#[derive(Debug)]
enum Ident {
    File(FileId),
    Block(BlockId),
}

fn identity(p: &Path) -> io::Result<Option<Ident>> {
    let meta = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_block_device() {
        return Ok(Some(Ident::File(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        })));
    }
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let parent = if sys.join("partition").exists() {
        std::fs::read_to_string(sys.join("../dev"))
            .ok()
            .and_then(|s| parse_dev(s.trim()))
    } else {
        None
    };
    let loop_file = std::fs::read_to_string(sys.join("loop/backing_file"))
        .ok()
        .and_then(|f| std::fs::metadata(f.trim()).ok())
        .map(|m| FileId {
            dev: m.dev(),
            ino: m.ino(),
        });
    Ok(Some(Ident::Block(BlockId {
        rdev,
        parent,
        loop_file,
    })))
}

/// `p` with its symlinks followed (also a dangling one) and its directory made canonical.
fn resolved(p: &Path) -> Option<PathBuf> {
    let mut p = p.to_path_buf();
    for _ in 0..32 {
        match std::fs::read_link(&p) {
            Ok(target) => p = p.parent().unwrap_or(Path::new("")).join(target),
            Err(_) => break,
        }
    }
    if let Ok(c) = p.canonicalize() {
        return Some(c);
    }
    let name = p.file_name()?;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.canonicalize().ok()?,
        _ => std::env::current_dir().ok()?,
    };
    Some(dir.join(name))
}

fn parse_dev(s: &str) -> Option<u64> {
    let (ma, mi) = s.split_once(':')?;
    Some(libc::makedev(ma.parse().ok()?, mi.parse().ok()?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn probe(img: &[u8]) -> Content {
        let mut read = |off: u64, buf: &mut [u8]| {
            let s = (off as usize).min(img.len());
            let n = buf.len().min(img.len() - s);
            buf[..n].copy_from_slice(&img[s..s + n]);
            Ok(n)
        };
        inspect(img.len() as u64, &mut read).unwrap()
    }

    fn img_with(len: usize, off: usize, bytes: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; len];
        v[off..off + bytes.len()].copy_from_slice(bytes);
        v
    }

    fn foreign(c: Content) -> String {
        match c {
            Content::Foreign(s) => s,
            other => panic!("expected foreign, got {other:?}"),
        }
    }

    #[test]
    fn blank_flashtier_and_data() {
        assert_eq!(probe(&[]), Content::Blank);
        assert_eq!(probe(&vec![0u8; 3 << 20]), Content::Blank);
        assert_eq!(probe(&img_with(8192, 0, MAGIC)), Content::Flashtier);
        let s = foreign(probe(&img_with(3 << 20, 5000, &[1])));
        assert!(s.contains("byte 5000"), "{s}");
        let s = foreign(probe(&img_with(3 << 20, (3 << 20) - 1, &[1])));
        assert!(s.contains(&format!("byte {}", (3 << 20) - 1)), "{s}");
        // A short file, not page aligned.
        let s = foreign(probe(&img_with(100, 99, &[1])));
        assert!(s.contains("byte 99"), "{s}");
        // The middle is sampled: the first page of each sample window is seen.
        let len = 10u64 << 20;
        let middle = len - 2 * EDGE;
        let off = EDGE + middle * 5 / SAMPLES;
        let s = foreign(probe(&img_with(len as usize, off as usize, &[7])));
        assert!(s.contains(&format!("byte {off}")), "{s}");
    }

    #[test]
    fn ext_flavours() {
        let ext = |compat: u32, incompat: u32, ro: u32| {
            let mut v = img_with(1 << 20, 1080, &0xEF53u16.to_le_bytes());
            v[1116..1120].copy_from_slice(&compat.to_le_bytes());
            v[1120..1124].copy_from_slice(&incompat.to_le_bytes());
            v[1124..1128].copy_from_slice(&ro.to_le_bytes());
            foreign(probe(&v))
        };
        // Feature words as mkfs.ext2/3/4 (e2fsprogs 1.47) write them.
        assert_eq!(ext(0x38, 0x2, 0x3), "an ext2 file system");
        assert_eq!(ext(0x3c, 0x2, 0x3), "an ext3 file system");
        assert_eq!(ext(0x3c, 0x2c2, 0x46b), "an ext4 file system");
    }

    #[test]
    fn end_signatures() {
        let len = 4usize << 20;
        let s = foreign(probe(&img_with(len, len - 512, b"EFI PART")));
        assert!(s.contains("GPT"), "{s}");
        let md_off = (len & !0xFFFF) - 0x10000;
        let s = foreign(probe(&img_with(len, md_off, &MD_MAGIC.to_le_bytes())));
        assert!(s.contains("md RAID"), "{s}");
    }

    #[test]
    fn same_storage_of_files_links_and_missing_paths() {
        let dir = std::env::temp_dir().join(format!("ft-probe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, b"x").unwrap();
        std::fs::write(&b, b"x").unwrap();
        std::os::unix::fs::symlink(&a, dir.join("l")).unwrap();
        assert!(same_storage(&a, &a).unwrap().is_some());
        assert!(same_storage(&a, &dir.join("l")).unwrap().is_some());
        assert!(same_storage(&a, &b).unwrap().is_none());
        assert!(same_storage(&a, &dir.join("missing")).unwrap().is_none());
        // Not created yet: the same path, directly or through a dangling symlink.
        let m = dir.join("missing");
        std::os::unix::fs::symlink(&m, dir.join("dangling")).unwrap();
        assert!(same_storage(&m, &dir.join("./missing")).unwrap().is_some());
        assert!(same_storage(&m, &dir.join("dangling")).unwrap().is_some());
        assert!(same_storage(&m, &dir.join("other")).unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
