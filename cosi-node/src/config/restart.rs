//! Restarts of the node runtime: which config fields need one ([`restart_fields`]), and the
//! hook through which an apply asks for one ([`NodeRuntime`]).
//!
//! **Live-applicable** fields take effect while the node runs, because controllers follow the
//! active config: `machine.nodeLabels`, `machine.kubelet`, `machine.network`,
//! `machine.sysctls`, `cluster.allowSchedulingOnControlPlanes` and every `ServiceConfig`
//! document. **Every other field needs a restart**: `machine.type`, `machine.token`,
//! `machine.install`, `cluster.name`, `cluster.controlPlane`, `cluster.network` (pods and
//! services keep the networks they were started with) and any field added to the schema later
//! until it is listed here — unknown means restart, the safe side.
//!
//! The daemon implements [`NodeRuntime`]: when a `reboot` apply (or an `auto` apply that needs
//! a restart) has persisted its config, the applier calls [`NodeRuntime::restart`]; the daemon
//! then stops its controllers and starts again, and its start calls
//! [`super::apply::load_at_start`], which makes the persisted config active.

use std::sync::Arc;

use cosi_core::Version;
use tokio::sync::watch;

/// Field paths (as [`super::ConfigDiff::changed`] names them) that take effect live.
const LIVE: &[&str] = &[
    "machine.nodeLabels",
    "machine.kubelet",
    "machine.network",
    "machine.sysctls",
    "cluster.allowSchedulingOnControlPlanes",
];

/// Named document kinds whose documents take effect live.
const LIVE_KINDS: &[&str] = &["ServiceConfig/"];

/// Whether a change at `path` takes effect without a restart.
pub fn is_live(path: &str) -> bool {
    LIVE.iter().any(|prefix| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    }) || LIVE_KINDS.iter().any(|kind| path.starts_with(kind))
}

/// The changed paths that need a restart, in order.
///
/// ```
/// use cosi_node::config::restart::restart_fields;
/// let changed = ["machine.nodeLabels.zone".to_string(), "machine.type".to_string()];
/// assert_eq!(restart_fields(&changed), ["machine.type"]);
/// ```
pub fn restart_fields(changed: &[String]) -> Vec<String> {
    changed.iter().filter(|p| !is_live(p)).cloned().collect()
}

/// Why the node runtime is asked to restart.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RestartRequest {
    /// The persisted config version the restart will make active.
    pub persisted_version: Version,
    /// The changed fields that need the restart (empty for an explicit `reboot`).
    pub fields: Vec<String>,
    /// Who applied the config.
    pub actor: String,
}

/// The node runtime, as the applier sees it. Implemented by the daemon.
///
/// `restart` is called after the config is persisted and before the apply returns; it must
/// not block (signal the daemon's main loop and return). The restart itself is the daemon's:
/// stop, start again, call [`super::apply::load_at_start`].
pub trait NodeRuntime: Send + Sync + 'static {
    /// Asks the node runtime to restart.
    fn restart(&self, request: RestartRequest);
}

/// A ready-made [`NodeRuntime`]: a `watch` channel holding the latest restart request, so a
/// daemon's main loop can `select!` on it. Memory stays bounded however many requests come:
/// a later request replaces an unread one.
///
/// ```
/// use cosi_node::config::restart::{NodeRuntime, RestartRequest, RestartSignal};
/// let (signal, mut requests) = RestartSignal::new();
/// signal.restart(RestartRequest {
///     persisted_version: cosi_core::Version::new(3),
///     fields: vec!["machine.type".into()],
///     actor: "admin".into(),
/// });
/// assert!(requests.has_changed().unwrap());
/// let request = requests.borrow_and_update().clone().unwrap();
/// assert_eq!(request.persisted_version.get(), 3);
/// ```
#[derive(Clone, Debug)]
pub struct RestartSignal {
    sender: Arc<watch::Sender<Option<RestartRequest>>>,
}

impl RestartSignal {
    /// A signal and the receiver the daemon waits on.
    pub fn new() -> (RestartSignal, watch::Receiver<Option<RestartRequest>>) {
        let (sender, receiver) = watch::channel(None);
        (
            RestartSignal {
                sender: Arc::new(sender),
            },
            receiver,
        )
    }
}

impl NodeRuntime for RestartSignal {
    fn restart(&self, request: RestartRequest) {
        // `send_replace` works with no receiver left (a daemon shutting down).
        self.sender.send_replace(Some(request));
    }
}
