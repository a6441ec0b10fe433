//! `incr` / `decr`, and the number rules `ma` shares.
//!
//! The value is read as memcached reads it (`strtoull` up to the first whitespace); `incr`
//! wraps at 2^64, `decr` stops at 0. When the new number is no longer than the old value,
//! memcached rewrites the item in place and pads it with spaces to the old length (so
//! `decr` of "10" by 1 stores "9 "); a longer number makes a new item. Both are kept here.
use bytes::{Bytes, BytesMut};
use flashtier_cache::{CasMode, Item, ItemMeta, ItemWrite, KvStore, Update};

use crate::codec::number::strtoull;
use crate::context::Context;
use crate::output::Output;
use crate::reply;
use crate::stats::Stats;

/// The value is not a number (or empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NonNumeric;

/// The result of applying a delta.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub number: u64,
    /// The item to write (same flags and exptime, fresh CAS).
    pub write: ItemWrite,
}

/// Parse an item's value as memcached's incr does.
pub fn parse_value(value: &[u8]) -> Result<u64, NonNumeric> {
    if value.is_empty() {
        return Err(NonNumeric);
    }
    strtoull(value).ok_or(NonNumeric)
}

/// Apply `delta` to `item` (incr wraps, decr floors at 0).
pub fn apply(item: &Item, incr: bool, delta: u64) -> Result<Applied, NonNumeric> {
    let old = parse_value(&item.value)?;
    let number = if incr {
        old.wrapping_add(delta)
    } else {
        old.saturating_sub(delta)
    };
    Ok(Applied {
        number,
        write: rewrite(item, number),
    })
}

/// The item memcached stores for `number` replacing `item`.
pub fn rewrite(item: &Item, number: u64) -> ItemWrite {
    let digits = number.to_string();
    let in_place = digits.len() <= item.value.len();
    let value = if in_place {
        let mut v = BytesMut::with_capacity(item.value.len());
        v.extend_from_slice(digits.as_bytes());
        v.resize(item.value.len(), b' ');
        v.freeze()
    } else {
        Bytes::from(digits)
    };
    ItemWrite {
        value,
        flags: item.flags,
        exptime: item.exptime,
        cas: CasMode::New,
        // An in-place update keeps the item's bits; a new item starts clean.
        meta: if in_place {
            item.meta
        } else {
            ItemMeta::default()
        },
    }
}

enum Outcome {
    Missing,
    NonNumeric,
    Done(u64),
}

pub async fn run<S: KvStore>(
    ctx: &Context<S>,
    key: &[u8],
    incr: bool,
    delta: u64,
    noreply: bool,
    out: &mut Output,
) {
    let res = ctx
        .store
        .update(key, |cur| match cur {
            None => (Update::Keep, Outcome::Missing),
            Some(it) => match apply(it, incr, delta) {
                Err(NonNumeric) => (Update::Keep, Outcome::NonNumeric),
                Ok(a) => (Update::Put(a.write), Outcome::Done(a.number)),
            },
        })
        .await;
    let s = &ctx.stats;
    let line = match res {
        Err(e) => return super::store_error(ctx, &e, noreply, out),
        Ok((Outcome::Missing, _)) => {
            Stats::incr(if incr { &s.incr_misses } else { &s.decr_misses });
            b"NOT_FOUND".to_vec()
        }
        Ok((Outcome::NonNumeric, _)) => {
            b"CLIENT_ERROR cannot increment or decrement non-numeric value".to_vec()
        }
        Ok((Outcome::Done(n), _)) => {
            Stats::incr(if incr { &s.incr_hits } else { &s.decr_hits });
            n.to_string().into_bytes()
        }
    };
    if !noreply {
        reply::line(out, &line);
    }
}

#[cfg(test)]
mod tests {
    use crate::command::testing::run as t;

    #[tokio::test]
    async fn incr_decr() {
        assert_eq!(t(b"incr a 1\r\n").await, "NOT_FOUND\r\n");
        assert_eq!(
            t(b"set a 5 0 2\r\n10\r\nincr a 5\r\ndecr a 6\r\nget a\r\ndecr a 100\r\nincr a 1000\r\nget a\r\n").await,
            "STORED\r\n15\r\n9\r\nVALUE a 5 2\r\n9 \r\nEND\r\n0\r\n1000\r\nVALUE a 5 4\r\n1000\r\nEND\r\n"
        );
        assert_eq!(
            t(b"set a 0 0 20\r\n18446744073709551615\r\nincr a 2\r\n").await,
            "STORED\r\n1\r\n"
        );
    }

    #[tokio::test]
    async fn errors() {
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\nincr a 1\r\n").await,
            "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
        );
        assert_eq!(
            t(b"set a 0 0 0\r\n\r\nincr a 1\r\n").await,
            "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
        );
        assert_eq!(
            t(b"incr a x\r\n").await,
            "CLIENT_ERROR invalid numeric delta argument\r\n"
        );
        assert_eq!(
            t(b"incr a -1\r\n").await,
            "CLIENT_ERROR invalid numeric delta argument\r\n"
        );
        assert_eq!(t(b"incr a x noreply\r\nincr a\r\n").await, "ERROR\r\n");
        assert_eq!(
            t(b"set a 0 0 1\r\n1\r\nincr a 1 noreply\r\nget a\r\n").await,
            "STORED\r\nVALUE a 0 1\r\n2\r\nEND\r\n"
        );
    }
}
