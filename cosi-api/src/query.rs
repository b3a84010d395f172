//! Label queries, id queries and bookmarks on the wire, both directions.
//!
//! The protocol's label terms carry their operand as a list of strings; this module checks what
//! the original's server reads without checking (an `EQUAL` without a value is an
//! invalid-argument error here, not a crash), and refuses an unknown operator as unsupported.

use cosi_core::{Bookmark, Error, IdQuery, LabelOp, LabelQueries, LabelQuery, LabelTerm, Result};

use crate::proto::resource as pb;

use pb::label_term::Operation;

/// Label queries as messages.
pub fn encode_labels(queries: &LabelQueries) -> Vec<pb::LabelQuery> {
    queries
        .0
        .iter()
        .map(|q| pb::LabelQuery {
            terms: q.terms.iter().map(encode_term).collect(),
        })
        .collect()
}

fn encode_term(term: &LabelTerm) -> pb::LabelTerm {
    let (op, value) = match &term.op {
        LabelOp::Exists => (Operation::Exists, vec![]),
        LabelOp::Equal(v) => (Operation::Equal, vec![v.clone()]),
        LabelOp::In(set) => (Operation::In, set.clone()),
        LabelOp::Lt(v) => (Operation::Lt, vec![v.clone()]),
        LabelOp::Lte(v) => (Operation::Lte, vec![v.clone()]),
        LabelOp::LtNumeric(n) => (Operation::LtNumeric, vec![n.to_string()]),
        LabelOp::LteNumeric(n) => (Operation::LteNumeric, vec![n.to_string()]),
    };
    pb::LabelTerm {
        key: term.key.clone(),
        op: op as i32,
        value,
        invert: term.invert,
    }
}

pub use crate::request_bounds::{MAX_LABEL_QUERIES, MAX_LABEL_TERMS, MAX_LABEL_VALUES};

/// Messages back into label queries. `subject` names the request in errors.
///
/// A query is evaluated against every resource of the kind (for a watch, against every change,
/// for as long as it runs), so its size is bounded: at most [`MAX_LABEL_QUERIES`] queries of
/// [`MAX_LABEL_TERMS`] terms, each listing at most [`MAX_LABEL_VALUES`] values. (The server
/// counts them, and all the values together, on the request's bytes before it builds the
/// message: [`crate::request_bounds`].)
pub fn decode_labels(subject: &str, queries: Vec<pb::LabelQuery>) -> Result<LabelQueries> {
    let too_many = |field: String, count: usize, limit: usize, what: &str| {
        Error::invalid(
            subject,
            field,
            format!("{count} {what}, more than the {limit} allowed"),
        )
    };
    if queries.len() > MAX_LABEL_QUERIES {
        return Err(too_many(
            "label_query".to_string(),
            queries.len(),
            MAX_LABEL_QUERIES,
            "queries",
        ));
    }
    for (i, query) in queries.iter().enumerate() {
        if query.terms.len() > MAX_LABEL_TERMS {
            return Err(too_many(
                format!("label_query[{i}].terms"),
                query.terms.len(),
                MAX_LABEL_TERMS,
                "terms",
            ));
        }
        for (j, term) in query.terms.iter().enumerate() {
            if term.value.len() > MAX_LABEL_VALUES {
                return Err(too_many(
                    format!("label_query[{i}].terms[{j}].value"),
                    term.value.len(),
                    MAX_LABEL_VALUES,
                    "values",
                ));
            }
        }
    }
    let mut out = Vec::with_capacity(queries.len());
    for (i, query) in queries.into_iter().enumerate() {
        let mut terms = Vec::with_capacity(query.terms.len());
        for (j, term) in query.terms.into_iter().enumerate() {
            terms.push(decode_term(
                subject,
                &format!("label_query[{i}].terms[{j}]"),
                term,
            )?);
        }
        out.push(LabelQuery { terms });
    }
    Ok(LabelQueries(out))
}

