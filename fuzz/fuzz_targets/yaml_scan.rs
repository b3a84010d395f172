//! Fuzzes the flow-nesting pass of `cosi_core::yaml` against the YAML library's own scanner:
//! up to where the library stops (the end, or its first error), both must open and close
//! flow collections at the same bytes, to the same levels. The pass is included as is (it
//! uses nothing from the rest of its crate); the library's scanner is called directly.
#![no_main]

use std::mem::MaybeUninit;

use unsafe_libyaml_norway as libyaml;

#[allow(dead_code)]
#[path = "../../cosi-core/src/yaml/scanner.rs"]
mod scanner;

/// `(byte offset, flow level after the token)` for every flow token the library returns, the
/// furthest offset of any token it returned after the stream start, and whether it reached
/// the end of the stream.
fn library_levels(text: &str) -> (Vec<(usize, usize)>, Option<usize>, bool) {
    // The library's positions start after a leading byte order mark.
    let shift = if text.starts_with('\u{FEFF}') { 3 } else { 0 };
    let mut levels = Vec::new();
    let mut furthest = None;
    let mut finished = false;
    let mut level = 0usize;
    // SAFETY: the parser is initialized before use and deleted once; every token it returns
    // is deleted after reading its type and mark; the input outlives the parser.
    unsafe {
        let mut parser = MaybeUninit::<libyaml::yaml_parser_t>::uninit();
        if libyaml::yaml_parser_initialize(parser.as_mut_ptr()).fail {
            return (levels, furthest, finished);
        }
        let mut parser = parser.assume_init();
        libyaml::yaml_parser_set_input_string(&mut parser, text.as_ptr(), text.len() as u64);
        loop {
            let mut token = MaybeUninit::<libyaml::yaml_token_t>::uninit();
            if libyaml::yaml_parser_scan(&mut parser, token.as_mut_ptr()).fail {
                break;
            }
            let mut token = token.assume_init();
            let offset = token.start_mark.index as usize + shift;
            if token.type_ != libyaml::YAML_STREAM_START_TOKEN {
                furthest = furthest.max(Some(offset));
            }
            match token.type_ {
                libyaml::YAML_FLOW_SEQUENCE_START_TOKEN | libyaml::YAML_FLOW_MAPPING_START_TOKEN => {
                    level += 1;
                    levels.push((offset, level));
                }
                libyaml::YAML_FLOW_SEQUENCE_END_TOKEN | libyaml::YAML_FLOW_MAPPING_END_TOKEN => {
                    level = level.saturating_sub(1);
                    levels.push((offset, level));
                }
                libyaml::YAML_STREAM_END_TOKEN => finished = true,
                _ => {}
            }
            libyaml::yaml_token_delete(&mut token);
            if finished {
                break;
            }
        }
        libyaml::yaml_parser_delete(&mut parser);
    }
    (levels, furthest, finished)
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (theirs, furthest, finished) = library_levels(text);
    let mut ours = Vec::new();
    scanner::scan(text, |change| {
        if !change.block {
            ours.push((change.offset, change.level));
        }
        true
    });
    if finished {
        assert_eq!(ours, theirs, "{text:?}");
        return;
    }
    // The library stopped early: what it returned is where ours begins, and the next token
    // of ours is one it held back (a possible key, waiting for its `:`) or never reached, at or
    // after the furthest token it returned.
    assert_eq!(ours[..theirs.len().min(ours.len())], theirs[..], "{text:?}");
    if let (Some(&(next, _)), Some(furthest)) = (ours.get(theirs.len()), furthest) {
        assert!(next >= furthest, "{text:?}: ours opens or closes at {next}, the library returned up to {furthest} without it");
    }
});
