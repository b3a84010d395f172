//! [`NamespaceRouter`]: one [`State`] made of a backend per namespace (e.g. `config` on disk,
//! `runtime` in memory), with an optional fallback for every other namespace.
//!
//! Every call goes to the backend of the namespace it names (a resource's, a pointer's or a
//! kind's); the router keeps no state of its own, so each backend's rules and watch semantics
//! hold unchanged.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use cosi_core::{
    CreateOptions, DestroyOptions, Error, Kind, ListOptions, Pointer, Result, SharedResource,
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

#[async_trait]
impl State for NamespaceRouter {
    async fn get(&self, pointer: &Pointer) -> Result<SharedResource> {
        self.backend(pointer.namespace(), pointer)?
            .get(pointer)
            .await
    }

    async fn list(&self, kind: &Kind, options: &ListOptions) -> Result<Vec<SharedResource>> {
        self.backend(kind.namespace(), kind)?
            .list(kind, options)
            .await
    }

    async fn create(
        &self,
        resource: SharedResource,
        options: CreateOptions,
    ) -> Result<SharedResource> {
        let pointer = resource.metadata().pointer();
        self.backend(pointer.namespace(), pointer)?
            .create(resource, options)
            .await
    }

    async fn update(
        &self,
        resource: SharedResource,
        options: UpdateOptions,
    ) -> Result<SharedResource> {
        let pointer = resource.metadata().pointer();
        self.backend(pointer.namespace(), pointer)?
            .update(resource, options)
            .await
    }

    async fn destroy(&self, pointer: &Pointer, options: DestroyOptions) -> Result<()> {
        self.backend(pointer.namespace(), pointer)?
            .destroy(pointer, options)
            .await
    }

    async fn watch(&self, pointer: &Pointer, options: WatchOptions) -> Result<Watch> {
        self.backend(pointer.namespace(), pointer)?
            .watch(pointer, options)
            .await
    }

    async fn watch_kind(&self, kind: &Kind, options: WatchKindOptions) -> Result<Watch> {
        self.backend(kind.namespace(), kind)?
            .watch_kind(kind, options)
            .await
    }
}
