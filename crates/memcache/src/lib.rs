//! The memcached text and meta protocol over a [`flashtier_cache::KvStore`].
