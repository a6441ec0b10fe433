//! `me`: meta debug, a human-readable dump of an item's metadata (never its value).
//!
//! memcached prints `ME <key> exp=.. la=.. cas=.. fetch=yes|no cls=.. size=..`. `exp` is
//! memcached's own (negated) remaining TTL, `-1` for never; `cls` and `size` are what
//! memcached's default slab layout would use for the item, since flashtier has no slabs.
use flashtier_cache::{KvStore, Update};

use crate::codec::meta::base64_encode;
use crate::context::Context;
use crate::output::Output;
use crate::reply;
use crate::stats::Stats;

/// memcached's per-item header, CAS included.
const ITEM_HEADER: usize = 48 + 8;

/// Total size memcached would account for the item.
pub fn item_size(key_len: usize, value_len: usize, flags: u32) -> usize {
    ITEM_HEADER + key_len + 1 + if flags == 0 { 0 } else { 4 } + value_len + 2
}

/// The slab class memcached 1.6's default layout (`-n 48 -f 1.25`) would put `size` in.
pub fn slab_class(size: usize) -> u32 {
    let mut chunk = 96usize;
    let mut class = 1;
    while chunk < size && class < 63 {
        chunk = (chunk as f64 * 1.25) as usize;
        chunk = chunk.div_ceil(8) * 8;
        class += 1;
    }
    class
}

pub async fn run<S: KvStore>(ctx: &Context<S>, key: &[u8], binary: bool, out: &mut Output) {
    Stats::incr(&ctx.stats.cmd_meta);
    // Peek without recording an access.
    let item = ctx
        .store
        .update(key, |cur| (Update::Keep, cur.cloned()))
        .await
        .ok()
        .and_then(|r| r.0);
    let Some(item) = item else {
        reply::line(out, b"EN");
        return;
    };
    let now = ctx.store.clock().now();
    let exp = if item.exptime == 0 {
        -1
    } else {
        i64::from(now) - i64::from(item.exptime)
    };
    let size = item_size(key.len(), item.value.len(), item.flags);
    let shown = if binary {
        base64_encode(key).into_bytes()
    } else {
        key.to_vec()
    };
    out.extend_from_slice(b"ME ");
    out.extend_from_slice(&shown);
    let rest = format!(
        " exp={exp} la={} cas={} fetch={} cls={} size={size}\r\n",
        now.saturating_sub(item.meta.last_access),
        item.cas,
        if item.meta.fetched { "yes" } else { "no" },
        slab_class(size),
    );
    out.extend_from_slice(rest.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::testing::run as t;

    #[tokio::test]
    async fn found_and_missing() {
        assert_eq!(t(b"me a\r\n").await, "EN\r\n");
        assert_eq!(
            t(b"ms YWJj 1 b\r\nx\r\nme YWJj b\r\nmg abc\r\nme abc\r\n").await,
            "HD\r\nME YWJj exp=-1 la=0 cas=1 fetch=no cls=1 size=63\r\nHD\r\nME abc exp=-1 la=0 cas=1 fetch=yes cls=1 size=63\r\n"
        );
        assert_eq!(
            t(b"me\r\n").await,
            "CLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(
            t(b"me a b\r\n").await,
            "CLIENT_ERROR bad command line format\r\n"
        );
    }

    #[test]
    fn classes() {
        assert_eq!(slab_class(63), 1);
        assert_eq!(slab_class(96), 1);
        assert_eq!(slab_class(97), 2);
    }
}
