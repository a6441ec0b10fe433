//! Opening a backend from a command-line spec: `nbd://…` and `nbd+unix://…` URIs become an
//! [`NbdClientBackend`], anything else is a file or block device path for [`FileBackend`].
//! This is what `flashtier block --backing` accepts.

use std::sync::Arc;

use crate::client::NbdClientBackend;
use crate::error::Error;
use flashtier_backend::{BlockBackend, FileBackend};

/// Connections opened to a remote NBD backing (more only if it allows multi-conn).
pub const DEFAULT_REMOTE_CONNECTIONS: usize = 4;

/// True if `spec` names a remote NBD export rather than a path.
pub fn is_nbd_uri(spec: &str) -> bool {
    spec.starts_with("nbd://") || spec.starts_with("nbd+unix://") || spec.starts_with("nbds")
}

/// Opens `spec` read-write: a remote export for NBD URIs, otherwise a file or device.
pub async fn open_backend(spec: &str) -> Result<Arc<dyn BlockBackend>, Error> {
    if is_nbd_uri(spec) {
        let b = NbdClientBackend::connect_str(spec, DEFAULT_REMOTE_CONNECTIONS).await?;
        return Ok(Arc::new(b));
    }
    let file = FileBackend::open(spec, false).map_err(|e| match e {
        crate::error::BackendError::Io(io) => Error::Io(io),
        other => Error::Config(format!("{spec}: {other}")),
    })?;
    Ok(Arc::new(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_specs() {
        assert!(is_nbd_uri("nbd://h/x"));
        assert!(is_nbd_uri("nbd+unix:///x?socket=/s"));
        assert!(!is_nbd_uri("/dev/sdb"));
        assert!(!is_nbd_uri("nbd.img"));
    }

    #[tokio::test]
    async fn opens_files_and_reports_missing_ones() {
        let path = std::env::temp_dir().join(format!("ftnbd-open-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 8192]).expect("write");
        let b = open_backend(path.to_str().expect("utf8"))
            .await
            .expect("open");
        assert_eq!(b.size(), 8192);
        std::fs::remove_file(&path).expect("cleanup");
        assert!(open_backend(path.to_str().expect("utf8")).await.is_err());
        assert!(open_backend("nbd+unix:///x?socket=/nonexistent/sock")
            .await
            .is_err());
    }
}
