//! Fuzzes patch application (strategic merge and JSON patches): no panic, and whatever a patch
//! produces round-trips through its canonical text.
#![no_main]

// Each target uses one of the checks.
#[allow(dead_code)]
#[path = "../src/config_checks.rs"]
mod config_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    config_checks::config_patch(data);
});
