//! Fuzz the NBD codec entry point `client_replies`: arbitrary bytes must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    flashtier_nbd::codec::fuzz::client_replies(data);
});
