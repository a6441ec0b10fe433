//! The NBD protocol (NetworkBlockDevice/nbd `doc/proto.md`) for flashtier's block face: a
//! server with concurrent, out-of-order request handling, a pipelined client, and a block
//! backend over another NBD server.
//!
//! The [`BlockBackend`](flashtier_backend::BlockBackend) trait and the file and memory
//! backends live in `flashtier-backend`, below this crate and the block cache; the cache
//! plugs in by implementing it, and this crate knows nothing of caching.
//!
//! # Layout
//! - [`proto`]: wire constants (magics, flags, options, commands, errno values).
//! - [`codec`]: pure `&[u8]` parsers and encoders for the handshake and transmission
//!   phases; the fuzz entry points ([`parse_request_header`], [`parse_option`], ...).
//! - [`error`]: [`ParseError`], [`Error`].
//! - [`addr`]: [`ListenAddr`] (`HOST:PORT`, `unix:PATH`) and [`NbdUri`] (`nbd://`,
//!   `nbd+unix://`).
//! - [`server`]: [`Server`], [`Export`], [`ServerConfig`], listener, handshake, connection,
//!   stats.
//! - [`client`]: [`NbdClient`] and [`NbdClientBackend`].
//! - [`open`]: [`open_backend`], a backend from a path or an NBD URI (`--backing`).
//!
//! # Protocol coverage
//! Fixed newstyle handshake with `NO_ZEROES`; options `EXPORT_NAME`, `ABORT`, `LIST`,
//! `INFO`, `GO` (others answered `REP_ERR_UNSUP`, including `STARTTLS` and
//! `STRUCTURED_REPLY`: replies are always simple); information `EXPORT`, `NAME`,
//! `DESCRIPTION`, `BLOCK_SIZE`; commands `READ`, `WRITE` (FUA), `FLUSH`, `TRIM`,
//! `WRITE_ZEROES` (FUA, NO_HOLE), `CACHE`, `DISC`.

//! # Example
//! ```no_run
//! use std::sync::Arc;
//! use flashtier_nbd::{open_backend, Export, Server, ServerConfig};
//!
//! # async fn run() -> Result<(), flashtier_nbd::Error> {
//! let backing = open_backend("/var/lib/disk.img").await?; // or "nbd+unix:///?socket=/run/slow.sock"
//! let server = Server::new(vec![Export::new("disk", backing)], ServerConfig::default())?;
//! let listener = Server::bind(&"unix:/run/flashtier.sock".parse()?).await?;
//! let stop = server.shutdown_handle(); // call stop.shutdown() from a signal handler
//! server.serve(listener).await?; // returns after a graceful shutdown
//! # Ok(()) }
//! ```

#![deny(unsafe_code)]

pub mod addr;
pub mod client;
pub mod codec;
pub mod error;
pub mod open;
pub mod proto;
pub mod server;
mod wire_io;

pub use addr::{ListenAddr, NbdTarget, NbdUri};
pub use client::{ExportInfo, NbdClient, NbdClientBackend};
pub use codec::handshake::{
    parse_client_flags, parse_greeting, parse_info, parse_option, parse_option_reply_header,
    ClientOption, Info, InfoRequest,
};
pub use codec::transmission::{
    parse_request_header, parse_simple_reply, Command, RequestHeader, SimpleReply,
};
pub use error::{Error, ParseError};
pub use open::{is_nbd_uri, open_backend};
pub use server::{
    ConnectionInfo, Export, Listener, Server, ServerConfig, ServerStats, ShutdownHandle,
    StatsSnapshot,
};
