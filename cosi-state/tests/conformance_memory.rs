//! The backend conformance suite run against the in-memory backend, and a check of the suite
//! itself: backends with one rule broken on purpose must fail the rule that covers it.

use std::sync::Arc;

use cosi_state::conformance::{Subject, HISTORY_WINDOW, MIN_DESTROY_MARKERS};
use cosi_state::{MemoryOptions, MemoryState};

fn memory_state() -> MemoryState {
    MemoryState::new(MemoryOptions {
        history: HISTORY_WINDOW,
        max_destroy_markers: MIN_DESTROY_MARKERS,
        ..MemoryOptions::default()
    })
}

async fn memory() -> Subject {
    Subject::new(Arc::new(memory_state()))
}

cosi_state::conformance_tests!(memory);

/// The suite must bite: each broken backend here violates exactly one rule, and the rule's test
/// (and the model test, for write rules) must fail on it.
mod suite_detects_broken_backends {
    use std::sync::Arc;

    use async_trait::async_trait;
    use cosi_core::{
        make_mut, Call, CreateOptions, DestroyOptions, Event, EventSource, Kind, LabelQueries,
        ListOptions, Pointer, SharedResource, State, UpdateOptions, Watch, WatchKindOptions,
        WatchOptions,
    };
    use cosi_state::conformance::{self, Subject};

    #[derive(Clone, Copy, PartialEq)]
    enum Bug {
        UpdateIgnoresOwner,
        UpdateIgnoresVersion,
        UpdateIgnoresPhase,
        ListUnsorted,
        ListIgnoresLabels,
        DestroyIgnoresFinalizers,
        WatchDropsUpdates,
        WatchIgnoresResumePosition,
        WatchIgnoresLabels,
        WatchIgnoresStrict,
        ListIgnoresIds,
    }

    /// The memory backend with one rule broken.
    struct Broken {
        inner: super::MemoryState,
        bug: Bug,
    }

    async fn broken(bug: Bug) -> Subject {
        Subject::new(Arc::new(Broken {
            inner: super::memory_state(),
            bug,
        }))
    }

    /// Passes every event except updates through.
    struct WithoutUpdates(Watch);

    #[async_trait]
    impl EventSource for WithoutUpdates {
        async fn next(&mut self) -> Option<Event> {
            loop {
                match self.0.recv().await? {
                    Event::Updated { .. } => continue,
                    event => return Some(event),
                }
            }
        }
    }

    impl State for Broken {
        fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
            self.inner.get(pointer)
        }

