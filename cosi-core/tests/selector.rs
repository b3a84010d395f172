//! Selector strings: display and parse are inverse, and parsing never panics.

use cosi_core::{LabelOp, LabelQueries, LabelQuery, LabelTerm, Labels};
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        // Plain words, the common case.
        "[a-z0-9./-]{1,8}",
        // Anything at all, control characters and selector syntax included.
        prop::collection::vec(any::<char>(), 0..6).prop_map(String::from_iter),
        prop::sample::select(vec![
            "", "in", "notin", "lt", "*", "!", "a b", "\"", "\\", "|", ";"
        ])
        .prop_map(String::from),
    ]
}

fn finite() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("finite", |n| n.is_finite())
}

fn op() -> impl Strategy<Value = LabelOp> {
    prop_oneof![
        Just(LabelOp::Exists),
        text().prop_map(LabelOp::Equal),
        prop::collection::vec(text(), 0..4).prop_map(LabelOp::In),
        text().prop_map(LabelOp::Lt),
        text().prop_map(LabelOp::Lte),
        finite().prop_map(LabelOp::LtNumeric),
        finite().prop_map(LabelOp::LteNumeric),
    ]
}

fn queries() -> impl Strategy<Value = LabelQueries> {
    let term =
        (text(), op(), any::<bool>()).prop_map(|(key, op, invert)| LabelTerm { key, op, invert });
    let query = prop::collection::vec(term, 0..4).prop_map(|terms| LabelQuery { terms });
    prop::collection::vec(query, 0..3).prop_map(LabelQueries)
}

proptest! {
    #[test]
    fn display_then_parse_gives_equal_queries(original in queries()) {
        let shown = original.to_string();
        let parsed = LabelQueries::parse(&shown);
        prop_assert!(parsed.is_ok(), "{shown:?}: {:?}", parsed.err());
        prop_assert_eq!(parsed.unwrap(), original);
    }

    #[test]
    fn parsing_arbitrary_text_never_panics_and_accepted_text_round_trips(
        selector in prop::collection::vec(
            prop::sample::select(vec![
                "a", "b", "=", "==", "!=", "!", "<", "<=", ">", ">=", " in ", " notin ", " lt ",
                " gte ", "(", ")", ",", "|", "*", "\"", "\\", "\\u{41}", "1ki", "-2.5", " ", "é",
            ]),
            0..12,
        ).prop_map(|parts| parts.concat())
    ) {
        if let Ok(parsed) = LabelQueries::parse(&selector) {
            prop_assert_eq!(LabelQueries::parse(&parsed.to_string()).unwrap(), parsed);
        }
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn terms_in_one_query_and_and_queries_or() {
    let selector = LabelQueries::parse("app=web,tier=db | legacy").unwrap();
    assert!(selector.matches(&labels(&[("app", "web"), ("tier", "db")])));
    assert!(!selector.matches(&labels(&[("app", "web")])));
    assert!(selector.matches(&labels(&[("legacy", "")])));
}

#[test]
fn greater_or_equal_with_units_is_inverted_less_than() {
    let selector = LabelQueries::parse("mem>=1ki").unwrap();
    assert_eq!(
        selector,
        LabelQuery::new()
            .with(LabelTerm::new("mem", LabelOp::LtNumeric(1024.0)).inverted())
            .into()
    );
    assert!(selector.matches(&labels(&[("mem", "1024")])));
    assert!(!selector.matches(&labels(&[("mem", "1023")])));
    assert!(!selector.matches(&labels(&[])));
}

#[test]
fn string_greater_than_does_not_match_a_missing_key() {
    let selector = LabelQueries::parse("zone gt m").unwrap();
    assert!(selector.matches(&labels(&[("zone", "n")])));
    assert!(!selector.matches(&labels(&[("zone", "m")])));
    assert!(!selector.matches(&labels(&[])));
}

#[test]
fn invalid_selector_error_names_the_column_and_the_expectation() {
    let err = LabelQueries::parse("app=web, tier in (a b)").unwrap_err();
    match err {
        cosi_core::Error::InvalidArgument {
            subject,
            field,
            message,
        } => {
            assert_eq!(subject, "selector");
            assert_eq!(field, "column 21");
            assert_eq!(message, "expected ',' or ')' in the value list, found 'b'");
        }
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn number_that_overflows_with_its_unit_is_rejected() {
    let selector = format!("a<{}pi", "9".repeat(308));
    let err = LabelQueries::parse(&selector).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("selector: invalid column 3: expected a number"),
        "{err}"
    );
}
