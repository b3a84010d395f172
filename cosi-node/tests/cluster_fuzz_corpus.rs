//! Replays every file of the `affiliate` fuzz corpus (`fuzz/corpus/affiliate/`) through its fuzz
//! check, so a normal `cargo test` guards what fuzzing found for published affiliates. Files named `ok-*` must
//! be accepted and `err-*` rejected; other files (added by the fuzzer) only must not break a rule.

#[path = "../../fuzz/src/node_checks.rs"]
#[allow(dead_code)]
mod node_checks;

use std::path::PathBuf;

use node_checks::Outcome;

#[test]
fn affiliate_corpus_is_decided_as_named_without_panics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/affiliate");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
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
        let outcome = node_checks::affiliate(&std::fs::read(&path).unwrap());
        if name.starts_with("ok-") {
            assert_eq!(outcome, Outcome::Accepted, "affiliate/{name}");
        } else if name.starts_with("err-") {
            assert_eq!(outcome, Outcome::Rejected, "affiliate/{name}");
        }
    }
}
