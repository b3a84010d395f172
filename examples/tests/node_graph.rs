//! `node --print-graph`: the controller graph of the node the flags describe, printed without
//! starting anything.

use std::process::{Command, Output};

const NODE: &str = env!("CARGO_BIN_EXE_node");

/// The graph of a node with a directory registry, as `--print-graph text` prints it. When the
/// node's controllers change on purpose, regenerate it with
/// `cargo run -p examples --bin node -- --print-graph text --registry-dir /nonexistent/registry
/// > examples/tests/golden/node-graph.txt` and review the diff.
const GOLDEN_TEXT: &str = include_str!("golden/node-graph.txt");

fn print_graph(format: &str, registry: &std::path::Path) -> Output {
    let output = Command::new(NODE)
        .args(["--print-graph", format, "--registry-dir"])
        .arg(registry)
        .output()
        .expect("the node daemon runs");
    assert!(
        output.status.success(),
        "--print-graph {format}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn the_text_graph_lists_every_controller_with_its_inputs_and_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join("registry");
    let output = print_graph("text", &registry);
    assert_eq!(String::from_utf8(output.stdout).unwrap(), GOLDEN_TEXT);
    assert!(
        !registry.exists(),
        "printing the graph creates no registry directory"
    );
}

#[test]
fn the_dot_graph_has_a_box_per_controller_and_an_edge_per_input_and_output() {
    let dir = tempfile::tempdir().unwrap();
    let output = print_graph("dot", &dir.path().join("registry"));
    let dot = String::from_utf8(output.stdout).unwrap();
    assert!(
        dot.starts_with("digraph controllers {\n") && dot.ends_with("}\n"),
        "{dot}"
    );

    // The controllers are the text listing's unindented lines; its indented lines are edges.
    let controllers: Vec<&str> = GOLDEN_TEXT
        .lines()
        .filter(|l| !l.starts_with(' '))
        .collect();
    let boxes: Vec<&str> = dot
        .lines()
        .filter_map(|l| l.strip_prefix("  \"")?.strip_suffix("\" [shape=box];"))
        .collect();
    assert_eq!(boxes, controllers);
    let edges = GOLDEN_TEXT.lines().filter(|l| l.starts_with("  ")).count();
    assert_eq!(dot.lines().filter(|l| l.contains(" -> ")).count(), edges);
}

#[test]
fn without_a_registry_the_graph_has_no_discovery_controller() {
    let output = Command::new(NODE)
        .args(["--print-graph", "text"])
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success());
    assert!(!text.contains("AffiliateDiscoveryController"), "{text}");
}

#[test]
fn a_graph_that_cannot_be_printed_is_an_error_not_a_panic() {
    // Given a stdout whose reader has gone (`node --print-graph dot | head` once head exits)
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);

    // When the graph is printed to it
    let output = Command::new(NODE)
        .args(["--print-graph", "text"])
        .stdout(std::process::Stdio::from(writer))
        .output()
        .expect("the node daemon runs");

    // Then the node says so and exits 1
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        String::from_utf8(output.stderr).unwrap(),
        "node: printing the graph: Broken pipe (os error 32)\n"
    );
}
