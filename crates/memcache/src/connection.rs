//! One client connection: read, parse every complete request, execute in order, write (the
//! loop: [`serve_connection`]). One tokio task per connection, on any worker thread.
//!
//! Invariants: replies stay in request order; only plain reads ([`is_plain_read`]) run
//! together, in a window of at most [`READ_WINDOW`] that keeps filling from the socket while
//! its reads are at the device ([`ReadWindow`]); every other request runs alone after
//! everything before it, so a read after a write in the same pipeline sees the write.
//! Reading stops while a write is pending or the window is full, so a slow reader stalls
//! only itself. Memory: the read
//! buffer holds at most one request being assembled (bounded by the decoder's limits), the
//! output buffer at most `max_output_buffer` plus one reply; an idle connection keeps no read
//! buffer and at most [`IDLE_KEEP`] of output buffer.

use std::time::Instant;

use bytes::{Buf, BytesMut};
use flashtier_cache::{GetNow, Item, KvStore};
use tokio::sync::watch;

use crate::access::Access;
use crate::codec::{CloseReason, Decoded, Decoder, Limits};
use crate::command::{execute, execute_fetched, Flow};
use crate::context::Context;
use crate::dump::DumpState;
use crate::latency::Stage;
use crate::output::Output;
use crate::request::{Request, StoreMode};
use crate::stats::Stats;
use crate::stream::{Stream, READ_CHUNK};
use crate::window::ReadWindow;

/// Output buffer capacity a connection keeps between bursts.
const IDLE_KEEP: usize = 64 * 1024;
/// Input buffer capacity a connection keeps while waiting for bytes: none, so thousands of
/// idle connections cost no read buffers (a burst allocates `READ_CHUNK` again).
const IDLE_KEEP_INPUT: usize = 0;
/// Longest command line shown by the per-command log.
const LOG_LINE_MAX: usize = 200;

/// Most plain reads of one connection in flight at once ([`ReadWindow`]). Bounds the reply
/// buffers held at once to this many replies (each at most one multi-get's worth).
///
/// Replies stay in request order. Requests that change nothing a later request could see
/// (`get`, `gets`, `mg` without T/N/R/I, `mn` -- see [`is_plain_read`]) run concurrently, up
/// to [`READ_WINDOW`] at a time, each into its own reply buffer, whether they came in one
/// packet or one by one while earlier reads were at the device; each reply is written as
/// soon as it and the ones before it are ready. A client keeps several device reads in
/// flight per connection, as memcached's extstore does for the IO of a whole read buffer.
/// Every other request runs alone, after everything before it, so a read after a write in
/// the same pipeline sees the write. A multi-key get also awaits its keys' reads together,
/// at most `FETCH_WINDOW` at a time (see `command::retrieval`): a connection keeps at most
/// `READ_WINDOW` × `FETCH_WINDOW` flash reads outstanding.
pub const READ_WINDOW: usize = 16;

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

/// Where a plain read runs, as its lookup decided.
enum Plan {
    /// It may wait for a device: in the window, overlapped with the requests behind it.
    Window,
    /// In place ([`execute`]): it completes on its first poll.
    InPlace,
    /// A one-key `get`/`gets` already answered by [`KvStore::get_if_ready`] (a RAM hit, one
    /// index probe for the decision and the read): only its reply is left to write.
    /// `Instant`: before the lookup (the request's latency starts there).
    Fetched(Option<Item>, Instant),
}

/// Where a plain read runs ([`KvStore::get_if_ready`], [`KvStore::read_may_wait`]); a
/// multi-key read always in the window (its keys' reads overlapped).
fn plan<S: KvStore>(store: &S, request: &Request) -> Plan {
    let wait = |may: bool| if may { Plan::Window } else { Plan::InPlace };
    match request {
        Request::Retrieval(r) => match r.keys.as_slice() {
            [key] if r.touch.is_none() => {
                let started = Instant::now();
                match store.get_if_ready(key) {
                    GetNow::Done(item) => Plan::Fetched(item, started),
                    GetNow::Run => Plan::InPlace,
                    GetNow::MayWait => Plan::Window,
                }
            }
            [key] => wait(store.read_may_wait(key)),
            _ => Plan::Window,
        },
        Request::MetaGet(m) => wait(store.read_may_wait(&m.key)),
        _ => Plan::InPlace,
    }
}

