//! Transmission-phase messages: the 28-byte request header, the 16-byte simple reply header
//! and the command classification both ends use.
//!
//! Layout of a request (big-endian): magic u32 @0, command flags u16 @4, type u16 @6,
//! handle u64 @8, offset u64 @16, length u32 @24; a WRITE's payload follows. A simple reply:
//! magic u32 @0, error u32 @4, handle u64 @8; a successful READ's data follows.

#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use crate::codec::cursor::Cursor;
use crate::error::ParseError;
use crate::proto;

/// A request header as sent by the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// Command flags (`CMD_FLAG_*`).
    pub flags: u16,
    /// Command type (`CMD_*`), possibly unknown.
    pub command: u16,
    /// Opaque handle echoed in the reply.
    pub handle: u64,
    /// Byte offset in the export.
    pub offset: u64,
    /// Byte length (payload length for WRITE).
    pub length: u32,
}

impl RequestHeader {
    /// Encodes the header (client side).
    pub fn encode(&self) -> [u8; proto::REQUEST_HEADER_LEN] {
        let mut out = [0u8; proto::REQUEST_HEADER_LEN];
        let parts: [&[u8]; 6] = [
            &proto::REQUEST_MAGIC.to_be_bytes(),
            &self.flags.to_be_bytes(),
            &self.command.to_be_bytes(),
            &self.handle.to_be_bytes(),
            &self.offset.to_be_bytes(),
            &self.length.to_be_bytes(),
        ];
        let mut pos = 0;
        for part in parts {
            for (dst, src) in out.iter_mut().skip(pos).zip(part) {
                *dst = *src;
            }
            pos += part.len();
        }
        out
    }

    /// The classified command.
    pub fn kind(&self) -> Command {
        Command::from_wire(self.command)
    }
}

/// Parses a request header. Fuzz entry point for the transmission phase. A wrong magic is
/// `BadMagic`, after which the server closes the connection (the stream cannot be resynced).
pub fn parse_request_header(buf: &[u8]) -> Result<RequestHeader, ParseError> {
    let mut c = Cursor::new(buf);
    let magic = c.u32()?;
    if magic != proto::REQUEST_MAGIC {
        return Err(ParseError::BadMagic {
            expected: u64::from(proto::REQUEST_MAGIC),
            found: u64::from(magic),
        });
    }
    Ok(RequestHeader {
        flags: c.u16()?,
        command: c.u16()?,
        handle: c.u64()?,
        offset: c.u64()?,
        length: c.u32()?,
    })
}

/// A simple reply header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimpleReply {
    /// Zero on success, else an NBD errno value.
    pub error: u32,
    /// Handle of the request this answers.
    pub handle: u64,
}

impl SimpleReply {
    /// Encodes the header (server side).
    pub fn encode(&self) -> [u8; proto::SIMPLE_REPLY_LEN] {
        let mut out = [0u8; proto::SIMPLE_REPLY_LEN];
        let bytes = proto::SIMPLE_REPLY_MAGIC
            .to_be_bytes()
            .into_iter()
            .chain(self.error.to_be_bytes())
            .chain(self.handle.to_be_bytes());
        for (dst, src) in out.iter_mut().zip(bytes) {
            *dst = src;
        }
        out
    }
}

/// Parses a simple reply header (client side). A structured reply magic is refused, since
/// this client never negotiates structured replies.
pub fn parse_simple_reply(buf: &[u8]) -> Result<SimpleReply, ParseError> {
    let mut c = Cursor::new(buf);
    let magic = c.u32()?;
    if magic != proto::SIMPLE_REPLY_MAGIC {
        return Err(ParseError::BadMagic {
            expected: u64::from(proto::SIMPLE_REPLY_MAGIC),
            found: u64::from(magic),
        });
    }
    Ok(SimpleReply {
        error: c.u32()?,
        handle: c.u64()?,
    })
}

