//! The plumbing both faces' admin endpoints share: a tiny HTTP/1.1 server over a
//! `TcpListener` — accept loop, request head (and small form body) parsing, query decoding,
//! response writing. One request per connection (`Connection: close`), text bodies; `HEAD`
//! is answered as `GET` without the body. What a
//! path means is the face's business ([`crate::block`] for block, [`crate::kv`] for kv):
//! each passes a handler turning a [`Request`] into a [`Response`].
//!
//! Bounds: the request head and body are each capped at 16 KiB (a longer request gets
//! `413`); a client that sends nothing for 10 s is dropped.
//!
//! # Threads
//! The accept loop is one tokio task; every connection is its own task calling the handler.
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head or body accepted.
const MAX_PART: usize = 16 << 10;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One parsed request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ... as sent (upper case by convention, not checked).
    pub method: String,
    /// The path without the query string (not decoded).
    pub path: String,
    /// The raw query string after `?` (not decoded; empty if none).
    pub query: String,
    /// The body (a form body of a POST/PUT), empty if none.
    pub body: String,
}

impl Request {
    /// Parse a request head (request line and headers; the body is not read here).
    fn parse_head(head: &str) -> Self {
        let line = head.lines().next().unwrap_or("");
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("/");
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Self {
            method,
            path: path.to_string(),
            query: query.to_string(),
            body: String::new(),
        }
    }

    /// `name=value` parameters of the query string, then of a form body, each name and
    /// value percent-decoded; a parameter without `=` has an empty value.
    pub fn params(&self) -> Vec<(String, String)> {
        [self.query.as_str(), self.body.trim()]
            .into_iter()
            .flat_map(|s| s.split('&'))
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (decode(k), decode(v))
            })
            .collect()
    }
}

/// A response: status code and a `text/plain` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub code: u16,
    pub body: String,
}

impl Response {
    pub fn new(code: u16, body: impl Into<String>) -> Self {
        Self {
            code,
            body: body.into(),
        }
    }

    pub fn ok(body: impl Into<String>) -> Self {
        Self::new(200, body)
    }
}

/// Percent-decode (`+` is a space; a malformed escape is kept as is).
pub fn decode(q: &str) -> String {
    let b = q.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                if let Some(v) = hex {
                    out.push(v);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Accept connections forever, answering each request with `handler`. `face` names the
/// endpoint in log lines.
pub async fn serve<H, Fut>(listener: TcpListener, face: &'static str, handler: H)
where
    H: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    let handler = Arc::new(handler);
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                let handler = Arc::clone(&handler);
                tokio::spawn(async move {
                    let _ = handle(sock, &*handler).await;
                });
            }
            Err(e) => {
                log::warn!("{face} admin endpoint: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle<H, Fut>(mut sock: TcpStream, handler: &H) -> std::io::Result<()>
where
    H: Fn(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let mut head_only = false;
    let response = match tokio::time::timeout(READ_TIMEOUT, read_request(&mut sock)).await {
        Ok(Ok(Some(mut req))) => {
            // HEAD is GET without the body (same status and Content-Length).
            if req.method.eq_ignore_ascii_case("HEAD") {
                head_only = true;
                req.method = "GET".into();
            }
            handler(req).await
        }
        Ok(Ok(None)) => Response::new(413, "request too large\n"),
        Ok(Err(e)) => return Err(e),
        Err(_) => return Ok(()),
    };
    write_response(&mut sock, &response, head_only).await
}

/// Read the head and, when `Content-Length` says so, the body. `None`: too large.
async fn read_request(sock: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        if buf.len() > MAX_PART {
            return Ok(None);
        }
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            // EOF before a blank line: answer what arrived (a bare request line).
            break buf.len();
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    };
    let head = String::from_utf8_lossy(buf.get(..head_end).unwrap_or_default()).into_owned();
    let mut req = Request::parse_head(&head);
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    if length > MAX_PART {
        return Ok(None);
    }
    let mut body = buf.get(head_end..).unwrap_or_default().to_vec();
    while body.len() < length {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    body.truncate(length);
    req.body = String::from_utf8_lossy(&body).into_owned();
    Ok(Some(req))
}

/// Offset just past the blank line ending the head, if it has arrived.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn write_response(
    sock: &mut TcpStream,
    r: &Response,
    head_only: bool,
) -> std::io::Result<()> {
    let reason = match r.code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        500 => "Internal Server Error",
        _ => "Error",
    };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        r.code,
        r.body.len()
    );
    sock.write_all(head.as_bytes()).await?;
    if !head_only {
        sock.write_all(r.body.as_bytes()).await?;
    }
    sock.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding() {
        assert_eq!(decode("a%20b+c%2"), "a b c%2");
        assert_eq!(decode("%zz%41"), "%zzA");
        assert_eq!(decode(""), "");
    }

    #[test]
    fn request_parts() {
        let mut r = Request::parse_head("POST /knobs?item_size=4k&x HTTP/1.1\r\nHost: h\r\n");
        r.body = "drop%5Funread=1\r\n".into();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/knobs");
        assert_eq!(
            r.params(),
            vec![
                ("item_size".to_string(), "4k".to_string()),
                ("x".to_string(), String::new()),
                ("drop_unread".to_string(), "1".to_string()),
            ]
        );
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET /\n\n"), Some(7));
        assert_eq!(head_end(b"GET /"), None);
    }
}
