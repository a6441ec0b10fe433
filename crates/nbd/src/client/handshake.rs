//! Client side of the fixed newstyle handshake: `OPT_GO` with block-size, name and
//! description requests, falling back to `OPT_EXPORT_NAME` for servers without `OPT_GO`.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::codec::handshake::{
    encode_option, parse_export_name_reply, parse_greeting, parse_info, parse_option_reply_header,
    Info, InfoRequest,
};
use crate::error::Error;
use crate::proto;
use flashtier_backend::BlockSizes;

/// What the server told us about the export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    /// Export size in bytes.
    pub size: u64,
    /// Transmission flags (`FLAG_*`).
    pub flags: u16,
    /// Size constraints (the spec's defaults when the server sent none).
    pub block_sizes: BlockSizes,
    /// Canonical name, if the server sent one.
    pub name: Option<String>,
    /// Description, if the server sent one.
    pub description: Option<String>,
}

impl ExportInfo {
    /// True if transmission flag `flag` is set.
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// Longest option reply payload accepted from a server.
const MAX_REPLY_LEN: u32 = 64 * 1024;

/// Negotiates `export` and leaves the stream at the start of transmission.
pub(crate) async fn handshake<R, W>(
    rd: &mut R,
    wr: &mut W,
    export: &str,
) -> Result<ExportInfo, Error>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut greeting = [0u8; proto::GREETING_LEN];
    rd.read_exact(&mut greeting).await?;
    let server_flags = parse_greeting(&greeting)?;
    if server_flags & proto::FLAG_FIXED_NEWSTYLE == 0 {
        return Err(Error::Handshake(
            "server does not speak fixed newstyle".into(),
        ));
    }
    let no_zeroes = server_flags & proto::FLAG_NO_ZEROES != 0;
    let mut client_flags = proto::FLAG_C_FIXED_NEWSTYLE;
    if no_zeroes {
        client_flags |= proto::FLAG_C_NO_ZEROES;
    }
    wr.write_all(&client_flags.to_be_bytes()).await?;

    let req = InfoRequest {
        name: export.to_string(),
        requests: vec![
            proto::INFO_BLOCK_SIZE,
            proto::INFO_NAME,
            proto::INFO_DESCRIPTION,
        ],
    };
    let mut out = Vec::new();
    encode_option(&mut out, proto::OPT_GO, &req.encode());
    wr.write_all(&out).await?;
    wr.flush().await?;

    let mut info = ExportInfo {
        size: 0,
        flags: 0,
        block_sizes: BlockSizes::default(),
        name: None,
        description: None,
    };
    let mut have_export = false;
    loop {
        let mut header = [0u8; proto::OPTION_REPLY_HEADER_LEN];
        rd.read_exact(&mut header).await?;
        let header = parse_option_reply_header(&header)?;
        if header.len > MAX_REPLY_LEN {
            return Err(Error::Handshake(format!(
                "option reply of {} bytes",
                header.len
            )));
        }
        let mut data = vec![0u8; header.len as usize];
        rd.read_exact(&mut data).await?;
        if header.option != proto::OPT_GO {
            return Err(Error::Handshake(format!(
                "reply to option {} while waiting for GO",
                header.option
            )));
        }
        match header.reply {
            proto::REP_INFO => match parse_info(&data)? {
                Info::Export { size, flags } => {
                    info.size = size;
                    info.flags = flags;
                    have_export = true;
                }
                Info::BlockSize {
                    min,
                    preferred,
                    max,
                } => {
                    info.block_sizes = BlockSizes {
                        min,
                        preferred,
                        max_payload: max,
                    };
                }
                Info::Name(n) => info.name = Some(n),
                Info::Description(d) => info.description = Some(d),
                _ => {}
            },
            proto::REP_ACK => {
                if !have_export {
                    return Err(Error::Handshake(
                        "GO acknowledged without INFO_EXPORT".into(),
                    ));
                }
                return Ok(info);
            }
            proto::REP_ERR_UNSUP => return export_name(rd, wr, export, no_zeroes).await,
            kind if kind & proto::REP_FLAG_ERROR != 0 => {
                let msg = String::from_utf8_lossy(&data);
                return Err(Error::Handshake(format!(
                    "server refused export {export:?}: error {:#x}: {msg}",
                    kind
                )));
            }
            _ => {}
        }
    }
}

/// Fallback for servers that do not know `OPT_GO`.
async fn export_name<R, W>(
    rd: &mut R,
    wr: &mut W,
    export: &str,
    no_zeroes: bool,
) -> Result<ExportInfo, Error>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut out = Vec::new();
    encode_option(&mut out, proto::OPT_EXPORT_NAME, export.as_bytes());
    wr.write_all(&out).await?;
    wr.flush().await?;
    let mut reply = vec![0u8; if no_zeroes { 10 } else { 134 }];
    rd.read_exact(&mut reply).await.map_err(|_| {
        Error::Handshake(format!("server closed the connection on export {export:?}"))
    })?;
    let (size, flags) = parse_export_name_reply(&reply)?;
    Ok(ExportInfo {
        size,
        flags,
        block_sizes: BlockSizes::default(),
        name: None,
        description: None,
    })
}
