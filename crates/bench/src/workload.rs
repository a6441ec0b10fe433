//! What to send: the key space, key and value-size distributions, get/set mix and value
//! contents, plus the per-connection operation sources built from them.
//!
//! A [`Workload`] is immutable and shared by reference with every worker thread. An
//! [`OpSource`] belongs to one connection for one phase.

use crate::keydist::{KeyDist, KeySampler};
use crate::pattern;
use crate::protocol::{self, OpKind, Protocol};
use crate::rng::Rng;
use crate::valuesize::ValueSizes;

/// A workload as configured (command line or library caller).
#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    /// Key-space size (number of distinct keys). Default on the command line: 100 000.
    pub keys: u64,
    /// Key popularity.
    pub dist: KeyDist,
    /// Scatter popular ranks over the key space (see [`crate::keydist`]).
    pub scramble: bool,
    /// Value sizes of SETs.
    pub sizes: ValueSizes,
    /// Fraction of GETs, in `[0, 1]`.
    pub get_ratio: f64,
    /// Key prefix.
    pub prefix: String,
    /// Dialect.
    pub protocol: Protocol,
    /// Verifiable values, checked on every GET hit.
    pub verify: bool,
    /// Cache-aside client: every GET miss is followed, on the same connection, by a SET of
    /// that key (the refill a real client makes after reading the source of truth).
    pub cache_aside: bool,
}

/// The workload shared by all connections.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Key sampler over the key space.
    pub keys: KeySampler,
    /// Value sizes of SETs.
    pub sizes: ValueSizes,
    /// Fraction of operations that are GETs, in `[0, 1]`.
    pub get_ratio: f64,
    /// Key prefix; key = prefix + decimal index.
    pub prefix: Vec<u8>,
    /// Dialect.
    pub protocol: Protocol,
    /// Whether values carry a verifiable pattern and GET hits are checked.
    pub verify: bool,
    /// Whether a GET miss is followed by a SET of its key (see [`WorkloadSpec::cache_aside`]).
    pub cache_aside: bool,
    /// Hash of the prefix, for pattern seeds.
    pub prefix_hash: u64,
    /// Value bytes used when not verifying: one pattern as long as the largest value.
    filler: Vec<u8>,
}

impl Workload {
    /// Builds the workload a spec describes, validating it.
    pub fn new(spec: &WorkloadSpec) -> Result<Self, crate::Error> {
        let WorkloadSpec {
            keys,
            dist,
            scramble,
            ref sizes,
            get_ratio,
            ref prefix,
            protocol,
            verify,
            cache_aside,
        } = *spec;
        if !(0.0..=1.0).contains(&get_ratio) {
            return Err(crate::Error::Config("get ratio must be in [0, 1]".into()));
        }
        let longest_key = prefix.len() + 20;
        if longest_key > 250 || prefix.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(crate::Error::Config(
                "key prefix must be printable, without spaces, and leave room for the index \
                 within 250 bytes"
                    .into(),
            ));
        }
        let keys = KeySampler::new(dist, keys, scramble)?;
        let mut filler = Vec::new();
        if !verify {
            pattern::fill(&mut filler, 0x5EED, sizes.max() as usize);
        }
        Ok(Self {
            keys,
            sizes: sizes.clone(),
            get_ratio,
            prefix_hash: pattern::prefix_hash(prefix.as_bytes()),
            prefix: prefix.as_bytes().to_vec(),
            protocol,
            verify,
            cache_aside,
            filler,
        })
    }

    /// Writes the key for `index` into `out` (cleared first).
    pub fn key(&self, index: u64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.prefix);
        protocol::push_decimal(out, index);
    }

    /// Appends a SET of key `index` with a `len`-byte value to `wbuf`; `scratch` holds the key
    /// and, when verifying, the value.
    pub fn encode_set(&self, index: u64, len: usize, wbuf: &mut Vec<u8>, scratch: &mut Scratch) {
        self.key(index, &mut scratch.key);
        if self.verify {
            scratch.value.clear();
            let seed = pattern::seed(self.prefix_hash, index, len);
            pattern::fill(&mut scratch.value, seed, len);
            protocol::encode_set(wbuf, self.protocol, &scratch.key, &scratch.value);
        } else {
            let value = self.filler.get(..len).unwrap_or(&self.filler);
            protocol::encode_set(wbuf, self.protocol, &scratch.key, value);
        }
    }

    /// Appends a GET of key `index` to `wbuf`.
    pub fn encode_get(&self, index: u64, wbuf: &mut Vec<u8>, scratch: &mut Scratch) {
        self.key(index, &mut scratch.key);
        protocol::encode_get(wbuf, self.protocol, &scratch.key);
    }
}

/// Reusable buffers of one connection.
#[derive(Debug, Default)]
pub struct Scratch {
    /// The current key.
    pub key: Vec<u8>,
    /// The current value when verifying.
    pub value: Vec<u8>,
}

/// One operation to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// GET or SET.
    pub kind: OpKind,
    /// Key index.
    pub key: u64,
    /// Value length (SET only; 0 for GET).
    pub len: u32,
}

/// Where a connection's operations come from during one phase.
#[derive(Debug, Clone)]
pub enum OpSource {
    /// Random keys and kinds drawn from the workload.
    Random,
    /// The load phase: a SET of every key `next, next + stride, ...` below `end`, once.
    Sequential {
        /// Next key index.
        next: u64,
        /// Distance between this connection's keys (the connection count).
        stride: u64,
        /// One past the last key index.
        end: u64,
    },
}

impl OpSource {
    /// The next operation, or `None` when the source is exhausted.
    pub fn next(&mut self, wl: &Workload, rng: &mut Rng) -> Option<Op> {
        match self {
            OpSource::Random => {
                let key = wl.keys.sample(rng);
                if wl.get_ratio >= 1.0 || rng.next_f64() < wl.get_ratio {
                    Some(Op {
                        kind: OpKind::Get,
                        key,
                        len: 0,
                    })
                } else {
                    Some(Op {
                        kind: OpKind::Set,
                        key,
                        len: wl.sizes.sample(rng),
                    })
                }
            }
            OpSource::Sequential { next, stride, end } => {
                if *next >= *end {
                    return None;
                }
                let key = *next;
                *next += *stride;
                Some(Op {
                    kind: OpKind::Set,
                    key,
                    len: wl.sizes.sample(rng),
                })
            }
        }
    }
}
