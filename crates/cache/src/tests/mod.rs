//! Unit tests of the whole cache that drive a component by hand (a promotion's phases, a
//! write-back pass, a write waiting out back-pressure) through `Cache::core` and
//! `Cache::tier`. The components' own tests, with fakes, are in their files; the behaviours
//! seen through the public API are in `tests/`.
mod backpressure;
mod get_if_ready;
mod promote;
mod writeback;
