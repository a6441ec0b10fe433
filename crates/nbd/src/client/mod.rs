//! The NBD client: one pipelined connection ([`NbdClient`]) and a backend over one or more
//! of them ([`NbdClientBackend`]), so an export can be served from another NBD server (for
//! instance a slow disk behind nbdkit).
//!
//! # Layout
//! - [`handshake`]: client side of fixed newstyle negotiation (`OPT_GO`, fallback
//!   `OPT_EXPORT_NAME`).
//! - [`connection`]: [`NbdClient`], requests pipelined over one socket, replies matched by
//!   handle in any order.
//! - [`backend`]: [`NbdClientBackend`], a [`flashtier_backend::BlockBackend`] over a few connections.

pub mod backend;
pub mod connection;
pub mod handshake;

pub use backend::NbdClientBackend;
pub use connection::NbdClient;
pub use handshake::ExportInfo;
