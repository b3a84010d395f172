//! The README's first command runs `demo`: it must run to completion on a fresh checkout,
//! through every step, and leave no process behind. (What each step shows is specified
//! exactly by `story.rs`; this checks the program a newcomer runs.)

use std::process::Command;

#[test]
fn the_demo_runs_every_step_and_stops_its_nodes() {
    // The binaries are built (they are this package's); without CARGO the demo builds nothing.
    let output = Command::new(env!("CARGO_BIN_EXE_demo"))
        .env_remove("CARGO")
        .env("RUST_LOG", "warn")
        .output()
        .expect("the demo starts");
    let stdout = String::from_utf8(output.stdout).expect("utf-8 output");
    assert!(
        output.status.success(),
        "the demo failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let headings: Vec<&str> = stdout.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(
        headings,
        [
            "## 0. A cluster's files",
            "## 1. There is no shell: the only way in is the API",
            "## 2. What runs, who is there, which addresses, which config",
            "## 3. A node label, live without a reboot",
            "## 4. A change on trial: rolled back unless confirmed",
            "## 5. A bad change is refused before it lands",
            "## 6. A valid config, a failing service",
            "## 7. The fix: delete the flag",
            "## 8. What changed on this node, and what a change would do",
            "## Done",
        ]
    );
    for node in ["cp-1", "worker-1"] {
        let stopped = format!("{node} stopped on SIGTERM (exit status: 0)");
        assert!(stdout.contains(&stopped), "{stopped} missing:\n{stdout}");
    }
    assert_eq!(String::from_utf8_lossy(&output.stderr), "", "no log noise");
}
