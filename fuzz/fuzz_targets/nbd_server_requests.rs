//! Fuzz the NBD codec entry point `server_requests`: arbitrary bytes must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    flashtier_nbd::codec::fuzz::server_requests(data);
});
