//! Value-size distributions: fixed, uniform range, or a weighted mix of sizes.
//!
//! Command-line forms: `4096`, `100-4096` (uniform, inclusive), `100:50,4096:40,65536:10`
//! (size:weight pairs; weights are relative). Immutable after parsing; cloned per thread.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;
use crate::rng::Rng;

/// A value-size distribution, in bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueSizes {
    /// Every value has this size.
    Fixed(u32),
    /// Uniform over `lo..=hi`.
    Uniform {
        /// Smallest size.
        lo: u32,
        /// Largest size.
        hi: u32,
    },
    /// Sizes with relative weights; `cumulative` holds running weight totals.
    Mix {
        /// `(size, weight)` as given.
        parts: Vec<(u32, u32)>,
        /// Running totals of the weights, same order as `parts`.
        cumulative: Vec<u64>,
    },
}

impl ValueSizes {
    /// The next value size.
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        match self {
            ValueSizes::Fixed(s) => *s,
            ValueSizes::Uniform { lo, hi } => lo + rng.below(u64::from(hi - lo) + 1) as u32,
            ValueSizes::Mix { parts, cumulative } => {
                let total = cumulative.last().copied().unwrap_or(1);
                let x = rng.below(total);
                let i = cumulative.partition_point(|&c| c <= x);
                parts.get(i).map_or(0, |p| p.0)
            }
        }
    }

    /// The largest size this distribution can produce.
    pub fn max(&self) -> u32 {
        match self {
            ValueSizes::Fixed(s) => *s,
            ValueSizes::Uniform { hi, .. } => *hi,
            ValueSizes::Mix { parts, .. } => parts.iter().map(|p| p.0).max().unwrap_or(0),
        }
    }

    /// The expected size.
    pub fn mean(&self) -> f64 {
        match self {
            ValueSizes::Fixed(s) => f64::from(*s),
            ValueSizes::Uniform { lo, hi } => (f64::from(*lo) + f64::from(*hi)) / 2.0,
            ValueSizes::Mix { parts, cumulative } => {
                let total = cumulative.last().copied().unwrap_or(1) as f64;
                parts
                    .iter()
                    .map(|&(s, w)| f64::from(s) * f64::from(w))
                    .sum::<f64>()
                    / total
            }
        }
    }
}

impl fmt::Display for ValueSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueSizes::Fixed(s) => write!(f, "{s}"),
            ValueSizes::Uniform { lo, hi } => write!(f, "{lo}-{hi}"),
            ValueSizes::Mix { parts, .. } => {
                let s: Vec<String> = parts.iter().map(|(s, w)| format!("{s}:{w}")).collect();
                write!(f, "{}", s.join(","))
            }
        }
    }
}

impl FromStr for ValueSizes {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::Config(format!("bad value size {s:?}"));
        let num = |x: &str| x.trim().parse::<u32>().map_err(|_| bad());
        if s.contains(':') {
            let mut parts = Vec::new();
            let mut cumulative = Vec::new();
            let mut total = 0u64;
            for pair in s.split(',') {
                let (size, weight) = pair.split_once(':').ok_or_else(bad)?;
                let (size, weight) = (num(size)?, num(weight)?);
                if weight == 0 {
                    return Err(bad());
                }
                total += u64::from(weight);
                parts.push((size, weight));
                cumulative.push(total);
            }
            Ok(ValueSizes::Mix { parts, cumulative })
        } else if let Some((lo, hi)) = s.split_once('-') {
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo > hi {
                return Err(bad());
            }
            Ok(ValueSizes::Uniform { lo, hi })
        } else {
            Ok(ValueSizes::Fixed(num(s)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_samples_each_form() {
        let mut rng = Rng::new(1);
        let f: ValueSizes = "100".parse().unwrap();
        assert_eq!(f.sample(&mut rng), 100);
        let u: ValueSizes = "10-20".parse().unwrap();
        for _ in 0..1000 {
            assert!((10..=20).contains(&u.sample(&mut rng)));
        }
        assert_eq!(u.max(), 20);
        let m: ValueSizes = "100:50,4096:40,65536:10".parse().unwrap();
        let (mut a, mut b, mut c) = (0, 0, 0);
        for _ in 0..100_000 {
            match m.sample(&mut rng) {
                100 => a += 1,
                4096 => b += 1,
                65536 => c += 1,
                x => panic!("unexpected size {x}"),
            }
        }
        assert!((49_000..51_000).contains(&a), "{a}");
        assert!((39_000..41_000).contains(&b), "{b}");
        assert!((9_300..10_700).contains(&c), "{c}");
        assert_eq!(m.max(), 65536);
        assert_eq!(m.to_string(), "100:50,4096:40,65536:10");
        assert!("20-10".parse::<ValueSizes>().is_err());
        assert!("100:0".parse::<ValueSizes>().is_err());
        assert!("x".parse::<ValueSizes>().is_err());
    }
}
