//! Two processes share one etcd: each sees the other's writes through its watch, in revision
//! order, and concurrent conflicting updates have exactly one winner. The processes are real
//! (the `cosi-etcd-peer` binary), not tasks.
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;

use std::time::Duration;

use cosi_test_support::etcd::{shared_server, unique_prefix};

/// How long a test waits for a peer's line before failing (a guard, never a sleep).
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A running peer process, driven line by line.
struct Peer {
    child: Child,
    input: ChildStdin,
    output: mpsc::Receiver<String>,
}

impl Peer {
    fn spawn(prefix: &str) -> Peer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cosi-etcd-peer"))
            .arg(shared_server().endpoint())
            .arg(prefix)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the peer binary runs");
        let input = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, output) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Peer {
            child,
            input,
            output,
        }
    }

    fn send(&mut self, command: &str) {
        writeln!(self.input, "{command}").expect("the peer reads commands");
        self.input.flush().expect("the peer reads commands");
    }

    /// The next line, failing the test if none comes in time.
    fn line(&self) -> String {
        self.output
            .recv_timeout(EVENT_TIMEOUT)
            .expect("the peer answers in time")
    }

    fn ask(&mut self, command: &str) -> String {
        self.send(command);
        self.line()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `(type, id, value, bookmark)` of an `event ...` line.
fn parse_event(line: &str) -> (String, String, String, u64) {
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.len(), 5, "an event line: {line}");
    assert_eq!(words[0], "event", "an event line: {line}");
    let bookmark = words[4].parse().expect("a numeric bookmark");
    (words[1].into(), words[2].into(), words[3].into(), bookmark)
}

#[test]
fn each_process_sees_the_others_writes_in_revision_order() {
    let prefix = unique_prefix("two-processes");
    let mut one = Peer::spawn(&prefix);
    let mut two = Peer::spawn(&prefix);
    assert_eq!(one.ask("watch"), "watching");
    assert_eq!(two.ask("watch"), "watching");

    // Both write at once: commands go out interleaved, answers are read afterwards (the event
    // lines of the watch are interleaved with them on each peer's stdout).
    for i in 0..5 {
        one.send(&format!("create one-{i} {i}"));
        two.send(&format!("create two-{i} {i}"));
    }
    let collect = |peer: &Peer| {
        let mut events = Vec::new();
        let mut answers = 0;
        while events.len() < 10 || answers < 5 {
            let line = peer.line();
            if line.starts_with("event ") {
                events.push(parse_event(&line));
            } else {
                assert!(line.starts_with("created "), "unexpected answer {line}");
                answers += 1;
            }
        }
        events
    };
    let seen_by_one = collect(&one);
    let seen_by_two = collect(&two);

    // The same changes, in the same (revision) order, in both processes.
    assert_eq!(seen_by_one, seen_by_two);
    let bookmarks: Vec<u64> = seen_by_one.iter().map(|e| e.3).collect();
    assert!(bookmarks.windows(2).all(|w| w[0] < w[1]), "{bookmarks:?}");
    let mut ids: Vec<&str> = seen_by_one.iter().map(|e| e.1.as_str()).collect();
    ids.sort();
    let mut expected: Vec<String> = (0..5)
        .flat_map(|i| [format!("one-{i}"), format!("two-{i}")])
        .collect();
    expected.sort();
    assert_eq!(ids, expected);
    assert!(seen_by_one.iter().all(|e| e.0 == "created"));
}

#[test]
fn concurrent_conflicting_updates_from_two_processes_have_exactly_one_winner() {
    let prefix = unique_prefix("conflict");
    let mut one = Peer::spawn(&prefix);
    let mut two = Peer::spawn(&prefix);
    assert_eq!(one.ask("create x 0"), "created x 1");
    assert_eq!(one.ask("read x"), "read x 1 0");
    assert_eq!(two.ask("read x"), "read x 1 0");

    // Both update from version 1 at the same moment.
    one.send("update x 1");
    two.send("update x 2");
    let answers = [one.line(), two.line()];
    let winners: Vec<usize> = (0..2).filter(|&i| answers[i] == "updated x 2").collect();
    let losers: Vec<usize> = (0..2).filter(|&i| answers[i] == "conflict 1 2").collect();
    assert_eq!((winners.len(), losers.len()), (1, 1), "{answers:?}");

    // The stored value is the winner's.
    let winner_value = winners[0] + 1;
    assert_eq!(one.ask("read x"), format!("read x 2 {winner_value}"));
}
