//! Small async read helpers shared by the server and the client: exact reads that report
//! EOF distinctly, and payload reads into a fresh buffer without zero-filling it first.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Reads exactly `len` bytes into a new buffer (no zero-fill; bytes are read straight into
/// spare capacity). EOF before `len` bytes is `UnexpectedEof`.
pub(crate) async fn read_payload<R: AsyncRead + Unpin>(
    rd: &mut R,
    len: usize,
) -> std::io::Result<Bytes> {
    let mut buf = BytesMut::with_capacity(len);
    while buf.len() < len {
        let want = (len - buf.len()) as u64;
        if (&mut *rd).take(want).read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(buf.freeze())
}
