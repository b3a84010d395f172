//! The backend conformance suite run against the in-memory backend.

use std::sync::Arc;

use cosi_state::conformance::{Subject, HISTORY_WINDOW, MIN_DESTROY_MARKERS};
use cosi_state::{MemoryOptions, MemoryState};

async fn memory() -> Subject {
    let options = MemoryOptions {
        history: HISTORY_WINDOW,
        max_destroy_markers: MIN_DESTROY_MARKERS,
    };
    Subject::new(Arc::new(MemoryState::new(options)))
}

cosi_state::conformance_tests!(memory);
