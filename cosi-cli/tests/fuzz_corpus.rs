//! Replays the corpus of the `client_config` fuzz target (`fuzz/corpus/client_config/`) through
//! its check, so a normal `cargo test` guards what fuzzing found. Files named `ok-*` must be
//! accepted and `err-*` rejected; other files (added by the fuzzer) only must not break a rule.

#[path = "../../fuzz/src/cli.rs"]
mod cli;

use std::path::PathBuf;

use cli::CliOutcome;

#[test]
fn client_config_corpus_parses_and_round_trips_without_panics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/client_config");
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
        let outcome = cli::client_config(&std::fs::read(&path).unwrap());
        if name.starts_with("ok-") {
            assert_eq!(outcome, CliOutcome::Accepted, "{name}");
        } else if name.starts_with("err-") {
            assert_eq!(outcome, CliOutcome::Rejected, "{name}");
        }
    }
}
