//! Key popularity distributions: uniform, zipf(θ) and hotspot, over a key space of `n` keys.
//!
//! A sampler returns a key *index* in `[0, n)`; the connection formats it as `prefix + index`.
//! Zipf uses rejection-inversion sampling (W. Hörmann and G. Derflinger, "Rejection-inversion
//! to generate variates from monotone discrete distributions", 1996): O(1) per sample, no
//! table, any θ ≥ 0 and any `n`, which a key space of 10^8 keys needs.
//!
//! By default popular ranks are scattered over the key space by a bijection
//! (`rank * m mod n`, `m` coprime with `n`), so hot keys are not also the keys written first
//! by the sequential load phase; `--no-scramble` keeps rank == index.
//! Samplers are immutable after construction and cloned into each worker thread.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;
use crate::rng::Rng;

/// Which distribution, as given on the command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    /// Every key equally likely: `uniform`.
    Uniform,
    /// P(rank k) ∝ k^-θ: `zipf:0.99` (`zipf` alone means θ = 0.99).
    Zipf(f64),
    /// `op_frac` of operations go to the first `key_frac` of the keys: `hotspot:0.9:0.1`.
    Hotspot {
        /// Fraction of operations that hit the hot set, in `[0, 1]`.
        op_frac: f64,
        /// Fraction of the key space that is hot, in `(0, 1]`.
        key_frac: f64,
    },
}

impl fmt::Display for KeyDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDist::Uniform => write!(f, "uniform"),
            KeyDist::Zipf(t) => write!(f, "zipf:{t}"),
            KeyDist::Hotspot { op_frac, key_frac } => write!(f, "hotspot:{op_frac}:{key_frac}"),
        }
    }
}

impl FromStr for KeyDist {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::Config(format!("bad key distribution {s:?}"));
        let mut parts = s.split(':');
        let name = parts.next().unwrap_or_default();
        let nums: Vec<f64> = parts
            .map(|p| p.parse::<f64>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        match (name, nums.as_slice()) {
            ("uniform", []) => Ok(KeyDist::Uniform),
            ("zipf", []) => Ok(KeyDist::Zipf(0.99)),
            ("zipf", [t]) if *t >= 0.0 && t.is_finite() => Ok(KeyDist::Zipf(*t)),
            ("hotspot", [o, k]) if (0.0..=1.0).contains(o) && *k > 0.0 && *k <= 1.0 => {
                Ok(KeyDist::Hotspot {
                    op_frac: *o,
                    key_frac: *k,
                })
            }
            _ => Err(bad()),
        }
    }
}

/// Samples key indices in `[0, n)`.
#[derive(Debug, Clone)]
pub struct KeySampler {
    n: u64,
    inner: Inner,
    /// Multiplier of the scrambling bijection; 1 means no scrambling.
    scramble: u64,
}

#[derive(Debug, Clone)]
enum Inner {
    Uniform,
    Zipf(Zipf),
    Hotspot { op_frac: f64, hot: u64 },
}

impl KeySampler {
    /// A sampler over `n ≥ 1` keys.
    pub fn new(dist: KeyDist, n: u64, scramble: bool) -> Result<Self, Error> {
        if n == 0 {
            return Err(Error::Config("key space must hold at least one key".into()));
        }
        let inner = match dist {
            KeyDist::Uniform => Inner::Uniform,
            KeyDist::Zipf(theta) => Inner::Zipf(Zipf::new(n, theta)),
            KeyDist::Hotspot { op_frac, key_frac } => Inner::Hotspot {
                op_frac,
                hot: ((n as f64 * key_frac) as u64).clamp(1, n),
            },
        };
        let scramble = if scramble { coprime_multiplier(n) } else { 1 };
        Ok(Self { n, inner, scramble })
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Always false: a sampler holds at least one key.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The popularity rank (0 = most popular) of the next key, before scrambling.
    pub fn sample_rank(&self, rng: &mut Rng) -> u64 {
        match &self.inner {
            Inner::Uniform => rng.below(self.n),
            Inner::Zipf(z) => z.sample(rng) - 1,
            Inner::Hotspot { op_frac, hot } => {
                if *hot == self.n || rng.next_f64() < *op_frac {
                    rng.below(*hot)
                } else {
                    hot + rng.below(self.n - hot)
                }
            }
        }
    }

    /// The key index for a popularity rank.
    pub fn index_of_rank(&self, rank: u64) -> u64 {
        ((u128::from(rank) * u128::from(self.scramble)) % u128::from(self.n)) as u64
    }

    /// The next key index.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let rank = self.sample_rank(rng);
        self.index_of_rank(rank)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A multiplier coprime with `n` that spreads neighbouring ranks far apart.
fn coprime_multiplier(n: u64) -> u64 {
    if n <= 2 {
        return 1;
    }
    // Start near n times the golden ratio's fractional part and walk to a coprime value.
    let mut m = ((n as f64 * 0.618_033_988_75) as u64).max(2);
    while gcd(m, n) != 1 {
        m += 1;
    }
    m
}

/// Rejection-inversion zipf sampler over ranks `1..=n` with exponent `theta`.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: f64,
    theta: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    s: f64,
}

impl Zipf {
    /// A sampler for `n ≥ 1` ranks, exponent `theta ≥ 0`.
    pub fn new(n: u64, theta: f64) -> Self {
        let nf = n as f64;
        let mut z = Self {
            n: nf,
            theta,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            s: 0.0,
        };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(nf + 0.5);
        z.s = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// A rank in `1..=n`.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_integral_n + rng.next_f64() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.s || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    /// h(x) = x^-θ.
    fn h(&self, x: f64) -> f64 {
        (-self.theta * x.ln()).exp()
    }

    /// H(x) = ∫ h: (x^(1-θ) - 1) / (1-θ), or ln x when θ = 1.
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.theta) * log_x) * log_x
    }

    fn h_integral_inverse(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.theta)).max(-1.0);
        (helper1(t) * y).exp()
    }
}

