//! Rules of selection: every label operator (string and numeric with units, inverted, ANDed
//! and ORed) and id regexes, on `list` and on `watch_kind` (live and bootstrap).

use cosi_core::{
    CreateOptions, Event, IdQuery, Kind, LabelOp, LabelQueries, LabelQuery, LabelTerm, ListOptions,
    Resource, ResourceSpec, State, UpdateOptions, WatchKindOptions,
};

use super::crud::with_value;
use super::fixture::{expect_ok, ids, next_event, Widget};
use super::Subject;

/// The labelled resources every label case selects from, in creation (and id) order.
const LABELLED: [(&str, &[(&str, &str)]); 6] = [
    ("a", &[("app", "web"), ("mem", "512"), ("tier", "a")]),
    ("b", &[("app", "db"), ("mem", "2ki"), ("tier", "b")]),
    ("c", &[("app", "cache"), ("mem", "1.5k")]),
    ("d", &[("mem", "1Mi")]),
    ("e", &[("mem", "lots")]),
    ("f", &[]),
];

/// One label case: the filter, the ids of [`LABELLED`] it selects, and labels of an extra
/// resource it also selects (the sentinel that ends a live watch).
struct LabelCase {
    name: &'static str,
    queries: LabelQueries,
    selects: &'static [&'static str],
    sentinel: &'static [(&'static str, &'static str)],
}

fn term(key: &str, op: LabelOp) -> LabelTerm {
    LabelTerm::new(key, op)
}

fn one(term: LabelTerm) -> LabelQueries {
    LabelQuery::new().with(term).into()
}

fn s(v: &str) -> String {
    v.to_string()
}

fn label_cases() -> Vec<LabelCase> {
    use LabelOp::*;
    let case = |name, queries, selects, sentinel| LabelCase {
        name,
        queries,
        selects,
        sentinel,
    };
    vec![
        case(
            "exists",
            one(term("app", Exists)),
            &["a", "b", "c"],
            &[("app", "x")],
        ),
        case(
            "not exists",
            one(term("app", Exists).inverted()),
            &["d", "e", "f"],
            &[],
        ),
        case(
            "equal",
            one(term("app", Equal(s("web")))),
            &["a"],
            &[("app", "web")],
        ),
        case(
            "not equal (missing key selected)",
            one(term("app", Equal(s("web"))).inverted()),
            &["b", "c", "d", "e", "f"],
            &[],
        ),
        case(
            "in",
            one(term("app", In(vec![s("web"), s("db")]))),
            &["a", "b"],
            &[("app", "db")],
        ),
        case(
            "not in (missing key selected)",
            one(term("app", In(vec![s("web"), s("db")])).inverted()),
            &["c", "d", "e", "f"],
            &[],
        ),
        case(
            "string lt",
            one(term("tier", Lt(s("b")))),
            &["a"],
            &[("tier", "a")],
        ),
        case(
            "inverted string lt (missing key never selected)",
            one(term("tier", Lt(s("b"))).inverted()),
            &["b"],
            &[("tier", "b")],
        ),
        case(
            "string lte",
            one(term("tier", Lte(s("b")))),
            &["a", "b"],
            &[("tier", "b")],
        ),
        case(
            "inverted string lte (missing key never selected)",
            one(term("tier", Lte(s("b"))).inverted()),
            &[],
            &[("tier", "c")],
        ),
        case(
            "numeric lt",
            one(term("mem", LtNumeric(1500.0))),
            &["a"],
            &[("mem", "1")],
        ),
        case(
            "inverted numeric lt (missing and non-numeric never selected)",
            one(term("mem", LtNumeric(1500.0)).inverted()),
            &["b", "c", "d"],
            &[("mem", "1500")],
        ),
        case(
            "numeric lte with k",
            one(term("mem", LteNumeric(1500.0))),
            &["a", "c"],
            &[("mem", "1.5k")],
        ),
        case(
            "inverted numeric lte (missing and non-numeric never selected)",
            one(term("mem", LteNumeric(1500.0)).inverted()),
            &["b", "d"],
            &[("mem", "2k")],
        ),
        case(
            "numeric lt with ki",
            one(term("mem", LtNumeric(2048.0))),
            &["a", "c"],
            &[("mem", "2047")],
        ),
        case(
            "numeric lte with ki",
            one(term("mem", LteNumeric(2048.0))),
            &["a", "b", "c"],
            &[("mem", "2Ki")],
        ),
        case(
            "numeric lte with mi",
            one(term("mem", LteNumeric(1_048_576.0))),
            &["a", "b", "c", "d"],
            &[("mem", "1mi")],
        ),
        case(
            "numeric lt with m",
            one(term("mem", LtNumeric(1e6))),
            &["a", "b", "c"],
            &[("mem", "999k")],
        ),
        case(
            "numeric lt with g",
            one(term("mem", LtNumeric(1e9))),
            &["a", "b", "c", "d"],
            &[("mem", "0.5g")],
        ),
        case(
            "terms in one query are ANDed",
            LabelQuery::new()
                .with(term("app", Exists))
                .with(term("mem", LtNumeric(2000.0)))
                .into(),
            &["a", "c"],
            &[("app", "x"), ("mem", "1")],
        ),
        case(
            "queries are ORed",
            LabelQueries(vec![
                LabelQuery::new().with(term("app", Equal(s("db")))),
                LabelQuery::new().with(term("tier", Equal(s("a")))),
            ]),
            &["a", "b"],
            &[("tier", "a")],
        ),
        case(
            "no query selects everything",
            LabelQueries::default(),
            &["a", "b", "c", "d", "e", "f"],
            &[],
        ),
    ]
}

