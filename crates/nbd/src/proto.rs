//! Protocol constants from NetworkBlockDevice/nbd `doc/proto.md`: magics, handshake and
//! transmission flags, option and reply numbers, information types, commands, command flags
//! and error values.
//!
//! Everything on the wire is big-endian (network byte order); the codec modules do the
//! conversion. Names follow the spec with the `NBD_` prefix dropped. Pure data: no thread
//! touches anything here at run time.

/// `NBDMAGIC`, the first 8 bytes the server sends.
pub const INIT_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: second server magic, and the magic of every client option.
pub const OPTS_MAGIC: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply (fixed newstyle).
pub const REP_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk (never sent by this server; recognised by the client).
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Server handshake flag: fixed newstyle negotiation.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Server handshake flag: the 124 zero bytes after `OPT_EXPORT_NAME` may be omitted.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;

/// Client flag: the client speaks fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: do not send the 124 zero bytes after `OPT_EXPORT_NAME`.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Transmission flag: always set.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
/// Transmission flag: the export is read-only.
pub const FLAG_READ_ONLY: u16 = 1 << 1;
/// Transmission flag: `CMD_FLUSH` is supported.
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
/// Transmission flag: `CMD_FLAG_FUA` is supported.
pub const FLAG_SEND_FUA: u16 = 1 << 3;
/// Transmission flag: the export behaves like a rotational disk.
pub const FLAG_ROTATIONAL: u16 = 1 << 4;
/// Transmission flag: `CMD_TRIM` is supported.
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
/// Transmission flag: `CMD_WRITE_ZEROES` and `CMD_FLAG_NO_HOLE` are supported.
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Transmission flag: `CMD_FLAG_DF` is supported (structured replies only).
pub const FLAG_SEND_DF: u16 = 1 << 7;
/// Transmission flag: FLUSH and FUA on one connection are visible on all connections.
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
/// Transmission flag: `CMD_RESIZE` is supported.
pub const FLAG_SEND_RESIZE: u16 = 1 << 9;
/// Transmission flag: `CMD_CACHE` is supported.
pub const FLAG_SEND_CACHE: u16 = 1 << 10;
/// Transmission flag: `CMD_FLAG_FAST_ZERO` is supported.
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

/// Option: choose an export and enter transmission (no error reply possible).
pub const OPT_EXPORT_NAME: u32 = 1;
/// Option: abort negotiation.
pub const OPT_ABORT: u32 = 2;
/// Option: list exports.
pub const OPT_LIST: u32 = 3;
/// Option: upgrade to TLS.
pub const OPT_STARTTLS: u32 = 5;
/// Option: describe an export.
pub const OPT_INFO: u32 = 6;
/// Option: describe an export and enter transmission.
pub const OPT_GO: u32 = 7;
/// Option: negotiate structured replies.
pub const OPT_STRUCTURED_REPLY: u32 = 8;
/// Option: list metadata contexts.
pub const OPT_LIST_META_CONTEXT: u32 = 9;
/// Option: select metadata contexts.
pub const OPT_SET_META_CONTEXT: u32 = 10;
/// Option: negotiate extended headers.
pub const OPT_EXTENDED_HEADERS: u32 = 11;

/// Option reply: success / end of a list.
pub const REP_ACK: u32 = 1;
/// Option reply: one export in an `OPT_LIST` answer.
pub const REP_SERVER: u32 = 2;
/// Option reply: one information item for `OPT_INFO` / `OPT_GO`.
pub const REP_INFO: u32 = 3;
/// Bit set in every error option reply.
pub const REP_FLAG_ERROR: u32 = 1 << 31;
/// Option reply error: unknown option.
pub const REP_ERR_UNSUP: u32 = REP_FLAG_ERROR | 1;
/// Option reply error: forbidden by policy.
pub const REP_ERR_POLICY: u32 = REP_FLAG_ERROR | 2;
/// Option reply error: syntactically or semantically invalid option.
pub const REP_ERR_INVALID: u32 = REP_FLAG_ERROR | 3;
/// Option reply error: not supported on this platform.
pub const REP_ERR_PLATFORM: u32 = REP_FLAG_ERROR | 4;
/// Option reply error: TLS required.
pub const REP_ERR_TLS_REQD: u32 = REP_FLAG_ERROR | 5;
/// Option reply error: the export does not exist.
pub const REP_ERR_UNKNOWN: u32 = REP_FLAG_ERROR | 6;
/// Option reply error: the server is shutting down.
pub const REP_ERR_SHUTDOWN: u32 = REP_FLAG_ERROR | 7;
/// Option reply error: the client must request block sizes.
pub const REP_ERR_BLOCK_SIZE_REQD: u32 = REP_FLAG_ERROR | 8;
/// Option reply error: request or reply too large.
pub const REP_ERR_TOO_BIG: u32 = REP_FLAG_ERROR | 9;

/// Information type: size and transmission flags (mandatory in a successful reply).
pub const INFO_EXPORT: u16 = 0;
/// Information type: canonical export name.
pub const INFO_NAME: u16 = 1;
/// Information type: human-readable description.
pub const INFO_DESCRIPTION: u16 = 2;
/// Information type: minimum, preferred and maximum block sizes.
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Command: read.
pub const CMD_READ: u16 = 0;
/// Command: write (payload follows the header).
pub const CMD_WRITE: u16 = 1;
/// Command: soft disconnect (no reply).
pub const CMD_DISC: u16 = 2;
/// Command: flush.
pub const CMD_FLUSH: u16 = 3;
/// Command: trim (discard hint).
pub const CMD_TRIM: u16 = 4;
/// Command: prefetch hint.
pub const CMD_CACHE: u16 = 5;
/// Command: write zeroes.
pub const CMD_WRITE_ZEROES: u16 = 6;
/// Command: block status (needs structured replies; unsupported here).
pub const CMD_BLOCK_STATUS: u16 = 7;

/// Command flag: force unit access.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag: `WRITE_ZEROES` must not punch a hole.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// Command flag: don't fragment a structured read reply.
pub const CMD_FLAG_DF: u16 = 1 << 2;
/// Command flag: one extent only in block status.
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
/// Command flag: fail `WRITE_ZEROES` unless fast.
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

/// Size of a request header on the wire (compact headers).
pub const REQUEST_HEADER_LEN: usize = 28;
/// Size of a simple reply header on the wire.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Size of an option header sent by the client (magic, option, length).
pub const OPTION_HEADER_LEN: usize = 16;
/// Size of an option reply header sent by the server (magic, option, type, length).
pub const OPTION_REPLY_HEADER_LEN: usize = 20;
/// Size of the server's first message (`NBDMAGIC`, `IHAVEOPT`, handshake flags).
pub const GREETING_LEN: usize = 18;

/// Default maximum payload of a request (2^25 bytes = 32 MiB), which the spec says any client
/// may rely on (defined beside `BlockSizes`, whose default it is).
pub use flashtier_backend::DEFAULT_MAX_PAYLOAD;
/// Longest string (export name, description) the spec allows.
pub const MAX_STRING_LEN: usize = 4096;
/// IANA port of NBD.
pub const DEFAULT_PORT: u16 = 10809;
