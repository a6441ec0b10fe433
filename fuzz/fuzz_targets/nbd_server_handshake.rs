//! Fuzz the NBD codec entry point `server_handshake`: arbitrary bytes must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    flashtier_nbd::codec::fuzz::server_handshake(data);
});