fn decode_term(subject: &str, field: &str, term: pb::LabelTerm) -> Result<LabelTerm> {
    let op = Operation::try_from(term.op).map_err(|_| Error::Unsupported {
        subject: subject.to_string(),
        message: format!("{field}: unsupported label query operator {}", term.op),
    })?;
    let mut values = term.value;
    let single = |values: &mut Vec<String>| -> Result<String> {
        if values.is_empty() {
            return Err(Error::invalid(
                subject,
                format!("{field}.value"),
                format!("operator {} needs a value", op.as_str_name()),
            ));
        }
        Ok(values.swap_remove(0))
    };
    let numeric = |text: String| -> Result<f64> {
        cosi_core::parse_quantity(&text).ok_or_else(|| {
            Error::invalid(
                subject,
                format!("{field}.value"),
                format!("{text:?} is not a number (with an optional unit suffix)"),
            )
        })
    };
    let (op, invert) = match op {
        Operation::Exists => (LabelOp::Exists, term.invert),
        // Deprecated in the protocol: "does not exist" is "exists", inverted.
        #[allow(deprecated)]
        Operation::NotExists => (LabelOp::Exists, !term.invert),
        Operation::Equal => (LabelOp::Equal(single(&mut values)?), term.invert),
        Operation::In => (LabelOp::In(values), term.invert),
        Operation::Lt => (LabelOp::Lt(single(&mut values)?), term.invert),
        Operation::Lte => (LabelOp::Lte(single(&mut values)?), term.invert),
        Operation::LtNumeric => (
            LabelOp::LtNumeric(numeric(single(&mut values)?)?),
            term.invert,
        ),
        Operation::LteNumeric => (
            LabelOp::LteNumeric(numeric(single(&mut values)?)?),
            term.invert,
        ),
    };
    Ok(LabelTerm {
        key: term.key,
        op,
        invert,
    })
}

/// An id query as a message.
pub fn encode_ids(ids: Option<&IdQuery>) -> Option<pb::IdQuery> {
    ids.map(|q| pb::IdQuery {
        regexp: q.as_str().to_string(),
    })
}

/// A message back into an id query; an empty pattern is no query.
pub fn decode_ids(subject: &str, query: Option<pb::IdQuery>) -> Result<Option<IdQuery>> {
    match query {
        Some(q) if !q.regexp.is_empty() => IdQuery::new(&q.regexp).map(Some).map_err(|e| {
            Error::invalid(
                subject,
                "id_query.regexp",
                format!("failed to compile regexp: {e}"),
            )
        }),
        _ => Ok(None),
    }
}

/// The id query message that selects exactly `id` (what a client sends to watch one resource
/// as a kind watch).
pub fn exact_id_message(id: &str) -> pb::IdQuery {
    pb::IdQuery {
        regexp: IdQuery::exact_pattern(id),
    }
}

/// The id query that selects exactly `id` (a single-resource watch served as a kind watch).
/// An id too long to make a pattern of is an invalid argument, as any overlong pattern.
pub fn exact_id(subject: &str, id: &str) -> Result<IdQuery> {
    let pattern = IdQuery::exact_pattern(id);
    if pattern.len() > cosi_core::id_query::MAX_PATTERN_BYTES {
        return Err(Error::invalid(
            subject,
            "id",
            format!(
                "{} bytes: a watch of one resource from a bookmark or with tail events selects \
                 it by a pattern, and that would be {} bytes, more than the {} a pattern may have",
                id.len(),
                pattern.len(),
                cosi_core::id_query::MAX_PATTERN_BYTES
            ),
        ));
    }
    IdQuery::new(&pattern)
}

/// A bookmark as opaque wire bytes.
pub fn encode_bookmark(bookmark: &Bookmark) -> Vec<u8> {
    bookmark.to_bytes()
}

