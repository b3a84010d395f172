//! Fuzzes the cmdline decoder of cosi-node: no panic, and what it accepts round-trips.
#![no_main]

#[path = "../src/node_checks.rs"]
mod node_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    node_checks::cmdline(data);
});
