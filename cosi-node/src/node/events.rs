//! [`NodeEvents`]: the node's event log, what an operator's `events` reads. It outlives the
//! node runtime: service events of every runtime (a restart in place starts a new supervisor)
//! and config events land in one ring, so an event stream keeps going across a restart.
//!
//! Bounded everywhere: the ring keeps the last [`NODE_EVENT_RING`] events; a reader follows
//! through a broadcast buffer of the same size and, when it falls further behind, is told how
//! many events it missed ([`NodeEventItem::Missed`]) instead of slowing down whoever pushes.
//!
//! The ring is in **time order**. Events reach it by different paths: a service event as the
//! supervisor reports it, a config event once its history entry is written — after the config
//! writes, by which time the services may already have reacted. A config event carries the time
//! the change took effect (before its writes), so it takes its place before those reactions.
//! Ids increase in the order events are recorded, so such an event has a larger id than the
//! events it is listed before; a reader that follows live receives events as they are recorded.
//!
//! This module only stores and hands out events; who feeds it is [`super::runtime`]'s and
//! [`super::lifecycle`]'s business.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use tokio::sync::broadcast;

use crate::services::ServiceState;

/// How many events the node keeps, and how far a reader may fall behind before it misses some.
pub const NODE_EVENT_RING: usize = 1024;

/// What an event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEventKind {
    /// A service changed state (or health).
    Service {
        /// The service.
        service: String,
        /// The state it is in after the event.
        state: ServiceState,
        /// Why, in words.
        message: String,
    },
    /// The machine config changed (one `ConfigHistory` entry).
    Config {
        /// How: `no-reboot`, `reboot`, `staged`, `try`, or `rollback` and `start` for what the
        /// node did by itself.
        mode: String,
        /// Who.
        actor: String,
        /// The version the change made current: the persisted config's for `staged` and
        /// `reboot` (the active one follows at the next start, with its own `start` event),
        /// the active config's otherwise.
        version: Option<u64>,
        /// One line: the size of the change and the changed fields.
        summary: String,
    },
}

/// One event of the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    /// Increasing from 1 in the life of the daemon process, in the order events are recorded.
    pub id: u64,
    /// When it happened.
    pub time: SystemTime,
    /// What happened.
    pub kind: NodeEventKind,
}

/// What a reader receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEventItem {
    /// An event.
    Event(Arc<NodeEvent>),
    /// This many events went by while the reader was too slow.
    Missed(u64),
}

#[derive(Debug, Default)]
struct Ring {
    next_id: u64,
    events: VecDeque<Arc<NodeEvent>>,
}

/// The node's event log. Cheap to clone; clones share the log.
///
/// ```
/// use std::time::SystemTime;
/// use cosi_node::node::{NodeEventItem, NodeEventKind, NodeEvents};
/// use cosi_node::services::ServiceState;
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let events = NodeEvents::default();
/// let service = |message: &str| NodeEventKind::Service {
///     service: "kubelet".into(),
///     state: ServiceState::Running,
///     message: message.into(),
/// };
/// events.push(SystemTime::now(), service("one"));
/// events.push(SystemTime::now(), service("two"));
/// // The last event, then live ones.
/// let mut reader = events.read(1);
/// events.push(SystemTime::now(), service("three"));
/// for (id, message) in [(2, "two"), (3, "three")] {
///     let Some(NodeEventItem::Event(event)) = reader.next().await else { panic!() };
///     assert_eq!((event.id, event.kind.clone()), (id, service(message)));
/// }
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct NodeEvents {
    ring: Arc<Mutex<Ring>>,
    live: broadcast::Sender<Arc<NodeEvent>>,
}

impl Default for NodeEvents {
    fn default() -> Self {
        NodeEvents {
            ring: Arc::default(),
            live: broadcast::channel(NODE_EVENT_RING).0,
        }
    }
}

impl NodeEvents {
    fn ring(&self) -> MutexGuard<'_, Ring> {
        // Every critical section is a push or a copy: a poisoned lock holds a whole ring.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records an event at its place by `time` (after every event as old or older); returns it
    /// as readers see it.
    pub fn push(&self, time: SystemTime, kind: NodeEventKind) -> Arc<NodeEvent> {
        let mut ring = self.ring();
        ring.next_id += 1;
        let event = Arc::new(NodeEvent {
            id: ring.next_id,
            time,
            kind,
        });
        if ring.events.len() == NODE_EVENT_RING {
            ring.events.pop_front();
        }
        // Late events are rare and late by little: look for their place from the back.
        let at = ring
            .events
            .iter()
            .rposition(|e| e.time <= time)
            .map_or(0, |before| before + 1);
        ring.events.insert(at, event.clone());
        // Sent under the ring's lock, so a reader that copies the ring and subscribes under
        // it sees every event exactly once. No receiver is not an error.
        let _ = self.live.send(event.clone());
        event
    }

