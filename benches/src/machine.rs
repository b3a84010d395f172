//! What a workload ran on: CPU count, CPU model and the load average, printed as a `#` line at
//! the top of every workload's output, because figures from a busy shared machine mean little
//! without it.

/// One line describing the machine now: `2 CPUs, AMD EPYC, load average 1.52 (1 min)`.
/// Parts that cannot be read (not Linux) are left out.
pub fn describe() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let mut parts = vec![format!("{cpus} CPUs")];
    if let Some(model) = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .as_deref()
        .and_then(cpu_model)
    {
        parts.push(model);
    }
    if let Some(load) = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .as_deref()
        .and_then(|text| text.split_whitespace().next().map(str::to_string))
    {
        parts.push(format!("load average {load} (1 min)"));
    }
    parts.join(", ")
}

/// The `model name` of the first CPU in the text of `/proc/cpuinfo`.
///
/// ```
/// let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t: fpu\n";
/// assert_eq!(benches::machine::cpu_model(cpuinfo).as_deref(), Some("AMD EPYC"));
/// ```
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split_once(':'))
        .map(|(_, model)| model.trim().to_string())
}
