use super::scanner::{scan, Nesting};
use super::*;

/// The flow level after every flow token, with its byte offset.
fn levels(text: &str) -> Vec<(usize, usize)> {
    let mut seen = Vec::new();
    scan(text, |change: Nesting| {
        if !change.block {
            seen.push((change.offset, change.level));
        }
        true
    });
    seen
}

fn limit(text: &str) -> String {
    check(text).unwrap_err().to_string()
}

#[test]
fn flow_collections_open_and_close_where_the_brackets_are() {
    assert_eq!(levels("[a, {b: c}]"), [(0, 1), (4, 2), (9, 1), (10, 0)]);
}

#[test]
fn brackets_in_quoted_scalars_are_not_flow_collections() {
    assert_eq!(levels("a: '[[{'\nb: \"]\\\"[\"\nc: []"), [(22, 1), (23, 0)]);
}

#[test]
fn brackets_in_comments_are_not_flow_collections() {
    assert_eq!(levels("a: 1 # [[[\n[b] #]]"), [(11, 1), (13, 0)]);
}

#[test]
fn brackets_inside_block_plain_scalars_are_text() {
    assert_eq!(levels("a: x[1]\nb: y{\n  z[: 1\n"), []);
}

#[test]
fn a_continuation_line_of_a_plain_scalar_is_text() {
    // `b [` continues the scalar of `a` (indented deeper than the mapping).
    assert_eq!(levels("a: one\n  b [\nc: [x]\n"), [(16, 1), (18, 0)]);
}

#[test]
fn block_scalar_lines_are_text_until_the_indentation_drops() {
    let text = "a: |\n  [[[ 'x\n   {{\nb: [y]\n";
    assert_eq!(levels(text), [(23, 1), (25, 0)]);
}

#[test]
fn block_scalar_with_an_indentation_indicator_keeps_its_indent() {
    // Content indent 1 (the indicator): the second line, at column 1, is still text.
    assert_eq!(levels("a: |1\n  [x\n [y\nb: [z]\n"), [(18, 1), (20, 0)]);
}

#[test]
fn a_single_quote_inside_a_plain_scalar_starts_no_string() {
    // `don't` is plain text: the `'` must not hide the `[` on the next line.
    assert_eq!(levels("a: don't\nb: [1]\nc: x'\n"), [(12, 1), (14, 0)]);
}

#[test]
fn inside_a_flow_collection_commas_and_brackets_end_plain_scalars() {
    assert_eq!(levels("[a[b], c]"), [(0, 1), (2, 2), (4, 1), (8, 0)]);
}

#[test]
fn a_tag_may_hold_brackets_only_when_verbatim() {
    assert_eq!(levels("- !<a[b]> x\n- !t [y]\n"), [(17, 1), (19, 0)]);
}

#[test]
fn closing_bracket_outside_any_collection_keeps_level_zero() {
    assert_eq!(levels("]"), [(0, 0)]);
}

#[test]
fn scanning_stops_at_a_character_the_reader_refuses() {
    assert_eq!(levels("[a]\u{1}[[["), [(0, 1), (2, 0)]);
}

#[test]
fn a_second_document_marker_starts_document_one() {
    let mut documents = Vec::new();
    scan("a: [1]\n---\nb: [2]\n", |change| {
        if !change.block {
            documents.push(change.document);
        }
        true
    });
    assert_eq!(documents, [0, 0, 1, 1]);
    let mut documents = Vec::new();
    scan("---\n[1]\n---\n[2]\n", |change| {
        if !change.block {
            documents.push(change.document);
        }
        true
    });
    assert_eq!(documents, [0, 0, 1, 1]);
}

#[test]
fn text_longer_than_max_bytes_is_refused_unread() {
    let limits = Limits {
        max_bytes: 10,
        ..Limits::default()
    };
    let err = limits.check("a: [1, 2, 3]").unwrap_err();
    assert_eq!(
        err,
        LimitError {
            document: 0,
            location: None,
            message: "the YAML text is 12 bytes, more than the 10 accepted".into(),
        }
    );
}

#[test]
fn flow_nesting_deeper_than_max_depth_is_refused_at_its_bracket() {
    assert_eq!(
        limit(&"[".repeat(65)),
        "line 1 column 65: more than 64 levels of nesting"
    );
    assert!(check(&format!("{}{}", "[".repeat(64), "]".repeat(64))).is_ok());
}

