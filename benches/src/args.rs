//! The command line of the workload binaries, parsed with clap: [`RunArgs`] (`--runs N`,
//! default 5, `--n N`, the item count, and `--workers N`, the tokio runtime's worker threads)
//! is what every workload accepts; a workload with
//! options of its own (W2's history window, W3's variant) flattens it into a parser of its own
//! and reads it with [`parse_env`]. A bad command line is a [`WorkloadError`] like any other
//! failure, so it ends as `FAILED: <workload>: <what was wrong>` with exit status 1.

use clap::{Args, Parser};

use crate::check::WorkloadError;

/// The options every workload accepts.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct RunArgs {
    /// How many times to run the workload; figures are the medians over the runs.
    #[arg(long, default_value_t = 5, value_parser = positive)]
    pub runs: usize,
    /// Item count (each workload has its own default).
    #[arg(long, value_parser = positive)]
    pub n: Option<usize>,
    /// Worker threads of the tokio runtime (default: tokio's, one per CPU). The workload's
    /// writer runs on the main thread beside them, so `--workers 1` on two CPUs runs two
    /// threads at once, as the reference runs with `GOMAXPROCS=2`.
    #[arg(long, value_parser = positive)]
    pub workers: Option<usize>,
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs {
            runs: 5,
            n: None,
            workers: None,
        }
    }
}

/// A command line of [`RunArgs`] alone.
#[derive(Parser, Debug)]
#[command(about = "A benchmark workload (see benches/WORKLOADS.md)")]
struct Common {
    #[command(flatten)]
    run: RunArgs,
}

impl RunArgs {
    /// Parses the process's arguments (`--help` prints the usage and exits).
    pub fn from_env() -> Result<Self, WorkloadError> {
        parse_env::<Common>().map(|common| common.run)
    }

    /// Parses `args` (without the program name).
    ///
    /// ```
    /// use benches::args::RunArgs;
    /// let args = RunArgs::parse(["--runs", "3", "--n=1000"].map(String::from)).unwrap();
    /// assert_eq!((args.runs, args.n, args.workers), (3, Some(1000), None));
    /// assert_eq!(RunArgs::parse(["--workers", "1"].map(String::from)).unwrap().workers, Some(1));
    /// assert!(RunArgs::parse(["--workers", "0"].map(String::from)).is_err());
    /// assert!(RunArgs::parse(["--runs", "0"].map(String::from)).is_err());
    /// assert!(RunArgs::parse(["--fast"].map(String::from)).is_err());
    /// ```
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, WorkloadError> {
        parse_from::<Common>(std::iter::once("workload".to_string()).chain(args))
            .map(|common| common.run)
    }
}

impl RunArgs {
    /// The multi-threaded tokio runtime the workload runs on: `--workers` worker threads
    /// (tokio's default without it), every driver enabled.
    ///
    /// ```
    /// use benches::args::RunArgs;
    /// let args = RunArgs::parse(["--workers", "1"].map(String::from)).unwrap();
    /// let runtime = args.runtime().unwrap();
    /// assert_eq!(runtime.metrics().num_workers(), 1);
    /// ```
    pub fn runtime(&self) -> Result<tokio::runtime::Runtime, WorkloadError> {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if let Some(workers) = self.workers {
            builder.worker_threads(workers);
        }
        builder
            .enable_all()
            .build()
            .map_err(|e| WorkloadError::new(format!("cannot start the tokio runtime: {e}")))
    }

    /// The command line of a child process that measures one run at `n` items (workloads
    /// that take each measurement in a fresh process): `--n`, `--runs 1` and this command
    /// line's `--workers`.
    ///
    /// ```
    /// use benches::args::RunArgs;
    /// let args = RunArgs::parse(["--workers", "1"].map(String::from)).unwrap();
    /// assert_eq!(args.child_args(100), ["--n", "100", "--runs", "1", "--workers", "1"]);
    /// assert_eq!(RunArgs::default().child_args(100), ["--n", "100", "--runs", "1"]);
    /// ```
    pub fn child_args(&self, n: usize) -> Vec<String> {
        let mut args = vec![
            "--n".to_string(),
            n.to_string(),
            "--runs".into(),
            "1".into(),
        ];
        if let Some(workers) = self.workers {
            args.extend(["--workers".to_string(), workers.to_string()]);
        }
        args
    }

    /// How the runtime is set up, for a workload's header line: `"2 runtime workers"` (the
    /// count it runs with).
    ///
    /// ```
    /// use benches::args::RunArgs;
    /// let args = RunArgs::parse(["--workers", "1"].map(String::from)).unwrap();
    /// let runtime = args.runtime().unwrap();
    /// assert_eq!(RunArgs::describe_runtime(&runtime), "1 runtime worker");
    /// ```
    pub fn describe_runtime(runtime: &tokio::runtime::Runtime) -> String {
        match runtime.metrics().num_workers() {
            1 => "1 runtime worker".to_string(),
            n => format!("{n} runtime workers"),
        }
    }
}

/// Parses the process's arguments into `P`; `--help` prints the usage and exits with status 0.
pub fn parse_env<P: Parser>() -> Result<P, WorkloadError> {
    parse_from(std::env::args())
}

/// Parses `args` (the program name first) into `P`; `--help` prints the usage and exits.
///
/// ```
/// use benches::args::{parse_from, RunArgs};
/// #[derive(clap::Parser)]
/// struct W9 {
///     #[command(flatten)]
///     run: RunArgs,
///     #[arg(long)]
///     fast: bool,
/// }
/// let w9: W9 = parse_from(["w9", "--fast", "--runs", "2"].map(String::from)).unwrap();
/// assert!(w9.fast);
/// assert_eq!(w9.run.runs, 2);
/// let error = parse_from::<W9>(["w9", "--slow"].map(String::from)).err().unwrap();
/// assert_eq!(error.to_string(), "unexpected argument '--slow' found");
/// ```
pub fn parse_from<P: Parser>(args: impl IntoIterator<Item = String>) -> Result<P, WorkloadError> {
    P::try_parse_from(args).map_err(|error| {
        use clap::error::ErrorKind;
        if matches!(
            error.kind(),
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
        ) {
            error.exit();
        }
        // clap's first line, without its `error: ` prefix (the workload prefixes `FAILED:`);
        // the usage and hint lines that follow are noise on a workload's stderr.
        let text = error.render().to_string();
        let first = text.lines().next().unwrap_or_default();
        WorkloadError::new(first.strip_prefix("error: ").unwrap_or(first))
    })
}

/// A positive integer (a count of runs, items or pairs): clap's value parser for such flags.
///
/// ```
/// assert_eq!(benches::args::positive("3"), Ok(3));
/// assert!(benches::args::positive("0").is_err());
/// ```
pub fn positive(value: &str) -> Result<usize, String> {
    value
        .parse::<usize>()
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| "expected a positive integer".to_string())
}
