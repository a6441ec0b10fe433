//! The incremental request parser: [`Decoder::decode`] finds one complete request at the
//! front of a connection's read buffer, or says `Incomplete`, or says close. It checks before
//! it parses: nothing is consumed until the whole line (and data block) is there.
//!
//! Invariant (the connection's memory bound): without a newline the buffer holds at most
//! [`Limits::max_line`] bytes (memcached's 2048; `get`/`gets` lines up to
//! [`Limits::max_get_line`]); a storage command waits for at most its line plus
//! `max_item_size + 2` bytes; a value over the item limit is never buffered (rejected, then
//! `swallow`ed as it arrives).
//!
//! Layout: [`number`] (C `strto*` rules), [`tokens`] (memcached's tokenizer), [`text`],
//! [`meta`]. Pure functions; runs on the connection's task.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

pub mod meta;
pub mod number;
pub mod text;
pub mod tokens;

use bytes::{Buf, Bytes, BytesMut};

use crate::request::{Meta, Request, Storage, StoreMode};

/// memcached closes a connection that sends this many bytes without a newline (unless the
/// line is a multi-key get).
pub const DEFAULT_MAX_LINE: usize = 2048;
/// memcached reads command lines into a buffer of this size (`READ_BUFFER_SIZE`): a line
/// whose newline does not fit in it is never seen whole, so the connection is closed even
/// when the newline arrived (again unless the line is a multi-key get).
pub const DEFAULT_MAX_BUFFERED_LINE: usize = 16 * 1024;
/// The longest key memcached accepts.
pub const KEY_MAX_LENGTH: usize = 250;

/// Size limits the decoder enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Values larger than this are rejected (and swallowed). Default: `1 MiB`.
    pub max_item_size: usize,
    /// Bytes without a newline before the connection is closed. Default: `2048`.
    pub max_line: usize,
    /// Same for `get`/`gets` lines, which memcached lets grow. Default: `1 MiB`.
    pub max_get_line: usize,
    /// Longest line, newline included, accepted even when it arrived whole (memcached's
    /// read buffer). Default: `16 KiB`.
    pub max_buffered_line: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_item_size: 1 << 20,
            max_line: DEFAULT_MAX_LINE,
            max_get_line: 1 << 20,
            max_buffered_line: DEFAULT_MAX_BUFFERED_LINE,
        }
    }
}

/// Why the decoder wants the connection closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The first byte was 0x80: a binary-protocol client (deprecated; not served).
    BinaryProtocol,
    /// No newline within the line limit.
    LineTooLong,
    /// An HTTP request line (memcached closes these silently).
    Http,
}

/// The result of one [`Decoder::decode`] call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// No complete request at the front of the buffer; read more bytes.
    Incomplete,
    /// One request, already removed from the buffer. Before decoding the next one, the caller
    /// must discard `swallow` further bytes (a rejected data block), reading them if needed.
    Request { request: Request, swallow: usize },
    /// Close the connection (after flushing replies already produced).
    Close(CloseReason),
}

/// What parsing a command line decided.
pub(crate) enum LineOutcome {
    /// The request is complete with the line alone.
    Done(Request),
    /// The line announced a data block of `len` bytes (plus `\r\n`).
    Data {
        len: usize,
        header: DataHeader,
    },
    /// A request to answer, followed by `swallow` bytes to discard.
    Swallow {
        request: Request,
        swallow: usize,
    },
    Close(CloseReason),
}

/// A storage command waiting for its data block.
pub(crate) enum DataHeader {
    Text(Storage),
    Meta { meta: Meta, mode: StoreMode },
}

/// Per-connection decoder state.
#[derive(Clone, Debug)]
pub struct Decoder {
    limits: Limits,
    /// Set once the first byte has been seen (binary-protocol detection happens only there).
    started: bool,
}

impl Decoder {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            started: false,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Decode one request from the front of `buf`. See the module docs.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Decoded {
        let Some(&first) = buf.first() else {
            return Decoded::Incomplete;
        };
        if !self.started {
            self.started = true;
            if first == 0x80 {
                return Decoded::Close(CloseReason::BinaryProtocol);
            }
        }
        let Some(nl) = memchr::memchr(b'\n', buf) else {
            return self.no_newline(buf);
        };
        let next = nl + 1;
        if next > self.limits.max_buffered_line && !is_get_line(buf) {
            return Decoded::Close(CloseReason::LineTooLong);
        }
        let outcome = {
            let mut line = buf.get(..nl).unwrap_or_default();
            if line.len() > 1 && line.last() == Some(&b'\r') {
                line = line.get(..line.len() - 1).unwrap_or_default();
            }
            // memcached tokenizes a C string: everything after a NUL byte is ignored.
            if let Some(nul) = memchr::memchr(0, line) {
                line = line.get(..nul).unwrap_or_default();
            }
            text::parse_line(line, &self.limits)
        };
        match outcome {
            LineOutcome::Done(request) => {
                buf.advance(next);
                Decoded::Request {
                    request,
                    swallow: 0,
                }
            }
            LineOutcome::Swallow { request, swallow } => {
                buf.advance(next);
                Decoded::Request { request, swallow }
            }
            LineOutcome::Close(reason) => Decoded::Close(reason),
            LineOutcome::Data { len, header } => {
                let Some(total) = next.checked_add(len).and_then(|t| t.checked_add(2)) else {
                    return Decoded::Close(CloseReason::LineTooLong);
                };
                if buf.len() < total {
                    buf.reserve(total - buf.len());
                    return Decoded::Incomplete;
                }
                buf.advance(next);
                let mut data = buf.split_to(len + 2);
                let good = data.get(len..) == Some(&b"\r\n"[..]);
                data.truncate(len);
                let value: Bytes = data.freeze();
                Decoded::Request {
                    request: finish_data(header, value, good),
                    swallow: 0,
                }
            }
        }
    }

    fn no_newline(&self, buf: &BytesMut) -> Decoded {
        if buf.len() <= self.limits.max_line {
            return Decoded::Incomplete;
        }
        if is_get_line(buf) && buf.len() <= self.limits.max_get_line {
            Decoded::Incomplete
        } else {
            Decoded::Close(CloseReason::LineTooLong)
        }
    }
}

/// memcached's test for a line allowed past the line limits: `get `/`gets ` after at most
/// 100 spaces.
fn is_get_line(buf: &[u8]) -> bool {
    let lead = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = buf.get(lead..).unwrap_or_default();
    lead <= 100 && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
}

/// Build the request once the data block is in; `good` says it ended with `\r\n`.
fn finish_data(header: DataHeader, value: Bytes, good: bool) -> Request {
    match header {
        DataHeader::Text(mut storage) => {
            if !good {
                return Request::Reply {
                    line: "CLIENT_ERROR bad data chunk",
                    noreply: storage.noreply,
                };
            }
            storage.value = value;
            Request::Storage(storage)
        }
        DataHeader::Meta { meta, mode } => {
            if !good {
                // Meta commands always report errors, even in quiet mode.
                return Request::Reply {
                    line: "CLIENT_ERROR bad data chunk",
                    noreply: false,
                };
            }
            Request::MetaSet { meta, mode, value }
        }
    }
}

#[cfg(test)]
mod tests;
