//! The command line every workload accepts: `--runs N` (default 5) and `--n N` (the item count,
//! default the workload's own). Parsed by hand: two flags do not justify a parser dependency.

use crate::check::WorkloadError;

/// Parsed command line of a workload binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunArgs {
    /// How many times to run the workload; figures are the medians over the runs.
    pub runs: usize,
    /// Item count, when given (`--n`); each workload has its own default.
    pub n: Option<usize>,
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs { runs: 5, n: None }
    }
}

impl RunArgs {
    /// Parses the process's arguments.
    pub fn from_env() -> Result<Self, WorkloadError> {
        Self::parse(std::env::args().skip(1))
    }

    /// Parses `args` (without the program name).
    ///
    /// ```
    /// use benches::args::RunArgs;
    /// let args = RunArgs::parse(["--runs", "3", "--n=1000"].map(String::from)).unwrap();
    /// assert_eq!((args.runs, args.n), (3, Some(1000)));
    /// assert!(RunArgs::parse(["--runs", "0"].map(String::from)).is_err());
    /// assert!(RunArgs::parse(["--fast"].map(String::from)).is_err());
    /// ```
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, WorkloadError> {
        let mut parsed = RunArgs::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
                None => (arg, None),
            };
            if flag == "--help" || flag == "-h" {
                return Err(WorkloadError::new(
                    "usage: <workload> [--runs N (default 5)] [--n ITEMS]",
                ));
            }
            let value = match inline.or_else(|| args.next()) {
                Some(value) => value,
                None => return Err(WorkloadError::new(format!("{flag} needs a value"))),
            };
            let number = value
                .parse::<usize>()
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| {
                    WorkloadError::new(format!(
                        "{flag}: expected a positive integer, got {value:?}"
                    ))
                })?;
            match flag.as_str() {
                "--runs" => parsed.runs = number,
                "--n" => parsed.n = Some(number),
                _ => {
                    return Err(WorkloadError::new(format!(
                        "unknown argument {flag:?} (expected --runs N or --n N)"
                    )))
                }
            }
        }
        Ok(parsed)
    }
}
