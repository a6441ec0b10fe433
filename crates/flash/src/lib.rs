//! flashtier's flash engine: a log of self-describing records on one or more devices.
//!
//! Knows nothing of keys' meaning or of protocols; the key-value face and the block face both
//! sit on it. See ARCHITECTURE.md for the plan this crate implements.
