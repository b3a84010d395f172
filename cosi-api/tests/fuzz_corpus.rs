//! Replays the corpora of the remote API's fuzz targets (`fuzz/corpus/wire_*/`) through the
//! fuzz checks, so a normal `cargo test` guards what fuzzing found. Files named `ok-*` must be
//! accepted and `err-*` rejected; other files (added by the fuzzer) only must not break a rule.

#[path = "../../fuzz/src/wire.rs"]
mod wire;

use std::path::PathBuf;

use wire::WireOutcome;

fn replay(target: &str, check: fn(&[u8]) -> WireOutcome) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "{} holds only {} files",
        dir.display(),
        files.len()
    );
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let outcome = check(&std::fs::read(&path).unwrap());
        if name.starts_with("ok-") {
            assert_eq!(outcome, WireOutcome::Accepted, "{target}/{name}");
        } else if name.starts_with("err-") {
            assert_eq!(outcome, WireOutcome::Rejected, "{target}/{name}");
        }
    }
}

#[test]
fn wire_resource_corpus_decodes_and_round_trips_without_panics() {
    replay("wire_resource", wire::wire_resource);
}

#[test]
fn wire_watch_corpus_decodes_without_panics() {
    replay("wire_watch", wire::wire_watch);
}
