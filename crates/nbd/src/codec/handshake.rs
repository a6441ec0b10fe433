//! Handshake-phase messages (fixed newstyle): the server greeting, client flags, option
//! requests, option replies and the information items of `OPT_INFO` / `OPT_GO`.
//!
//! Both directions live here because the server and the client ([`crate::client`]) share
//! them. The `parse_*` functions take untrusted bytes and are the fuzz entry points for the
//! handshake; the `encode_*` functions append to a `Vec<u8>`.

#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use crate::codec::cursor::Cursor;
use crate::error::ParseError;
use crate::proto;

/// Longest option payload the server accepts; longer ones are refused with
/// `REP_ERR_TOO_BIG`. A name is at most 4096 bytes, so 16 KiB leaves room for info requests.
pub const MAX_OPTION_LEN: u32 = 16 * 1024;

/// The server's opening message: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
pub fn encode_greeting(handshake_flags: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(proto::GREETING_LEN);
    out.extend_from_slice(&proto::INIT_MAGIC.to_be_bytes());
    out.extend_from_slice(&proto::OPTS_MAGIC.to_be_bytes());
    out.extend_from_slice(&handshake_flags.to_be_bytes());
    out
}

/// Parses the server greeting and returns the handshake flags. Oldstyle servers (second
/// magic `cliserv_magic`) are rejected with `BadMagic`.
pub fn parse_greeting(buf: &[u8]) -> Result<u16, ParseError> {
    let mut c = Cursor::new(buf);
    let magic = c.u64()?;
    if magic != proto::INIT_MAGIC {
        return Err(ParseError::BadMagic {
            expected: proto::INIT_MAGIC,
            found: magic,
        });
    }
    let magic = c.u64()?;
    if magic != proto::OPTS_MAGIC {
        return Err(ParseError::BadMagic {
            expected: proto::OPTS_MAGIC,
            found: magic,
        });
    }
    c.u16()
}

/// Parses the client's 32-bit flags, refusing bits the server did not offer (the spec says
/// the server MUST drop the connection then).
pub fn parse_client_flags(buf: &[u8], offered: u16) -> Result<u32, ParseError> {
    let flags = Cursor::new(buf).u32()?;
    let mut allowed = proto::FLAG_C_FIXED_NEWSTYLE;
    if offered & proto::FLAG_NO_ZEROES != 0 {
        allowed |= proto::FLAG_C_NO_ZEROES;
    }
    if flags & !allowed != 0 {
        return Err(ParseError::Invalid(
            "client flags not offered by the server",
        ));
    }
    Ok(flags)
}

/// The fixed 16-byte header of a client option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionHeader {
    /// Option number (`OPT_*`).
    pub option: u32,
    /// Length of the data that follows.
    pub len: u32,
}

/// Parses an option header (magic checked; the length is not bounded here).
pub fn parse_option_header(buf: &[u8]) -> Result<OptionHeader, ParseError> {
    let mut c = Cursor::new(buf);
    let magic = c.u64()?;
    if magic != proto::OPTS_MAGIC {
        return Err(ParseError::BadMagic {
            expected: proto::OPTS_MAGIC,
            found: magic,
        });
    }
    Ok(OptionHeader {
        option: c.u32()?,
        len: c.u32()?,
    })
}

/// Appends an option header and its data.
pub fn encode_option(out: &mut Vec<u8>, option: u32, data: &[u8]) {
    out.extend_from_slice(&proto::OPTS_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&len_u32(data.len()).to_be_bytes());
    out.extend_from_slice(data);
}

/// The export name plus information requests carried by `OPT_INFO` and `OPT_GO`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoRequest {
    /// Export name; empty means the default export.
    pub name: String,
    /// Information types the client asked for (`INFO_*`), in order.
    pub requests: Vec<u16>,
}

impl InfoRequest {
    /// Encodes the option data of `OPT_INFO` / `OPT_GO`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + self.name.len() + 2 * self.requests.len());
        out.extend_from_slice(&len_u32(self.name.len()).to_be_bytes());
        out.extend_from_slice(self.name.as_bytes());
        let n = u16::try_from(self.requests.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&n.to_be_bytes());
        for r in self.requests.iter().take(usize::from(n)) {
            out.extend_from_slice(&r.to_be_bytes());
        }
        out
    }
}

