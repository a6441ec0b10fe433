//! Helpers the flash engine's integration tests share: where real files go (the engine uses
//! O_DIRECT, which tmpfs refuses) and a file device spec.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use flashtier_flash::{DeviceSpec, FlashConfig};

/// A directory on a real filesystem: `$FLASH_TEST_DIR`, else `/var/tmp`.
pub fn disk_dir() -> PathBuf {
    std::env::var_os("FLASH_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/tmp".into())
}

/// `disk_dir()/flashtier-test-<pid>-<name>`: a per-process file path (not created).
pub fn disk_file(name: &str) -> PathBuf {
    disk_dir().join(format!("flashtier-test-{}-{name}", std::process::id()))
}

/// A tier-0 file device of `size` bytes at `path`, created if missing.
pub fn file_spec(path: &Path, size: u64) -> DeviceSpec {
    DeviceSpec {
        path: path.to_path_buf(),
        size,
        tier: 0,
        create: true,
    }
}

/// [`FlashConfig::small`] with no interval flusher and no background reclaimer: the test
/// decides when chunks are written and segments reclaimed.
pub fn manual() -> FlashConfig {
    FlashConfig {
        flush_interval: None,
        background_reclaim: false,
        ..FlashConfig::small()
    }
}