/// What [`Session::pump`] stopped for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pump {
    /// No complete request left: flush output, then read.
    NeedInput,
    /// The next request waits for the read window (room for a read, or empty for anything
    /// else): flush output, then wait for a read to finish, not for input.
    Wait,
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
    /// Connection id (logs, `stats conns`).
    pub id: u64,
    /// Passed ASCII authentication (or none is required).
    authenticated: bool,
    /// A dump in progress.
    dump: Option<DumpState>,
    /// Requests run since the connection last yielded (-R).
    since_yield: u32,
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
            id: 0,
            authenticated: false,
            dump: None,
            since_yield: 0,
        }
    }

    /// Execute every complete request in `input`. See [`Pump`].
    pub async fn pump<'a, S: KvStore>(
        &mut self,
        ctx: &'a Context<S>,
        window: &mut ReadWindow<'a>,
    ) -> Pump {
        loop {
            if let Some(dump) = self.dump.as_mut() {
                if dump.step(ctx, &mut self.output).await {
                    self.dump = None;
                }
                if self.output.len() >= self.max_output {
                    return Pump::Flush;
                }
                continue;
            }
            if self.swallow > 0 {
                let n = self.swallow.min(self.input.len());
                self.input.advance(n);
                self.swallow -= n;
                if self.swallow > 0 {
                    return Pump::NeedInput;
                }
            }
            let logging = log::log_enabled!(log::Level::Debug) && self.lookahead.is_none();
            if logging {
                self.log_command();
            }
            let decoded = match self.lookahead.take() {
                Some(d) => d,
                None => self.decoder.decode(&mut self.input),
            };
            let before = self.output.len();
            match decoded {
                Decoded::Incomplete => return Pump::NeedInput,
                Decoded::Close(reason) => {
                    let s = &ctx.stats;
                    match reason {
                        CloseReason::BinaryProtocol => Stats::incr(&s.binary_protocol_rejected),
                        CloseReason::LineTooLong => Stats::incr(&s.line_too_long_closed),
                        _ => {}
                    }
                    log::trace!("<{} closing: {reason:?}", self.id);
                    return Pump::Close(reason);
                }
                Decoded::Request { request, swallow } => {
                    let authenticating = ctx.settings.auth.is_some() && !self.authenticated;
                    let plain = swallow == 0 && !authenticating && is_plain_read(&request);
                    // What it touches, if it runs in the window: any request on named
                    // keys while others are in flight, or a read that may wait for the
                    // device (so the requests behind it go on meanwhile). `None`: it runs
                    // in place — alone after everything in flight, or with nothing in
                    // flight and nothing to wait for (a write, a RAM hit, a miss), without
                    // the window's allocations.
                    // A plain read's lookup runs only with nothing in flight; a one-key
                    // get's may answer it here already (`Plan::Fetched`).
                    let planned = (plain && window.is_empty()).then(|| plan(&*ctx.store, &request));
                    let windowed = swallow == 0
                        && !authenticating
                        && (!window.is_empty() || matches!(planned, Some(Plan::Window)));
                    // Answered already: nothing is in flight and it is not windowed, so its
                    // reply goes out now, in order, and the item is not held across the
                    // awaits below.
                    let answered = match (planned, &request) {
                        (Some(Plan::Fetched(item, started)), Request::Retrieval(r)) => {
                            execute_fetched(ctx, r, item, started, &mut self.output);
                            true
                        }
                        _ => false,
                    };
                    let access = windowed.then(|| Access::of(&request, plain)).flatten();
                    // With requests in flight, one on named keys waits for room in the
                    // window and for the running ones on its keys; anything else for the
                    // window to empty (replies in order, a read after a write sees it).
                    let wait = !window.is_empty()
                        && access
                            .as_ref()
                            .is_none_or(|a| window.is_full() || window.conflicts(a));
                    if wait {
                        if window.is_full() {
                            Stats::incr(&ctx.stats.window_full_waits);
                        } else if access.is_some() {
                            Stats::incr(&ctx.stats.window_key_waits);
                        }
                        self.lookahead = Some(Decoded::Request { request, swallow });
                        return Pump::Wait;
                    }
                    self.swallow = swallow;
                    self.since_yield += 1;
                    if authenticating {
                        self.authenticate(ctx, request);
                    } else if let Some(access) = access {
                        // In the window: its reply waits its turn. (A write gets here only
                        // beside requests in flight.)
                        if access.write {
                            Stats::incr(&ctx.stats.windowed_writes);
                        } else if window.len() == 1 {
                            // A second read joining one in flight starts a run of reads.
                            Stats::incr(&ctx.stats.pipelined_read_batches);
                        }
                        window.push(Self::run_apart(ctx, request), access);
                        if logging {
                            // -vv shows each reply after its command: no overlap.
                            window.finish(&mut self.output).await;
                        } else {
                            // Started now: most finish on their first poll (a RAM hit, a
                            // write), and then a request on the same key right behind it
                            // need not wait.
                            window.collect(&mut self.output).await;
                        }
                    } else if answered {
                        // Its reply is written (above).
                    } else {
                        // Boxed: every command's future in place would sit in every
                        // connection's task, idle or not (a few KiB each; see
                        // tests/idle_connections.rs); one allocation per request run here.
                        match Box::pin(execute(ctx, request, &mut self.output)).await {
                            Flow::Close => return Pump::Quit,
                            Flow::Dump(state) => self.dump = Some(state),
                            Flow::Continue => {}
                        }
                    }
                    if logging {
                        self.log_reply(before);
                    }
                    if self.since_yield >= ctx.settings.reqs_per_event {
                        // memcached -R: let the other connections run.
                        self.since_yield = 0;
                        Stats::incr(&ctx.stats.conn_yields);
                        tokio::task::yield_now().await;
                    }
                    if self.output.len() >= self.max_output {
                        return Pump::Flush;
                    }
                }
            }
        }
    }

    /// A request run in the window, into its own reply buffer. Only requests on named keys
    /// and plain reads get there, and none of them closes the connection or starts a dump.
    fn run_apart<'a, S: KvStore>(
        ctx: &'a Context<S>,
        request: Request,
    ) -> crate::join::BoxFuture<'a, Output> {
        Box::pin(async move {
            let mut out = Output::new();
            let _ = execute(ctx, request, &mut out).await;
            out
        })
    }

    /// -vv: the command line at the front of the input.
    fn log_command(&self) {
        if self.swallow > 0 || self.input.is_empty() {
            return;
        }
        let Some(end) = memchr::memchr(b'\n', &self.input) else {
            return;
        };
        let line = &self.input[..end.min(LOG_LINE_MAX)];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        log::debug!("<{} {}", self.id, line.escape_ascii());
    }

    /// -vv: the first line of the reply appended since `before`.
    fn log_reply(&self, before: usize) {
        let produced = self.output.len().saturating_sub(before);
        if produced == 0 {
            return;
        }
        let tail: &[u8] = &self.output;
        let start = tail.len().saturating_sub(produced);
        let reply = &tail[start..];
        let first = reply.split(|&b| b == b'\n').next().unwrap_or(reply);
        let first = &first[..first.len().min(LOG_LINE_MAX)];
        let first = first.strip_suffix(b"\r").unwrap_or(first);
        log::debug!(">{} {}", self.id, first.escape_ascii());
    }

    /// memcached's ASCII authentication: only `set <key> <flags> <exptime> <n>` with
    /// `user pass` as its data is served before the connection authenticates.
    fn authenticate<S>(&mut self, ctx: &Context<S>, request: Request) {
        let Some(auth) = &ctx.settings.auth else {
            return;
        };
        let line: &[u8] = match request {
            Request::Storage(s) if s.mode == StoreMode::Set => {
                let mut parts = s.value.split(|&b| b == b' ').filter(|p| !p.is_empty());
                match (parts.next(), parts.next()) {
                    (Some(user), Some(pass)) => {
                        Stats::incr(&ctx.stats.auth_cmds);
                        if auth.check(user, pass) {
                            self.authenticated = true;
                            log::debug!("<{} authenticated", self.id);
                            b"STORED"
                        } else {
                            Stats::incr(&ctx.stats.auth_errors);
                            b"CLIENT_ERROR authentication failure"
                        }
                    }
                    _ => b"CLIENT_ERROR bad authentication token format",
                }
            }
            _ => b"CLIENT_ERROR unauthenticated",
        };
        crate::reply::line(&mut self.output, line);
    }

    /// True while a rejected data block is still being discarded.
    pub fn swallowing(&self) -> bool {
        self.swallow > 0
    }
}

