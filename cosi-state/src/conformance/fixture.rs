//! What the rules share: the fixture resource types, constructors, and the guarded waits and
//! event summaries the watch rules compare.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use cosi_core::{
    CreateOptions, Error, Event, Kind, Pointer, Resource, ResourceSpec, SharedResource, State,
    Watch,
};
use serde::{Deserialize, Serialize};

use super::HISTORY_WINDOW;

/// How long the suite waits for an event or a task before declaring the backend stuck.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

/// The main fixture type of the suite: `Widgets.conformance.cosi.dev` in namespace
/// `conformance`.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct Widget {
    /// A value the rules change to make updates observable.
    pub value: u64,
}

impl ResourceSpec for Widget {
    const TYPE: &'static str = "Widgets.conformance.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "conformance";
}

/// A second fixture type: `Gadgets.conformance.cosi.dev`, used to check that kinds are separate,
/// that a typed read of the wrong type is an error, and that a spec no store can keep exactly
/// (a NaN float) is refused.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
pub struct Gadget {
    /// A name, so the spec is not shaped like [`Widget`]'s.
    pub name: String,
    /// A float, which JSON (the stores' and the wire's form) holds only when finite.
    pub ratio: f64,
}

impl ResourceSpec for Gadget {
    const TYPE: &'static str = "Gadgets.conformance.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "conformance";
}

/// The widget kind.
pub(crate) fn widgets() -> Kind {
    Widget::kind()
}

/// A pointer to widget `id`.
pub(crate) fn widget_pointer(id: &str) -> Pointer {
    widgets().pointer(id)
}

/// An unstored widget.
pub(crate) fn widget(id: &str, value: u64) -> Resource<Widget> {
    Resource::new(id, Widget { value })
}

/// An unstored widget with labels.
pub(crate) fn labelled_widget(id: &str, labels: &[(&str, &str)]) -> Resource<Widget> {
    let mut r = widget(id, 0);
    for (k, v) in labels {
        r.metadata.labels_mut().insert(k.to_string(), v.to_string());
    }
    r
}

/// Creates `resource` with `owner`, panicking (naming the rule) on failure.
pub(crate) async fn create_ok(
    state: &dyn State,
    rule: &str,
    resource: Resource<Widget>,
    owner: Option<&str>,
) -> SharedResource {
    let pointer = resource.metadata.pointer().clone();
    let options = CreateOptions {
        owner: owner.map(Arc::from),
    };
    state
        .create(resource.into_shared(), options)
        .await
        .unwrap_or_else(|e| panic!("{rule}: setup create of {pointer} failed: {e}"))
}

/// Unwraps the error of `result`, panicking (naming the rule and the step) if it succeeded.
pub(crate) fn expect_err<T: fmt::Debug>(rule: &str, step: &str, result: Result<T, Error>) -> Error {
    match result {
        Ok(v) => panic!("{rule}: {step}: expected an error, got Ok({v:?})"),
        Err(e) => e,
    }
}

/// Unwraps `result`, panicking (naming the rule and the step) on an error.
pub(crate) fn expect_ok<T>(rule: &str, step: &str, result: Result<T, Error>) -> T {
    result.unwrap_or_else(|e| panic!("{rule}: {step}: unexpected error: {e} ({e:?})"))
}

/// Awaits `future` for at most [`TIMEOUT`], panicking (naming the rule and the step) when it
/// takes longer.
pub(crate) async fn within<F: std::future::Future>(rule: &str, step: &str, future: F) -> F::Output {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .unwrap_or_else(|_| panic!("{rule}: {step}: nothing happened within {TIMEOUT:?}"))
}

/// The next event that is not a `Noop` (a `Noop` only moves the position, the rules are about
/// changes), panicking if none arrives within [`TIMEOUT`] or the watch ends.
pub(crate) async fn next_event(rule: &str, watch: &mut Watch) -> Event {
    loop {
        match within(rule, "waiting for the next watch event", watch.recv()).await {
            Some(Event::Noop { .. }) => continue,
            Some(event) => return event,
            None => panic!("{rule}: the watch ended while an event was expected"),
        }
    }
}

