//! What the memory tests share (`harness = false` tests that measure a process's memory): its
//! figures from `/proc/self/status`, and the `main` that runs either the test or, in a second
//! process of the same binary, the server it measures.

use std::ffi::OsString;
use std::future::Future;

/// One of this process's memory figures from `/proc/self/status`, in KiB: `"VmHWM"` (peak
/// resident) or `"VmRSS"` (resident).
pub fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// The runtime every memory test and its server run on: two workers, as the machine has.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Says that the test `name` passed, in the lines `cargo test` reads.
pub fn passed(name: &str) {
    println!("test {name} ... ok");
    println!("test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
}

/// A memory test's `main`: with `server_var` set, this process is the test's server
/// (`server`, given the variable's value); otherwise it runs the test `name`.
pub fn serve_or_test<S, T>(
    server_var: &str,
    server: impl FnOnce(OsString) -> S,
    name: &str,
    test: impl FnOnce() -> T,
) where
    S: Future<Output = ()>,
    T: Future<Output = ()>,
{
    let runtime = runtime();
    if let Some(value) = std::env::var_os(server_var) {
        runtime.block_on(server(value));
        return;
    }
    runtime.block_on(test());
    passed(name);
}
