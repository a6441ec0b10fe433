//! Server side of the fixed newstyle handshake.
//!
//! Sequence: greeting (`NBDMAGIC`, `IHAVEOPT`, flags FIXED_NEWSTYLE | NO_ZEROES), client
//! flags, then options until `OPT_EXPORT_NAME` or a successful `OPT_GO` enters transmission,
//! `OPT_ABORT` ends the session, or the client hangs up. Supported: EXPORT_NAME, ABORT, LIST,
//! INFO, GO; every other option gets `REP_ERR_UNSUP` (this server offers neither TLS nor
//! structured replies). Runs in the connection's task, strictly request/response.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::codec::handshake::{
    encode_export_name_reply, encode_greeting, encode_option_reply, encode_rep_server,
    parse_client_flags, parse_option_data, parse_option_header, ClientOption, Info, InfoRequest,
    MAX_OPTION_LEN,
};
use crate::error::Error;
use crate::proto;
use crate::server::{Export, Shared};

/// Largest oversized option payload drained (then refused with `REP_ERR_TOO_BIG`) instead
/// of dropping the connection.
const MAX_OPTION_DRAIN: u64 = 1 << 20;

/// How the handshake ended.
pub(crate) enum Outcome {
    /// Enter transmission with this export.
    Transmission(Export),
    /// The client aborted or left; close quietly.
    Closed,
}

/// Transmission flags advertised for `export`.
pub fn transmission_flags(export: &Export) -> u16 {
    let b = &export.backend;
    let mut flags = proto::FLAG_HAS_FLAGS
        | proto::FLAG_SEND_FLUSH
        | proto::FLAG_SEND_FUA
        | proto::FLAG_SEND_TRIM
        | proto::FLAG_SEND_WRITE_ZEROES
        | proto::FLAG_SEND_CACHE;
    if b.can_multi_conn() {
        flags |= proto::FLAG_CAN_MULTI_CONN;
    }
    if b.is_read_only() {
        flags |= proto::FLAG_READ_ONLY;
    }
    if b.is_rotational() {
        flags |= proto::FLAG_ROTATIONAL;
    }
    flags
}

/// Largest READ/WRITE payload on `export` under `shared`'s configuration.
pub(crate) fn max_payload(shared: &Shared, export: &Export) -> u32 {
    shared
        .config
        .max_payload
        .min(export.backend.block_sizes().max_payload)
}

/// Reads exactly `n` bytes, mapping a clean EOF to `Ok(None)`.
async fn read_or_eof<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut [u8]) -> Result<bool, Error> {
    match rd.read_exact(buf).await {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(Error::Io(e)),
    }
}

async fn reply<W: AsyncWrite + Unpin>(
    wr: &mut W,
    option: u32,
    kind: u32,
    data: &[u8],
) -> Result<(), Error> {
    let mut out = Vec::with_capacity(proto::OPTION_REPLY_HEADER_LEN + data.len());
    encode_option_reply(&mut out, option, kind, data);
    wr.write_all(&out).await?;
    Ok(())
}

