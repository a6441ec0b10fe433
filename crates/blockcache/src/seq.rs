//! Sequential stream detection for the bypass (bcache's `sequential_cutoff`, FlashCache's
//! `skip_seq_thresh_kb`): a few slots remember where recent streams will continue; a request
//! that starts where a stream ended extends it. One mutex, taken briefly per request.

const SLOTS: usize = 8;

/// Remembered streams.
#[derive(Debug, Default)]
pub struct SeqDetector {
    /// (next expected offset, bytes in the run so far, last use).
    slots: [(u64, u64, u64); SLOTS],
    tick: u64,
}

impl SeqDetector {
    /// Record a request and return the length in bytes of the sequential run it belongs to
    /// (the request alone if it continues nothing).
    pub fn observe(&mut self, offset: u64, len: u64) -> u64 {
        self.tick += 1;
        let tick = self.tick;
        if let Some(s) = self.slots.iter_mut().find(|s| s.2 != 0 && s.0 == offset) {
            s.0 = offset + len;
            s.1 += len;
            s.2 = tick;
            return s.1;
        }
        let mut victim = 0;
        for (i, s) in self.slots.iter().enumerate() {
            if s.2 < self.slots[victim].2 {
                victim = i;
            }
        }
        self.slots[victim] = (offset + len, len, tick);
        len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_interleaved_streams() {
        let mut d = SeqDetector::default();
        assert_eq!(d.observe(0, 4096), 4096);
        assert_eq!(d.observe(1 << 30, 4096), 4096);
        assert_eq!(d.observe(4096, 4096), 8192);
        assert_eq!(d.observe((1 << 30) + 4096, 8192), 12288);
        assert_eq!(d.observe(12345, 10), 10);
    }
}
