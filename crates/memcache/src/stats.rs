//! Protocol counters: what memcached's `stats` reports about commands and connections.
//!
//! Every connection task updates these with relaxed atomics (they are counters, not
//! synchronisation). Store-side numbers (items, bytes, evictions) come from the store's own
//! `StoreStats`; this struct holds only what the protocol layer sees. Names follow memcached's
//! `stats` so existing dashboards keep working.
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident),* $(,)? }
     resettable { $($(#[$rm:meta])* $rfield:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Default)]
        pub struct $name {
            $($(#[$fm])* pub $field: AtomicU64,)*
            $($(#[$rm])* pub $rfield: AtomicU64,)*
        }

        impl $name {
            /// (name, value) pairs of the resettable counters, in memcached's order.
            pub fn counters(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($rfield), self.$rfield.load(Ordering::Relaxed)),)*]
            }

            /// `stats reset`: zero the command counters (gauges are kept).
            pub fn reset(&self) {
                $(self.$rfield.store(0, Ordering::Relaxed);)*
            }
        }
    };
}

counters! {
    /// Protocol-level counters shared by all connections of one server.
    Stats {
        /// Open client connections (gauge).
        curr_connections,
        /// Connections accepted since start, including rejected ones.
        total_connections,
        /// Connections refused because `max_connections` was reached.
        rejected_connections,
    }
    resettable {
        cmd_get,
        cmd_set,
        cmd_flush,
        cmd_touch,
        cmd_meta,
        get_hits,
        get_misses,
        get_expired,
        get_flushed,
        delete_misses,
        delete_hits,
        incr_misses,
        incr_hits,
        decr_misses,
        decr_hits,
        cas_misses,
        cas_hits,
        cas_badval,
        touch_hits,
        touch_misses,
        store_too_large,
        store_no_memory,
        auth_cmds,
        auth_errors,
        /// Connections closed by -o idle_timeout.
        idle_kicks,
        bytes_read,
        bytes_written,
        /// Connections closed for sending a binary-protocol request.
        binary_protocol_rejected,
        /// Connections closed for an over-long line.
        line_too_long_closed,
        /// Runs of two or more pipelined reads executed together on one connection.
        pipelined_read_batches,
        /// Writes run beside requests still in a connection's window (no key in common).
        windowed_writes,
        /// Requests that waited for a running request of their connection on the same key.
        window_key_waits,
        /// Requests that waited for room in their connection's window (16 in flight).
        window_full_waits,
        /// Times a connection yielded after -R requests.
        conn_yields,
        /// TLS connections established (-Z).
        ssl_new_sessions,
        /// TLS handshakes that failed or timed out.
        ssl_handshake_errors,
    }
}

impl Stats {
    /// Add `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Add one to a counter.
    pub fn incr(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Read a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_keeps_gauges() {
        let s = Stats::default();
        Stats::incr(&s.cmd_get);
        Stats::incr(&s.curr_connections);
        s.reset();
        assert_eq!(Stats::get(&s.cmd_get), 0);
        assert_eq!(Stats::get(&s.curr_connections), 1);
        assert_eq!(s.counters().first(), Some(&("cmd_get", 0)));
    }
}
