//! `ms`: meta set. Modes `S E A P R` map onto the storage commands (a `C` compare turns `S`
//! and `R` into `cas`); `I` lets an older CAS store the value as stale. The reply is
//! `HD NS EX NF` plus the `O`, `k` and `c` flags in request order; `q` hides `HD`.
use bytes::Bytes;
use flashtier_cache::KvStore;

use super::exptime;
use super::storage::{count_cas, decide, Offer, Stored};
use crate::context::Context;
use crate::output::Output;
use crate::reply;
use crate::request::{Meta, StoreMode};
use crate::stats::Stats;

pub async fn run<S: KvStore>(
    ctx: &Context<S>,
    meta: Meta,
    mode: StoreMode,
    value: Bytes,
    out: &mut Output,
) {
    Stats::incr(&ctx.stats.cmd_set);
    let o = &meta.opts;
    let now = ctx.store.clock().now();
    let offer = Offer {
        value,
        flags: o.client_flags,
        exptime: exptime::absolute(o.ttl.unwrap_or(0), now),
        compare: o.compare_cas.unwrap_or(0),
        set_stale: o.invalidate && mode == StoreMode::Cas,
        any_cas: !ctx.settings.cas_enabled,
    };
    ctx.detail.record(
        &meta.key,
        ctx.settings.detail_delimiter,
        crate::detail::Event::Set,
    );
    let max = ctx.store.max_item_size();
    let res = ctx
        .store
        .update(&meta.key, |cur| decide(mode, cur, &offer, max))
        .await;
    let (result, cas) = match res {
        Ok((r, cas)) => (r, cas.unwrap_or(0)),
        Err(e) => return super::store_error(ctx, &e, false, out),
    };
    count_cas(ctx, mode, result);
    if result == Stored::Stored && o.quiet {
        return;
    }
    out.extend_from_slice(match result {
        Stored::Stored => b"HD",
        Stored::NotStored => b"NS",
        Stored::Exists => b"EX",
        Stored::NotFound => b"NF",
    });
    for f in &o.flags {
        match f.letter {
            b'O' => reply::flag_bytes(out, b'O', &f.token),
            b'k' => super::meta_key(out, &meta),
            b'c' => reply::flag_u64(out, b'c', ctx.cas_out(cas)),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use crate::command::testing::{run as t, Harness};

    #[tokio::test]
    async fn modes() {
        assert_eq!(
            t(b"ms x 2 MA\r\nzz\r\nms x 2 ME\r\nzz\r\nms x 2 ME\r\nzz\r\nms x 2 MA c\r\nyy\r\nmg x v c\r\n").await,
            "NS\r\nHD\r\nNS\r\nHD c2\r\nVA 4 c2\r\nzzyy\r\n"
        );
        assert_eq!(
            t(b"ms x 2\r\nzz\r\nms x 2 MR C1\r\nqq\r\nms x 2 MP\r\nqq\r\nmg x v\r\n").await,
            "HD\r\nHD\r\nHD\r\nVA 4\r\nqqqq\r\n"
        );
        assert_eq!(
            t(b"ms x 2 MR\r\nzz\r\nms x 2 MS q\r\nzz\r\nmn\r\n").await,
            "NS\r\nMN\r\n"
        );
        assert_eq!(t(b"ms x 2 C5\r\nzz\r\n").await, "NF\r\n");
    }

    #[tokio::test]
    async fn flags_ttl_opaque() {
        let h = Harness::new();
        assert_eq!(
            h.send(b"ms a 1 F7 T10 O99 k c\r\nx\r\nmg a f t v\r\n")
                .await,
            "HD O99 ka c1\r\nVA 1 f7 t10\r\nx\r\n"
        );
        h.clock.advance(10);
        assert_eq!(h.send(b"mg a v\r\n").await, "EN\r\n");
    }

    #[tokio::test]
    async fn invalidate_with_old_cas() {
        assert_eq!(
            t(b"ms a 1\r\nx\r\nms a 1\r\ny\r\nms a 1 C1 I\r\nz\r\nmg a v c\r\nms a 1 C1\r\nw\r\n")
                .await,
            "HD\r\nHD\r\nHD\r\nVA 1 c3 X W\r\nz\r\nEX\r\n"
        );
    }

    #[tokio::test]
    async fn errors_swallow_data() {
        assert_eq!(
            t(b"ms a\r\n").await,
            "CLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(
            t(b"ms a S1\r\nx\r\n").await,
            "CLIENT_ERROR bad command line format\r\nERROR\r\n"
        );
        assert_eq!(
            t(b"ms a 1 MZ\r\nx\r\nmn\r\n").await,
            "CLIENT_ERROR invalid mode for ms M token\r\nMN\r\n"
        );
        assert_eq!(
            t(b"ms a 1 F-1\r\nx\r\nmn\r\n").await,
            "CLIENT_ERROR bad command line format\r\nMN\r\n"
        );
        assert_eq!(
            t(b"ms a 1 b\r\nx\r\nmn\r\n").await,
            "CLIENT_ERROR error decoding key\r\nMN\r\n"
        );
        assert_eq!(
            t(b"ms a 1 q\r\nxyz\r\nmn\r\n").await,
            "CLIENT_ERROR bad data chunk\r\nERROR\r\nMN\r\n"
        );
        let mut big = b"ms a 2000 T0\r\n".to_vec();
        big.extend_from_slice(&[b'x'; 2000]);
        big.extend_from_slice(b"\r\nmn\r\n");
        assert_eq!(
            t(&big).await,
            "SERVER_ERROR object too large for cache\r\nMN\r\n"
        );
    }
}
