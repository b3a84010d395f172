//! Hostile YAML probe (not a BENCHMARKS.md workload; it measures the bound `cosi_core::yaml`
//! puts on outside input): how long each YAML entry point takes to refuse, or to accept, a
//! mebibyte of text built to be expensive, beside a mebibyte of ordinary config.
//!
//! - `deep_flow_seq`, `deep_flow_map`, `deep_map_of_seq`, `deep_block_seq`: nesting a mebibyte
//!   deep (`[[[…`, `{a: {a: …`, `{"": [{"": […`, `- - - …`), decoded as resources
//!   (`Decoder::decode_yaml`); refused at 64 levels.
//! - `aliases`: a list that names an anchored list of ten about a hundred thousand times; refused
//!   at 1 Mi values.
//! - `oversize`: 32 MiB (one API message) of `[`; refused unread.
//! - `config_big_map`: a machine config whose `nodeLabels` hold as many keys as fit in a
//!   mebibyte, read by `cosi_node` (`document::decode`); accepted.
//! - `patch_keyed`: that many interfaces merged by name into as many others
//!   (`patch::apply`); accepted.
//! - `baseline`: a mebibyte of ordinary config (maps, lists, flow collections) decoded as one
//!   resource: the cost of reading that much YAML at all. `*_vs_baseline` is the ratio.
//!
//! Every outcome is checked: each hostile text is refused with the limit it crosses, each large
//! one is accepted whole.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use benches::args::RunArgs;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::report::Report;
use cosi_core::dynamic::{Decoder, UnknownTypes};
use cosi_core::yaml::MAX_BYTES;
use cosi_core::Registry;

const HEADER: &str = "metadata: {namespace: ns, type: Notes.test.cosi.dev, id: n}\nspec:";

fn main() -> ExitCode {
    exit_on_error("hostile_yaml", run())
}

/// `HEADER`, `start`, then `unit` until the text is as long as it may be.
fn mebibyte_of(start: &str, unit: &str) -> String {
    let mut text = format!("{HEADER}{start}");
    while text.len() + unit.len() <= MAX_BYTES {
        text.push_str(unit);
    }
    text
}

fn aliases() -> String {
    let mut text = format!("{HEADER}\n  a: &a [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n  b: [*a");
    while text.len() + 5 < MAX_BYTES {
        text.push_str(", *a");
    }
    text.push(']');
    text
}

fn baseline() -> String {
    let mut text = format!("{HEADER}\n");
    let mut i = 0;
    while text.len() + 120 < MAX_BYTES {
        text.push_str(&format!(
            "  key{i}:\n    name: value-{i}\n    list: [a, b]\n    nested: {{x: 1, y: [1, 2]}}\n"
        ));
        i += 1;
    }
    text
}

fn big_map_config() -> String {
    let mut text = String::from("version: v1alpha1\nmachine:\n  nodeLabels:\n");
    let mut i = 0;
    while text.len() + 32 < MAX_BYTES {
        text.push_str(&format!("    k{i}: v\n"));
        i += 1;
    }
    text
}

fn interfaces(prefix: &str, count: usize) -> String {
    let mut text = String::from("machine:\n  network:\n    interfaces:\n");
    for i in 0..count {
        text.push_str(&format!("    - interface: {prefix}{i}\n"));
    }
    text
}

/// Decodes `text` as resources: the time, and the error (if refused).
fn decode(text: &str) -> (Duration, Option<String>) {
    let registry = Registry::new();
    let decoder = Decoder::new(&registry).unknown_types(UnknownTypes::KeepDynamic);
    let started = Instant::now();
    let result = decoder.decode_yaml(text);
    (started.elapsed(), result.err().map(|e| e.to_string()))
}

fn refused(name: &str, text: &str, limit: &str) -> Result<Duration, WorkloadError> {
    let (elapsed, error) = decode(text);
    let error = error.unwrap_or_default();
    ensure(error.contains(limit), || {
        format!("{name}: expected a refusal naming {limit:?}, got {error:?}")
    })?;
    Ok(elapsed)
}

fn run() -> Result<(), WorkloadError> {
    let args = RunArgs::from_env()?;
    if args.workers.is_some() {
        return Err(WorkloadError::new(
            "--workers: hostile_yaml parses on the main thread and starts no runtime",
        ));
    }
    let hostile = [
        ("deep_flow_seq", mebibyte_of(" ", "[")),
        ("deep_flow_map", mebibyte_of("", " {a:")),
        ("deep_map_of_seq", mebibyte_of("", r#" {"": ["#)),
        ("deep_block_seq", mebibyte_of("\n", "- ")),
    ];
    let aliases = aliases();
    let oversize = "[".repeat(32 << 20);
    let baseline = baseline();
    let config = big_map_config();
    let keyed = 20_000;
    let base = cosi_node::config::document::decode(
        interfaces("eth", keyed)
            .replace("machine:", "version: v1alpha1\nmachine:")
            .as_bytes(),
    )
    .map_err(|e| WorkloadError::new(format!("patch base: {e}")))?;
    let patch = cosi_node::config::patch::Patch::parse(interfaces("veth", keyed).as_bytes(), "p")
        .map_err(|e| WorkloadError::new(format!("patch: {e}")))?;

    println!(
        "# hostile_yaml: 1 MiB texts ({MAX_BYTES} bytes), {} runs, default limits",
        args.runs
    );
    println!("# machine: {}", benches::machine::describe());
    let mut report = Report::default();
    for run in 1..=args.runs {
        let (base_time, error) = decode(&baseline);
        ensure(error.is_none(), || format!("baseline refused: {error:?}"))?;
        report.record_ms("hostile_yaml.baseline", base_time);
        let mut line = format!(
            "# run {run}: baseline {:.1} ms",
            base_time.as_secs_f64() * 1e3
        );
        let mut timed = Vec::new();
        for (name, text) in &hostile {
            timed.push((*name, refused(name, text, "levels of nesting")?));
        }
        timed.push((
            "aliases",
            refused("aliases", &aliases, "values once aliases")?,
        ));
        timed.push((
            "oversize",
            refused("oversize", &oversize, "more than the 1048576 accepted")?,
        ));

        let started = Instant::now();
        let decoded = cosi_node::config::document::decode(config.as_bytes());
        let elapsed = started.elapsed();
        let labels = decoded.map(|c| c.machine().node_labels.len()).unwrap_or(0);
        ensure(labels > 50_000, || {
            format!("config_big_map: {labels} labels read")
        })?;
        timed.push(("config_big_map", elapsed));

        let started = Instant::now();
        let patched = cosi_node::config::patch::apply(&base, std::slice::from_ref(&patch));
        let elapsed = started.elapsed();
        let count = patched
            .map(|c| c.machine().network.interfaces.len())
            .unwrap_or(0);
        ensure(count == 2 * keyed, || {
            format!("patch_keyed: {count} interfaces")
        })?;
        timed.push(("patch_keyed", elapsed));

        for (name, elapsed) in timed {
            line.push_str(&format!(", {name} {:.2} ms", elapsed.as_secs_f64() * 1e3));
            report.record_ms(&format!("hostile_yaml.{name}"), elapsed);
            report.record(
                &format!("hostile_yaml.{name}_vs_baseline"),
                elapsed.as_secs_f64() / base_time.as_secs_f64(),
                "x",
            );
        }
        println!("{line}");
    }
    report.print();
    Ok(())
}
