//! `ma`: meta arithmetic. Modes `I +` (incr, default) and `D -` (decr); `D` sets the delta
//! (default 1), `N` creates a missing item with the `J` value (default 0), `C` compares CAS
//! (0 means no compare, as in memcached), `T` sets the TTL on success. Flags apply in request
//! order, so `t` before `T` reports the old TTL.
use bytes::Bytes;
use flashtier_cache::{CasMode, Item, ItemMeta, ItemWrite, KvStore, Update};

use super::arith::{apply, NonNumeric};
use super::exptime;
use crate::codec::meta::{is_long_opaque, opaque_too_long};
use crate::context::Context;
use crate::output::Output;
use crate::reply;
use crate::request::{Meta, MetaOpts};
use crate::stats::Stats;

enum Outcome {
    NotFound,
    Exists,
    NonNumeric,
    /// The new number, and what `t` reports.
    Done {
        number: u64,
        ttl_out: i64,
        created: bool,
    },
}

/// Apply `T`/`N`/`t` in order to an exptime; returns (final exptime, `t` output). memcached
/// applies them while writing the reply, so flags after a too-long opaque never apply.
fn walk(o: &MetaOpts, mut abs: u32, created: bool, now: u32) -> (u32, i64) {
    let mut ttl_out = -1;
    for f in o.flags.iter().take_while(|f| !is_long_opaque(f)) {
        match f.letter {
            b't' => ttl_out = exptime::remaining(abs, now),
            b'T' => abs = exptime::absolute(o.ttl.unwrap_or(0), now),
            b'N' if created => abs = exptime::absolute(o.vivify.unwrap_or(0), now),
            _ => {}
        }
    }
    (abs, ttl_out)
}

/// memcached stores an item whose total size (48-byte header, 8-byte CAS, key, NUL, value,
/// CRLF) exceeds its largest slab chunk (512 KiB by default, `-o slab_chunk_max`) in chunks,
/// and refuses arithmetic on a chunked item before comparing CAS. No such value is a number.
fn memcached_chunked(key: &[u8], value: &[u8]) -> bool {
    48 + 8 + key.len() + 1 + value.len() + 2 > 512 * 1024
}

fn decide(o: &MetaOpts, key: &[u8], incr: bool, cur: Option<&Item>, now: u32) -> (Update, Outcome) {
    let Some(it) = cur else {
        if o.vivify.is_none() {
            return (Update::Keep, Outcome::NotFound);
        }
        let (abs, ttl_out) = walk(o, 0, true, now);
        let w = ItemWrite {
            value: Bytes::from(o.initial.to_string()),
            flags: 0,
            exptime: abs,
            cas: CasMode::New,
            meta: ItemMeta::default(),
        };
        return (
            Update::Put(w),
            Outcome::Done {
                number: o.initial,
                ttl_out,
                created: true,
            },
        );
    };
    if it.value.is_empty() || memcached_chunked(key, &it.value) {
        return (Update::Keep, Outcome::NonNumeric);
    }
    if o.compare_cas.is_some_and(|c| c != 0 && c != it.cas) {
        return (Update::Keep, Outcome::Exists);
    }
    match apply(it, incr, o.delta) {
        Err(NonNumeric) => (Update::Keep, Outcome::NonNumeric),
        Ok(mut a) => {
            let (abs, ttl_out) = walk(o, it.exptime, false, now);
            a.write.exptime = abs;
            (
                Update::Put(a.write),
                Outcome::Done {
                    number: a.number,
                    ttl_out,
                    created: false,
                },
            )
        }
    }
}

