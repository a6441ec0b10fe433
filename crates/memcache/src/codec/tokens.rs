//! memcached's command-line tokenizer.
//!
//! Tokens are separated by runs of spaces (only `' '`; a tab is part of a token). memcached
//! keeps at most 23 tokens per pass; the arity checks in [`super::text`] are written against
//! that capped count, so `count()` is capped the same way. Multi-key gets iterate every token
//! with [`Tokens::all`].

/// memcached's `MAX_TOKENS` (24) minus its terminal token.
pub const MAX_REAL_TOKENS: usize = 23;

/// The tokens of one command line (borrowing the line).
#[derive(Clone, Copy, Debug)]
pub struct Tokens<'a> {
    line: &'a [u8],
    toks: [&'a [u8]; MAX_REAL_TOKENS],
    n: usize,
}

impl<'a> Tokens<'a> {
    pub fn new(line: &'a [u8]) -> Self {
        let mut toks: [&'a [u8]; MAX_REAL_TOKENS] = [&[]; MAX_REAL_TOKENS];
        let mut n = 0;
        for t in line.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
            if let Some(slot) = toks.get_mut(n) {
                *slot = t;
                n += 1;
            } else {
                break;
            }
        }
        Self { line, toks, n }
    }

    /// Number of tokens, capped at [`MAX_REAL_TOKENS`] as memcached counts them.
    pub fn count(&self) -> usize {
        self.n
    }

    /// Token `i`, or an empty slice past the end.
    pub fn get(&self, i: usize) -> &'a [u8] {
        if i < self.n {
            self.toks.get(i).copied().unwrap_or_default()
        } else {
            &[]
        }
    }

    /// The last token (memcached's `tokens[ntokens - 2]`, where it looks for `noreply`).
    pub fn last(&self) -> &'a [u8] {
        self.get(self.n.saturating_sub(1))
    }

    /// Every token of the line, uncapped.
    pub fn all(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.line.split(|&b| b == b' ').filter(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_spaces_only() {
        let t = Tokens::new(b"  get  a\tb c ");
        assert_eq!(t.count(), 3);
        assert_eq!(t.get(0), b"get");
        assert_eq!(t.get(1), b"a\tb");
        assert_eq!(t.last(), b"c");
        assert_eq!(t.get(9), b"");
    }

    #[test]
    fn caps_like_memcached() {
        let line: Vec<u8> = (0..30)
            .flat_map(|i| format!("k{i} ").into_bytes())
            .collect();
        let t = Tokens::new(&line);
        assert_eq!(t.count(), MAX_REAL_TOKENS);
        assert_eq!(t.all().count(), 30);
    }
}
