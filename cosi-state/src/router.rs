//! [`NamespaceRouter`]: one [`State`] made of a backend per namespace (e.g. `config` on disk,
//! `runtime` in memory), with an optional fallback for every other namespace.
//!
//! Every call goes to the backend of the namespace it names (a resource's, a pointer's or a
//! kind's); the router keeps no state of its own, so each backend's rules and watch semantics
//! hold unchanged.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use cosi_core::{
    Call, CreateOptions, DestroyOptions, Error, Kind, ListOptions, Pointer, Result, SharedResource,
    State, UpdateOptions, Watch, WatchKindOptions, WatchOptions,
};

/// Routes each namespace to its own backend.
///
/// ```
/// use std::sync::Arc;
/// use cosi_core::{Kind, ListOptions, State};
/// use cosi_state::{MemoryState, NamespaceRouter};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let config: Arc<dyn State> = Arc::new(MemoryState::default());
/// let router = NamespaceRouter::new([("config", config)], None).unwrap();
/// let kind = Kind::new("runtime", "Services.runtime.cosi.dev");
/// let err = router.list(&kind, &ListOptions::default()).await.unwrap_err();
/// assert!(err.to_string().contains("\"runtime\""));
/// # });
/// ```
pub struct NamespaceRouter {
    routes: HashMap<String, Arc<dyn State>>,
    fallback: Option<Arc<dyn State>>,
}

impl NamespaceRouter {
    /// A router sending each listed namespace to its backend, and every other namespace to
    /// `fallback` (or failing with an invalid-argument error naming it, if there is none).
    /// A namespace listed twice, or an empty one, is an error.
    pub fn new<N: Into<String>>(
        routes: impl IntoIterator<Item = (N, Arc<dyn State>)>,
        fallback: Option<Arc<dyn State>>,
    ) -> Result<Self> {
        let mut map = HashMap::new();
        for (namespace, backend) in routes {
            let namespace = namespace.into();
            if namespace.is_empty() {
                return Err(Error::invalid(
                    "namespace router",
                    "routes",
                    "an empty namespace cannot be routed",
                ));
            }
            if map.insert(namespace.clone(), backend).is_some() {
                return Err(Error::invalid(
                    "namespace router",
                    "routes",
                    format!("namespace {namespace:?} is routed twice"),
                ));
            }
        }
        Ok(NamespaceRouter {
            routes: map,
            fallback,
        })
    }

    /// The backend serving `namespace`; `subject` names what is being accessed in the error.
    fn backend(&self, namespace: &str, subject: &dyn fmt::Display) -> Result<&dyn State> {
        if let Some(backend) = self.routes.get(namespace).or(self.fallback.as_ref()) {
            return Ok(&**backend);
        }
        let mut routed: Vec<&str> = self.routes.keys().map(String::as_str).collect();
        routed.sort_unstable();
        Err(Error::invalid(
            subject.to_string(),
            "namespace",
            format!(
                "no backend serves namespace {namespace:?} (routed: {}; no fallback)",
                routed.join(", ")
            ),
        ))
    }
}

