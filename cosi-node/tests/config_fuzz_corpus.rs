//! Replays every file of the machine config fuzz corpora (`fuzz/corpus/config_decode/`,
//! `fuzz/corpus/config_patch/`) through the fuzz checks, so a normal `cargo test` guards what
//! fuzzing found. Files named `ok-*` must be accepted and `err-*` rejected; other files (added
//! by the fuzzer) only must not break a rule.

#[path = "../../fuzz/src/config_checks.rs"]
mod config_checks;

use std::path::PathBuf;

use config_checks::Outcome;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "{} holds only {} files",
        dir.display(),
        files.len()
    );
    files
}

fn replay(target: &str, check: fn(&[u8]) -> Outcome) {
    for (name, data) in corpus(target) {
        let outcome = check(&data);
        if name.starts_with("ok-") {
            assert_eq!(outcome, Outcome::Accepted, "{target}/{name}");
        } else if name.starts_with("err-") {
            assert_eq!(outcome, Outcome::Rejected, "{target}/{name}");
        }
    }
}

#[test]
fn config_decode_corpus_decodes_and_round_trips_without_panics() {
    replay("config_decode", config_checks::config_decode);
}

#[test]
fn config_patch_corpus_applies_and_round_trips_without_panics() {
    replay("config_patch", config_checks::config_patch);
}
