//! Reading one request's replies off a connection, up to the `mn` sentinel.
//!
//! Every request ends with `mn\r\n`, so the reply is complete after the expected number of
//! `MN\r\n` lines (the sentinel's plus any generated `mn`'s). No knowledge of each command's
//! reply shape is needed — which matters for malformed input, where the shape is exactly what
//! is being tested. The only structure used is the length of data blocks (`VALUE ... <bytes>`,
//! `VA <size> ...`), so a value that happens to contain `MN\r\n` is not mistaken for the end.
//!
//! A reply ends in one of three ways: complete, the server closed the connection, or nothing
//! arrived for the read timeout (a hang). Touched by one runner thread per server.

use std::io::{self, BufRead, BufReader, Read};

/// Longest reply line accepted; a server sending more without a newline is reported as such.
const MAX_LINE: usize = 64 * 1024;
/// Largest data block accepted (well above any item size limit in use).
const MAX_DATA: usize = 64 * 1024 * 1024;

/// One unit of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A response line, `\r\n` included.
    Line(Vec<u8>),
    /// A `VALUE`/`VA` header line (with `\r\n`) and its data block (with the trailing
    /// `\r\n` as received).
    Data { header: Vec<u8>, data: Vec<u8> },
}

/// How the reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// All expected `MN` lines arrived.
    Complete,
    /// The server closed (or reset) the connection.
    Closed,
    /// Nothing arrived within the read timeout.
    TimedOut,
    /// The server sent a line longer than 64 KiB or a data block larger than 64 MiB.
    Oversized,
}

/// The replies to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Frames before the sentinel's `MN` (that one is not included).
    pub frames: Vec<Frame>,
    /// How reading ended.
    pub end: End,
}

impl Reply {
    /// The raw bytes received, for reports.
    pub fn raw(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for f in &self.frames {
            match f {
                Frame::Line(l) => out.extend_from_slice(l),
                Frame::Data { header, data } => {
                    out.extend_from_slice(header);
                    out.extend_from_slice(data);
                }
            }
        }
        out
    }
}

/// The data block length announced by a `VALUE` or `VA` header line, if it is one.
pub fn data_len(line: &[u8]) -> Option<usize> {
    let body = line.strip_suffix(b"\r\n")?;
    let mut tokens = body.split(|&b| b == b' ');
    let first = tokens.next()?;
    let len_token = match first {
        b"VALUE" => tokens.nth(2)?,
        b"VA" => tokens.next()?,
        _ => return None,
    };
    let len: usize = std::str::from_utf8(len_token).ok()?.parse().ok()?;
    Some(len)
}

fn classify(e: &io::Error) -> End {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => End::TimedOut,
        _ => End::Closed,
    }
}

/// Reads one line (up to and including `\n`). `Ok(None)` at end of stream.
fn read_line<R: Read>(r: &mut BufReader<R>, out: &mut Vec<u8>) -> Result<bool, End> {
    out.clear();
    loop {
        let available = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(classify(&e)),
        };
        if available.is_empty() {
            return if out.is_empty() {
                Ok(false)
            } else {
                Err(End::Closed)
            };
        }
        if let Some(pos) = available.iter().position(|&b| b == b'\n') {
            out.extend_from_slice(&available[..=pos]);
            r.consume(pos + 1);
            return Ok(true);
        }
        let n = available.len();
        out.extend_from_slice(available);
        r.consume(n);
        if out.len() > MAX_LINE {
            return Err(End::Oversized);
        }
    }
}

/// Reads replies until `expected_mn` lines `MN\r\n` were seen at frame level.
pub fn read_reply<R: Read>(r: &mut BufReader<R>, expected_mn: usize) -> Reply {
    let mut frames = Vec::new();
    let mut seen_mn = 0;
    let mut line = Vec::new();
    loop {
        match read_line(r, &mut line) {
            Ok(true) => {}
            Ok(false) => {
                return Reply {
                    frames,
                    end: End::Closed,
                }
            }
            Err(end) => {
                if !line.is_empty() {
                    frames.push(Frame::Line(std::mem::take(&mut line)));
                }
                return Reply { frames, end };
            }
        }
        if line == b"MN\r\n" {
            seen_mn += 1;
            if seen_mn == expected_mn {
                return Reply {
                    frames,
                    end: End::Complete,
                };
            }
            frames.push(Frame::Line(line.clone()));
            continue;
        }
        match data_len(&line) {
            Some(len) if len <= MAX_DATA => {
                let mut data = vec![0u8; len + 2];
                if let Err(e) = r.read_exact(&mut data) {
                    frames.push(Frame::Line(line.clone()));
                    return Reply {
                        frames,
                        end: classify(&e),
                    };
                }
                frames.push(Frame::Data {
                    header: line.clone(),
                    data,
                });
            }
            Some(_) => {
                frames.push(Frame::Line(line.clone()));
                return Reply {
                    frames,
                    end: End::Oversized,
                };
            }
            None => frames.push(Frame::Line(line.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8], mn: usize) -> Reply {
        read_reply(&mut BufReader::new(bytes), mn)
    }

    #[test]
    fn value_containing_mn_is_not_the_end() {
        let r = parse(b"VALUE k 0 4 7\r\nMN\r\n\r\nEND\r\nMN\r\n", 1);
        assert_eq!(r.end, End::Complete);
        assert_eq!(r.frames.len(), 2);
        assert_eq!(
            r.frames[0],
            Frame::Data {
                header: b"VALUE k 0 4 7\r\n".to_vec(),
                data: b"MN\r\n\r\n".to_vec()
            }
        );
    }

    #[test]
    fn generated_mn_lines_are_counted() {
        let r = parse(b"MN\r\nHD\r\nMN\r\n", 2);
        assert_eq!(r.end, End::Complete);
        assert_eq!(
            r.frames,
            vec![
                Frame::Line(b"MN\r\n".to_vec()),
                Frame::Line(b"HD\r\n".to_vec())
            ]
        );
    }

    #[test]
    fn eof_is_closed() {
        let r = parse(b"ERROR\r\n", 1);
        assert_eq!(r.end, End::Closed);
        let r = parse(b"VA 10\r\nabc", 1);
        assert_eq!(r.end, End::Closed);
    }

    #[test]
    fn data_len_of_headers() {
        assert_eq!(data_len(b"VALUE k 1 22 33\r\n"), Some(22));
        assert_eq!(data_len(b"VA 5 t1 c2\r\n"), Some(5));
        assert_eq!(data_len(b"VA\r\n"), None);
        assert_eq!(data_len(b"HD c1\r\n"), None);
    }
}
