//! Structural comparison of CAS values: each server's values mapped to first-seen order.
//!
//! CAS values are opaque; what a client *can* observe is which replies name the same item
//! version (two `gets` return equal CAS exactly when nothing modified the item in between).
//! So each server gets a map from CAS value to a version number in first-seen order, and the
//! comparison looks at version numbers.
//!
//! Invariant: the map is global per server, not per key — stricter than the protocol, as
//! memcached's one global counter is; a server that reuses a CAS value for another key's item
//! is reported. Value 0 ("no CAS") is never mapped.
//!
//! Touched only by the runner thread.

use std::collections::HashMap;

/// One server's CAS value ⇄ version number map.
#[derive(Debug, Default, Clone)]
pub struct CasMap {
    to_version: HashMap<u64, u32>,
    to_value: Vec<u64>,
}

impl CasMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The version number for `value`, assigning the next one if `value` is new.
    /// Returns `None` for 0, which is not a CAS value but its absence.
    pub fn version_of(&mut self, value: u64) -> Option<u32> {
        if value == 0 {
            return None;
        }
        if let Some(&v) = self.to_version.get(&value) {
            return Some(v);
        }
        let v = u32::try_from(self.to_value.len()).unwrap_or(u32::MAX);
        self.to_value.push(value);
        self.to_version.insert(value, v);
        Some(v)
    }

    /// The server's CAS value for a version number it has produced.
    pub fn value_of(&self, version: u32) -> Option<u64> {
        self.to_value.get(version as usize).copied()
    }

    /// How many distinct CAS values were seen.
    pub fn len(&self) -> usize {
        self.to_value.len()
    }

    /// True before any CAS value was seen.
    pub fn is_empty(&self) -> bool {
        self.to_value.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_seen_order_makes_equal_relations_equal() {
        let mut a = CasMap::new();
        let mut b = CasMap::new();
        // Server A counts 5, 6, 5; server B counts 900, 17, 900: same relations.
        let va: Vec<_> = [5, 6, 5].iter().map(|&x| a.version_of(x)).collect();
        let vb: Vec<_> = [900, 17, 900].iter().map(|&x| b.version_of(x)).collect();
        assert_eq!(va, vb);
        assert_eq!(a.value_of(1), Some(6));
        assert_eq!(b.value_of(1), Some(17));
    }

    #[test]
    fn reuse_is_visible() {
        let mut a = CasMap::new();
        let mut b = CasMap::new();
        let va: Vec<_> = [5, 6].iter().map(|&x| a.version_of(x)).collect();
        let vb: Vec<_> = [9, 9].iter().map(|&x| b.version_of(x)).collect();
        assert_ne!(va, vb);
    }

    #[test]
    fn zero_is_not_a_version() {
        let mut a = CasMap::new();
        assert_eq!(a.version_of(0), None);
        assert!(a.is_empty());
    }
}
