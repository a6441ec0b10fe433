//! `delete` and `touch`: single-key commands with a one-word reply.
use flashtier_cache::{KvStore, Update};

use super::exptime;
use super::retrieval::touch_item;
use crate::context::Context;
use crate::output::Output;
use crate::reply;
use crate::stats::Stats;

pub async fn delete<S: KvStore>(ctx: &Context<S>, key: &[u8], noreply: bool, out: &mut Output) {
    ctx.detail.record(
        key,
        ctx.settings.detail_delimiter,
        crate::detail::Event::Delete,
    );
    let res = ctx
        .store
        .update(key, |cur| match cur {
            Some(_) => (Update::Delete, true),
            None => (Update::Keep, false),
        })
        .await;
    match res {
        Err(e) => super::store_error(ctx, &e, noreply, out),
        Ok((found, _)) => {
            let s = &ctx.stats;
            Stats::incr(if found {
                &s.delete_hits
            } else {
                &s.delete_misses
            });
            if !noreply {
                reply::line(out, if found { b"DELETED" } else { b"NOT_FOUND" });
            }
        }
    }
}

pub async fn touch<S: KvStore>(
    ctx: &Context<S>,
    key: &[u8],
    exptime: i32,
    noreply: bool,
    out: &mut Output,
) {
    let abs = exptime::absolute(exptime, ctx.store.clock().now());
    let found = touch_item(ctx, key, abs).await.is_some();
    let s = &ctx.stats;
    Stats::incr(&s.cmd_touch);
    Stats::incr(if found {
        &s.touch_hits
    } else {
        &s.touch_misses
    });
    if !noreply {
        reply::line(out, if found { b"TOUCHED" } else { b"NOT_FOUND" });
    }
}

#[cfg(test)]
mod tests {
    use crate::command::testing::{run as t, Harness};

    #[tokio::test]
    async fn delete_forms() {
        assert_eq!(t(b"delete a\r\n").await, "NOT_FOUND\r\n");
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\ndelete a\r\nget a\r\n").await,
            "STORED\r\nDELETED\r\nEND\r\n"
        );
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\ndelete a 0\r\n").await,
            "STORED\r\nDELETED\r\n"
        );
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\ndelete a noreply\r\ndelete a 0 noreply\r\nget a\r\n").await,
            "STORED\r\nEND\r\n"
        );
        let usage = "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
        assert_eq!(t(b"delete a 1\r\n").await, usage);
        assert_eq!(t(b"delete a x y\r\n").await, usage);
        assert_eq!(t(b"delete a x noreply\r\n").await, "");
        assert_eq!(t(b"delete a 0 0 0\r\n").await, "ERROR\r\n");
    }

    #[tokio::test]
    async fn touch_sets_ttl() {
        let h = Harness::new();
        assert_eq!(h.send(b"touch a 10\r\n").await, "NOT_FOUND\r\n");
        assert_eq!(
            h.send(b"set a 0 0 1\r\nx\r\ntouch a 10\r\n").await,
            "STORED\r\nTOUCHED\r\n"
        );
        h.clock.advance(11);
        assert_eq!(h.send(b"get a\r\n").await, "END\r\n");
        assert_eq!(
            h.send(b"touch a x\r\n").await,
            "CLIENT_ERROR invalid exptime argument\r\n"
        );
        assert_eq!(h.send(b"touch a\r\n").await, "ERROR\r\n");
    }
}
