//! Output capture with real processes: line by line per stream, tail then follow, a slow
//! follower that cannot slow the service, the capped, rotated log file, and a process that
//! left the service's group holding its output open.

mod services_support;

use std::path::PathBuf;

use cosi_node::services::{
    LineSplitter, LogFileOptions, LogItem, LogReader, LogStream, RestartPolicy, RotatingFile,
    ServiceSpec, ServiceState, Supervisor, SupervisorOptions, FOLLOW_BUFFER, MAX_LINE,
    TRUNCATED_MARK,
};
use proptest::prelude::*;
use services_support::*;

fn once(script: &str) -> ServiceSpec {
    ServiceSpec::command("/bin/sh")
        .with_args(["-c", script])
        .with_restart(RestartPolicy::Never)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_stream_is_captured_line_by_line_in_order() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply(
            "talker",
            once("echo out 1; echo err 1 >&2; printf 'out 2\\nout 3'; echo err 2 >&2"),
        )
        .unwrap();
    wait_state(&mut events, "talker", ServiceState::Finished).await;

    let lines = supervisor.tail("talker", 100).unwrap();
    let of = |stream: LogStream| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.stream == stream)
            .map(|l| l.text.clone())
            .collect()
    };
    assert_eq!(of(LogStream::Stdout), ["out 1", "out 2", "out 3"]);
    assert_eq!(of(LogStream::Stderr), ["err 1", "err 2"]);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_gets_the_tail_then_follows_new_lines() {
    // Given a service that printed three lines and then waits for input on a FIFO
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("input");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let supervisor = supervisor();
    let script = format!(
        "echo line 1; echo line 2; echo line 3; echo waiting; cat {}; echo after",
        fifo.display()
    );
    supervisor.apply("reader", once(&script)).unwrap();
    let mut first = supervisor.logs("reader", 0, true).unwrap();
    wait_line(&mut first, "waiting").await;

    // When a reader asks for the last 2 lines and follows
    let mut reader = supervisor.logs("reader", 2, true).unwrap();
    let texts = |item: Option<LogItem>| match item {
        Some(LogItem::Line(line)) => line.text.clone(),
        other => panic!("expected a line, got {other:?}"),
    };
    assert_eq!(texts(reader.next().await), "line 3");
    assert_eq!(texts(reader.next().await), "waiting");

    // Then it receives what the service prints next, and nothing twice
    let path = fifo.clone();
    tokio::task::spawn_blocking(move || std::fs::write(path, b"live 1\n"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(texts(reader.next().await), "live 1");
    assert_eq!(texts(reader.next().await), "after");

    // And a reader without follow ends after the tail
    let mut tail = supervisor.logs("reader", 1, false).unwrap();
    assert_eq!(texts(tail.next().await), "after");
    assert_eq!(tail.next().await, None);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_follower_skips_lines_and_never_holds_the_service_back() {
    // Given a follower that reads nothing while the service prints 20000 lines and exits
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply("flood", once("seq 1 20000; echo done"))
        .unwrap();
    let mut slow = supervisor.logs("flood", 0, true).unwrap();

    // When the service finishes (it did not wait for the follower)
    wait_state(&mut events, "flood", ServiceState::Finished).await;

    // Then the follower is told what it missed, then reads the newest lines, up to "done"
    let mut skipped = 0;
    let mut read = Vec::new();
    loop {
        match tokio::time::timeout(PATIENCE, slow.next()).await.unwrap() {
            Some(LogItem::Skipped(n)) => skipped += n,
            Some(LogItem::Line(line)) => {
                let done = line.text == "done";
                read.push(line.text.clone());
                if done {
                    break;
                }
            }
            None => panic!("the log ended before \"done\""),
        }
    }
    assert!(skipped > 0);
    assert!(read.len() <= FOLLOW_BUFFER, "{}", read.len());
    assert_eq!(
        skipped as usize + read.len(),
        20001,
        "every line is read or counted"
    );
    assert_eq!(read.first().unwrap(), &(skipped + 1).to_string());
    // And the ring kept the newest lines for everyone else
    let tail = supervisor.tail("flood", 2).unwrap();
    assert_eq!(tail[0].text, "20000");
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_file_is_capped_and_rotated_in_the_state_directory() {
    // Given files capped at 4 KiB with two rotated generations
    let dir = tempfile::tempdir().unwrap();
    let supervisor = Supervisor::new(SupervisorOptions {
        state_dir: Some(dir.path().to_path_buf()),
        log_file: LogFileOptions {
            max_bytes: 4096,
            keep: 2,
            queue: 4096,
        },
        ..options()
    })
    .unwrap();
    let mut events = supervisor.events(0);

    // When a service prints 1000 lines (about 46 KB of records)
    supervisor
        .apply(
            "chatty",
            once("i=0; while [ $i -lt 1000 ]; do i=$((i+1)); echo line $i; done"),
        )
        .unwrap();
    wait_state(&mut events, "chatty", ServiceState::Finished).await;
    supervisor.flush_logs("chatty").await.unwrap();

    // Then the current file holds the newest lines, within the cap, and two generations
    let path = dir.path().join("logs").join("chatty.log");
    let current = std::fs::read_to_string(&path).unwrap();
    assert!(current.len() <= 4096, "{}", current.len());
    let last = current.lines().last().unwrap();
    assert!(last.ends_with(" stdout line 1000"), "{last}");
    let timestamp = last.split(' ').next().unwrap();
    assert!(humantime::parse_rfc3339(timestamp).is_ok(), "{timestamp}");
    for generation in [1, 2] {
        let rotated = RotatingFile::generation(&path, generation);
        let size = std::fs::metadata(&rotated).unwrap().len();
        assert!(size > 0 && size <= 4096, "{}: {size}", rotated.display());
    }
    assert!(!RotatingFile::generation(&path, 3).exists());
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_without_end_is_cut_at_the_limit() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    let script = format!(
        "head -c {} /dev/zero | tr '\\\\0' x; echo; echo next",
        MAX_LINE * 3
    );
    supervisor.apply("long", once(&script)).unwrap();
    wait_state(&mut events, "long", ServiceState::Finished).await;
    let lines = supervisor.tail("long", 10).unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].text.len(), MAX_LINE + TRUNCATED_MARK.len());
    assert!(lines[0].text.ends_with(TRUNCATED_MARK));
    assert_eq!(lines[1].text, "next");
    supervisor.shutdown().await;
}

/// A service that starts a lingerer: a process in its own session (out of the service's
/// group, so not killed with it) that prints its pid once it is there, and keeps the
/// service's stdout and stderr open. The service runs until it is stopped.
fn leaves_a_lingerer() -> ServiceSpec {
    once("setsid sh -c 'echo lingerer $$; exec sleep 600' & exec sleep 600")
}

/// The grandchild of [`leaves_a_lingerer`], killed when dropped.
struct Lingerer(u32);

impl Lingerer {
    /// Reads the pid the service printed.
    async fn from_log(follow: &mut LogReader) -> Self {
        let pid = wait_line_prefix(follow, "lingerer ").await;
        let pid = pid.parse().unwrap();
        assert!(running(pid), "the lingerer {pid} runs");
        Lingerer(pid)
    }

    /// The pipes it holds as stdout and stderr (`pipe:[inode]`).
    fn output_pipes(&self) -> Vec<PathBuf> {
        [1, 2]
            .iter()
            .map(|fd| std::fs::read_link(format!("/proc/{}/fd/{fd}", self.0)).unwrap())
            .collect()
    }
}

impl Drop for Lingerer {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0 as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Which of `pipes` this process (the supervisor) still has an end of.
fn held_by_this_process(pipes: &[PathBuf]) -> Vec<PathBuf> {
    let mut held: Vec<PathBuf> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| pipes.contains(target))
        .collect();
    held.sort();
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_ends_when_its_service_is_removed_though_a_process_that_left_the_group_holds_its_output(
) {
    // Given a service whose lingerer holds its output open, followed
    let supervisor = supervisor();
    supervisor.apply("lingering", leaves_a_lingerer()).unwrap();
    let mut follow = supervisor.logs("lingering", 100, true).unwrap();
    let _lingerer = Lingerer::from_log(&mut follow).await;

    // When the service is removed
    supervisor.remove("lingering").unwrap();

    // Then the follow ends (the timeout only fails the test)
    let end = tokio::time::timeout(PATIENCE, follow.next()).await;
    assert_eq!(
        end,
        Ok(None),
        "the follow is open after the service was removed"
    );
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_leaves_no_output_reader_behind_though_a_process_that_left_the_group_holds_its_output(
) {
    // Given a service whose lingerer holds its output open
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor.apply("lingering", leaves_a_lingerer()).unwrap();
    let mut follow = supervisor.logs("lingering", 100, true).unwrap();
    let lingerer = Lingerer::from_log(&mut follow).await;
    let pipes = lingerer.output_pipes();

    // When the run is over
    supervisor.stop("lingering").unwrap();
    wait_state(&mut events, "lingering", ServiceState::Finished).await;

    // Then the supervisor holds no end of its output pipes: their readers are gone
    assert_eq!(held_by_this_process(&pipes), Vec::<PathBuf>::new());
    supervisor.shutdown().await;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn lines_do_not_depend_on_how_the_bytes_arrive(
        text in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'a'), Just(b'\r'), any::<u8>()], 0..4000),
        cuts in proptest::collection::vec(0usize..4000, 0..20),
    ) {
        let whole = {
            let mut s = LineSplitter::default();
            let mut out = s.push(&text);
            out.extend(s.finish());
            out
        };
        let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c <= text.len()).collect();
        cuts.sort_unstable();
        let mut pieces = LineSplitter::default();
        let mut out = Vec::new();
        let mut start = 0;
        for cut in cuts.into_iter().chain(std::iter::once(text.len())) {
            out.extend(pieces.push(&text[start..cut]));
            start = cut;
        }
        out.extend(pieces.finish());
        prop_assert_eq!(&out, &whole);
        for line in &whole {
            prop_assert!(line.len() <= MAX_LINE + TRUNCATED_MARK.len());
            prop_assert!(!line.contains('\n'));
        }
    }

    #[test]
    fn a_line_is_never_longer_than_the_limit(
        len in 0usize..(3 * MAX_LINE),
    ) {
        let mut s = LineSplitter::default();
        let bytes = vec![b'y'; len];
        let mut out = s.push(&bytes);
        out.extend(s.push(b"\n"));
        prop_assert_eq!(out.len(), 1);
        prop_assert!(out[0].len() <= MAX_LINE + TRUNCATED_MARK.len());
    }
}
