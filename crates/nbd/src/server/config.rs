//! Server configuration: the exports and the per-connection limits.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::proto;
use flashtier_backend::BlockBackend;

/// One named export and the backend that serves it.
#[derive(Clone)]
pub struct Export {
    /// Name clients ask for; the first export is also the default (empty name).
    pub name: String,
    /// Human-readable description (sent with `OPT_LIST` and `NBD_INFO_DESCRIPTION`).
    pub description: String,
    /// The storage.
    pub backend: Arc<dyn BlockBackend>,
}

impl Export {
    /// An export named `name` with no description.
    pub fn new(name: impl Into<String>, backend: Arc<dyn BlockBackend>) -> Self {
        Export {
            name: name.into(),
            description: String::new(),
            backend,
        }
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Checks name and description against the spec's string rules.
    pub fn validate(&self) -> Result<(), Error> {
        for (what, s) in [("name", &self.name), ("description", &self.description)] {
            if s.len() > proto::MAX_STRING_LEN || s.contains('\0') {
                return Err(Error::Config(format!(
                    "export {what} {s:?} is too long or has NUL"
                )));
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("size", &self.backend.size())
            .finish()
    }
}

/// Per-connection limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// Requests one connection may have in flight; the reader stops reading until one
    /// completes. Default: `64`.
    pub max_in_flight: usize,
    /// Payload bytes (WRITE data received plus READ data pending) one connection may hold in
    /// flight. Default: `128 MiB`.
    pub max_in_flight_bytes: u32,
    /// Largest READ/WRITE payload accepted; larger requests get `EINVAL`. Never above the
    /// backend's own maximum. Default: `32 MiB` (2^25, what every client may rely on).
    pub max_payload: u32,
    /// An oversized WRITE's payload up to this many bytes is read and discarded so the
    /// stream stays in sync (reply `EINVAL`); beyond it the connection is closed as a
    /// denial-of-service attempt. Default: `64 MiB`.
    pub max_discard: u32,
    /// Time a client may take to finish the handshake before it is disconnected.
    /// Default: `30 s`.
    pub handshake_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_in_flight: 64,
            max_in_flight_bytes: 128 << 20,
            max_payload: proto::DEFAULT_MAX_PAYLOAD,
            max_discard: 64 << 20,
            handshake_timeout: Duration::from_secs(30),
        }
    }
}

impl ServerConfig {
    /// Checks the limits are usable.
    pub fn validate(&self) -> Result<(), Error> {
        if self.max_in_flight == 0 || self.max_in_flight > 4096 {
            return Err(Error::Config("max_in_flight must be in 1..=4096".into()));
        }
        if self.max_payload < 4096 {
            return Err(Error::Config("max_payload must be at least 4096".into()));
        }
        if self.handshake_timeout.is_zero() {
            return Err(Error::Config("handshake_timeout must be positive".into()));
        }
        if self.max_in_flight_bytes < self.max_payload {
            return Err(Error::Config(
                "max_in_flight_bytes must be >= max_payload".into(),
            ));
        }
        Ok(())
    }
}