/// ln(1+x)/x, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1)/x, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zipf_pmf(n: u64, theta: f64) -> Vec<f64> {
        let norm: f64 = (1..=n).map(|k| (k as f64).powf(-theta)).sum();
        (1..=n).map(|k| (k as f64).powf(-theta) / norm).collect()
    }

    #[test]
    fn zipf_matches_its_pmf() {
        for &theta in &[0.5, 0.99, 1.0, 1.2] {
            let n = 1000;
            let pmf = zipf_pmf(n, theta);
            let z = Zipf::new(n, theta);
            let mut rng = Rng::new(42);
            let samples = 400_000;
            let mut counts = vec![0u64; n as usize];
            for _ in 0..samples {
                let k = z.sample(&mut rng);
                assert!((1..=n).contains(&k));
                counts[(k - 1) as usize] += 1;
            }
            // Head ranks individually, within 5 standard deviations.
            for rank in [1usize, 2, 3, 10, 100] {
                let p = pmf[rank - 1];
                let expect = p * samples as f64;
                let sd = (samples as f64 * p * (1.0 - p)).sqrt();
                let got = counts[rank - 1] as f64;
                assert!(
                    (got - expect).abs() < 5.0 * sd + 1.0,
                    "theta {theta} rank {rank}: got {got}, expected {expect:.0} ± {sd:.0}"
                );
            }
            // The tail half as a block.
            let p_tail: f64 = pmf[500..].iter().sum();
            let got: u64 = counts[500..].iter().sum();
            let expect = p_tail * samples as f64;
            assert!(
                (got as f64 - expect).abs() < 0.03 * expect + 50.0,
                "theta {theta}: tail {got} vs {expect:.0}"
            );
        }
    }

    #[test]
    fn zipf_theta_zero_is_uniform_and_n_one_works() {
        let z = Zipf::new(4, 0.0);
        let mut rng = Rng::new(3);
        let mut counts = [0u32; 4];
        for _ in 0..40_000 {
            counts[(z.sample(&mut rng) - 1) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
        let one = Zipf::new(1, 0.99);
        assert_eq!(one.sample(&mut rng), 1);
    }

    #[test]
    fn zipf_handles_huge_key_space() {
        let z = Zipf::new(1_000_000_000, 0.99);
        let mut rng = Rng::new(5);
        let ones = (0..100_000).filter(|_| z.sample(&mut rng) == 1).count();
        // P(1) = 1/H(1e9, 0.99) ≈ 0.045.
        assert!((3_500..5_500).contains(&ones), "{ones}");
    }

    #[test]
    fn hotspot_sends_op_fraction_to_hot_keys() {
        let dist: KeyDist = "hotspot:0.9:0.1".parse().unwrap();
        let s = KeySampler::new(dist, 1000, false).unwrap();
        let mut rng = Rng::new(9);
        let hot = (0..100_000).filter(|_| s.sample(&mut rng) < 100).count();
        assert!((89_000..91_000).contains(&hot), "{hot}");
    }

    #[test]
    fn scramble_is_a_bijection() {
        for n in [1u64, 2, 3, 10, 97, 1000, 1024] {
            let s = KeySampler::new(KeyDist::Uniform, n, true).unwrap();
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let i = s.index_of_rank(r) as usize;
                assert!(!seen[i], "n {n}: index {i} twice");
                seen[i] = true;
            }
        }
    }

    #[test]
    fn parses_distributions() {
        assert_eq!("uniform".parse::<KeyDist>().unwrap(), KeyDist::Uniform);
        assert_eq!("zipf:1.1".parse::<KeyDist>().unwrap(), KeyDist::Zipf(1.1));
        assert!("zipf:-1".parse::<KeyDist>().is_err());
        assert!("hotspot:0.9".parse::<KeyDist>().is_err());
        assert!("pareto".parse::<KeyDist>().is_err());
    }
}
