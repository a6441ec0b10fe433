//! `md`: meta delete. With `I` the item is not removed but marked stale with a new CAS (and
//! optionally a new TTL from `T`), so the next `mg` wins the right to recache it. `C` only
//! deletes when the CAS matches. The reply is `HD NF EX` plus `O` and `k`; `q` hides `HD`.
use flashtier_cache::{CasMode, ItemMeta, ItemWrite, KvStore, Update};

use super::exptime;
use crate::context::Context;
use crate::output::Output;
use crate::request::Meta;
use crate::stats::Stats;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Deleted,
    /// Marked stale (`I`); the flag says the item had been fetched.
    Invalidated(bool),
    NotFound,
    Exists,
}

pub async fn run<S: KvStore>(ctx: &Context<S>, meta: Meta, out: &mut Output) {
    let o = &meta.opts;
    ctx.detail.record(
        &meta.key,
        ctx.settings.detail_delimiter,
        crate::detail::Event::Delete,
    );
    let now = ctx.store.clock().now();
    let res = ctx
        .store
        .update(&meta.key, |cur| {
            let Some(it) = cur else {
                return (Update::Keep, Outcome::NotFound);
            };
            if ctx.settings.cas_enabled && o.compare_cas.is_some_and(|c| c != it.cas) {
                return (Update::Keep, Outcome::Exists);
            }
            if !o.invalidate {
                return (Update::Delete, Outcome::Deleted);
            }
            let w = ItemWrite {
                value: it.value.clone(),
                flags: it.flags,
                exptime: o.ttl.map_or(it.exptime, |t| exptime::absolute(t, now)),
                cas: CasMode::New,
                meta: ItemMeta {
                    stale: true,
                    win_token_sent: false,
                    ..it.meta
                },
            };
            (Update::Put(w), Outcome::Invalidated(it.meta.fetched))
        })
        .await;
    let outcome = match res {
        Ok((r, _)) => r,
        Err(e) => return super::store_error(ctx, &e, false, out),
    };
    let s = &ctx.stats;
    match outcome {
        Outcome::Deleted => Stats::incr(&s.delete_hits),
        Outcome::Invalidated(fetched) => {
            // memcached flips the stale bit in place, so the item stays fetched; the store
            // resets that bit on a write, so read it once more to set it again.
            if fetched {
                let _ = ctx.store.get(&meta.key).await;
            }
        }
        Outcome::NotFound | Outcome::Exists => Stats::incr(&s.delete_misses),
    }
    if matches!(outcome, Outcome::Deleted | Outcome::Invalidated(_)) && o.quiet {
        return;
    }
    out.extend_from_slice(match outcome {
        Outcome::Deleted | Outcome::Invalidated(_) => b"HD",
        Outcome::NotFound => b"NF",
        Outcome::Exists => b"EX",
    });
    super::meta_echo(out, &meta);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use crate::command::testing::run as t;

    #[tokio::test]
    async fn delete_forms() {
        assert_eq!(
            t(b"md a\r\nmd a q\r\nmd a k O5\r\n").await,
            "NF\r\nNF\r\nNF ka O5\r\n"
        );
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\nmd a C9\r\nmd a C1 q\r\nmg a\r\nmn\r\n").await,
            "STORED\r\nEX\r\nEN\r\nMN\r\n"
        );
        assert_eq!(
            t(b"md a zz\r\n").await,
            "CLIENT_ERROR invalid or duplicate flag\r\n"
        );
        assert_eq!(
            t(b"md a q q\r\n").await,
            "CLIENT_ERROR invalid or duplicate flag\r\n"
        );
        assert_eq!(t(b"md\r\n").await, "ERROR\r\n");
    }

    #[tokio::test]
    async fn invalidate_keeps_value() {
        assert_eq!(
            t(b"set a 3 0 1\r\nx\r\nmd a I\r\nget a\r\nmg a c\r\n").await,
            "STORED\r\nHD\r\nVALUE a 3 1\r\nx\r\nEND\r\nHD c2 X W\r\n"
        );
    }

    #[tokio::test]
    async fn invalidate_keeps_the_fetched_bit() {
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\nget a\r\nmd a I\r\nmg a h\r\nset b 0 0 1\r\ny\r\nmd b I\r\nmg b h\r\n")
                .await,
            "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\nHD\r\nHD h1 X W\r\nSTORED\r\nHD\r\nHD h0 X W\r\n"
        );
    }
}
