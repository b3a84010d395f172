//! The controllers program: its controllers converge on the disk store, it stops gracefully on
//! SIGTERM and closes the store, and the next start finds what the last one left.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The program running on `dir`, and its output line by line.
fn start(dir: &Path) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_controllers"))
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the controllers binary starts");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// Reads lines until every one of `wanted` was printed; returns all lines read.
fn read_until(lines: &mut Lines<BufReader<ChildStdout>>, wanted: &[&str]) -> Vec<String> {
    let mut missing: BTreeSet<&str> = wanted.iter().copied().collect();
    let mut read = Vec::new();
    while !missing.is_empty() {
        let Some(line) = lines.next() else {
            panic!("the program ended before printing {missing:?}; it printed {read:#?}");
        };
        let line = line.expect("utf-8 output");
        missing.remove(line.as_str());
        read.push(line);
    }
    read
}

/// Sends SIGTERM, then reads the rest of the output and the exit status.
fn terminate(mut child: Child, lines: Lines<BufReader<ChildStdout>>) -> Vec<String> {
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("SIGTERM is sent");
    let rest: Vec<String> = lines.map(|l| l.expect("utf-8 output")).collect();
    let status = child.wait().expect("the program is reaped");
    assert!(
        status.success(),
        "exit status {status}; last output {rest:#?}"
    );
    rest
}

/// Kills the program if the test is still running after `limit`, so that a hang fails the
/// test instead of stopping the run (it never fires in a passing test).
fn guard(pid: u32, limit: Duration) -> mpsc::Sender<()> {
    let (done, finished) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(limit) {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    });
    done
}

#[test]
fn controllers_converge_stop_on_sigterm_and_the_next_start_finds_their_state() {
    let dir = tempfile::tempdir().unwrap();

    // Given a first start on an empty directory: it seeds disks and a quota, and the transform
    // and the queue controller derive labels and usages.
    let (child, mut lines) = start(dir.path());
    let done = guard(child.id(), Duration::from_secs(120));
    let first = read_until(
        &mut lines,
        &[
            "created label sda: 100 GiB",
            "created label sdb: 400 GiB",
            "created label sdc: 250 GiB",
            "created usage sda: 100 GiB, within quota",
            "created usage sdb: 400 GiB, over quota",
            "created usage sdc: 250 GiB, within quota",
        ],
    );
    assert!(
        first[0].ends_with("state.redb: 0 disks, 0 usages"),
        "{first:#?}"
    );
    assert_eq!(first[1], "running 2 controllers; Ctrl-C or SIGTERM stops");

    // When SIGTERM arrives, the engine stops without aborting anything and the store closes.
    let rest = terminate(child, lines);
    assert_eq!(
        rest,
        ["engine stopped: 3 tasks stopped, 0 aborted", "store closed"]
    );
    drop(done);

    // Then a second start opens the same file and finds what the first one derived.
    let (child, mut lines) = start(dir.path());
    let done = guard(child.id(), Duration::from_secs(120));
    let second = read_until(
        &mut lines,
        &["running 2 controllers; Ctrl-C or SIGTERM stops"],
    );
    assert!(
        second[0].ends_with("state.redb: 3 disks, 3 usages"),
        "{second:#?}"
    );
    let rest = terminate(child, lines);
    assert_eq!(rest.last().map(String::as_str), Some("store closed"));
    drop(done);
}
