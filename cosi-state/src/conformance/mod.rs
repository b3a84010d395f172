//! The backend conformance suite: every rule of the [`State`] contract (DESIGN.md sections 3
//! and 4, `cosi_core::state`) as one public async function per rule, a model-based property test,
//! and [`conformance_tests!`](crate::conformance_tests), which turns them into one test per rule
//! for a backend.
//!
//! The suite owns its fixture resource types ([`Widget`], [`Gadget`]) and reaches the backend only
//! through [`State`] and the derived helpers of [`cosi_core::StateExt`], so it runs unchanged
//! against the in-memory, disk and etcd backends.
//!
//! # Adopting the suite
//!
//! A backend adopts the suite in three lines' worth of code:
//!
//! 1. a `[[test]]` entry in its crate's `Cargo.toml` with `required-features = ["conformance"]`;
//! 2. in that test file, an async factory returning a fresh, empty [`Subject`] per call;
//! 3. `cosi_state::conformance_tests!(factory);` — one `#[tokio::test]` per rule plus the
//!    property test.
//!
//! ```
//! use std::sync::Arc;
//! use cosi_state::conformance::{Subject, HISTORY_WINDOW, MIN_DESTROY_MARKERS};
//! use cosi_state::{MemoryOptions, MemoryState};
//!
//! async fn memory() -> Subject {
//!     let options = MemoryOptions {
//!         history: HISTORY_WINDOW,
//!         max_destroy_markers: MIN_DESTROY_MARKERS,
//!         ..MemoryOptions::default()
//!     };
//!     Subject::new(Arc::new(MemoryState::new(options)))
//! }
//! cosi_state::conformance_tests!(memory);
//! # fn main() {}
//! ```
//!
//! A backend that lives in a temporary directory or under an etcd key prefix keeps it alive
//! (and cleans it up on drop) with [`Subject::with_guard`]. The rule functions are public too,
//! so a backend can also call one directly (`conformance::update_checks_owner(&subject).await`).
//!
//! Requirements on the backend under test:
//! - its per-kind exact history window holds at most [`HISTORY_WINDOW`] events (the catch-up
//!   rules write past it on purpose), keeps every event a live watcher has not read up to that
//!   limit, and keeps at least the last 8 events even when no watcher needs them (the tail and
//!   resume rules replay up to 8 events to a watch opened after them);
//! - it keeps up to [`MIN_DESTROY_MARKERS`] destroy markers per kind while a live watcher may
//!   need them, and the newest few otherwise, so that a watcher that fell behind gets a
//!   compacted catch-up rather than a full resync;
//! - it hands back the fixture types ([`Widget`], [`Gadget`]) as their Rust types, because
//!   typed access is part of the contract (a backend that decodes from bytes registers them).
//!
//! The calling crate needs `tokio` (features `macros`, `rt-multi-thread`) as a dependency: the
//! generated tests are `#[tokio::test]`s. The property test runs `PROPTEST_CASES` cases
//! (default [`DEFAULT_MODEL_CASES`]). No rule sleeps: every wait for an event or a task is
//! bounded by a 10 s timeout, so a broken backend fails instead of hanging.
//!
//! Every rule function panics with a message naming the rule and what differed.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use cosi_core::State;

mod concurrency;
mod consumer_view;
mod crud;
mod filtered_bookmarks;
mod filtered_catch_up;
mod fixture;
mod lifecycle;
mod model;
mod query;

mod watch;

pub use concurrency::*;
pub use crud::*;
pub use filtered_bookmarks::*;
pub use filtered_catch_up::*;
pub use fixture::{Gadget, Widget};
pub use lifecycle::*;
pub use model::{model_agrees_with_backend, DEFAULT_MODEL_CASES};
pub use query::*;
pub use watch::*;

/// The most events per kind the exact history window of a backend under test holds.
pub const HISTORY_WINDOW: usize = 32;

/// The destroy markers per kind a backend under test must be able to keep for a live watcher.
pub const MIN_DESTROY_MARKERS: usize = 16;

/// A backend under test: the state, plus whatever must stay alive as long as it is used (a
/// temporary directory, an etcd key prefix that is cleaned up on drop).
pub struct Subject {
    /// The backend, fresh and empty.
    pub state: Arc<dyn State>,
    // Declared after `state` so that the backend is dropped before what it lives in.
    guard: Option<Box<dyn Any + Send + Sync>>,
}

impl Subject {
    /// A subject with nothing to keep alive.
    pub fn new(state: Arc<dyn State>) -> Self {
        Subject { state, guard: None }
    }

    /// Keeps `guard` alive as long as the subject (and drops it after the state).
    pub fn with_guard(mut self, guard: impl Send + Sync + 'static) -> Self {
        self.guard = Some(Box::new(guard));
        self
    }

    /// The backend.
    pub fn state(&self) -> &dyn State {
        &*self.state
    }
}

impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subject")
            .field("guarded", &self.guard.is_some())
            .finish_non_exhaustive()
    }
}