/// A decoded client option.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientOption {
    /// `OPT_EXPORT_NAME`: enter transmission with this export (no error reply possible).
    ExportName(String),
    /// `OPT_ABORT`.
    Abort,
    /// `OPT_LIST`.
    List,
    /// `OPT_INFO`.
    Info(InfoRequest),
    /// `OPT_GO`.
    Go(InfoRequest),
    /// Any other option (answered with `REP_ERR_UNSUP`); its data is skipped.
    Unsupported(u32),
}

fn parse_string(bytes: &[u8]) -> Result<String, ParseError> {
    if bytes.len() > proto::MAX_STRING_LEN {
        return Err(ParseError::TooLong {
            len: bytes.len() as u64,
            max: proto::MAX_STRING_LEN as u64,
        });
    }
    if bytes.contains(&0) {
        return Err(ParseError::Invalid("string contains NUL"));
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| ParseError::Invalid("string is not UTF-8"))
}

/// Decodes the data of option `option`. Errors mean the server answers `REP_ERR_INVALID`
/// (or, for `OPT_EXPORT_NAME`, closes the connection).
pub fn parse_option_data(option: u32, data: &[u8]) -> Result<ClientOption, ParseError> {
    match option {
        proto::OPT_EXPORT_NAME => Ok(ClientOption::ExportName(parse_string(data)?)),
        proto::OPT_ABORT => Ok(ClientOption::Abort),
        proto::OPT_LIST => {
            if data.is_empty() {
                Ok(ClientOption::List)
            } else {
                Err(ParseError::Invalid("OPT_LIST carries data"))
            }
        }
        proto::OPT_INFO | proto::OPT_GO => {
            let mut c = Cursor::new(data);
            let name_len = c.u32()?;
            let name_len = usize::try_from(name_len).map_err(|_| ParseError::Invalid("name"))?;
            if name_len > data.len().saturating_sub(6) {
                return Err(ParseError::Invalid("name longer than option data"));
            }
            let name = parse_string(c.take(name_len)?)?;
            let count = c.u16()?;
            let mut requests = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                requests.push(c.u16()?);
            }
            if c.remaining() != 0 {
                return Err(ParseError::Invalid(
                    "trailing bytes after information requests",
                ));
            }
            let req = InfoRequest { name, requests };
            Ok(if option == proto::OPT_GO {
                ClientOption::Go(req)
            } else {
                ClientOption::Info(req)
            })
        }
        other => Ok(ClientOption::Unsupported(other)),
    }
}

/// Parses one whole option (header and data) from the front of `buf`; returns it and the
/// number of bytes consumed. Fuzz entry point for the server's option loop.
pub fn parse_option(buf: &[u8]) -> Result<(ClientOption, usize), ParseError> {
    let header = parse_option_header(buf)?;
    if header.len > MAX_OPTION_LEN {
        return Err(ParseError::TooLong {
            len: u64::from(header.len),
            max: u64::from(MAX_OPTION_LEN),
        });
    }
    let mut c = Cursor::new(buf);
    c.take(proto::OPTION_HEADER_LEN)?;
    let data = c.take(header.len as usize)?;
    Ok((parse_option_data(header.option, data)?, c.position()))
}

/// The fixed 20-byte header of an option reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionReplyHeader {
    /// The option this answers.
    pub option: u32,
    /// Reply type (`REP_*`).
    pub reply: u32,
    /// Length of the data that follows.
    pub len: u32,
}

/// Appends an option reply with its data.
pub fn encode_option_reply(out: &mut Vec<u8>, option: u32, reply: u32, data: &[u8]) {
    out.extend_from_slice(&proto::REP_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply.to_be_bytes());
    out.extend_from_slice(&len_u32(data.len()).to_be_bytes());
    out.extend_from_slice(data);
}

/// Parses an option reply header (client side).
pub fn parse_option_reply_header(buf: &[u8]) -> Result<OptionReplyHeader, ParseError> {
    let mut c = Cursor::new(buf);
    let magic = c.u64()?;
    if magic != proto::REP_MAGIC {
        return Err(ParseError::BadMagic {
            expected: proto::REP_MAGIC,
            found: magic,
        });
    }
    Ok(OptionReplyHeader {
        option: c.u32()?,
        reply: c.u32()?,
        len: c.u32()?,
    })
}

