//! Fuzzes `cosictl`'s client config file (see `src/cli.rs`).
#![no_main]

#[path = "../src/cli.rs"]
mod cli;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cli::client_config(data);
});