/// Each case gets its own namespace, so cases cannot see each other's resources.
fn case_kind(index: usize) -> Kind {
    Widget::kind_in(&format!("labels-{index}"))
}

async fn create_in(rule: &str, state: &dyn State, kind: &Kind, id: &str, labels: &[(&str, &str)]) {
    let mut resource = Resource::new_in(kind.namespace(), id, Widget::default());
    for (k, v) in labels {
        resource.metadata.labels_mut().insert(s(k), s(v));
    }
    expect_ok(
        rule,
        "create",
        state
            .create(resource.into_shared(), CreateOptions::default())
            .await,
    );
}

async fn create_labelled(rule: &str, state: &dyn State, kind: &Kind) {
    for (id, labels) in LABELLED {
        create_in(rule, state, kind, id, labels).await;
    }
}

/// Ids of the `Created` events up to and including the one for `last`.
async fn created_until(rule: &str, watch: &mut cosi_core::Watch, last: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        match next_event(rule, watch).await {
            Event::Created { resource, .. } => {
                let id = resource.metadata().id().to_string();
                seen.push(id.clone());
                if id == last {
                    return seen;
                }
            }
            other => panic!("{rule}: only created events were expected, got {other:?}"),
        }
    }
}

/// Ids of a bootstrap's `Created` events, checking it ends with `Bootstrapped`.
async fn bootstrapped(rule: &str, watch: &mut cosi_core::Watch) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        match next_event(rule, watch).await {
            Event::Created { resource, .. } => seen.push(resource.metadata().id().to_string()),
            Event::Bootstrapped { .. } => return seen,
            other => panic!("{rule}: only a bootstrap was expected, got {other:?}"),
        }
    }
}

fn with_sentinel(selects: &[&str], sentinel: &str) -> Vec<String> {
    selects
        .iter()
        .map(|id| s(id))
        .chain([s(sentinel)])
        .collect()
}

/// `list` with a label filter returns exactly the matching resources, for every operator:
/// exists, equal, in, string lt/lte, numeric lt/lte with unit suffixes, each inverted (a
/// comparison on a missing or non-numeric value selects nothing even inverted), AND within a
/// query, OR across queries.
pub async fn label_operators_select_on_list(subject: &Subject) {
    const RULE: &str = "label_operators_select_on_list";
    let state = subject.state();
    for (index, case) in label_cases().into_iter().enumerate() {
        let kind = case_kind(index);
        create_labelled(RULE, state, &kind).await;
        let options = ListOptions {
            labels: case.queries,
            ids: None,
        };
        let listed = expect_ok(RULE, case.name, state.list(&kind, &options).await);
        assert_eq!(ids(&listed), case.selects, "{RULE}: {}", case.name);
    }
}

