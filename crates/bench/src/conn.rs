//! One client connection: its socket, buffers and the queue of requests awaiting replies.
//!
//! Invariant: `inflight` holds exactly the requests written (or queued in `wbuf`) whose
//! replies have not been parsed yet, in send order, which is the order replies arrive in.
//! A connection is moved into one worker thread per phase and touched only by it (with the
//! thread client, into the connection's receiving thread; its sender writes on a clone of the
//! socket and never touches this struct).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};

use crate::error::Error;
use crate::protocol::OpKind;
use crate::rng::Rng;
use crate::workload::Scratch;

/// Smallest read buffer; it grows to fit a reply larger than this.
const RBUF_MIN: usize = 256 * 1024;

/// A request awaiting its reply.
#[derive(Debug, Clone, Copy)]
pub struct InFlight {
    /// Time latency is measured from: the scheduled time (open loop) or the send time
    /// (closed loop), ns since the run's base instant.
    pub t0: u64,
    /// GET, SET or DELETE.
    pub kind: OpKind,
    /// Key index (for verification).
    pub key: u64,
    /// With a [`crate::history::KeyHistory`]: a GET's guard or a DELETE's send stamp; else 0.
    pub stamp: u64,
    /// Whether it falls in the measured window (after warm-up).
    pub measured: bool,
}

/// Refills a connection queues at most (`--cache-aside`); more misses are counted, not refilled.
pub const REFILL_LIMIT: usize = 1024;

/// A client connection.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    /// Bytes to send; `wbuf[wpos..]` is not yet written.
    pub wbuf: Vec<u8>,
    wpos: usize,
    /// Received bytes; `rbuf[rpos..rend]` is not yet parsed.
    rbuf: Vec<u8>,
    rpos: usize,
    rend: usize,
    /// Requests awaiting replies, in send order.
    pub inflight: VecDeque<InFlight>,
    /// `--cache-aside`: keys whose GET missed, to be SET next (at most
    /// [`REFILL_LIMIT`]).
    pub refill: VecDeque<u64>,
    /// The connection's random stream.
    pub rng: Rng,
    /// Reusable key/value buffers.
    pub scratch: Scratch,
    /// Set once the connection failed; it is skipped from then on.
    pub dead: bool,
}

impl Conn {
    /// Connects to `addr`, with Nagle off and the socket non-blocking.
    pub fn connect(addr: &str, seed: u64) -> Result<Self, Error> {
        let connect_err = |source| Error::Connect {
            addr: addr.to_string(),
            source,
        };
        let stream = TcpStream::connect(addr).map_err(connect_err)?;
        stream.set_nodelay(true).map_err(connect_err)?;
        stream.set_nonblocking(true).map_err(connect_err)?;
        Ok(Self::from_stream(stream, seed))
    }

    /// Wraps a connected socket as it is (blocking or not).
    pub fn from_stream(stream: TcpStream, seed: u64) -> Self {
        Self {
            stream,
            wbuf: Vec::with_capacity(64 * 1024),
            wpos: 0,
            rbuf: vec![0; RBUF_MIN],
            rpos: 0,
            rend: 0,
            inflight: VecDeque::new(),
            refill: VecDeque::new(),
            rng: Rng::new(seed),
            scratch: Scratch::default(),
            dead: false,
        }
    }

    /// The socket descriptor, for polling.
    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// Whether bytes are waiting to be written.
    pub fn wants_write(&self) -> bool {
        self.wpos < self.wbuf.len()
    }

    /// Writes as much of `wbuf` as the socket takes without blocking.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.wpos < self.wbuf.len() {
            let pending = self.wbuf.get(self.wpos..).unwrap_or(&[]);
            match self.stream.write(pending) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        }
        Ok(())
    }

    /// Reads what the socket has without blocking. Returns `Ok(false)` on EOF.
    pub fn fill(&mut self) -> io::Result<bool> {
        loop {
            if self.rend == self.rbuf.len() {
                if self.rpos > 0 {
                    self.rbuf.copy_within(self.rpos..self.rend, 0);
                    self.rend -= self.rpos;
                    self.rpos = 0;
                } else {
                    let new_len = self.rbuf.len() * 2;
                    self.rbuf.resize(new_len, 0);
                }
            }
            let spare = self.rbuf.get_mut(self.rend..).unwrap_or(&mut []);
            let room = spare.len();
            match self.stream.read(spare) {
                Ok(0) => return Ok(false),
                // A short read drained the socket (almost always): skip the extra read that
                // would only return WouldBlock. Level-triggered polling reports any rest.
                Ok(n) if n < room => {
                    self.rend += n;
                    return Ok(true);
                }
                Ok(n) => self.rend += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// One `read` into the buffer, compacting or growing it first if it is full: for a
    /// blocking socket, where a second read would wait for more bytes. A read that timed out
    /// (`SO_RCVTIMEO`) or was interrupted reads nothing and returns `Ok(true)`; `Ok(false)`
    /// means EOF.
    pub fn read_once(&mut self) -> io::Result<bool> {
        if self.rend == self.rbuf.len() {
            if self.rpos > 0 {
                self.rbuf.copy_within(self.rpos..self.rend, 0);
                self.rend -= self.rpos;
                self.rpos = 0;
            } else {
                let new_len = self.rbuf.len() * 2;
                self.rbuf.resize(new_len, 0);
            }
        }
        let spare = self.rbuf.get_mut(self.rend..).unwrap_or(&mut []);
        match self.stream.read(spare) {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.rend += n;
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// The received, unparsed bytes.
    pub fn unparsed(&self) -> &[u8] {
        self.rbuf.get(self.rpos..self.rend).unwrap_or(&[])
    }

    /// Marks `n` unparsed bytes as consumed.
    pub fn consume(&mut self, n: usize) {
        self.rpos = (self.rpos + n).min(self.rend);
        if self.rpos == self.rend {
            self.rpos = 0;
            self.rend = 0;
        }
    }
}
