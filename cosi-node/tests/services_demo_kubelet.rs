//! The workload program itself: strict flags like a kubelet, a health endpoint, a clean exit
//! on SIGTERM.

mod services_support;

use std::process::Stdio;
use std::time::Duration;

use cosi_node::services::{probe, Probe};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use services_support::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

type Stdout = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

async fn next(lines: &mut Stdout) -> String {
    tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("a line in time")
        .unwrap()
        .expect("the program is still running")
}

fn run(args: &[&str]) -> std::process::Output {
    std::process::Command::new(DEMO_KUBELET)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn an_unknown_flag_exits_1_naming_the_flag() {
    for args in [
        &["--bogus"][..],
        &["--bogus=1"],
        &["--healthz-port=0", "--max-pods", "3"],
    ] {
        let output = run(args);
        let flag = args
            .iter()
            .find(|a| *a != &"--healthz-port=0")
            .unwrap()
            .split('=')
            .next()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            format!("unknown flag: {flag}\n"),
            "{args:?}"
        );
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn a_bad_flag_value_exits_1_with_the_parsers_reason() {
    let output = run(&["--healthz-port=high"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("invalid value 'high' for '--healthz-port <HEALTHZ_PORT>'"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_serves_healthz_logs_its_sync_loop_and_exits_0_on_sigterm() {
    let mut child = Command::new(DEMO_KUBELET)
        .args([
            "--healthz-port=0",
            "--hostname-override=node-1",
            "--sync-frequency=50ms",
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = next(&mut lines).await;
    let address = first
        .strip_prefix("demo-kubelet: node node-1: serving healthz on ")
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();

    let timeout = Duration::from_secs(5);
    let healthz = Probe::Http {
        url: format!("http://{address}/healthz"),
    };
    assert_eq!(probe(&healthz, timeout).await, Ok(()));
    let other = Probe::Http {
        url: format!("http://{address}/other"),
    };
    assert_eq!(
        probe(&other, timeout).await,
        Err(format!("HTTP 404 from GET http://{address}/other"))
    );
    assert_eq!(
        next(&mut lines).await,
        "demo-kubelet: sync loop 1: node node-1 is ready"
    );

    kill(Pid::from_raw(child.id().unwrap() as i32), Signal::SIGTERM).unwrap();
    loop {
        let line = next(&mut lines).await;
        if line == "demo-kubelet: received SIGTERM, shutting down" {
            break;
        }
        assert!(line.starts_with("demo-kubelet: sync loop "), "{line}");
    }
    assert!(child.wait().await.unwrap().success());
}