/// A label-filtered kind watch selects exactly what `list` does, for every operator: live
/// (created events of matching resources only) and in its bootstrap.
pub async fn label_operators_select_on_watch(subject: &Subject) {
    const RULE: &str = "label_operators_select_on_watch";
    let state = subject.state();
    for (index, case) in label_cases().into_iter().enumerate() {
        let kind = case_kind(index);
        let options = WatchKindOptions {
            labels: case.queries.clone(),
            ..WatchKindOptions::default()
        };
        let mut live = expect_ok(
            RULE,
            case.name,
            state.watch_kind(&kind, options.clone()).await,
        );
        create_labelled(RULE, state, &kind).await;
        create_in(RULE, state, &kind, "sentinel", case.sentinel).await;
        let expected = with_sentinel(case.selects, "sentinel");
        assert_eq!(
            created_until(RULE, &mut live, "sentinel").await,
            expected,
            "{RULE}: live, {}",
            case.name
        );

        let bootstrap = WatchKindOptions {
            bootstrap: true,
            ..options
        };
        let mut initial = expect_ok(RULE, case.name, state.watch_kind(&kind, bootstrap).await);
        assert_eq!(
            bootstrapped(RULE, &mut initial).await,
            expected,
            "{RULE}: bootstrap, {}",
            case.name
        );
    }
}

const IDS: [&str; 6] = ["eth0", "eth1", "eth10", "lo", "veth0", "wlan0"];

/// `list` with an id regex returns exactly the matching ids (anchored or not), sorted.
pub async fn id_regex_selects_on_list(subject: &Subject) {
    const RULE: &str = "id_regex_selects_on_list";
    let state = subject.state();
    let kind = Widget::kind();
    for id in IDS {
        create_in(RULE, state, &kind, id, &[]).await;
    }
    for (pattern, selects) in [
        ("^eth[0-9]+$", &["eth0", "eth1", "eth10"][..]),
        ("eth", &["eth0", "eth1", "eth10", "veth0"]),
        ("^(lo|wlan0)$", &["lo", "wlan0"]),
        ("^none$", &[]),
    ] {
        let options = ListOptions {
            labels: LabelQueries::default(),
            ids: Some(IdQuery::new(pattern).expect("the suite's patterns are valid")),
        };
        let listed = expect_ok(RULE, pattern, state.list(&kind, &options).await);
        assert_eq!(ids(&listed), selects, "{RULE}: pattern {pattern:?}");
    }
}

/// A kind watch with an id regex delivers changes of matching ids only (live) and bootstraps
/// only matching ids.
pub async fn id_regex_selects_on_watch(subject: &Subject) {
    const RULE: &str = "id_regex_selects_on_watch";
    let state = subject.state();
    let kind = Widget::kind();
    let options = WatchKindOptions {
        ids: Some(IdQuery::new("^eth[0-9]+$").expect("the suite's pattern is valid")),
        ..WatchKindOptions::default()
    };
    let mut live = expect_ok(
        RULE,
        "watch_kind",
        state.watch_kind(&kind, options.clone()).await,
    );
    for id in IDS {
        create_in(RULE, state, &kind, id, &[]).await;
    }
    // Changes to ids outside the filter must not be delivered.
    let lo = expect_ok(RULE, "get", state.get(&kind.pointer("lo")).await);
    expect_ok(
        RULE,
        "update",
        state
            .update(with_value(&lo, 1), UpdateOptions::default())
            .await,
    );
    expect_ok(
        RULE,
        "destroy",
        state
            .destroy(&kind.pointer("veth0"), Default::default())
            .await,
    );
    create_in(RULE, state, &kind, "eth99", &[]).await;
    assert_eq!(
        created_until(RULE, &mut live, "eth99").await,
        ["eth0", "eth1", "eth10", "eth99"],
        "{RULE}: live"
    );

    let bootstrap = WatchKindOptions {
        bootstrap: true,
        ..options
    };
    let mut initial = expect_ok(RULE, "watch_kind", state.watch_kind(&kind, bootstrap).await);
    assert_eq!(
        bootstrapped(RULE, &mut initial).await,
        ["eth0", "eth1", "eth10", "eth99"],
        "{RULE}: bootstrap"
    );
}
