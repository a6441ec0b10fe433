//! The engine formats only what is blank or already its own: a device holding a file system,
//! a partition table, a volume signature or any other non-zero data is refused (named in the
//! error) and left byte for byte as it was, unless `force_format` is set; a flashtier device
//! of the other face (kv flash vs block cache) is refused too; the same file given twice is
//! refused; and an open that fails leaves no file it created or grew behind.
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flashtier_flash::{Device, DeviceSpec, DropAll, Error, Flash, FlashConfig, MemoryDevice, Role};

fn cfg(role: Role) -> FlashConfig {
    FlashConfig {
        role,
        ..common::manual()
    }
}

fn open_mem(dev: &Arc<MemoryDevice>, cfg: FlashConfig) -> Result<Flash, Error> {
    let d: Arc<dyn Device> = Arc::clone(dev) as Arc<dyn Device>;
    Flash::open(vec![d], cfg, Arc::new(DropAll), |_| {}).map(|(f, _)| f)
}

/// A 4 MiB memory device with `bytes` written at `off`.
fn dev_with(off: u64, bytes: &[u8]) -> Arc<MemoryDevice> {
    let d = Arc::new(MemoryDevice::new("m", 4 << 20));
    d.poke(off, bytes);
    d
}

fn refused(res: Result<Flash, Error>, what: &str) -> String {
    match res {
        Err(e @ Error::NotBlank { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(what), "{msg:?} should name {what:?}");
            msg
        }
        Err(e) => panic!("expected NotBlank naming {what}, got {e}"),
        Ok(_) => panic!("formatted a device holding {what}"),
    }
}

#[test]
fn signatures_are_refused_and_left_untouched() {
    let mut ext4 = vec![0u8; 1024];
    ext4[56..58].copy_from_slice(&0xEF53u16.to_le_bytes());
    ext4[92..96].copy_from_slice(&0x3cu32.to_le_bytes()); // has_journal
    ext4[96..100].copy_from_slice(&0x2c2u32.to_le_bytes()); // extents, 64bit, flex_bg
    let mut lvm = vec![0u8; 32];
    lvm[..8].copy_from_slice(b"LABELONE");
    lvm[24..32].copy_from_slice(b"LVM2 001");
    let bcache_magic = [
        0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d,
        0x81,
    ];
    let cases: Vec<(u64, Vec<u8>, &str)> = vec![
        (1024, ext4, "ext4"),
        (0, b"XFSB".to_vec(), "XFS"),
        (0x10040, b"_BHRfS_M".to_vec(), "btrfs"),
        (512, lvm, "LVM"),
        (510, vec![0x55, 0xAA], "MBR"),
        (512, b"EFI PART".to_vec(), "GPT"),
        (4086, b"SWAPSPACE2".to_vec(), "swap"),
        (4096 + 24, bcache_magic.to_vec(), "bcache"),
        (0, b"LUKS\xba\xbe\x00\x02".to_vec(), "LUKS"),
    ];
    for (off, bytes, what) in cases {
        let dev = dev_with(off, &bytes);
        let before = dev.image();
        let msg = refused(open_mem(&dev, cfg(Role::Kv)), what);
        assert!(msg.contains("force"), "{msg}: names the override");
        assert!(dev.image() == before, "{what}: device changed");
        // The override formats it.
        let f = open_mem(
            &dev,
            FlashConfig {
                force_format: true,
                ..cfg(Role::Kv)
            },
        )
        .unwrap_or_else(|e| panic!("{what} with force_format: {e}"));
        f.close().unwrap();
        assert!(dev.image() != before);
    }
}

#[test]
fn any_non_zero_byte_where_it_looks_is_refused() {
    // Start, end, and a spot in between (the middle is sampled, not read whole).
    for off in [0u64, 4095, 1 << 20, (3 << 20) + 5, (4 << 20) - 1] {
        let dev = dev_with(off, &[0x01]);
        let before = dev.image();
        let msg = refused(open_mem(&dev, cfg(Role::Block)), "non-zero");
        assert!(msg.contains(&off.to_string()), "{msg}: names the offset");
        assert!(dev.image() == before);
    }
    // All zeros is blank: formatted.
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    open_mem(&dev, cfg(Role::Kv)).unwrap().close().unwrap();
}

