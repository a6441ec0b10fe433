//! One client connection: read, parse every complete request, execute in order, write.
//!
//! The loop (one tokio task per connection, on any worker thread):
//! 1. [`Session::pump`] decodes and executes every complete request in the read buffer,
//!    appending replies to the output buffer (pipelining), and discards swallowed bytes.
//! 2. When no complete request is left — or the output buffer passed its limit — the output
//!    is written in one go. Reading stops while a write is pending, so a client that does not
//!    read its replies (a slow reader) stalls only itself, and memory stays bounded.
//! 3. Read more and repeat; on shutdown, stop reading, flush what was produced and close.
//!
//! Memory invariants: the read buffer holds at most one request being assembled (bounded by
//! the decoder's limits); the output buffer holds at most `max_output_buffer` plus one reply.
//! Idle connections keep no read buffer (an empty one is released before waiting) and at
//! most [`IDLE_KEEP`] of output buffer.
//!
//! Replies stay in request order because requests are executed one after another; a
//! multi-key get is the unit that may await several store reads together (see
//! `command::retrieval`).
use bytes::{Buf, BytesMut};
use flashtier_cache::KvStore;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::codec::{CloseReason, Decoded, Decoder, Limits};
use crate::command::{execute, Flow};
use crate::context::Context;
use crate::output::Output;
use crate::stats::Stats;

/// Read size per `read` call (memcached reads 16 KiB at a time too).
const READ_CHUNK: usize = 16 * 1024;
/// Output buffer capacity a connection keeps between bursts.
const IDLE_KEEP: usize = 64 * 1024;
/// Input buffer capacity a connection keeps while waiting for bytes: none, so thousands of
/// idle connections cost no read buffers (a burst allocates `READ_CHUNK` again).
const IDLE_KEEP_INPUT: usize = 0;

/// What [`Session::pump`] stopped for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pump {
    /// No complete request left: flush output, then read.
    NeedInput,
    /// The output buffer is over its limit: flush before executing more.
    Flush,
    /// `quit`: flush and close.
    Quit,
    /// Protocol violation: flush and close.
    Close(CloseReason),
}

/// The protocol state of one connection, independent of the socket (tests drive it
/// directly).
#[derive(Debug)]
pub struct Session {
    decoder: Decoder,
    /// Bytes still to discard from a rejected data block.
    swallow: usize,
    pub input: BytesMut,
    pub output: Output,
    max_output: usize,
}

impl Session {
    pub fn new(limits: Limits, max_output: usize) -> Self {
        Self {
            decoder: Decoder::new(limits),
            swallow: 0,
            input: BytesMut::new(),
            output: Output::new(),
            max_output,
        }
    }

    /// Execute every complete request in `input`. See [`Pump`].
    pub async fn pump<S: KvStore>(&mut self, ctx: &Context<S>) -> Pump {
        loop {
            if self.swallow > 0 {
                let n = self.swallow.min(self.input.len());
                self.input.advance(n);
                self.swallow -= n;
                if self.swallow > 0 {
                    return Pump::NeedInput;
                }
            }
            match self.decoder.decode(&mut self.input) {
                Decoded::Incomplete => return Pump::NeedInput,
                Decoded::Close(reason) => {
                    let s = &ctx.stats;
                    match reason {
                        CloseReason::BinaryProtocol => Stats::incr(&s.binary_protocol_rejected),
                        CloseReason::LineTooLong => Stats::incr(&s.line_too_long_closed),
                        _ => {}
                    }
                    return Pump::Close(reason);
                }
                Decoded::Request { request, swallow } => {
                    self.swallow = swallow;
                    if execute(ctx, request, &mut self.output).await == Flow::Close {
                        return Pump::Quit;
                    }
                    if self.output.len() >= self.max_output {
                        return Pump::Flush;
                    }
                }
            }
        }
    }

    /// True while a rejected data block is still being discarded.
    pub fn swallowing(&self) -> bool {
        self.swallow > 0
    }
}

/// Serve one accepted connection until the client leaves, sends `quit`, breaks the protocol
/// or the server shuts down.
pub async fn serve_connection<S: KvStore>(
    ctx: &Context<S>,
    mut stream: TcpStream,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let limits = Limits {
        max_item_size: ctx.settings.max_item_size.min(ctx.store.max_item_size()),
        ..Limits::default()
    };
    let mut session = Session::new(limits, ctx.settings.max_output_buffer);
    loop {
        let step = session.pump(ctx).await;
        if !session.output.is_empty() {
            Stats::add(&ctx.stats.bytes_written, session.output.len() as u64);
            for segment in session.output.drain() {
                stream.write_all(&segment).await?;
            }
            session.output.clear(IDLE_KEEP);
        }
        match step {
            Pump::Quit | Pump::Close(_) => return Ok(()),
            Pump::Flush => continue,
            Pump::NeedInput => {}
        }
        if *shutdown.borrow() {
            return Ok(());
        }
        if session.input.is_empty() && session.input.capacity() > IDLE_KEEP_INPUT {
            session.input = BytesMut::new();
        }
        // Wait for bytes (holding no buffer while idle), or for shutdown.
        tokio::select! {
            ready = stream.readable() => ready?,
            _ = shutdown.changed() => return Ok(()),
        }
        session.input.reserve(READ_CHUNK);
        let mut room = session.input.capacity() - session.input.len();
        let mut n = match stream.try_read_buf(&mut session.input) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        Stats::add(&ctx.stats.bytes_read, n as u64);
        // A read that filled the buffer may have left more behind: keep reading (up to a
        // bound) so a pipeline sent in one burst is answered with one write. A short read
        // means the socket is drained, so skip the extra syscall.
        while n == room && session.input.len() < READ_CHUNK * 4 {
            session.input.reserve(READ_CHUNK);
            room = session.input.capacity() - session.input.len();
            n = match stream.try_read_buf(&mut session.input) {
                Ok(n) if n > 0 => n,
                _ => break,
            };
            Stats::add(&ctx.stats.bytes_read, n as u64);
        }
    }
}
