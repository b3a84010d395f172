//! What a workload ran on: CPU count, CPU model and the load average, printed as a `#` line at
//! the top of every workload's output, because figures from a busy shared machine mean little
//! without it.

/// One line describing the machine now and the allocator the workload runs with:
/// `2 CPUs, AMD EPYC, load average 1.52 (1 min), system allocator`. Parts that cannot be read
/// (not Linux) are left out.
pub fn describe() -> String {
    let allocator = format!("{} allocator", allocator());
    match load_average() {
        Some(load) => format!(
            "{}, load average {load:.2} (1 min), {allocator}",
            hardware()
        ),
        None => format!("{}, {allocator}", hardware()),
    }
}

/// The global allocator of the benchmark binaries: `"system"` (the default), or `"mimalloc"`
/// when built with the `mimalloc` feature. The project's libraries never choose one; this
/// feature exists to measure what the choice changes.
///
/// ```
/// let expected = if cfg!(feature = "mimalloc") { "mimalloc" } else { "system" };
/// assert_eq!(benches::machine::allocator(), expected);
/// ```
pub fn allocator() -> &'static str {
    if cfg!(feature = "mimalloc") {
        "mimalloc"
    } else {
        "system"
    }
}

/// The machine without its load: `2 CPUs, AMD EPYC`.
pub fn hardware() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let mut parts = vec![format!("{cpus} CPUs")];
    if let Some(model) = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .as_deref()
        .and_then(cpu_model)
    {
        parts.push(model);
    }
    parts.join(", ")
}

/// The 1-minute load average now, from `/proc/loadavg`; `None` where it cannot be read.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .as_deref()
        .and_then(parse_load_average)
}

/// The 1-minute load average from the text of `/proc/loadavg`.
///
/// ```
/// assert_eq!(benches::machine::parse_load_average("6.20 3.76 2.06 7/150 20932\n"), Some(6.2));
/// assert_eq!(benches::machine::parse_load_average(""), None);
/// ```
pub fn parse_load_average(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
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
