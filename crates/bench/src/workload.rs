//! What to send: the key space, key and value-size distributions, get/set/delete mix and
//! value contents, plus the per-connection operation sources built from them.
//!
//! A [`Workload`] is shared by reference with every worker thread; it is immutable but for
//! its [`KeyHistory`] (atomics). An [`OpSource`] belongs to one connection for one phase.

use crate::history::KeyHistory;
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
    /// Fraction of DELETEs, in `[0, 1]`, of a key drawn from the same distribution; SETs are
    /// the rest, so `get_ratio + delete_ratio` must not exceed 1. Default on the command
    /// line: 0.
    pub delete_ratio: f64,
    /// Key prefix.
    pub prefix: String,
    /// Dialect.
    pub protocol: Protocol,
    /// Verifiable values, checked on every GET hit; with deletes, a hit on a deleted key must
    /// also follow a later SET of it (see [`crate::history`]).
    pub verify: bool,
    /// Cache-aside client: every GET miss is followed, on the same connection, by a SET of
    /// that key (the refill a real client makes after reading the source of truth).
    pub cache_aside: bool,
}

/// The workload shared by all connections.
#[derive(Debug)]
pub struct Workload {
    /// Key sampler over the key space.
    pub keys: KeySampler,
    /// Value sizes of SETs.
    pub sizes: ValueSizes,
    /// Fraction of operations that are GETs, in `[0, 1]`.
    pub get_ratio: f64,
    /// Fraction of operations that are DELETEs; `get_ratio + delete_ratio <= 1`.
    pub delete_ratio: f64,
    /// Key prefix; key = prefix + decimal index.
    pub prefix: Vec<u8>,
    /// Dialect.
    pub protocol: Protocol,
    /// Whether values carry a verifiable pattern and GET hits are checked.
    pub verify: bool,
    /// DELETEs and SETs per key, when verifying a workload with deletes.
    pub history: Option<KeyHistory>,
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
            delete_ratio,
            ref prefix,
            protocol,
            verify,
            cache_aside,
        } = *spec;
        if !(0.0..=1.0).contains(&get_ratio) {
            return Err(crate::Error::Config("get ratio must be in [0, 1]".into()));
        }
        if !(0.0..=1.0).contains(&delete_ratio) {
            return Err(crate::Error::Config(
                "delete ratio must be in [0, 1]".into(),
            ));
        }
        if get_ratio + delete_ratio > 1.0 {
            return Err(crate::Error::Config(format!(
                "get ratio {get_ratio} + delete ratio {delete_ratio} exceeds 1"
            )));
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
        let history = (verify && delete_ratio > 0.0).then(|| KeyHistory::new(keys.len()));
        Ok(Self {
            keys,
            sizes: sizes.clone(),
            get_ratio,
            delete_ratio,
            prefix_hash: pattern::prefix_hash(prefix.as_bytes()),
            prefix: prefix.as_bytes().to_vec(),
            protocol,
            verify,
            history,
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

    /// Appends a DELETE of key `index` to `wbuf`.
    pub fn encode_delete(&self, index: u64, wbuf: &mut Vec<u8>, scratch: &mut Scratch) {
        self.key(index, &mut scratch.key);
        protocol::encode_delete(wbuf, self.protocol, &scratch.key);
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
    /// GET, SET or DELETE.
    pub kind: OpKind,
    /// Key index.
    pub key: u64,
    /// Value length (SET only; 0 otherwise).
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
                // One draw splits [0, 1) into GET | DELETE | SET; without deletes the random
                // stream is the one runs made before deletes existed.
                let u = if wl.get_ratio >= 1.0 {
                    0.0
                } else {
                    rng.next_f64()
                };
                let kind = if u < wl.get_ratio || wl.get_ratio >= 1.0 {
                    OpKind::Get
                } else if u < wl.get_ratio + wl.delete_ratio {
                    OpKind::Delete
                } else {
                    OpKind::Set
                };
                let len = match kind {
                    OpKind::Set => wl.sizes.sample(rng),
                    OpKind::Get | OpKind::Delete => 0,
                };
                Some(Op { kind, key, len })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(get_ratio: f64, delete_ratio: f64) -> WorkloadSpec {
        WorkloadSpec {
            keys: 1000,
            dist: KeyDist::Uniform,
            scramble: true,
            sizes: ValueSizes::Fixed(10),
            get_ratio,
            delete_ratio,
            prefix: "k:".into(),
            protocol: Protocol::Text,
            verify: false,
            cache_aside: false,
        }
    }

    fn mix(get_ratio: f64, delete_ratio: f64) -> [u64; 3] {
        let wl = Workload::new(&spec(get_ratio, delete_ratio)).unwrap();
        let mut rng = Rng::new(7);
        let mut n = [0u64; 3];
        for _ in 0..100_000 {
            let op = OpSource::Random.next(&wl, &mut rng).unwrap();
            let i = match op.kind {
                OpKind::Get => 0,
                OpKind::Delete => 1,
                OpKind::Set => 2,
            };
            n[i] += 1;
            assert_eq!(op.len > 0, op.kind == OpKind::Set);
        }
        n
    }

    #[test]
    fn deletes_take_their_share_of_the_mix() {
        let [g, d, s] = mix(0.6, 0.25);
        let near = |got: u64, want: f64| (got as f64 - want * 1e5).abs() < 1e5 * 0.01;
        assert!(
            near(g, 0.6) && near(d, 0.25) && near(s, 0.15),
            "{g} {d} {s}"
        );
        assert_eq!(mix(0.9, 0.0)[1], 0);
        assert_eq!(mix(1.0, 0.0), [100_000, 0, 0]);
        assert_eq!(mix(0.0, 1.0), [0, 100_000, 0]);
        // Fractions that add up to 1 leave no SETs.
        assert_eq!(mix(0.7, 0.3)[2], 0);
        assert_eq!(mix(0.15, 0.85)[2], 0);
    }

    #[test]
    fn ratios_are_validated() {
        assert!(Workload::new(&spec(0.9, 0.2)).is_err());
        assert!(Workload::new(&spec(0.5, -0.1)).is_err());
        assert!(Workload::new(&spec(0.5, f64::NAN)).is_err());
        assert!(Workload::new(&spec(0.9, 0.1)).is_ok());
        // The delete history exists only when it is needed.
        assert!(Workload::new(&spec(0.5, 0.1)).unwrap().history.is_none());
        let mut v = spec(0.5, 0.1);
        v.verify = true;
        assert!(Workload::new(&v).unwrap().history.is_some());
        v.delete_ratio = 0.0;
        assert!(Workload::new(&v).unwrap().history.is_none());
    }
}