    /// A reader of the newest `tail` events (`usize::MAX`: every event kept), then live ones.
    pub fn read(&self, tail: usize) -> NodeEventReader {
        let ring = self.ring();
        let skip = ring.events.len().saturating_sub(tail);
        NodeEventReader {
            backlog: ring.events.iter().skip(skip).cloned().collect(),
            live: self.live.subscribe(),
        }
    }
}

/// Reads events: a tail, then live events. See [`NodeEvents::read`].
#[derive(Debug)]
pub struct NodeEventReader {
    backlog: VecDeque<Arc<NodeEvent>>,
    live: broadcast::Receiver<Arc<NodeEvent>>,
}

impl NodeEventReader {
    /// The next item; `None` once the log is gone.
    pub async fn next(&mut self) -> Option<NodeEventItem> {
        if let Some(event) = self.backlog.pop_front() {
            return Some(NodeEventItem::Event(event));
        }
        match self.live.recv().await {
            Ok(event) => Some(NodeEventItem::Event(event)),
            Err(broadcast::error::RecvError::Lagged(n)) => Some(NodeEventItem::Missed(n)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// The reader as a stream (for a server-streaming API).
    pub fn into_stream(self) -> impl futures::Stream<Item = NodeEventItem> + Send + 'static {
        futures::stream::unfold(self, |mut reader| async move {
            let item = reader.next().await?;
            Some((item, reader))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(n: u64) -> NodeEventKind {
        NodeEventKind::Config {
            mode: "no-reboot".into(),
            actor: "admin".into(),
            version: Some(n),
            summary: String::new(),
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_events() {
        let events = NodeEvents::default();
        for n in 0..(NODE_EVENT_RING as u64 + 10) {
            events.push(SystemTime::UNIX_EPOCH, config(n));
        }
        let ring = events.ring();
        assert_eq!(ring.events.len(), NODE_EVENT_RING);
        assert_eq!(ring.events.front().unwrap().id, 11);
        assert_eq!(ring.events.back().unwrap().id, NODE_EVENT_RING as u64 + 10);
    }

    #[tokio::test]
    async fn a_late_event_takes_its_place_by_time_in_the_tail() {
        let events = NodeEvents::default();
        let at = |ms| SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(ms);
        events.push(at(10), config(1));
        events.push(at(30), config(3));
        events.push(at(30), config(4));
        // Recorded last, but it happened between the first and the others.
        events.push(at(20), config(2));
        let mut reader = events.read(usize::MAX);
        let mut read = Vec::new();
        for _ in 0..4 {
            let Some(NodeEventItem::Event(event)) = reader.next().await else {
                panic!("four events are kept")
            };
            read.push((event.id, event.kind.clone()));
        }
        assert_eq!(
            read,
            [
                (1, config(1)),
                (4, config(2)),
                (2, config(3)),
                (3, config(4))
            ]
        );
    }

    #[tokio::test]
    async fn a_reader_that_falls_behind_is_told_how_many_it_missed() {
        let events = NodeEvents::default();
        let mut reader = events.read(0);
        for n in 0..(NODE_EVENT_RING as u64 + 5) {
            events.push(SystemTime::UNIX_EPOCH, config(n));
        }
        assert_eq!(reader.next().await, Some(NodeEventItem::Missed(5)));
        let Some(NodeEventItem::Event(next)) = reader.next().await else {
            panic!("an event follows the gap")
        };
        assert_eq!(next.id, 6);
    }

    #[tokio::test]
    async fn a_full_tail_reads_every_event_kept_then_live_ones() {
        let events = NodeEvents::default();
        events.push(SystemTime::UNIX_EPOCH, config(1));
        let mut reader = events.read(usize::MAX);
        events.push(SystemTime::UNIX_EPOCH, config(2));
        let mut ids = Vec::new();
        for _ in 0..2 {
            if let Some(NodeEventItem::Event(e)) = reader.next().await {
                ids.push(e.id);
            }
        }
        assert_eq!(ids, [1, 2]);
    }
}