/// Commands this crate understands, plus `Unknown` for the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Command {
    /// `CMD_READ`.
    Read,
    /// `CMD_WRITE`.
    Write,
    /// `CMD_DISC`.
    Disc,
    /// `CMD_FLUSH`.
    Flush,
    /// `CMD_TRIM`.
    Trim,
    /// `CMD_CACHE`.
    Cache,
    /// `CMD_WRITE_ZEROES`.
    WriteZeroes,
    /// Anything else (including `CMD_BLOCK_STATUS`, which needs structured replies).
    Unknown(u16),
}

impl Command {
    /// Classifies a wire command number.
    pub fn from_wire(cmd: u16) -> Command {
        match cmd {
            proto::CMD_READ => Command::Read,
            proto::CMD_WRITE => Command::Write,
            proto::CMD_DISC => Command::Disc,
            proto::CMD_FLUSH => Command::Flush,
            proto::CMD_TRIM => Command::Trim,
            proto::CMD_CACHE => Command::Cache,
            proto::CMD_WRITE_ZEROES => Command::WriteZeroes,
            other => Command::Unknown(other),
        }
    }

    /// The wire command number.
    pub fn to_wire(self) -> u16 {
        match self {
            Command::Read => proto::CMD_READ,
            Command::Write => proto::CMD_WRITE,
            Command::Disc => proto::CMD_DISC,
            Command::Flush => proto::CMD_FLUSH,
            Command::Trim => proto::CMD_TRIM,
            Command::Cache => proto::CMD_CACHE,
            Command::WriteZeroes => proto::CMD_WRITE_ZEROES,
            Command::Unknown(cmd) => cmd,
        }
    }

    /// Command flags valid for this command on this server: FUA on every command (the spec
    /// says a server advertising FUA MUST accept it everywhere) and NO_HOLE on WRITE_ZEROES.
    pub fn allowed_flags(self) -> u16 {
        match self {
            Command::WriteZeroes => proto::CMD_FLAG_FUA | proto::CMD_FLAG_NO_HOLE,
            _ => proto::CMD_FLAG_FUA,
        }
    }

    /// A short name for stats and logs.
    pub fn name(self) -> &'static str {
        match self {
            Command::Read => "read",
            Command::Write => "write",
            Command::Disc => "disc",
            Command::Flush => "flush",
            Command::Trim => "trim",
            Command::Cache => "cache",
            Command::WriteZeroes => "write_zeroes",
            Command::Unknown(_) => "unknown",
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip() {
        let h = RequestHeader {
            flags: proto::CMD_FLAG_FUA,
            command: proto::CMD_WRITE,
            handle: 0x0102_0304_0506_0708,
            offset: 1 << 40,
            length: 4096,
        };
        let bytes = h.encode();
        assert_eq!(&bytes[..4], &[0x25, 0x60, 0x95, 0x13]);
        assert_eq!(parse_request_header(&bytes), Ok(h));
        assert_eq!(h.kind(), Command::Write);
        assert_eq!(
            parse_request_header(&bytes[..27]),
            Err(ParseError::Incomplete { needed: 28 })
        );
    }

    #[test]
    fn bad_magic_is_reported() {
        let mut bytes = RequestHeader {
            flags: 0,
            command: 0,
            handle: 1,
            offset: 0,
            length: 1,
        }
        .encode();
        bytes[0] = 0;
        assert!(matches!(
            parse_request_header(&bytes),
            Err(ParseError::BadMagic { .. })
        ));
    }

    #[test]
    fn simple_reply_round_trip() {
        let r = SimpleReply {
            error: 22,
            handle: 7,
        };
        let bytes = r.encode();
        assert_eq!(&bytes[..4], &[0x67, 0x44, 0x66, 0x98]);
        assert_eq!(parse_simple_reply(&bytes), Ok(r));
        let mut structured = bytes;
        structured[..4].copy_from_slice(&proto::STRUCTURED_REPLY_MAGIC.to_be_bytes());
        assert!(parse_simple_reply(&structured).is_err());
    }

    #[test]
    fn command_classification() {
        for cmd in 0..10u16 {
            assert_eq!(Command::from_wire(cmd).to_wire(), cmd);
        }
        assert_eq!(Command::from_wire(7), Command::Unknown(7));
        assert_eq!(Command::WriteZeroes.allowed_flags(), 3);
        assert_eq!(Command::Read.allowed_flags(), 1);
    }
}
