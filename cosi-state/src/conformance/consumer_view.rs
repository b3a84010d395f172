//! [`ConsumerView`]: what the consumer of a kind watch holds, built only from its events, the
//! way a consumer that trusts the contract builds it — and a check, on every event, that the
//! watch kept the contract: events are relative to what the consumer holds, whether exact or
//! part of a catch-up, filtered or not.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use cosi_core::{Event, SharedResource, Watch};

/// The resources a watch's consumer holds, by id.
#[derive(Debug, Default)]
pub(crate) struct ConsumerView {
    resources: BTreeMap<String, SharedResource>,
    /// Whether a catch-up (a compacted event) or a resync was received.
    caught_up: bool,
}

impl ConsumerView {
    /// Applies one event, or says which rule it breaks: a `Created` of a resource the view
    /// holds, an `Updated` or `Destroyed` of one it does not, an exact `Updated` whose old
    /// state is not the held one, an error.
    pub(crate) fn apply(&mut self, event: &Event) -> Result<(), String> {
        self.caught_up |= event.is_compacted();
        let id = |r: &SharedResource| r.metadata().id().to_string();
        match event {
            Event::Created { resource, .. } => {
                if self
                    .resources
                    .insert(id(resource), resource.clone())
                    .is_some()
                {
                    return Err(format!(
                        "created {}, which it holds: {event:?}",
                        id(resource)
                    ));
                }
            }
            Event::Updated {
                old,
                resource,
                compacted,
                ..
            } => {
                let Some(held) = self.resources.insert(id(resource), resource.clone()) else {
                    return Err(format!(
                        "updated {}, which it never held: {event:?}",
                        id(resource)
                    ));
                };
                let old_version = old.as_ref().map(|o| o.metadata().version());
                if !compacted && old_version != Some(held.metadata().version()) {
                    return Err(format!(
                        "exact update of {} whose old state is not the held version {}: {event:?}",
                        id(resource),
                        held.metadata().version()
                    ));
                }
            }
            Event::Destroyed { resource, .. } => {
                if self.resources.remove(resource.metadata().id()).is_none() {
                    return Err(format!(
                        "destroyed {}, which it never held: {event:?}",
                        id(resource)
                    ));
                }
            }
            Event::Resync { .. } => {
                self.resources.clear();
                self.caught_up = true;
            }
            Event::Bootstrapped { .. } | Event::Noop { .. } => {}
            other => return Err(format!("unexpected event {other:?}")),
        }
        Ok(())
    }

    /// The held resources, in id order.
    pub(crate) fn resources(&self) -> impl Iterator<Item = &SharedResource> {
        self.resources.values()
    }

    /// Whether the watch had to catch up (or resync) at least once.
    pub(crate) fn caught_up(&self) -> bool {
        self.caught_up
    }
}

/// The events `watch` has ready now, without waiting for more: polled once each, so this never
/// blocks and never sleeps (a watch's `recv` is cancellation-safe).
pub(crate) fn ready_events(watch: &mut Watch) -> Vec<Event> {
    let mut events = Vec::new();
    let mut context = Context::from_waker(Waker::noop());
    loop {
        let poll = pin!(watch.recv()).poll(&mut context);
        match poll {
            Poll::Ready(Some(event)) => events.push(event),
            Poll::Ready(None) | Poll::Pending => return events,
        }
    }
}