/// Generates one test per conformance rule for a backend. `$factory` is an async function (or a
/// closure returning a future) that yields a fresh, empty [`Subject`] each time it is called.
///
/// See the [module docs](crate::conformance) for an example.
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::conformance_tests!(@rules $factory, [::tokio::test];
            create_get_list_destroy,
            a_long_run_of_calls_answers_every_call,
            list_is_sorted_by_id,
            create_of_existing_resource_conflicts,
            update_of_missing_resource_is_not_found,
            update_with_stale_version_conflicts,
            update_with_future_version_conflicts,
            update_of_tearing_down_resource_is_phase_conflict_unless_expected,
            update_checks_owner,
            teardown_checks_owner,
            destroy_checks_owner,
            update_cannot_change_owner,
            timestamps_are_set_by_the_store,
            typed_downcast_mismatch_is_an_error,
            a_spec_no_store_can_keep_exactly_is_refused,
            finalizers_are_changed_without_owner_in_any_phase,
            destroy_with_finalizers_conflicts,
            teardown_is_idempotent_and_ready_only_without_finalizers,
            modify_creates_updates_and_skips_unchanged,
            teardown_and_destroy_completes_when_another_task_destroys,
            single_watch_starts_with_tombstone_for_missing_resource,
            single_watch_starts_with_current_state,
            kind_watch_bootstraps_contents_in_id_order,
            kind_watch_tails_recent_events,
            kind_watch_resumes_after_every_bookmark,
            kind_watch_resumes_after_bootstrap_bookmark,
            kind_watch_refuses_a_bookmark_it_did_not_issue,
            label_filtered_kind_watch_turns_transitions_into_created_and_destroyed,
            aggregated_watch_delivers_same_events_in_batches,
            shared_batch_watch_delivers_same_events,
            label_operators_select_on_list,
            label_operators_select_on_watch,
            id_regex_selects_on_list,
            id_regex_selects_on_watch,
            watcher_behind_window_receives_compacted_catch_up,
            watch_resumed_from_bookmark_behind_window_converges,
            strict_watcher_behind_window_gets_overrun_error,
            single_watch_behind_window_catches_up_to_latest_state,
            strict_single_watch_behind_window_gets_overrun_error,
            single_watch_behind_window_learns_its_resource_was_destroyed,
            label_filtered_watch_resumes_from_its_last_bookmark_after_skipped_changes,
            id_filtered_watch_resumes_from_its_last_bookmark_after_skipped_changes,
            lagging_filtered_watch_gets_a_resource_that_entered_as_created,
            lagging_filtered_watch_gets_a_resource_that_left_as_destroyed,
            lagging_filtered_watch_gets_a_held_resource_destroyed_meanwhile_as_destroyed,
            lagging_filtered_watch_gets_an_update_of_a_held_resource_as_updated,
            lagging_filtered_watch_hears_nothing_of_resources_it_never_saw,
            lagging_filtered_watch_builds_a_view_equal_to_the_matching_contents
        );
        $crate::conformance_tests!(@rules $factory,
            [::tokio::test(flavor = "multi_thread", worker_threads = 2)];
            concurrent_finalizer_changes_converge,
            concurrent_modifies_lose_no_update,
            concurrent_creates_one_succeeds_rest_already_exist,
            concurrent_writers_produce_one_total_order,
            teardown_and_destroy_completes_when_last_finalizer_is_removed,
            concurrent_destroys_one_succeeds_rest_not_found
        );
        #[test]
        fn model_agrees_with_backend() {
            $crate::conformance::model_agrees_with_backend(|| ($factory)());
        }
    };
    (@rules $factory:expr, [$attr:meta]; $($rule:ident),* $(,)?) => {
        $(
            #[$attr]
            async fn $rule() {
                let subject: $crate::conformance::Subject = ($factory)().await;
                $crate::conformance::$rule(&subject).await;
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    /// A rule function left out of `conformance_tests!` would silently never run for any backend.
    #[test]
    fn every_rule_function_is_generated_by_the_macro() {
        let this = include_str!("mod.rs");
        let start = this
            .find("macro_rules! conformance_tests")
            .expect("the macro is defined in this file");
        let generated: Vec<&str> = this[start..]
            .lines()
            .map(|l| l.trim().trim_end_matches(','))
            .collect();
        let rule_files = [
            include_str!("concurrency.rs"),
            include_str!("crud.rs"),
            include_str!("filtered_bookmarks.rs"),
            include_str!("filtered_catch_up.rs"),
            include_str!("lifecycle.rs"),
            include_str!("query.rs"),
            include_str!("watch.rs"),
        ];
        let mut rules = 0;
        for line in rule_files.iter().flat_map(|f| f.lines()) {
            if let Some(rest) = line.strip_prefix("pub async fn ") {
                let name = rest.split('(').next().unwrap_or(rest);
                assert!(
                    generated.contains(&name),
                    "rule {name} is missing from conformance_tests!"
                );
                rules += 1;
            }
        }
        assert!(rules >= 40, "only {rules} rule functions found");
    }
}
