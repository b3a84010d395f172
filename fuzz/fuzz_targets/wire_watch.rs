//! Fuzzes the remote API's decoding of network input (see `src/wire.rs`).
#![no_main]

#[path = "../src/wire.rs"]
mod wire;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::wire_watch(data);
});
