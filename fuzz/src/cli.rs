//! The check behind the `client_config` target: `cosictl`'s client config file, shared with
//! `cosi-cli/tests/fuzz_corpus.rs` (which includes this file, so it builds as a module of both).

use cosi_cli::client_config::ClientConfig;

/// What the check made of its input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CliOutcome {
    /// Parsed, and its written form parses back equal and writes the same again.
    Accepted,
    /// Rejected with an error (not a panic).
    Rejected,
}

/// Parses `data` as a client config; a parsed one must write to text that parses back equal.
pub fn client_config(data: &[u8]) -> CliOutcome {
    let Ok(text) = std::str::from_utf8(data) else {
        return CliOutcome::Rejected;
    };
    let Ok(parsed) = ClientConfig::parse(text) else {
        return CliOutcome::Rejected;
    };
    let written = parsed.to_text();
    let reparsed = ClientConfig::parse(&written).unwrap_or_else(|e| {
        panic!("{text:?} was written as {written:?}, which does not parse: {e}")
    });
    assert_eq!(reparsed, parsed, "{text:?} was written as {written:?}");
    assert_eq!(reparsed.to_text(), written);
    CliOutcome::Accepted
}