pub async fn run<S: KvStore>(ctx: &Context<S>, meta: Meta, incr: bool, out: &mut Output) {
    // memcached -C: a compare value matches any item.
    let opts = if ctx.settings.cas_enabled {
        None
    } else {
        Some(crate::request::MetaOpts {
            compare_cas: None,
            ..meta.opts.clone()
        })
    };
    let o = opts.as_ref().unwrap_or(&meta.opts);
    let now = ctx.store.clock().now();
    let res = ctx
        .store
        .update(&meta.key, |cur| decide(o, &meta.key, incr, cur, now))
        .await;
    let (outcome, cas) = match res {
        Ok((r, cas)) => (r, cas.unwrap_or(0)),
        Err(e) => return super::store_error(ctx, &e, false, out),
    };
    let s = &ctx.stats;
    if !matches!(outcome, Outcome::NonNumeric) && opaque_too_long(o) {
        // memcached applies the delta, then fails while echoing the opaque.
        reply::line(out, b"CLIENT_ERROR opaque token too long");
        return;
    }
    match outcome {
        Outcome::NonNumeric => {
            reply::line(
                out,
                b"CLIENT_ERROR cannot increment or decrement non-numeric value",
            );
        }
        Outcome::NotFound | Outcome::Exists => {
            if matches!(outcome, Outcome::NotFound) {
                Stats::incr(if incr { &s.incr_misses } else { &s.decr_misses });
                out.extend_from_slice(b"NF");
            } else {
                out.extend_from_slice(b"EX");
            }
            super::meta_echo(out, &meta);
            out.extend_from_slice(b"\r\n");
        }
        Outcome::Done {
            number,
            ttl_out,
            created,
        } => {
            if !created {
                Stats::incr(if incr { &s.incr_hits } else { &s.decr_hits });
            }
            // memcached's quiet mode hides the nominal reply of an update, but not of an
            // item created by `N`.
            if o.quiet && !created {
                return;
            }
            let digits = number.to_string();
            if o.value {
                out.extend_from_slice(b"VA ");
                reply::u64(out, digits.len() as u64);
            } else {
                out.extend_from_slice(b"HD");
            }
            for f in &o.flags {
                match f.letter {
                    b'c' => reply::flag_u64(out, b'c', ctx.cas_out(cas)),
                    b't' => {
                        out.extend_from_slice(b" t");
                        reply::i64(out, ttl_out);
                    }
                    b'O' => reply::flag_bytes(out, b'O', &f.token),
                    b'k' => super::meta_key(out, &meta),
                    _ => {}
                }
            }
            if o.value {
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(digits.as_bytes());
            }
            out.extend_from_slice(b"\r\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::testing::run as t;

    #[test]
    fn values_memcached_chunks_are_non_numeric_before_cas() {
        let item = |len: usize| Item {
            value: Bytes::from("7".repeat(len)),
            flags: 0,
            exptime: 0,
            cas: 5,
            meta: ItemMeta::default(),
        };
        let o = MetaOpts {
            compare_cas: Some(1),
            delta: 1,
            ..MetaOpts::default()
        };
        let limit = 512 * 1024 - 48 - 8 - 1 - 1 - 2;
        assert!(matches!(
            decide(&o, b"k", true, Some(&item(limit + 1)), 0).1,
            Outcome::NonNumeric
        ));
        assert!(matches!(
            decide(&o, b"k", true, Some(&item(limit)), 0).1,
            Outcome::Exists
        ));
    }

    #[tokio::test]
    async fn counter_lifecycle() {
        assert_eq!(
            t(b"ma cnt\r\nma cnt N0 J5 v t c\r\nma cnt v MD D10\r\nma cnt q\r\nma cnt C1 v\r\nma cnt v k\r\n").await,
            "NF\r\nVA 1 t-1 c1\r\n5\r\nVA 1\r\n0\r\nEX\r\nVA 1 kcnt\r\n2\r\n"
        );
    }

    #[tokio::test]
    async fn ttl_and_errors() {
        assert_eq!(
            t(b"ma c N100 t T5 t\r\n").await,
            "CLIENT_ERROR invalid or duplicate flag\r\n"
        );
        assert_eq!(
            t(b"ma c N100 t\r\nma c T5 t\r\n").await,
            "HD t100\r\nHD t5\r\n"
        );
        // TTL flags after a too-long opaque are not applied (the delta and `N`'s create are).
        let o = "o".repeat(33);
        let req = format!("ma c N100 O{o} T5\r\nmg c t v\r\nma d O{o} N100\r\nmg d t v\r\n");
        assert_eq!(
            t(req.as_bytes()).await,
            "CLIENT_ERROR opaque token too long\r\nVA 1 t100\r\n0\r\n\
             CLIENT_ERROR opaque token too long\r\nVA 1 t-1\r\n0\r\n"
        );
        assert_eq!(
            t(b"ma c MX\r\n").await,
            "CLIENT_ERROR invalid mode for ma M token\r\n"
        );
        assert_eq!(
            t(b"ma c D-1\r\n").await,
            "CLIENT_ERROR invalid or duplicate flag\r\n"
        );
        assert_eq!(
            t(b"set c 0 0 1\r\nx\r\nma c\r\n").await,
            "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
        );
        assert_eq!(
            t(b"set c 0 0 2\r\n99\r\nma c MI D1 v\r\nget c\r\n").await,
            "STORED\r\nVA 3\r\n100\r\nVALUE c 0 3\r\n100\r\nEND\r\n"
        );
    }
}