/// Runs the handshake on a fresh connection.
pub(crate) async fn negotiate<R, W>(
    shared: &Shared,
    rd: &mut R,
    wr: &mut W,
) -> Result<Outcome, Error>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let offered = proto::FLAG_FIXED_NEWSTYLE | proto::FLAG_NO_ZEROES;
    wr.write_all(&encode_greeting(offered)).await?;
    wr.flush().await?;
    let mut flags = [0u8; 4];
    if !read_or_eof(rd, &mut flags).await? {
        return Ok(Outcome::Closed);
    }
    let client_flags = parse_client_flags(&flags, offered)?;
    let no_zeroes = client_flags & proto::FLAG_C_NO_ZEROES != 0;

    loop {
        wr.flush().await?;
        let mut header = [0u8; proto::OPTION_HEADER_LEN];
        if !read_or_eof(rd, &mut header).await? {
            return Ok(Outcome::Closed);
        }
        let header = parse_option_header(&header)?;
        if header.len > MAX_OPTION_LEN {
            let len = u64::from(header.len);
            if header.option == proto::OPT_EXPORT_NAME || len > MAX_OPTION_DRAIN {
                return Err(Error::Handshake(format!("option of {len} bytes refused")));
            }
            tokio::io::copy(&mut (&mut *rd).take(len), &mut tokio::io::sink()).await?;
            reply(
                wr,
                header.option,
                proto::REP_ERR_TOO_BIG,
                b"option too large",
            )
            .await?;
            continue;
        }
        let mut data = vec![0u8; header.len as usize];
        if !read_or_eof(rd, &mut data).await? {
            return Ok(Outcome::Closed);
        }
        let option = match parse_option_data(header.option, &data) {
            Ok(o) => o,
            Err(e) if header.option == proto::OPT_EXPORT_NAME => return Err(e.into()),
            Err(e) => {
                let msg = e.to_string();
                reply(wr, header.option, proto::REP_ERR_INVALID, msg.as_bytes()).await?;
                continue;
            }
        };
        if shared.shutting_down() && option != ClientOption::Abort {
            if header.option == proto::OPT_EXPORT_NAME {
                return Ok(Outcome::Closed);
            }
            reply(
                wr,
                header.option,
                proto::REP_ERR_SHUTDOWN,
                b"server is shutting down",
            )
            .await?;
            continue;
        }
        match option {
            ClientOption::ExportName(name) => {
                // No error reply exists for EXPORT_NAME: an unknown name ends the session.
                let Some(export) = shared.export(&name) else {
                    return Ok(Outcome::Closed);
                };
                let size = export.backend.size();
                let out = encode_export_name_reply(size, transmission_flags(export), no_zeroes);
                wr.write_all(&out).await?;
                wr.flush().await?;
                return Ok(Outcome::Transmission(export.clone()));
            }
            ClientOption::Abort => {
                reply(wr, header.option, proto::REP_ACK, &[]).await?;
                wr.flush().await?;
                return Ok(Outcome::Closed);
            }
            ClientOption::List => {
                for e in &shared.exports {
                    let data = encode_rep_server(&e.name, &e.description);
                    reply(wr, header.option, proto::REP_SERVER, &data).await?;
                }
                reply(wr, header.option, proto::REP_ACK, &[]).await?;
            }
            ClientOption::Info(req) | ClientOption::Go(req) => {
                let go = header.option == proto::OPT_GO;
                if let Some(export) = send_info(shared, wr, header.option, &req).await? {
                    if go {
                        wr.flush().await?;
                        return Ok(Outcome::Transmission(export));
                    }
                }
            }
            ClientOption::Unsupported(opt) => {
                reply(wr, opt, proto::REP_ERR_UNSUP, b"option not supported").await?;
            }
        }
    }
}

/// Answers `OPT_INFO` / `OPT_GO`; returns the export on success.
async fn send_info<W: AsyncWrite + Unpin>(
    shared: &Shared,
    wr: &mut W,
    option: u32,
    req: &InfoRequest,
) -> Result<Option<Export>, Error> {
    let Some(export) = shared.export(&req.name) else {
        let msg = format!("no export named {:?}", req.name);
        reply(wr, option, proto::REP_ERR_UNKNOWN, msg.as_bytes()).await?;
        return Ok(None);
    };
    let info = Info::Export {
        size: export.backend.size(),
        flags: transmission_flags(export),
    };
    reply(wr, option, proto::REP_INFO, &info.encode()).await?;
    let sizes = export.backend.block_sizes();
    // Block sizes are sent even when not requested: they are informative, and any client
    // may rely on the defaults we stay within.
    let bs = Info::BlockSize {
        min: sizes.min,
        preferred: sizes.preferred,
        max: max_payload(shared, export),
    };
    reply(wr, option, proto::REP_INFO, &bs.encode()).await?;
    for kind in &req.requests {
        let item = match *kind {
            proto::INFO_NAME => Info::Name(export.name.clone()),
            proto::INFO_DESCRIPTION if !export.description.is_empty() => {
                Info::Description(export.description.clone())
            }
            _ => continue,
        };
        reply(wr, option, proto::REP_INFO, &item.encode()).await?;
    }
    reply(wr, option, proto::REP_ACK, &[]).await?;
    Ok(Some(export.clone()))
}
