//! What the memory tests share (`harness = false` tests that measure a process's memory): its
//! figures from `/proc/self/status`, the `main` that runs either the test or, in a second
//! process of the same binary, the server it measures, and that server as the test sees it
//! ([`ServerChild`]).

use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

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

/// A memory test's server: this binary again, as a child process that prints `LABEL value`
/// lines (its port, its memory figures) and takes the test's words on its standard input.
pub struct ServerChild {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    stdin: ChildStdin,
}

impl ServerChild {
    /// Starts this binary with `envs` set (one of them names the server to run).
    pub fn spawn(envs: &[(&str, &OsStr)]) -> ServerChild {
        let mut command = Command::new(std::env::current_exe().unwrap());
        for (name, value) in envs {
            command.env(name, value);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let stdin = child.stdin.take().unwrap();
        ServerChild {
            child,
            lines,
            stdin,
        }
    }

    /// The rest of the server's next line, which must start with `label`.
    pub fn expect(&mut self, label: &str) -> String {
        let Some(line) = self.lines.next() else {
            panic!("the server ended: {:?}", self.child.wait());
        };
        let line = line.unwrap();
        match line.strip_prefix(label) {
            Some(rest) => rest.trim().to_string(),
            None => panic!("expected {label}, got {line:?}"),
        }
    }

    /// The number on the server's next line, `label` and the number.
    pub fn figure(&mut self, label: &str) -> u64 {
        let rest = self.expect(label);
        rest.parse()
            .unwrap_or_else(|_| panic!("expected a number after {label}, got {rest:?}"))
    }

    /// Says `word` to the server.
    pub fn say(&mut self, word: &str) {
        writeln!(self.stdin, "{word}").unwrap();
    }

    /// Tells the server it is done, and waits for it to end.
    pub fn finish(mut self) {
        self.say("done");
        self.child.wait().unwrap();
    }
}

/// This process's resident memory once it has stopped falling (its tasks finish dropping
/// what they held): its lowest figure, taken when it has not fallen for half a second.
pub async fn settled_rss_kib() -> u64 {
    let started = std::time::Instant::now();
    let (mut low, mut since) = (status_kib("VmRSS"), std::time::Instant::now());
    while since.elapsed() < std::time::Duration::from_millis(500)
        && started.elapsed() < std::time::Duration::from_secs(30)
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let now = status_kib("VmRSS");
        if now < low {
            (low, since) = (now, std::time::Instant::now());
        }
    }
    low
}

/// The end of a server child that measures its peak: once its calls' tasks have stopped
/// growing its resident memory (no growth for a second, at most a minute), prints `PEAK <MiB>`
/// for the parent, then serves until the parent says it is done (a line on stdin, or stdin
/// closed).
pub async fn report_peak_then_serve() {
    let started = std::time::Instant::now();
    let (mut last, mut since) = (status_kib("VmRSS") / 1024, std::time::Instant::now());
    while since.elapsed() < std::time::Duration::from_secs(1)
        && started.elapsed() < std::time::Duration::from_secs(60)
    {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let now = status_kib("VmRSS") / 1024;
        if now > last {
            (last, since) = (now, std::time::Instant::now());
        }
    }
    println!("PEAK {}", status_kib("VmHWM") / 1024);
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().lock().read_line(&mut String::new());
}