        fn list<'a>(
            &'a self,
            kind: &'a Kind,
            options: &'a ListOptions,
        ) -> Call<'a, Vec<SharedResource>> {
            Call::pending(async move {
                let mut options = options.clone();
                if self.bug == Bug::ListIgnoresLabels {
                    options.labels = LabelQueries::default();
                }
                if self.bug == Bug::ListIgnoresIds {
                    options.ids = None;
                }
                let mut listed = self.inner.list(kind, &options).await?;
                if self.bug == Bug::ListUnsorted {
                    listed.reverse();
                }
                Ok(listed)
            })
        }

        fn create<'a>(
            &'a self,
            resource: SharedResource,
            options: CreateOptions,
        ) -> Call<'a, SharedResource> {
            self.inner.create(resource, options)
        }

        fn update<'a>(
            &'a self,
            mut resource: SharedResource,
            mut options: UpdateOptions,
        ) -> Call<'a, SharedResource> {
            Call::pending(async move {
                let stored = self.inner.get(resource.metadata().pointer()).await;
                match (self.bug, stored) {
                    (Bug::UpdateIgnoresOwner, Ok(stored)) => {
                        options.owner = stored.metadata().shared_owner().cloned();
                    }
                    (Bug::UpdateIgnoresVersion, Ok(stored)) => {
                        let version = stored.metadata().version();
                        make_mut(&mut resource).metadata_mut().set_version(version);
                    }
                    (Bug::UpdateIgnoresPhase, _) => options.expected_phase = None,
                    _ => {}
                }
                self.inner.update(resource, options).await
            })
        }

        fn destroy<'a>(&'a self, pointer: &'a Pointer, options: DestroyOptions) -> Call<'a, ()> {
            Call::pending(async move {
                if self.bug == Bug::DestroyIgnoresFinalizers {
                    if let Ok(stored) = self.inner.get(pointer).await {
                        if stored.metadata().owner() == options.owner.as_deref() {
                            let mut cleared = stored.clone();
                            make_mut(&mut cleared)
                                .metadata_mut()
                                .finalizers_mut()
                                .clear();
                            let any_phase = UpdateOptions {
                                owner: options.owner.clone(),
                                expected_phase: None,
                            };
                            self.inner.update(cleared, any_phase).await?;
                        }
                    }
                }
                self.inner.destroy(pointer, options).await
            })
        }

        fn watch<'a>(&'a self, pointer: &'a Pointer, options: WatchOptions) -> Call<'a, Watch> {
            Call::pending(async move {
                let watch = self.inner.watch(pointer, options).await?;
                Ok(match self.bug {
                    Bug::WatchDropsUpdates => Watch::new(WithoutUpdates(watch)),
                    _ => watch,
                })
            })
        }

        fn watch_kind<'a>(
            &'a self,
            kind: &'a Kind,
            mut options: WatchKindOptions,
        ) -> Call<'a, Watch> {
            Call::pending(async move {
                match self.bug {
                    Bug::WatchIgnoresResumePosition => options.since = None,
                    Bug::WatchIgnoresLabels => options.labels = LabelQueries::default(),
                    Bug::WatchIgnoresStrict => options.strict = false,
                    _ => {}
                }
                let watch = self.inner.watch_kind(kind, options).await?;
                Ok(match self.bug {
                    Bug::WatchDropsUpdates => Watch::new(WithoutUpdates(watch)),
                    _ => watch,
                })
            })
        }
    }

    /// Checks that a rule's failure is a panic whose message names the rule.
    fn assert_names(panic: Box<dyn std::any::Any + Send>, rule: &str) {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        assert!(
            message.contains(rule),
            "the failure must name the rule {rule}: {message}"
        );
    }

    macro_rules! detects {
        ($($test:ident: $bug:ident fails $rule:ident;)*) => {
            $(
                #[tokio::test]
                async fn $test() {
                    let subject = broken(Bug::$bug).await;
                    let run = tokio::spawn(async move { conformance::$rule(&subject).await });
                    let failure = run.await.expect_err("the rule must fail on this backend");
                    assert_names(failure.into_panic(), stringify!($rule));
                }
            )*
        };
    }

    detects! {
        update_without_owner_check: UpdateIgnoresOwner fails update_checks_owner;
        update_without_version_check: UpdateIgnoresVersion fails update_with_stale_version_conflicts;
        update_without_future_version_check: UpdateIgnoresVersion fails update_with_future_version_conflicts;
        update_without_phase_check: UpdateIgnoresPhase
            fails update_of_tearing_down_resource_is_phase_conflict_unless_expected;
        unsorted_list: ListUnsorted fails list_is_sorted_by_id;
        list_without_label_filter: ListIgnoresLabels fails label_operators_select_on_list;
        destroy_without_finalizer_check: DestroyIgnoresFinalizers fails destroy_with_finalizers_conflicts;
        watch_losing_updates: WatchDropsUpdates fails single_watch_starts_with_current_state;
        kind_watch_losing_updates: WatchDropsUpdates fails kind_watch_tails_recent_events;
        watch_without_resume: WatchIgnoresResumePosition fails kind_watch_resumes_after_every_bookmark;
        watch_without_label_filter: WatchIgnoresLabels fails label_operators_select_on_watch;
        watch_without_strict_mode: WatchIgnoresStrict fails strict_watcher_behind_window_gets_overrun_error;
        list_without_id_filter: ListIgnoresIds fails id_regex_selects_on_list;
    }

    macro_rules! model_detects {
        ($($test:ident: $bug:ident;)*) => {
            $(
                #[test]
                fn $test() {
                    let run = std::panic::catch_unwind(|| {
                        conformance::model_agrees_with_backend(|| broken(Bug::$bug))
                    });
                    let failure = run.expect_err("the model test must fail on this backend");
                    assert_names(failure, "model_agrees_with_backend");
                }
            )*
        };
    }

    model_detects! {
        model_detects_update_without_owner_check: UpdateIgnoresOwner;
        model_detects_update_without_version_check: UpdateIgnoresVersion;
        model_detects_update_without_phase_check: UpdateIgnoresPhase;
        model_detects_destroy_without_finalizer_check: DestroyIgnoresFinalizers;
        model_detects_lost_events: WatchDropsUpdates;
    }
}
