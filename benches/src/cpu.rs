//! CPU time used by this process (user + system, all threads), from `getrusage`: beside a
//! phase's wall time it shows how much work the phase did and how well it used the cores
//! (CPU time ÷ wall time), which a wall time alone hides on a machine shared with other work.
//! Also the process's minor page faults: each is a page of fresh memory the kernel hands out
//! and zeroes on first touch, a cost the wall time of a fresh process includes.

use std::time::Duration;

use nix::sys::resource::{getrusage, UsageWho};

use crate::check::WorkloadError;

/// User plus system CPU time of this process so far, summed over its threads.
///
/// ```
/// let before = benches::cpu::process_cpu().unwrap();
/// let mut x = 0u64;
/// for i in 0..10_000_000u64 {
///     x = x.wrapping_add(std::hint::black_box(i));
/// }
/// std::hint::black_box(x);
/// assert!(benches::cpu::process_cpu().unwrap() >= before);
/// ```
pub fn process_cpu() -> Result<Duration, WorkloadError> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)
        .map_err(|e| WorkloadError::new(format!("getrusage failed: {e}")))?;
    let micros = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec().max(0) as u64)
            + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    Ok(micros(usage.user_time()) + micros(usage.system_time()))
}

/// Minor page faults of this process so far, summed over its threads: pages of memory touched
/// for the first time (or otherwise mapped without reading a disk).
///
/// ```
/// let before = benches::cpu::minor_faults().unwrap();
/// let mut fresh = vec![0u8; 64 << 20];
/// for page in fresh.chunks_mut(4096) {
///     page[0] = 1;
/// }
/// std::hint::black_box(&fresh);
/// assert!(benches::cpu::minor_faults().unwrap() > before);
/// ```
pub fn minor_faults() -> Result<u64, WorkloadError> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)
        .map_err(|e| WorkloadError::new(format!("getrusage failed: {e}")))?;
    Ok(usage.minor_page_faults().max(0) as u64)
}