/// One information item of a `REP_INFO` reply.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Info {
    /// `INFO_EXPORT`: size in bytes and transmission flags.
    Export { size: u64, flags: u16 },
    /// `INFO_NAME`: canonical name.
    Name(String),
    /// `INFO_DESCRIPTION`: human-readable description.
    Description(String),
    /// `INFO_BLOCK_SIZE`: minimum, preferred and maximum payload sizes.
    BlockSize { min: u32, preferred: u32, max: u32 },
    /// An information type this crate does not know; clients ignore it.
    Unknown(u16),
}

impl Info {
    /// The data of a `REP_INFO` reply carrying this item.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Info::Export { size, flags } => {
                out.extend_from_slice(&proto::INFO_EXPORT.to_be_bytes());
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(&flags.to_be_bytes());
            }
            Info::Name(name) => {
                out.extend_from_slice(&proto::INFO_NAME.to_be_bytes());
                out.extend_from_slice(name.as_bytes());
            }
            Info::Description(text) => {
                out.extend_from_slice(&proto::INFO_DESCRIPTION.to_be_bytes());
                out.extend_from_slice(text.as_bytes());
            }
            Info::BlockSize {
                min,
                preferred,
                max,
            } => {
                out.extend_from_slice(&proto::INFO_BLOCK_SIZE.to_be_bytes());
                out.extend_from_slice(&min.to_be_bytes());
                out.extend_from_slice(&preferred.to_be_bytes());
                out.extend_from_slice(&max.to_be_bytes());
            }
            Info::Unknown(kind) => out.extend_from_slice(&kind.to_be_bytes()),
        }
        out
    }
}

/// Parses the data of a `REP_INFO` reply (client side).
pub fn parse_info(data: &[u8]) -> Result<Info, ParseError> {
    let mut c = Cursor::new(data);
    let kind = c.u16()?;
    let info = match kind {
        proto::INFO_EXPORT => {
            if data.len() != 12 {
                return Err(ParseError::Invalid("INFO_EXPORT length is not 12"));
            }
            Info::Export {
                size: c.u64()?,
                flags: c.u16()?,
            }
        }
        proto::INFO_NAME => Info::Name(parse_string(c.rest())?),
        proto::INFO_DESCRIPTION => Info::Description(parse_string(c.rest())?),
        proto::INFO_BLOCK_SIZE => {
            if data.len() != 14 {
                return Err(ParseError::Invalid("INFO_BLOCK_SIZE length is not 14"));
            }
            Info::BlockSize {
                min: c.u32()?,
                preferred: c.u32()?,
                max: c.u32()?,
            }
        }
        other => Info::Unknown(other),
    };
    Ok(info)
}

/// Data of a `REP_SERVER` reply to `OPT_LIST`: name length, name, then the description.
pub fn encode_rep_server(name: &str, description: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len() + description.len());
    out.extend_from_slice(&len_u32(name.len()).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(description.as_bytes());
    out
}

/// Parses a `REP_SERVER` reply into (name, description).
pub fn parse_rep_server(data: &[u8]) -> Result<(String, String), ParseError> {
    let mut c = Cursor::new(data);
    let len = c.u32()? as usize;
    if len > data.len().saturating_sub(4) {
        return Err(ParseError::Invalid("name longer than reply"));
    }
    let name = parse_string(c.take(len)?)?;
    let description = parse_string(c.rest())?;
    Ok((name, description))
}

/// The server's answer to `OPT_EXPORT_NAME`: size, transmission flags and, unless the client
/// negotiated `FLAG_C_NO_ZEROES`, 124 zero bytes.
pub fn encode_export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(134);
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        out.resize(out.len() + 124, 0);
    }
    out
}

/// Parses the answer to `OPT_EXPORT_NAME` (the 10 bytes before any zero padding).
pub fn parse_export_name_reply(buf: &[u8]) -> Result<(u64, u16), ParseError> {
    let mut c = Cursor::new(buf);
    Ok((c.u64()?, c.u16()?))
}

