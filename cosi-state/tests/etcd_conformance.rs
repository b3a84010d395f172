//! The backend conformance suite run against the etcd backend, on a real etcd server (one per
//! test binary, a fresh key prefix per test).
#![cfg(all(feature = "etcd", feature = "conformance"))]

mod etcd_common;

use std::sync::Arc;

use cosi_state::conformance::{Gadget, Subject, Widget, HISTORY_WINDOW};

async fn etcd() -> Subject {
    // A buffer of one event: a paused watcher is behind after the window, as the suite expects.
    let options = etcd_common::options("conformance")
        .with_history_window(HISTORY_WINDOW)
        .with_watch_buffer(1);
    let registry = cosi_core::Registry::new()
        .with::<Widget>()
        .and_then(|r| r.with::<Gadget>())
        .expect("the fixture types register");
    let state = etcd_common::connect_with(options, registry).await;
    Subject::new(Arc::new(state))
}

cosi_state::conformance_tests!(etcd);
