//! `mg`: meta get, with vivify (`N`), recache (`R`), touch (`T`) and the stale/win protocol.
//!
//! memcached applies the flags in request order, so `t` before `T` reports the old TTL and
//! `R` after `T` compares with the new one; [`walk`] replays that order. The win token is
//! handed out once: on a vivified miss (`N`), when the TTL is below `R`, or when the item is
//! stale; later readers see `Z`. `h` and `l` report the item's state before this access.
use flashtier_cache::{CasMode, Item, ItemMeta, ItemWrite, KvStore, Update};

use super::exptime;
use crate::codec::meta::{is_long_opaque, opaque_too_long};
use crate::context::Context;
use crate::output::Output;
use crate::reply;
use crate::request::{Meta, MetaOpts};
use crate::stats::Stats;

/// The effect of the flags on one item, in request order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Walk {
    /// The item's exptime after `T`/`N`.
    exptime: u32,
    /// What `t` reports (the TTL at the point `t` appears).
    ttl_out: i64,
    won: bool,
    ttl_set: bool,
}

fn walk(o: &MetaOpts, item: &Item, created: bool, now: u32) -> Walk {
    let mut w = Walk {
        exptime: item.exptime,
        ttl_out: -1,
        won: false,
        ttl_set: false,
    };
    for f in &o.flags {
        match f.letter {
            b'T' => {
                w.ttl_set = true;
                w.exptime = exptime::absolute(o.ttl.unwrap_or(0), now);
            }
            b'N' if created => {
                w.exptime = exptime::absolute(o.vivify.unwrap_or(0), now);
                w.won = true;
            }
            b'R' => {
                let threshold = exptime::absolute(o.recache.unwrap_or(0), now);
                if !item.meta.win_token_sent && !created && w.exptime != 0 && w.exptime < threshold
                {
                    w.won = true;
                }
            }
            b't' => w.ttl_out = exptime::remaining(w.exptime, now),
            _ => {}
        }
    }
    if item.meta.stale && !item.meta.win_token_sent {
        w.won = true;
    }
    w
}

/// What the lookup found.
struct Found {
    /// The item as it was before this command (for `created`, the stub).
    item: Item,
    walk: Walk,
    created: bool,
    /// CAS after the command (a vivified item gets a fresh one).
    cas: u64,
}

/// The write (if any) that the walk requires.
fn write_for(item: &Item, walk: &Walk, created: bool) -> Option<ItemWrite> {
    let token = item.meta.win_token_sent || walk.won;
    let needed = created || walk.ttl_set || token != item.meta.win_token_sent;
    needed.then(|| ItemWrite {
        value: item.value.clone(),
        flags: item.flags,
        exptime: walk.exptime,
        cas: if created { CasMode::New } else { CasMode::Keep },
        meta: ItemMeta {
            stale: item.meta.stale,
            win_token_sent: token,
            ..ItemMeta::default()
        },
    })
}

fn stub() -> Item {
    Item {
        value: Default::default(),
        flags: 0,
        exptime: 0,
        cas: 0,
        meta: ItemMeta::default(),
    }
}

async fn lookup<S: KvStore>(ctx: &Context<S>, meta: &Meta, now: u32) -> Option<Found> {
    let o = &meta.opts;
    let modifies = o.vivify.is_some() || o.ttl.is_some() || o.recache.is_some();
    if !modifies && !o.no_update {
        // The common read: one `get`, which also records the access.
        let item = ctx.store.get(&meta.key).await.ok().flatten()?;
        let w = walk(o, &item, false, now);
        if w.won {
            // Stale and nobody holds the token yet: hand it out, unless the item changed.
            let cas = item.cas;
            let wrote = ctx
                .store
                .update(&meta.key, |cur| match cur {
                    Some(c) if c.cas == cas && !c.meta.win_token_sent => {
                        match write_for(c, &walk(o, c, false, now), false) {
                            Some(w) => (Update::Put(w), true),
                            None => (Update::Keep, false),
                        }
                    }
                    _ => (Update::Keep, false),
                })
                .await
                .is_ok_and(|(wrote, _)| wrote);
            if wrote {
                // memcached sets the token bit in place; the store's write cleared the
                // fetched bit that the read above had set, so set it again.
                let _ = ctx.store.get(&meta.key).await;
            }
        }
        let cas = item.cas;
        return Some(Found {
            item,
            walk: w,
            created: false,
            cas,
        });
    }
    let res = ctx
        .store
        .update(&meta.key, |cur| {
            let (item, created) = match cur {
                Some(it) => (it.clone(), false),
                None if o.vivify.is_some() => (stub(), true),
                None => return (Update::Keep, None),
            };
            let w = walk(o, &item, created, now);
            let update = write_for(&item, &w, created).map_or(Update::Keep, Update::Put);
            (update, Some((item, w, created)))
        })
        .await;
    let (found, new_cas) = match res {
        Ok((Some(f), cas)) => (f, cas),
        _ => return None,
    };
    let (item, walk, created) = found;
    // memcached changes TTL and token bits in place, so an item that was fetched stays
    // fetched even under `u`; the store's write cleared that bit, so read once more.
    let kept_fetched = item.meta.fetched && !created && write_for(&item, &walk, created).is_some();
    if !o.no_update || kept_fetched {
        // Record the access the way a plain read would (memcached's delayed bump marks even
        // a just-vivified item fetched).
        let _ = ctx.store.get(&meta.key).await;
    }
    let cas = new_cas.unwrap_or(item.cas);
    Some(Found {
        item,
        walk,
        created,
        cas,
    })
}