/// Converts a length that the caller keeps far below 4 GiB to the wire's `u32`.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn greeting_round_trip() {
        let g = encode_greeting(proto::FLAG_FIXED_NEWSTYLE | proto::FLAG_NO_ZEROES);
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(parse_greeting(&g), Ok(3));
        assert_eq!(
            parse_greeting(&g[..10]),
            Err(ParseError::Incomplete { needed: 16 })
        );
    }

    #[test]
    fn client_flags_must_be_offered() {
        let both = 3u32.to_be_bytes();
        assert_eq!(parse_client_flags(&both, 3), Ok(3));
        assert!(parse_client_flags(&both, 1).is_err());
        assert!(parse_client_flags(&4u32.to_be_bytes(), 3).is_err());
    }

    #[test]
    fn go_round_trip_and_consumed_length() {
        let req = InfoRequest {
            name: "disk".into(),
            requests: vec![proto::INFO_BLOCK_SIZE],
        };
        let mut buf = Vec::new();
        encode_option(&mut buf, proto::OPT_GO, &req.encode());
        buf.extend_from_slice(b"trailing");
        let (opt, used) = parse_option(&buf).expect("valid option");
        assert_eq!(opt, ClientOption::Go(req));
        assert_eq!(used, buf.len() - 8);
        assert_eq!(
            parse_option(&buf[..20]),
            Err(ParseError::Incomplete { needed: 16 + 12 })
        );
    }

    #[test]
    fn info_rejects_bad_lengths() {
        let mut data = 100u32.to_be_bytes().to_vec();
        data.extend_from_slice(&[0, 0]);
        assert!(parse_option_data(proto::OPT_INFO, &data).is_err());
        let mut data = 0u32.to_be_bytes().to_vec();
        data.extend_from_slice(&[0, 2, 0, 3]);
        assert!(matches!(
            parse_option_data(proto::OPT_INFO, &data),
            Err(ParseError::Incomplete { .. })
        ));
        assert!(parse_option_data(proto::OPT_LIST, b"x").is_err());
        assert!(parse_option_data(proto::OPT_EXPORT_NAME, b"a\0b").is_err());
    }

    #[test]
    fn unknown_options_are_unsupported_not_errors() {
        assert_eq!(
            parse_option_data(proto::OPT_STARTTLS, b"").ok(),
            Some(ClientOption::Unsupported(proto::OPT_STARTTLS))
        );
    }

    #[test]
    fn oversized_option_is_refused() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&proto::OPTS_MAGIC.to_be_bytes());
        buf.extend_from_slice(&proto::OPT_GO.to_be_bytes());
        buf.extend_from_slice(&(MAX_OPTION_LEN + 1).to_be_bytes());
        assert!(matches!(
            parse_option(&buf),
            Err(ParseError::TooLong { .. })
        ));
    }

    #[test]
    fn info_items_round_trip() {
        for info in [
            Info::Export {
                size: 1 << 30,
                flags: 0x1ed,
            },
            Info::Name("n".into()),
            Info::Description("d e".into()),
            Info::BlockSize {
                min: 1,
                preferred: 4096,
                max: 1 << 25,
            },
        ] {
            assert_eq!(parse_info(&info.encode()), Ok(info));
        }
        assert_eq!(parse_info(&[0, 9, 1]), Ok(Info::Unknown(9)));
        assert!(parse_info(&[0, 0, 1]).is_err());
    }

    #[test]
    fn option_reply_and_export_name_reply() {
        let mut out = Vec::new();
        encode_option_reply(
            &mut out,
            proto::OPT_LIST,
            proto::REP_SERVER,
            &encode_rep_server("a", "b"),
        );
        let h = parse_option_reply_header(&out).expect("header");
        assert_eq!(
            h,
            OptionReplyHeader {
                option: 3,
                reply: 2,
                len: 6
            }
        );
        assert_eq!(parse_rep_server(&out[20..]), Ok(("a".into(), "b".into())));
        assert_eq!(encode_export_name_reply(5, 1, false).len(), 134);
        let r = encode_export_name_reply(5, 1, true);
        assert_eq!(parse_export_name_reply(&r), Ok((5, 1)));
    }
}
