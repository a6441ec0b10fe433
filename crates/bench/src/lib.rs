//! Load generator for memcached-protocol servers and the side-by-side benchmark runner.