#[test]
fn flow_nesting_counts_the_block_collections_around_it() {
    let limits = Limits {
        max_depth: 3,
        ..Limits::default()
    };
    assert!(limits.check("a:\n  b: [[x]]\n").is_err());
    assert!(limits.check("a:\n  b: [x]\n").is_ok());
}

#[test]
fn block_collections_are_reported_where_they_open_one_indentation_deeper() {
    let mut opened = Vec::new();
    scan("a:\n  b: 1\n  c:\n  - x\n  - - y\n", |change| {
        if change.block {
            opened.push((change.line, change.column, change.blocks));
        }
        true
    });
    // The map at 0, the map at 2 (its list at the same column is not deeper), the inner list.
    assert_eq!(opened, [(0, 0, 1), (1, 2, 2), (4, 4, 3)]);
}

#[test]
fn block_nesting_deeper_than_max_depth_is_refused() {
    let mut text = String::new();
    for depth in 0..70 {
        text.push_str(&" ".repeat(depth));
        text.push_str("a:\n");
    }
    text.push_str(&" ".repeat(70));
    text.push_str("b\n");
    let err = check(&text).unwrap_err();
    assert_eq!(err.message, "more than 64 levels of nesting");
    assert_eq!(err.location.map(|at| at.line), Some(65));
}

#[test]
fn aliases_count_as_everything_they_stand_for() {
    let text = "a: &a [1, 2, 3]\nb: [*a, *a]\n";
    // The map, `a`, its list of 3, `b`, its list, and twice the list of 3: 16 values.
    let exact = Limits {
        max_nodes: 16,
        ..Limits::default()
    };
    assert!(exact.check(text).is_ok());
    let one_less = Limits {
        max_nodes: 15,
        ..Limits::default()
    };
    let err = one_less.check(text).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 1 column 14: more than 15 values once aliases are expanded (an alias counts as \
         all it stands for), reached at b[1][2]"
    );
}

#[test]
fn aliases_of_a_string_count_as_all_its_bytes() {
    // One 10-byte string and three aliases of it: 40 bytes of strings, plus the keys a, b,
    // c, d (4 bytes).
    let text = "a: &s 0123456789\nb: *s\nc: *s\nd: *s\n";
    let exact = Limits {
        max_scalar_bytes: 44,
        ..Limits::default()
    };
    assert!(exact.check(text).is_ok());
    let one_less = Limits {
        max_scalar_bytes: 43,
        ..Limits::default()
    };
    let err = one_less.check(text).unwrap_err();
    assert_eq!(
        err.message,
        "more than 43 bytes of strings once aliases are expanded (an alias counts as all it \
         stands for), reached at d"
    );
}

#[test]
fn the_default_refuses_a_long_string_aliased_thousands_of_times() {
    let mut text = format!("a: &s {}\nl:\n", "x".repeat(100_000));
    for _ in 0..2_000 {
        text.push_str("- *s\n");
    }
    assert!(text.len() < MAX_BYTES);
    let err = check(&text).unwrap_err();
    assert!(
        err.message
            .starts_with("more than 4194304 bytes of strings"),
        "{}",
        err.message
    );
}

#[test]
fn a_document_that_is_not_yaml_passes_the_check() {
    assert!(check("a: [1").is_ok());
    assert!(check("a: *nowhere").is_ok());
}

#[test]
fn the_check_names_the_document_it_refused() {
    let limits = Limits {
        max_depth: 1,
        ..Limits::default()
    };
    assert_eq!(
        limits.check("a: 1\n---\nb: {c: d}\n").unwrap_err().document,
        1
    );
    assert_eq!(limits.check("a: 1\n---\nb: [c]\n").unwrap_err().document, 1);
}

#[test]
fn an_unreadable_document_is_reported_by_position_before_its_values() {
    let mut seen = Vec::new();
    read_documents::<serde_json::Value, ()>(
        "a: 1\n---\nb: {c: [1\n",
        &Limits::default(),
        |i, r| {
            seen.push((i, r.map_err(|e| matches!(e, ReadError::Unreadable { .. }))));
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].1.is_ok());
    assert_eq!(seen[1], (1, Err(true)));
}
