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
//! Replies stay in request order. Requests that change nothing a later request could see
//! (`get`, `gets`, `mg` without T/N/R/I, `mn` -- see [`is_plain_read`]) and arrive back to back
//! in one pipeline are executed together, up to [`READ_BATCH`] at a time, each into its own
//! reply buffer, and their replies appended in order: a client pipelining GETs of items on
//! flash keeps several device reads in flight, as memcached's extstore does when it queues
//! the IO of a whole read buffer. Every other request runs alone, after everything before it,
//! so a read after a write in the same pipeline sees the write. A multi-key get also awaits
//! its keys' reads together (see `command::retrieval`).
use bytes::{Buf, BytesMut};
use flashtier_cache::KvStore;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::codec::{CloseReason, Decoded, Decoder, Limits};
use crate::command::{execute, Flow};
use crate::context::Context;
use crate::join::{join_all, BoxFuture};
use crate::output::Output;
use crate::request::Request;
use crate::stats::Stats;

/// Read size per `read` call (memcached reads 16 KiB at a time too).
const READ_CHUNK: usize = 16 * 1024;
/// Output buffer capacity a connection keeps between bursts.
const IDLE_KEEP: usize = 64 * 1024;
/// Input buffer capacity a connection keeps while waiting for bytes: none, so thousands of
/// idle connections cost no read buffers (a burst allocates `READ_CHUNK` again).
const IDLE_KEEP_INPUT: usize = 0;

/// Most pipelined read requests of one connection executed together. Bounds the reply
/// buffers held at once to this many replies (each at most one multi-get's worth).
pub const READ_BATCH: usize = 16;

/// True for requests whose execution changes nothing another request can observe (beyond
/// access bookkeeping), so several may run concurrently with their replies kept in order.
pub fn is_plain_read(request: &Request) -> bool {
    match request {
        Request::Retrieval(r) => r.touch.is_none(),
        Request::MetaGet(m) => {
            let o = &m.opts;
            o.ttl.is_none() && o.vivify.is_none() && o.recache.is_none() && !o.invalidate
        }
        Request::MetaNoop => true,
        _ => false,
    }
}

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
    /// A request decoded while gathering a batch of reads that could not join it.
    lookahead: Option<Decoded>,
    pub input: BytesMut,
    pub output: Output,
    max_output: usize,
}

impl Session {
    pub fn new(limits: Limits, max_output: usize) -> Self {
        Self {
            decoder: Decoder::new(limits),
            swallow: 0,
            lookahead: None,
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
            let decoded = match self.lookahead.take() {
                Some(d) => d,
                None => self.decoder.decode(&mut self.input),
            };
            match decoded {
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
                    if swallow == 0 && is_plain_read(&request) {
                        let batch = self.gather_reads(request);
                        self.execute_reads(ctx, batch).await;
                    } else if execute(ctx, request, &mut self.output).await == Flow::Close {
                        return Pump::Quit;
                    }
                    if self.output.len() >= self.max_output {
                        return Pump::Flush;
                    }
                }
            }
        }
    }

    /// `first` and the plain reads decoded right after it (up to [`READ_BATCH`]); the first
    /// request that cannot join is kept in `lookahead`.
    fn gather_reads(&mut self, first: Request) -> Vec<Request> {
        let mut batch = vec![first];
        while batch.len() < READ_BATCH && !self.input.is_empty() {
            match self.decoder.decode(&mut self.input) {
                Decoded::Request {
                    request,
                    swallow: 0,
                } if is_plain_read(&request) => batch.push(request),
                other => {
                    self.lookahead = Some(other);
                    break;
                }
            }
        }
        batch
    }

    /// Execute plain reads concurrently; replies are appended in request order.
    async fn execute_reads<S: KvStore>(&mut self, ctx: &Context<S>, mut batch: Vec<Request>) {
        if batch.len() == 1 {
            if let Some(request) = batch.pop() {
                // A plain read never closes the connection.
                let _ = execute(ctx, request, &mut self.output).await;
            }
            return;
        }
        Stats::incr(&ctx.stats.pipelined_read_batches);
        let runs = batch
            .into_iter()
            .map(|request| -> BoxFuture<'_, Output> {
                Box::pin(async move {
                    let mut out = Output::new();
                    let _ = execute(ctx, request, &mut out).await;
                    out
                })
            })
            .collect();
        for out in join_all(runs).await {
            self.output.append(out);
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

#[cfg(test)]
mod tests {
    use crate::command::testing::{Harness, TEST_MAX_ITEM};
    use crate::stats::Stats;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn pipelined_reads_answer_in_order_and_see_earlier_writes() {
        let h = Harness::new();
        let out = block_on(h.send(
            b"set a 0 0 1\r\n1\r\nget a\r\nget b\r\nmg a v\r\nmn\r\ngets a\r\n\
              set a 0 0 1\r\n2\r\nget a\r\nmg a v\r\nmg b v\r\n",
        ));
        let cas = out
            .lines()
            .find(|l| l.starts_with("VALUE a 0 1 "))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or("?")
            .to_string();
        assert_eq!(
            out,
            format!(
                "STORED\r\nVALUE a 0 1\r\n1\r\nEND\r\nEND\r\nVA 1\r\n1\r\nMN\r\n\
                 VALUE a 0 1 {cas}\r\n1\r\nEND\r\nSTORED\r\nVALUE a 0 1\r\n2\r\nEND\r\n\
                 VA 1\r\n2\r\nEN\r\n"
            )
        );
        // Two runs of reads: get a .. gets a, then get a .. mg b.
        assert_eq!(Stats::get(&h.ctx.stats.pipelined_read_batches), 2);
    }

    #[test]
    fn a_swallowed_value_ends_a_batch_and_is_discarded() {
        let h = Harness::new();
        let big = TEST_MAX_ITEM + 10;
        let mut input = b"set a 0 0 1\r\nx\r\nget a\r\nget a\r\n".to_vec();
        input.extend_from_slice(format!("set c 0 0 {big}\r\n").as_bytes());
        input.extend(std::iter::repeat_n(b'z', big));
        input.extend_from_slice(b"\r\nget a\r\nget c\r\n");
        let out = block_on(h.send(&input));
        assert_eq!(
            out,
            "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\nVALUE a 0 1\r\nx\r\nEND\r\n\
             SERVER_ERROR object too large for cache\r\nVALUE a 0 1\r\nx\r\nEND\r\nEND\r\n"
        );
    }
}
