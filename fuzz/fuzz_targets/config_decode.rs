//! Fuzzes machine config decoding: no panic, and whatever decodes round-trips through its
//! canonical text and its resource form.
#![no_main]

// Each target uses one of the checks.
#[allow(dead_code)]
#[path = "../src/config_checks.rs"]
mod config_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    config_checks::config_decode(data);
});
