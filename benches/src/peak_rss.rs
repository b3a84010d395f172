//! Peak resident memory of this process, read from `VmHWM` in `/proc/self/status` (Linux), and
//! the current resident size (`VmRSS`, for W6's memory deltas).
//!
//! The high-water mark only ever grows; [`reset`] asks the kernel to lower it to the current
//! resident size (`echo 5 > /proc/self/clear_refs`), so a workload run repeatedly can measure
//! each run's own peak.

use crate::check::WorkloadError;

/// Peak resident set size of this process so far, in MiB.
pub fn peak_rss_mib() -> Result<f64, WorkloadError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| WorkloadError::new(format!("cannot read /proc/self/status: {e}")))?;
    parse_vm_hwm_kib(&status)
        .map(|kib| kib as f64 / 1024.0)
        .ok_or_else(|| WorkloadError::new("no VmHWM line in /proc/self/status"))
}

/// Resident set size of this process now (`VmRSS`), in bytes.
pub fn current_rss_bytes() -> Result<u64, WorkloadError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| WorkloadError::new(format!("cannot read /proc/self/status: {e}")))?;
    parse_status_kib(&status, "VmRSS:")
        .map(|kib| kib * 1024)
        .ok_or_else(|| WorkloadError::new("no VmRSS line in /proc/self/status"))
}

/// Lowers the peak to the current resident size. Returns whether the kernel accepted it
/// (it does on Linux 4.0 and later); when it did not, the next peak covers the whole process.
pub fn reset() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The `VmHWM` value in KiB from the text of `/proc/<pid>/status`.
///
/// ```
/// let status = "Name:\tw1\nVmPeak:\t  200 kB\nVmHWM:\t   8192 kB\n";
/// assert_eq!(benches::peak_rss::parse_vm_hwm_kib(status), Some(8192));
/// ```
pub fn parse_vm_hwm_kib(status: &str) -> Option<u64> {
    parse_status_kib(status, "VmHWM:")
}

/// The value in KiB of the `key` line (`VmRSS:`, `VmHWM:`) of `/proc/<pid>/status`.
fn parse_status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
}
