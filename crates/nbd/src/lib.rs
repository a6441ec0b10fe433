//! The NBD protocol (NetworkBlockDevice/nbd `doc/proto.md`) for flashtier's block face: a
//! server with concurrent, out-of-order request handling, a pipelined client, and a block
//! backend over another NBD server. The [`BlockBackend`](flashtier_backend::BlockBackend)
//! trait and the file and memory backends live in `flashtier-backend`, below this crate and
//! the block cache; this crate knows nothing of caching. Coverage, example: [`Server`].
//!
//! # Layout
//! - [`proto`] (wire constants), [`codec`] (pure `&[u8]` parsers/encoders, the fuzz entry
//!   points), [`error`] ([`ParseError`], [`Error`]).
//! - [`addr`] ([`ListenAddr`], [`NbdUri`]), [`open`] ([`open_backend`] from a path or URI,
//!   `--backing`), [`server`] ([`Server`], [`Export`], [`ServerConfig`]), [`client`]
//!   ([`NbdClient`], [`NbdClientBackend`]).

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