/// Bytes a connection may still read, without waiting, once the server is shutting down.
const SHUTDOWN_DRAIN_BYTES: usize = 4 * READ_CHUNK * 16;

/// Serve one accepted connection until the client leaves, sends `quit`, breaks the protocol,
/// stays idle past `idle_timeout` or the server shuts down.
///
/// The loop (one tokio task per connection, on any worker thread):
/// 1. [`Session::pump`] decodes and executes every complete request in the read buffer,
///    appending replies to the output buffer (pipelining), and discards swallowed bytes.
/// 2. When no complete request is left — or the output buffer passed its limit — the output
///    is written in one go (one vectored write of every reply segment). Reading stops while a
///    write is pending, so a client that does not read its replies (a slow reader) stalls only
///    itself, and memory stays bounded.
/// 3. Read more and repeat; on shutdown, answer what is already in the socket (no waiting,
///    bounded), flush and close.
pub async fn serve_connection<S: KvStore>(
    ctx: &Context<S>,
    mut stream: Stream,
    id: u64,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    if let Stream::Tcp(s) = &stream {
        let _ = s.set_nodelay(true);
        crate::rxstamp::enable(std::os::fd::AsRawFd::as_raw_fd(s));
    }
    let limits = Limits {
        max_item_size: ctx.settings.max_item_size.min(ctx.store.max_item_size()),
        ..Limits::default()
    };
    let mut session = Session::new(limits, ctx.settings.max_output_buffer);
    session.id = id;
    let mut draining = false;
    let mut drained = 0usize;
    // When the last read returned (the turnaround stage runs from it to the reply write).
    let mut read_at = None;
    let mut window = ReadWindow::new(READ_WINDOW);
    // The reply's segments, kept between writes (emptied after each).
    let mut segments: Vec<bytes::Bytes> = Vec::new();
    loop {
        // The flash reads this turn starts are handed to the kernel together; reads that
        // finish at once (RAM hits) reply in this turn.
        let step = flashtier_cache::flash::batch_submissions(async {
            let step = session.pump(ctx, &mut window).await;
            window.collect(&mut session.output).await;
            step
        })
        .await;
        if matches!(step, Pump::Quit | Pump::Close(_)) {
            // The reads before `quit` (or the bad request) are answered first.
            window.finish(&mut session.output).await;
        }
        if !session.output.is_empty() {
            Stats::add(&ctx.stats.bytes_written, session.output.len() as u64);
            segments.extend(session.output.drain());
            let t = std::time::Instant::now();
            let written = stream.write_segments(&segments).await;
            segments.clear();
            written?;
            stream.flush().await?;
            let done = std::time::Instant::now();
            ctx.latency.stage(Stage::Write).record(done - t);
            if let Some(r) = read_at.take() {
                ctx.latency.stage(Stage::Turnaround).record(done - r);
            }
            session.output.clear(IDLE_KEEP);
        }
        match step {
            Pump::Quit | Pump::Close(_) => {
                stream.shutdown().await;
                return Ok(());
            }
            Pump::Flush => continue,
            Pump::Wait => {
                // The socket is not read meanwhile: what the client sends next waits in it
                // (bounded memory; TCP pushes back).
                window.next(&mut session.output).await;
                continue;
            }
            Pump::NeedInput => {}
        }
        // Shutting down: answer what the client already sent (bytes sitting in the socket,
        // read without waiting, up to a bound) so it is not reset with requests unread.
        if draining || *shutdown.borrow() {
            draining = true;
            if drained >= SHUTDOWN_DRAIN_BYTES {
                return Ok(());
            }
            match stream.read_ready(&mut session.input) {
                Some(n) => {
                    drained += n;
                    Stats::add(&ctx.stats.bytes_read, n as u64);
                    continue;
                }
                None if !window.is_empty() => {
                    window.finish(&mut session.output).await;
                    continue;
                }
                None => return Ok(()),
            }
        }
        if session.input.is_empty() && session.input.capacity() > IDLE_KEEP_INPUT {
            session.input = BytesMut::new();
        }
        // Wait for bytes (holding no buffer while idle on a plain socket), for shutdown, or
        // for the idle timeout.
        let idle = async {
            match ctx.settings.idle_timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let (n, age) = tokio::select! {
            r = stream.read_some(&mut session.input) => r?,
            // A read finished while more requests may come: send its reply now.
            _ = window.next(&mut session.output), if !window.is_empty() => continue,
            _ = shutdown.changed() => {
                draining = true;
                continue;
            }
            _ = idle, if window.is_empty() => {
                Stats::incr(&ctx.stats.idle_kicks);
                log::trace!("<{id} closing idle connection");
                return Ok(());
            }
        };
        if n == 0 {
            return Ok(());
        }
        read_at = Some(std::time::Instant::now());
        if let Some(age) = age {
            ctx.latency.stage(Stage::SocketWait).record(age);
        }
        Stats::add(&ctx.stats.bytes_read, n as u64);
        // A read that filled its chunk may have left more behind: keep reading (up to a
        // bound) so a pipeline sent in one burst is answered with one write. A short read
        // means the socket is drained, so skip the extra syscall.
        while n >= READ_CHUNK && session.input.len() < READ_CHUNK * 4 {
            match stream.read_ready(&mut session.input) {
                Some(more) => Stats::add(&ctx.stats.bytes_read, more as u64),
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use bytes::Bytes;
    use flashtier_cache::{ItemWrite, KvStore};

    use super::{Pump, ReadWindow, Session, READ_WINDOW};
    use crate::codec::Limits;
    use crate::command::testing::{Harness, SlowStore, TEST_MAX_ITEM};
    use crate::context::{Context, Settings};
    use crate::stats::Stats;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    /// A slow store holding `a` = "a" (and `b` = "b"), and `get a` sent in its own packet:
    /// its read is in flight.
    async fn one_read_in_flight<'a>(
        ctx: &'a Context<SlowStore>,
        session: &mut Session,
        window: &mut ReadWindow<'a>,
    ) {
        for k in [&b"a"[..], b"b"] {
            let w = ItemWrite::new(Bytes::copy_from_slice(k), 0, 0);
            ctx.store.inner.set(k, w).await.unwrap();
        }
        session.input.extend_from_slice(b"get a\r\n");
        assert_eq!(session.pump(ctx, window).await, Pump::NeedInput);
        window.collect(&mut session.output).await;
        assert_eq!(ctx.store.in_flight.load(Ordering::SeqCst), 1);
    }

    fn window<'a>() -> ReadWindow<'a> {
        ReadWindow::new(READ_WINDOW)
    }

    /// Open the store's gate, answer everything and return all the session answered.
    async fn open_and_finish<'a>(
        ctx: &'a Context<SlowStore>,
        session: &mut Session,
        window: &mut ReadWindow<'a>,
    ) -> String {
        ctx.store.open.store(true, Ordering::SeqCst);
        window.finish(&mut session.output).await;
        assert_eq!(session.pump(ctx, window).await, Pump::NeedInput);
        window.finish(&mut session.output).await;
        String::from_utf8_lossy(&session.output.to_vec()).into_owned()
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
        // The model store never waits: each read finishes on its first poll, so no two
        // are in flight together.
        assert_eq!(Stats::get(&h.ctx.stats.pipelined_read_batches), 0);
    }

    /// Issue 30: a read that arrives (in its own packet) while an earlier one is still at
    /// the device starts at once; a write waits for both; replies stay in order.
    #[test]
    fn reads_arriving_one_by_one_overlap_and_a_write_waits_for_them() {
        block_on(async {
            let ctx = Context::new(Arc::new(SlowStore::new(false)), Settings::default());
            let (mut session, mut window) = (Session::new(Limits::default(), 1 << 20), window());
            one_read_in_flight(&ctx, &mut session, &mut window).await;
            let store = &ctx.store;
            // The next packet: its read joins the one still waiting.
            session.input.extend_from_slice(b"get b\r\n");
            assert_eq!(session.pump(&ctx, &mut window).await, Pump::NeedInput);
            window.collect(&mut session.output).await;
            assert_eq!(
                store.in_flight.load(Ordering::SeqCst),
                2,
                "both reads in flight"
            );
            assert_eq!(Stats::get(&ctx.stats.pipelined_read_batches), 1);
            assert!(session.output.is_empty());
            // A write waits for the reads before it.
            session
                .input
                .extend_from_slice(b"set a 0 0 1\r\nz\r\nget a\r\n");
            assert_eq!(session.pump(&ctx, &mut window).await, Pump::Wait);
            assert_eq!(
                open_and_finish(&ctx, &mut session, &mut window).await,
                "VALUE a 0 1\r\na\r\nEND\r\nVALUE b 0 1\r\nb\r\nEND\r\nSTORED\r\n\
                 VALUE a 0 1\r\nz\r\nEND\r\n"
            );
        });
    }

    /// Issue 30: a write on a key no read in flight touches runs at once, beside them; its
    /// reply still leaves in order, and a read of its key behind it sees it.
    #[test]
    fn a_write_on_another_key_runs_beside_reads_in_flight_with_its_reply_in_order() {
        block_on(async {
            let ctx = Context::new(Arc::new(SlowStore::new(false)), Settings::default());
            let (mut session, mut window) = (Session::new(Limits::default(), 1 << 20), window());
            one_read_in_flight(&ctx, &mut session, &mut window).await;
            let store = &ctx.store;
            session
                .input
                .extend_from_slice(b"set b 0 0 1\r\nz\r\nget b\r\ndelete a\r\n");
            // The set runs now; the get of b joins the window; the delete of a waits for
            // the read of a.
            assert_eq!(session.pump(&ctx, &mut window).await, Pump::Wait);
            window.collect(&mut session.output).await;
            let stored = store.inner.get(b"b").await.unwrap();
            assert_eq!(stored.map(|i| i.value), Some(Bytes::from_static(b"z")));
            assert!(
                session.output.is_empty(),
                "replies wait for the read before"
            );
            assert_eq!(Stats::get(&ctx.stats.windowed_writes), 1);
            assert_eq!(Stats::get(&ctx.stats.window_key_waits), 1);
            assert_eq!(
                open_and_finish(&ctx, &mut session, &mut window).await,
                "VALUE a 0 1\r\na\r\nEND\r\nSTORED\r\nVALUE b 0 1\r\nz\r\nEND\r\nDELETED\r\n"
            );
        });
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