impl fmt::Debug for NamespaceRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut routed: Vec<&str> = self.routes.keys().map(String::as_str).collect();
        routed.sort_unstable();
        f.debug_struct("NamespaceRouter")
            .field("routes", &routed)
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl State for NamespaceRouter {
    fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
        Call::after(self.backend(pointer.namespace(), pointer), |backend| {
            backend.get(pointer)
        })
    }

    fn list<'a>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> Call<'a, Vec<SharedResource>> {
        Call::after(self.backend(kind.namespace(), kind), |backend| {
            backend.list(kind, options)
        })
    }

    fn create(&self, resource: SharedResource, options: CreateOptions) -> Call<'_, SharedResource> {
        let pointer = resource.metadata().pointer();
        Call::after(self.backend(pointer.namespace(), pointer), |backend| {
            backend.create(resource, options)
        })
    }

    fn update(&self, resource: SharedResource, options: UpdateOptions) -> Call<'_, SharedResource> {
        let pointer = resource.metadata().pointer();
        Call::after(self.backend(pointer.namespace(), pointer), |backend| {
            backend.update(resource, options)
        })
    }

    fn destroy<'a>(&'a self, pointer: &'a Pointer, options: DestroyOptions) -> Call<'a, ()> {
        Call::after(self.backend(pointer.namespace(), pointer), |backend| {
            backend.destroy(pointer, options)
        })
    }

    fn watch<'a>(&'a self, pointer: &'a Pointer, options: WatchOptions) -> Call<'a, Watch> {
        Call::after(self.backend(pointer.namespace(), pointer), |backend| {
            backend.watch(pointer, options)
        })
    }

    fn watch_kind<'a>(&'a self, kind: &'a Kind, options: WatchKindOptions) -> Call<'a, Watch> {
        Call::after(self.backend(kind.namespace(), kind), |backend| {
            backend.watch_kind(kind, options)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cosi_core::{DynamicResource, Event, Metadata};

    use super::*;
    use crate::MemoryState;

    fn resource(namespace: &str, id: &str) -> SharedResource {
        Arc::new(DynamicResource {
            metadata: Metadata::new(Pointer::new(namespace, "Things.test.cosi.dev", id)),
            spec: serde_json::json!({ "n": 1 }),
        })
    }

    fn kind(namespace: &str) -> Kind {
        Kind::new(namespace, "Things.test.cosi.dev")
    }

    fn backends() -> (Arc<MemoryState>, Arc<MemoryState>) {
        (
            Arc::new(MemoryState::default()),
            Arc::new(MemoryState::default()),
        )
    }

    /// A router of `config` and `runtime` to those backends, without fallback.
    fn config_and_runtime(
        config: &Arc<MemoryState>,
        runtime: &Arc<MemoryState>,
    ) -> NamespaceRouter {
        NamespaceRouter::new(
            [
                ("config", config.clone() as Arc<dyn State>),
                ("runtime", runtime.clone() as Arc<dyn State>),
            ],
            None,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn calls_to_backends_that_answer_at_once_are_done_through_the_router() {
        let (config, runtime) = backends();
        let router = config_and_runtime(&config, &runtime);
        // The test has its own thread, far from its 256th store call: no call here yields.
        let created = router.create(resource("config", "a"), CreateOptions::default());
        assert!(created.is_done(), "{created:?}");
        let created = created.await.unwrap();
        let next = DynamicResource {
            metadata: created.metadata().clone(),
            spec: serde_json::json!({ "n": 2 }),
        };
        let updated = router.update(Arc::new(next), UpdateOptions::default());
        assert!(updated.is_done(), "{updated:?}");
        assert_eq!(updated.await.unwrap().metadata().version().get(), 2);
        let pointer = Pointer::new("config", "Things.test.cosi.dev", "a");
        let stored = config.get(&pointer).await.unwrap();
        assert_eq!(stored.metadata().version().get(), 2);
        assert!(runtime
            .list(&kind("config"), &ListOptions::default())
            .await
            .unwrap()
            .is_empty());
        let unrouted = router.create(resource("nowhere", "a"), CreateOptions::default());
        assert!(
            unrouted.is_done(),
            "an unrouted namespace is an error at once"
        );
        assert!(unrouted
            .await
            .unwrap_err()
            .to_string()
            .contains("no backend serves namespace"));
    }

    #[tokio::test]
    async fn each_namespace_goes_to_its_own_backend() {
        let (config, runtime) = backends();
        let router = config_and_runtime(&config, &runtime);
        router
            .create(resource("config", "a"), CreateOptions::default())
            .await
            .unwrap();
        router
            .create(resource("runtime", "b"), CreateOptions::default())
            .await
            .unwrap();
        let ids = |v: Vec<SharedResource>| -> Vec<String> {
            v.iter().map(|r| r.metadata().id().to_string()).collect()
        };
        let in_config = config.list(&kind("config"), &ListOptions::default()).await;
        assert_eq!(ids(in_config.unwrap()), ["a"]);
        let in_runtime = runtime
            .list(&kind("runtime"), &ListOptions::default())
            .await;
        assert_eq!(ids(in_runtime.unwrap()), ["b"]);
        assert!(config
            .list(&kind("runtime"), &ListOptions::default())
            .await
            .unwrap()
            .is_empty());
        let through_router = router.list(&kind("runtime"), &ListOptions::default()).await;
        assert_eq!(ids(through_router.unwrap()), ["b"]);
    }

    #[tokio::test]
    async fn watch_kind_delegates_by_the_kinds_namespace() {
        let (config, runtime) = backends();
        let router = NamespaceRouter::new(
            [("config", config as Arc<dyn State>)],
            Some(runtime.clone() as Arc<dyn State>),
        )
        .unwrap();
        let mut watch = router
            .watch_kind(&kind("runtime"), WatchKindOptions::default())
            .await
            .unwrap();
        runtime
            .create(resource("runtime", "b"), CreateOptions::default())
            .await
            .unwrap();
        let event = tokio::time::timeout(Duration::from_secs(5), watch.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(&event, Event::Created { resource, .. } if resource.metadata().id() == "b"),
            "{event:?}"
        );
    }

    #[tokio::test]
    async fn an_unrouted_namespace_without_fallback_is_an_error_naming_it() {
        let (config, _) = backends();
        let router = NamespaceRouter::new([("config", config as Arc<dyn State>)], None).unwrap();
        let err = router
            .create(resource("secrets", "a"), CreateOptions::default())
            .await
            .unwrap_err();
        match err {
            Error::InvalidArgument {
                subject,
                field,
                message,
            } => {
                assert_eq!(subject, "secrets/Things.test.cosi.dev/a");
                assert_eq!(field, "namespace");
                assert_eq!(
                    message,
                    "no backend serves namespace \"secrets\" (routed: config; no fallback)"
                );
            }
            other => panic!("expected an invalid argument, got {other}"),
        }
    }

    #[tokio::test]
    async fn an_unrouted_namespace_goes_to_the_fallback() {
        let (config, fallback) = backends();
        let router = NamespaceRouter::new(
            [("config", config as Arc<dyn State>)],
            Some(fallback.clone() as Arc<dyn State>),
        )
        .unwrap();
        router
            .create(resource("other", "a"), CreateOptions::default())
            .await
            .unwrap();
        let pointer = Pointer::new("other", "Things.test.cosi.dev", "a");
        assert!(fallback.get(&pointer).await.is_ok());
    }

    #[test]
    fn a_namespace_routed_twice_is_rejected() {
        let (a, b) = backends();
        let err = NamespaceRouter::new(
            [
                ("config", a as Arc<dyn State>),
                ("config", b as Arc<dyn State>),
            ],
            None,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("\"config\" is routed twice"),
            "{err}"
        );
    }
}