#[test]
fn the_other_face_is_refused_its_own_reopened() {
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    open_mem(&dev, cfg(Role::Block)).unwrap().close().unwrap();
    let before = dev.image();
    refused(open_mem(&dev, cfg(Role::Kv)), "flashtier block cache");
    assert!(dev.image() == before);
    let (f, info) = {
        let d: Arc<dyn Device> = Arc::clone(&dev) as Arc<dyn Device>;
        Flash::open(vec![d], cfg(Role::Block), Arc::new(DropAll), |_| {}).unwrap()
    };
    assert!(!info.formatted, "its own role: recovered, not formatted");
    f.close().unwrap();
    // A device formatted by an engine user that names no role opens under any role.
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    open_mem(&dev, cfg(Role::Any)).unwrap().close().unwrap();
    let d: Arc<dyn Device> = Arc::clone(&dev) as Arc<dyn Device>;
    let (f, info) = Flash::open(vec![d], cfg(Role::Kv), Arc::new(DropAll), |_| {}).unwrap();
    assert!(!info.formatted);
    f.close().unwrap();
    // force_format reformats the other face's device.
    let dev = Arc::new(MemoryDevice::new("m", 4 << 20));
    open_mem(&dev, cfg(Role::Kv)).unwrap().close().unwrap();
    let d: Arc<dyn Device> = Arc::clone(&dev) as Arc<dyn Device>;
    let force = FlashConfig {
        force_format: true,
        ..cfg(Role::Block)
    };
    let (f, info) = Flash::open(vec![d], force, Arc::new(DropAll), |_| {}).unwrap();
    assert!(info.formatted);
    f.close().unwrap();
}

fn scratch(name: &str) -> PathBuf {
    let d = common::disk_dir().join(format!("flashtier-blank-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn spec(path: &Path, size: u64) -> DeviceSpec {
    common::file_spec(path, size)
}

fn open_specs(specs: &[DeviceSpec], cfg: FlashConfig) -> Result<Flash, Error> {
    let cfg = FlashConfig {
        io_backend: flashtier_flash::IoBackend::Psync,
        ..cfg
    };
    Flash::open_specs(specs, cfg, Arc::new(DropAll), |_| {}).map(|(f, _)| f)
}

#[test]
fn a_refused_file_keeps_its_bytes_and_its_length() {
    let dir = scratch("refused");
    let p = dir.join("data.img");
    // 1 MiB of a pattern, shorter than the size asked for: nothing may grow it.
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 + 3) as u8).collect();
    std::fs::write(&p, &data).unwrap();
    let res = open_specs(&[spec(&p, 8 << 20)], cfg(Role::Kv));
    refused(res, "non-zero");
    assert_eq!(std::fs::read(&p).unwrap(), data);
    // Non-zero data only in the last MiB of a larger file.
    let mut tail = vec![0u8; 8 << 20];
    tail[(8 << 20) - 10] = 9;
    std::fs::write(&p, &tail).unwrap();
    refused(open_specs(&[spec(&p, 8 << 20)], cfg(Role::Kv)), "non-zero");
    assert_eq!(std::fs::read(&p).unwrap(), tail);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_same_file_twice_is_refused() {
    let dir = scratch("twice");
    let p = dir.join("f");
    let link = dir.join("link");
    let hard = dir.join("hard");
    std::fs::write(&p, vec![0u8; 4 << 20]).unwrap();
    std::os::unix::fs::symlink(&p, &link).unwrap();
    std::fs::hard_link(&p, &hard).unwrap();
    for other in [&p, &link, &hard] {
        match open_specs(&[spec(&p, 4 << 20), spec(other, 4 << 20)], cfg(Role::Kv)) {
            Err(e @ Error::SameStorage(_)) => assert!(e.to_string().contains("same"), "{e}"),
            Err(e) => panic!("expected SameStorage, got {e}"),
            Ok(_) => panic!("opened {} twice", other.display()),
        }
    }
    assert_eq!(std::fs::read(&p).unwrap(), vec![0u8; 4 << 20]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_open_removes_the_file_it_created_and_shrinks_the_one_it_grew() {
    let dir = scratch("litter");
    // Too small for the configuration's segments: the open fails after the file exists.
    let created = dir.join("new");
    assert!(matches!(
        open_specs(&[spec(&created, 1 << 20)], cfg(Role::Kv)),
        Err(Error::Config(_))
    ));
    assert!(!created.exists(), "created file left behind");
    // An existing (blank, shorter) file in a set whose other member is refused: it was not
    // grown, or was shrunk back.
    let short = dir.join("short");
    std::fs::write(&short, vec![0u8; 64 << 10]).unwrap();
    let foreign = dir.join("foreign");
    std::fs::write(&foreign, b"XFSB and more").unwrap();
    refused(
        open_specs(
            &[spec(&short, 4 << 20), spec(&foreign, 4 << 20)],
            cfg(Role::Kv),
        ),
        "XFS",
    );
    assert_eq!(std::fs::metadata(&short).unwrap().len(), 64 << 10);
    assert_eq!(std::fs::read(&foreign).unwrap(), b"XFSB and more");
    // A successful open keeps both.
    let f = open_specs(
        &[spec(&short, 4 << 20), spec(&created, 4 << 20)],
        cfg(Role::Kv),
    )
    .unwrap();
    f.close().unwrap();
    assert_eq!(std::fs::metadata(&short).unwrap().len(), 4 << 20);
    assert_eq!(std::fs::metadata(&created).unwrap().len(), 4 << 20);
    std::fs::remove_dir_all(&dir).unwrap();
}