/// Flags with which memcached fetches an item without bumping it and bumps it only once the
/// reply is complete (`_meta_flag_preparse` sets its `locked` option for them).
const DELAYED_BUMP: &[u8] = b"hlNRT";

/// memcached finds an over-long opaque while writing the reply: a vivified item is already
/// created, and `T`/`N` flags before the `O` have applied; no win token is handed out. The
/// access is recorded only when memcached had already bumped the item while fetching it,
/// which it does unless a flag makes it delay the bump to the end of the command (`h l N R
/// T`, see [`DELAYED_BUMP`]) or `u` forbids it. Replay exactly that, then report the error.
async fn opaque_error<S: KvStore>(ctx: &Context<S>, meta: &Meta, now: u32, out: &mut Output) {
    let o = &meta.opts;
    let cut = o
        .flags
        .iter()
        .position(is_long_opaque)
        .unwrap_or(o.flags.len());
    let before = MetaOpts {
        flags: o.flags.iter().take(cut).cloned().collect(),
        ..o.clone()
    };
    let res = ctx
        .store
        .update(&meta.key, |cur| {
            let (item, created) = match cur {
                Some(it) => (it.clone(), false),
                None if o.vivify.is_some() => (stub(), true),
                None => return (Update::Keep, None),
            };
            let mut w = walk(&before, &item, created, now);
            w.won = false;
            match write_for(&item, &w, created) {
                Some(write) => {
                    let kept_fetched = !created && item.meta.fetched;
                    (Update::Put(write), Some((!created, kept_fetched)))
                }
                None => (Update::Keep, Some((!created, false))),
            }
        })
        .await;
    if let Ok((Some((found, kept_fetched)), _)) = res {
        let bumped = !o.no_update && !DELAYED_BUMP.iter().any(|&l| o.has(l));
        // A hit that was bumped, or a fetched item the store's write (a TTL change memcached
        // makes in place) marked unfetched: record the access.
        if (found && bumped) || kept_fetched {
            let _ = ctx.store.get(&meta.key).await;
        }
    }
    reply::line(out, b"CLIENT_ERROR opaque token too long");
}

/// Count the command and its hit or miss: as a touch when it changes the TTL (`T`), else as
/// a get (memcached's `cmd_touch`/`touch_hits` or `cmd_get`/`get_hits` and their misses).
fn count(stats: &Stats, o: &MetaOpts, hit: bool) {
    let (cmd, result) = match (o.ttl.is_some(), hit) {
        (true, true) => (&stats.cmd_touch, &stats.touch_hits),
        (true, false) => (&stats.cmd_touch, &stats.touch_misses),
        (false, true) => (&stats.cmd_get, &stats.get_hits),
        (false, false) => (&stats.cmd_get, &stats.get_misses),
    };
    Stats::incr(cmd);
    Stats::incr(result);
}