/// Wire bytes back into a bookmark. Never fails: bytes a store did not issue are carried as
/// they are, and that store refuses them when asked to resume (an invalid-argument error on
/// `since`, which the server sends as `FailedPrecondition`, as the original does).
pub fn decode_bookmark(bytes: &[u8]) -> Bookmark {
    Bookmark::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosi_core::Labels;
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = LabelOp> {
        let text = "[a-z0-9]{0,4}";
        prop_oneof![
            Just(LabelOp::Exists),
            text.prop_map(LabelOp::Equal),
            proptest::collection::vec(text, 0..3).prop_map(LabelOp::In),
            text.prop_map(LabelOp::Lt),
            text.prop_map(LabelOp::Lte),
            (-1e6f64..1e6).prop_map(LabelOp::LtNumeric),
            (-1e6f64..1e6).prop_map(LabelOp::LteNumeric),
        ]
    }

    proptest! {
        #[test]
        fn label_queries_round_trip(
            queries in proptest::collection::vec(
                proptest::collection::vec(("[a-z]{1,3}", op(), any::<bool>()), 0..4), 0..3)
        ) {
            let queries = LabelQueries(queries.into_iter().map(|terms| LabelQuery {
                terms: terms.into_iter().map(|(key, op, invert)| LabelTerm { key, op, invert }).collect(),
            }).collect());
            let back = decode_labels("test", encode_labels(&queries)).unwrap();
            prop_assert_eq!(back, queries);
        }
    }

    #[test]
    fn equal_without_value_is_invalid_not_a_crash() {
        let term = pb::LabelTerm {
            key: "app".into(),
            op: Operation::Equal as i32,
            value: vec![],
            invert: false,
        };
        let err =
            decode_labels("list ns/T", vec![pb::LabelQuery { terms: vec![term] }]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "list ns/T: invalid label_query[0].terms[0].value: operator EQUAL needs a value"
        );
    }

    #[test]
    fn unknown_operator_is_unsupported() {
        let term = pb::LabelTerm {
            key: "app".into(),
            op: 42,
            value: vec![],
            invert: false,
        };
        let err = decode_labels("list", vec![pb::LabelQuery { terms: vec![term] }]).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    }

    #[test]
    #[allow(deprecated)] // The operator under test is deprecated in the protocol.
    fn not_exists_is_exists_inverted() {
        let term = pb::LabelTerm {
            key: "app".into(),
            op: Operation::NotExists as i32,
            value: vec![],
            invert: false,
        };
        let q = decode_labels("list", vec![pb::LabelQuery { terms: vec![term] }]).unwrap();
        assert!(q.matches(&Labels::new()));
        assert!(!q.matches(&[("app".to_string(), "x".to_string())].into()));
    }

    #[test]
    fn exact_id_matches_only_that_id() {
        let q = exact_id("test", "a.b+c").unwrap();
        assert!(q.matches("a.b+c"));
        assert!(!q.matches("aXb+c"));
        assert!(!q.matches("a.b+cd"));
    }

    #[test]
    fn bookmarks_travel_as_opaque_bytes_both_ways() {
        let ours = Bookmark::at(7, 9);
        assert_eq!(decode_bookmark(&encode_bookmark(&ours)), ours);
        // A peer's bookmark (the reference's are 16 bytes) comes back byte for byte.
        let theirs = [1u8; 16];
        assert_eq!(encode_bookmark(&decode_bookmark(&theirs)), theirs);
    }

    fn exists_terms(n: usize) -> Vec<pb::LabelTerm> {
        (0..n)
            .map(|_| pb::LabelTerm {
                key: String::new(),
                op: Operation::Exists as i32,
                value: Vec::new(),
                invert: true,
            })
            .collect()
    }

    #[test]
    fn a_label_query_with_more_terms_than_the_limit_is_refused_naming_the_field() {
        let ok = vec![pb::LabelQuery {
            terms: exists_terms(MAX_LABEL_TERMS),
        }];
        assert_eq!(decode_labels("list", ok).unwrap().0[0].terms.len(), 64);
        let over = vec![pb::LabelQuery {
            terms: exists_terms(MAX_LABEL_TERMS + 1),
        }];
        assert_eq!(
            decode_labels("list", over).unwrap_err().to_string(),
            "list: invalid label_query[0].terms: 65 terms, more than the 64 allowed"
        );
    }

    #[test]
    fn more_label_queries_than_the_limit_are_refused() {
        let over = vec![pb::LabelQuery::default(); MAX_LABEL_QUERIES + 1];
        assert_eq!(
            decode_labels("list", over).unwrap_err().to_string(),
            "list: invalid label_query: 65 queries, more than the 64 allowed"
        );
    }

    #[test]
    fn a_term_listing_more_values_than_the_limit_is_refused() {
        let term = pb::LabelTerm {
            key: "k".to_string(),
            op: Operation::In as i32,
            value: vec!["v".to_string(); MAX_LABEL_VALUES + 1],
            invert: false,
        };
        let over = vec![pb::LabelQuery { terms: vec![term] }];
        assert_eq!(
            decode_labels("watch", over).unwrap_err().to_string(),
            "watch: invalid label_query[0].terms[0].value: 1025 values, more than the 1024 allowed"
        );
    }

    #[test]
    fn an_id_too_long_for_an_exact_pattern_is_an_invalid_id_not_a_panic() {
        let id = "a".repeat(5000);
        let refused = exact_id("test/Widgets/aaa", &id).unwrap_err();
        assert!(
            matches!(&refused, Error::InvalidArgument { field, .. } if field == "id"),
            "{refused}"
        );
        assert!(refused.to_string().len() < 400, "{refused}");
    }
}
