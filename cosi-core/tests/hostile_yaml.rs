//! Hostile YAML is refused with the limit it crosses, before anything of it is built: a
//! mebibyte of nesting or of aliases, and text over the size limit (how fast is measured by the
//! `hostile_yaml` bench, not here).

use cosi_core::yaml::{self, Limits, MAX_BYTES};
use cosi_core::{Error, Registry};

const HEADER: &str = "metadata: {namespace: ns, type: Notes.test.cosi.dev, id: n}\nspec:";

/// `HEADER` and `start`, then `unit` repeated until the text is exactly one mebibyte.
fn mebibyte_of(start: &str, unit: &str) -> String {
    let mut text = String::with_capacity(MAX_BYTES);
    text.push_str(HEADER);
    text.push_str(start);
    while text.len() + unit.len() <= MAX_BYTES {
        text.push_str(unit);
    }
    text.push_str(&" ".repeat(MAX_BYTES - text.len()));
    assert_eq!(text.len(), MAX_BYTES);
    text
}

fn decode(text: &str) -> (String, String, String) {
    let registry = Registry::new();
    let decoder = cosi_core::dynamic::Decoder::new(&registry)
        .unknown_types(cosi_core::dynamic::UnknownTypes::KeepDynamic);
    match decoder.decode_yaml(text) {
        Err(Error::InvalidArgument {
            subject,
            field,
            message,
        }) => (subject, field, message),
        Err(other) => panic!("expected InvalidArgument, got {other}"),
        Ok(decoded) => panic!("decoded {} resources", decoded.len()),
    }
}

fn too_deep() -> String {
    "more than 64 levels of nesting".to_string()
}

#[test]
fn a_mebibyte_of_nested_flow_sequences_is_refused_at_the_nesting_limit() {
    let text = mebibyte_of(" ", "[");
    // The document is one level, so the 64th `[` (after `spec: `, column 7) is the 65th.
    assert_eq!(
        decode(&text),
        (
            "YAML document 1".into(),
            "line 2 column 70".into(),
            too_deep()
        )
    );
}

#[test]
fn a_mebibyte_of_nested_flow_maps_is_refused_at_the_nesting_limit() {
    let text = mebibyte_of("", " {a:");
    assert_eq!(
        decode(&text),
        (
            "YAML document 1".into(),
            "line 2 column 259".into(),
            too_deep()
        )
    );
}

#[test]
fn a_mebibyte_of_flow_maps_nesting_sequences_is_refused_at_the_nesting_limit() {
    let text = mebibyte_of("", r#" {"": ["#);
    let (subject, field, message) = decode(&text);
    assert_eq!((subject, message), ("YAML document 1".into(), too_deep()));
    // Each ` {"": [` is two levels: the 32nd `[` is the 65th level.
    assert_eq!(field, "line 2 column 229");
}

#[test]
fn a_mebibyte_of_nested_block_lists_is_refused_at_the_nesting_limit() {
    let text = mebibyte_of("\n", "- ");
    // Each `- ` is one more list, nested in the item of the one before. The first, at the
    // column of `spec`, counts as written from the second on: the 65th `-` is refused.
    let (subject, field, message) = decode(&text);
    assert_eq!((subject, message), ("YAML document 1".into(), too_deep()));
    assert_eq!(field, "line 3 column 129");
}

#[test]
fn a_mebibyte_of_aliases_is_refused_at_the_value_limit() {
    // One anchored list of ten values and a list that names it about a hundred thousand times:
    // a million values and more once expanded.
    let mut text = format!("{HEADER}\n  a: &a [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n  b: [*a");
    while text.len() + 5 < MAX_BYTES {
        text.push_str(", *a");
    }
    text.push(']');
    let (subject, field, message) = decode(&text);
    assert_eq!(subject, "YAML document 1");
    // Where the walk was in the anchored list when the count ran out.
    assert_eq!(field, "line 3 column 34");
    assert_eq!(
        message,
        "more than 1048576 values once aliases are expanded (an alias counts as all it stands \
         for), reached at spec.b[95322][8]"
    );
}

#[test]
fn a_billion_laughs_is_refused_at_the_value_limit() {
    let mut text = format!("{HEADER}\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..10 {
        let below = format!("*l{}", level - 1);
        let items = [below.as_str(); 10].join(", ");
        text.push_str(&format!("  l{level}: &l{level} [{items}]\n"));
    }
    // Few values written and many alias uses: the YAML library's own bound stops it first.
    assert_eq!(
        decode(&text),
        (
            "YAML document 1".into(),
            "document".into(),
            "aliases are expanded more than 100 times as often as the document has values (the \
             YAML library's limit)"
                .into()
        )
    );
}

#[test]
fn text_over_the_size_limit_is_refused_unread() {
    // As much as one API message may carry.
    let text = "[".repeat(32 << 20);
    assert_eq!(
        decode(&text),
        (
            "YAML document 1".into(),
            "document".into(),
            "the YAML text is 33554432 bytes, more than the 1048576 accepted".into()
        )
    );
}

#[test]
fn the_same_limits_apply_to_any_caller_of_the_check() {
    let text = mebibyte_of(" ", "[");
    let err = yaml::check(&text).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2 column 70: more than 64 levels of nesting"
    );
    let shallow = Limits {
        max_depth: 8,
        ..Limits::default()
    };
    assert_eq!(
        shallow.check(&text).unwrap_err().to_string(),
        "line 2 column 14: more than 8 levels of nesting"
    );
}