pub async fn run<S: KvStore>(ctx: &Context<S>, meta: Meta, out: &mut Output) {
    let now = ctx.store.clock().now();
    if opaque_too_long(&meta.opts) {
        return opaque_error(ctx, &meta, now, out).await;
    }
    let found = lookup(ctx, &meta, now).await;
    let o = &meta.opts;
    let detail = |hit| {
        let ev = crate::detail::Event::Get { hit };
        ctx.detail
            .record(&meta.key, ctx.settings.detail_delimiter, ev);
    };
    let Some(f) = found else {
        detail(false);
        count(&ctx.stats, o, false);
        if !o.quiet {
            out.extend_from_slice(b"EN");
            super::meta_echo(out, &meta);
            out.extend_from_slice(b"\r\n");
        }
        return;
    };
    detail(true);
    count(&ctx.stats, o, true);
    let item = &f.item;
    if o.value {
        out.extend_from_slice(b"VA ");
        reply::u64(out, item.value.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    for flag in &o.flags {
        match flag.letter {
            b's' => reply::flag_u64(out, b's', item.value.len() as u64),
            b't' => {
                out.extend_from_slice(b" t");
                reply::i64(out, f.walk.ttl_out);
            }
            b'c' => reply::flag_u64(out, b'c', ctx.cas_out(f.cas)),
            b'f' => reply::flag_u64(out, b'f', u64::from(item.flags)),
            b'l' => {
                let la = if f.created {
                    0
                } else {
                    now.saturating_sub(item.meta.last_access)
                };
                reply::flag_u64(out, b'l', u64::from(la));
            }
            b'h' => reply::flag_u64(out, b'h', u64::from(item.meta.fetched && !f.created)),
            b'O' => reply::flag_bytes(out, b'O', &flag.token),
            b'k' => super::meta_key(out, &meta),
            _ => {}
        }
    }
    if item.meta.win_token_sent {
        out.extend_from_slice(b" Z");
    }
    if item.meta.stale {
        out.extend_from_slice(b" X");
    }
    if f.walk.won {
        out.extend_from_slice(b" W");
    }
    out.extend_from_slice(b"\r\n");
    if o.value {
        out.put_value(f.item.value);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use crate::command::testing::{run as t, Harness};

    #[tokio::test]
    async fn hit_and_miss() {
        assert_eq!(t(b"mg a v\r\n").await, "EN\r\n");
        assert_eq!(
            t(b"mg missing v k Oabc\r\nmg missing v q\r\nmn\r\n").await,
            "EN kmissing Oabc\r\nMN\r\n"
        );
        assert_eq!(
            t(b"set a 5 0 1\r\nx\r\nmg a q\r\nmg a\r\nmg a s v f t c h k q O123\r\n").await,
            "STORED\r\nHD\r\nHD\r\nVA 1 s1 f5 t-1 c1 h1 ka O123\r\nx\r\n"
        );
    }

    #[tokio::test]
    async fn hit_flag_reports_previous_state() {
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\nmg a h\r\nmg a h\r\n").await,
            "STORED\r\nHD h0\r\nHD h1\r\n"
        );
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\nmg a h u\r\nmg a h\r\n").await,
            "STORED\r\nHD h0\r\nHD h0\r\n"
        );
        // A TTL change or a win token under `u` keeps a fetched item fetched.
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\nget a\r\nmg a T100 u\r\nmg a h\r\n").await,
            "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\nHD\r\nHD h1\r\n"
        );
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\nmd a I\r\nmg a\r\nmg a h\r\n").await,
            "STORED\r\nHD\r\nHD X W\r\nHD h1 Z X\r\n"
        );
    }

    #[tokio::test]
    async fn long_opaque_records_the_access_unless_the_bump_is_delayed() {
        let o = "o".repeat(33);
        for (flags, h) in [
            ("v", 1),
            ("t", 1),
            ("c k s f", 1),
            ("q", 1),
            ("h", 0),
            ("l", 0),
            ("T100", 0),
            ("R30", 0),
            ("N30", 0),
            ("u", 0),
        ] {
            let req = format!("set a 0 0 1\r\nx\r\nmg a O{o} {flags}\r\nmg a h\r\n");
            assert_eq!(
                t(req.as_bytes()).await,
                format!("STORED\r\nCLIENT_ERROR opaque token too long\r\nHD h{h}\r\n"),
                "flags {flags}"
            );
        }
        // A TTL change keeps a fetched item fetched.
        let req = format!("set a 0 0 1\r\nx\r\nget a\r\nmg a T9 O{o}\r\nmg a h t\r\n");
        assert_eq!(
            t(req.as_bytes()).await,
            "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\nCLIENT_ERROR opaque token too long\r\nHD h1 t9\r\n"
        );
    }

    #[tokio::test]
    async fn ttl_and_recache() {
        let h = Harness::new();
        assert_eq!(
            h.send(b"set a 0 0 1\r\nx\r\nmg a T30 t\r\nmg a R40 t c\r\nmg a R40 t c\r\n")
                .await,
            "STORED\r\nHD t30\r\nHD t30 c1 W\r\nHD t30 c1 Z\r\n"
        );
        assert_eq!(
            h.send(b"mg a t T100\r\nmg a t\r\n").await,
            "HD t30 Z\r\nHD t100 Z\r\n"
        );
    }

    #[tokio::test]
    async fn stale_and_vivify() {
        assert_eq!(
            t(b"set a 0 0 1\r\nx\r\nmd a I T10\r\nmg a c v\r\nmg a c v\r\n").await,
            "STORED\r\nHD\r\nVA 1 c2 X W\r\nx\r\nVA 1 c2 Z X\r\nx\r\n"
        );
        assert_eq!(
            t(b"mg nv N30 s t v c\r\nmg nv N30 s t v\r\nms nv 3 C999\r\nabc\r\nmg nv v\r\n").await,
            "VA 0 s0 t30 c1 W\r\n\r\nVA 0 s0 t30 Z\r\n\r\nEX\r\nVA 0 Z\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn base64_key() {
        assert_eq!(
            t(b"ms YWJj 1 b k c\r\nx\r\nmg YWJj b k v\r\nget abc\r\n").await,
            "HD kYWJj b c1\r\nVA 1 kYWJj b\r\nx\r\nVALUE abc 0 1\r\nx\r\nEND\r\n"
        );
    }

    #[tokio::test]
    async fn errors() {
        assert_eq!(t(b"mg a v v\r\n").await, "CLIENT_ERROR duplicate flag\r\n");
        assert_eq!(t(b"mg a zz\r\n").await, "CLIENT_ERROR invalid flag\r\n");
        let long = format!("mg {} v\r\n", "k".repeat(251));
        assert_eq!(
            t(long.as_bytes()).await,
            "CLIENT_ERROR bad command line format\r\n"
        );
        let opaque = format!("mg a O{}\r\n", "1".repeat(40));
        assert_eq!(
            t(opaque.as_bytes()).await,
            "CLIENT_ERROR opaque token too long\r\n"
        );
        assert_eq!(t(b"mg\r\n").await, "ERROR\r\n");
        assert_eq!(
            t(b"mg a Tx\r\n").await,
            "CLIENT_ERROR bad token in command line format\r\n"
        );
        assert_eq!(
            t(b"mg a b\r\n").await,
            "CLIENT_ERROR error decoding key\r\n"
        );
        let many = format!("mg a {}\r\n", "O1 ".repeat(19));
        assert_eq!(
            t(many.as_bytes()).await,
            "CLIENT_ERROR options flags are too long\r\n"
        );
    }

    #[tokio::test]
    async fn quiet_semantics() {
        // q hides only the miss (EN); hits and errors are still sent.
        assert_eq!(
            t(b"mg zz q k\r\nmg zz q v zz\r\nset a 0 0 1\r\nx\r\nmg a q v\r\nmn\r\n").await,
            "CLIENT_ERROR invalid flag\r\nSTORED\r\nVA 1\r\nx\r\nMN\r\n"
        );
        // md/ma/ms q hide only HD; NF/NS/EX are still sent.
        assert_eq!(
            t(b"md zz q\r\nma zz q\r\nms zz 1 q MR\r\nx\r\nmn\r\n").await,
            "NF\r\nNF\r\nNS\r\nMN\r\n"
        );
    }

    #[tokio::test]
    async fn vivify_with_expired_ttl_and_recache_after_touch() {
        assert_eq!(
            t(b"mg a N0 v\r\nmg a v\r\nmg b N-1 v\r\nmg b v\r\n").await,
            "VA 0 W\r\n\r\nVA 0 Z\r\n\r\nVA 0 W\r\n\r\nEN\r\n"
        );
        assert_eq!(
            t(b"set a 0 0 1\r\n1\r\nmg a R30\r\nmg a T10 R30\r\nmg a R30\r\nmg a T0\r\nmg a R30 t\r\n")
                .await,
            "STORED\r\nHD\r\nHD W\r\nHD Z\r\nHD Z\r\nHD t-1 Z\r\n"
        );
    }
}