/// The events (not `Noop`s) up to and including the `occurrence`-th (from 1) that looks like
/// `last`. Reading up to a known final event rather than a count makes a lost event fail at once
/// as a mismatch instead of waiting for the timeout.
pub(crate) async fn events_through(
    rule: &str,
    watch: &mut Watch,
    last: &Seen,
    occurrence: usize,
) -> Vec<Event> {
    let mut events = Vec::new();
    let mut matched = 0;
    loop {
        let event = next_event(rule, watch).await;
        if seen(&event) == *last {
            matched += 1;
        }
        events.push(event);
        if matched == occurrence {
            return events;
        }
        if events.len() > 4 * HISTORY_WINDOW {
            panic!(
                "{rule}: {} events arrived without {last:?}: {:?}",
                events.len(),
                seen_all(&events)
            );
        }
    }
}

/// What the rules compare about an event: its type, the resource id and version, and whether
/// it is part of a catch-up.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub kind: &'static str,
    pub id: String,
    pub version: u64,
    pub compacted: bool,
}

impl fmt::Debug for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}@{}", self.kind, self.id, self.version)?;
        if self.compacted {
            f.write_str(" (compacted)")?;
        }
        Ok(())
    }
}

impl Seen {
    /// An exact (not compacted) event of `kind` about `id` at `version`.
    pub fn exact(kind: &'static str, id: &str, version: u64) -> Self {
        Seen {
            kind,
            id: id.to_string(),
            version,
            compacted: false,
        }
    }

    /// A compacted event (part of a catch-up) of `kind` about `id` at `version`.
    pub fn compacted(kind: &'static str, id: &str, version: u64) -> Self {
        Seen {
            compacted: true,
            ..Self::exact(kind, id, version)
        }
    }

    /// A `Created` event.
    pub fn created(id: &str, version: u64) -> Self {
        Self::exact("created", id, version)
    }

    /// An `Updated` event.
    pub fn updated(id: &str, version: u64) -> Self {
        Self::exact("updated", id, version)
    }

    /// A `Destroyed` event.
    pub fn destroyed(id: &str, version: u64) -> Self {
        Self::exact("destroyed", id, version)
    }

    /// A `Bootstrapped` marker.
    pub fn bootstrapped() -> Self {
        Self::exact("bootstrapped", "", 0)
    }
}

/// Summarises an event for comparison.
pub(crate) fn seen(event: &Event) -> Seen {
    match event.resource() {
        Some(r) => Seen {
            kind: event.type_name(),
            id: r.metadata().id().to_string(),
            version: r.metadata().version().get(),
            compacted: event.is_compacted(),
        },
        None => Seen::exact(event.type_name(), "", 0),
    }
}

/// Summarises events for comparison.
pub(crate) fn seen_all(events: &[Event]) -> Vec<Seen> {
    events.iter().map(seen).collect()
}

/// Checks that an `Updated` event carries the previous state at the previous version.
pub(crate) fn assert_updated_has_old(rule: &str, event: &Event) {
    if let Event::Updated {
        old,
        resource,
        compacted: false,
        ..
    } = event
    {
        let old = old
            .as_ref()
            .unwrap_or_else(|| panic!("{rule}: exact updated event without old state: {event:?}"));
        assert_eq!(
            (old.metadata().id(), old.metadata().version().get() + 1),
            (
                resource.metadata().id(),
                resource.metadata().version().get()
            ),
            "{rule}: updated event's old state must be the previous version of the same resource"
        );
    }
}

/// The ids of `resources`, in order.
pub(crate) fn ids(resources: &[SharedResource]) -> Vec<String> {
    resources
        .iter()
        .map(|r| r.metadata().id().to_string())
        .collect()
}

/// Reads events through the last of `expected` and asserts they are exactly `expected`;
/// returns them.
pub(crate) async fn expect_events(
    rule: &str,
    watch: &mut Watch,
    expected: &[Seen],
    what: &str,
) -> Vec<Event> {
    let last = expected
        .last()
        .expect("the suite always expects at least one event");
    let occurrence = expected.iter().filter(|s| *s == last).count();
    let events = events_through(rule, watch, last, occurrence).await;
    assert_eq!(seen_all(&events), expected, "{rule}: {what}");
    events
}
