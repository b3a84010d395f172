//! Fuzzes selector parsing: no panic, and whatever parses displays to text that parses back equal.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cosi_fuzz::selector(data);
});
