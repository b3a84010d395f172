//! Fuzzes YAML decoding: no panic, and whatever decodes writes back to YAML and JSON that decode
//! to the same resources.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cosi_fuzz::dynamic_yaml(data);
});
