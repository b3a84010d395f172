//! Who may call what: roles read from the caller's client certificate, the method table, and
//! the resource rules of the State service.
//!
//! Three layers, as in Talos:
//! 1. **Identity** ([`Caller`]): the Organization values of the client certificate's subject
//!    (`os:reader`, `os:operator`, `os:admin`; unknown values are kept and grant nothing). A
//!    plaintext (h2c) server trusts every caller ([`Caller::trusted`]): it is for loopback and
//!    tests only. A maintenance connection (server-only TLS, before the node has a
//!    configuration) is [`Caller::maintenance`].
//! 2. **The method table** ([`required_role`], enforced for every call by [`MethodGate`]):
//!    reader = State reads, logs, events, service list, version; operator = reader + service
//!    start/stop/restart; admin = everything, and any method not in the table. A maintenance
//!    caller may call `ApplyConfiguration` and nothing else.
//! 3. **Resource rules** ([`StatePolicy`], applied by the State service): sensitive types are
//!    read by admins only (their definitions stay listable); State writes are admin-only, never
//!    to the types only `ApplyConfiguration` writes (the machine config), never to a type a
//!    controller writes (its outputs: a resource created there by hand would block or be taken
//!    over by the controller), and never to a resource a controller owns.
//!
//! Every refusal is `PermissionDenied` "not authorized" with a detail
//! ([`crate::status::not_authorized`]), distinguishable from an owner conflict.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::Status;

use crate::status::not_authorized;

/// A role of the API.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Role {
    /// Reads that expose no secrets.
    Reader,
    /// Reader plus service management.
    Operator,
    /// Everything.
    Admin,
}

impl Role {
    /// The role's certificate Organization value.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "os:reader",
            Role::Operator => "os:operator",
            Role::Admin => "os:admin",
        }
    }

    /// The role an Organization value names, if any.
    pub fn parse(text: &str) -> Option<Role> {
        match text.trim() {
            "os:reader" => Some(Role::Reader),
            "os:operator" => Some(Role::Operator),
            "os:admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the caller reached the server.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Transport {
    /// Plaintext HTTP/2: every caller is trusted (loopback and tests only).
    Plaintext,
    /// Mutual TLS: roles from the client certificate.
    MutualTls,
    /// Server-only TLS before the node has a configuration.
    Maintenance,
}

/// The authenticated caller of one connection (put into every request's extensions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The certificate's common name (empty when there is none).
    pub name: String,
    /// Every Organization value of the certificate, trimmed, empties dropped.
    pub organizations: BTreeSet<String>,
    /// How the caller connected.
    pub transport: Transport,
    /// Where a maintenance caller connected from (`None` for the others, and for a maintenance
    /// caller made without one): maintenance callers have no name, so their connections and
    /// calls are counted per address.
    pub address: Option<IpAddr>,
}

impl Caller {
    /// A caller authenticated by a client certificate with these Organization values.
    pub fn from_certificate<'a>(
        name: &str,
        organizations: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        Caller {
            name: name.to_string(),
            organizations: organizations
                .into_iter()
                .map(str::trim)
                .filter(|o| !o.is_empty())
                .map(str::to_string)
                .collect(),
            transport: Transport::MutualTls,
            address: None,
        }
    }

    /// A caller on a plaintext connection: trusted with everything.
    pub fn trusted() -> Self {
        Caller {
            name: String::new(),
            organizations: BTreeSet::new(),
            transport: Transport::Plaintext,
            address: None,
        }
    }

    /// A caller on a maintenance connection: may only apply a configuration.
    pub fn maintenance() -> Self {
        Caller {
            name: String::new(),
            organizations: BTreeSet::new(),
            transport: Transport::Maintenance,
            address: None,
        }
    }

    /// A maintenance caller connected from `address` (an IPv4-mapped IPv6 address counts as
    /// its IPv4 address).
    pub fn maintenance_from(address: IpAddr) -> Self {
        Caller {
            address: Some(address.to_canonical()),
            ..Caller::maintenance()
        }
    }

    /// The highest role the caller holds (admin implies operator implies reader).
    pub fn role(&self) -> Option<Role> {
        if self.transport == Transport::Plaintext {
            return Some(Role::Admin);
        }
        if self.transport == Transport::Maintenance {
            return None;
        }
        self.organizations
            .iter()
            .filter_map(|o| Role::parse(o))
            .max()
    }

    /// Whether the caller holds `role` (or a higher one).
    pub fn has(&self, role: Role) -> bool {
        self.role().is_some_and(|r| r >= role)
    }

    /// Whether resource rules apply (everyone but a plaintext caller).
    pub fn is_trusted(&self) -> bool {
        self.transport == Transport::Plaintext
    }

    /// The caller as logs and histories name it: the certificate's common name and the role,
    /// as in `ops (os:admin)`; `caller` when the certificate has no name.
    ///
    /// ```
    /// use cosi_api::auth::Caller;
    /// assert_eq!(Caller::from_certificate("ops", ["os:admin"]).describe(), "ops (os:admin)");
    /// assert_eq!(Caller::maintenance().describe(), "caller (no role)");
    /// ```
    pub fn describe(&self) -> String {
        let who = if self.name.is_empty() {
            "caller"
        } else {
            &self.name
        };
        match self.role() {
            Some(role) => format!("{who} ({role})"),
            None => format!("{who} (no role)"),
        }
    }
}

/// The method the maintenance mode accepts.
pub const APPLY_CONFIGURATION: &str = "/cosi.machine.MachineService/ApplyConfiguration";

/// The method table: the least role that may call `method` (a full gRPC path,
/// `/package.Service/Method`). Methods not in the table need admin.
///
/// ```
/// use cosi_api::auth::{required_role, Role};
/// assert_eq!(required_role("/cosi.resource.State/Get"), Role::Reader);
/// assert_eq!(required_role("/cosi.machine.MachineService/ServiceRestart"), Role::Operator);
/// assert_eq!(required_role("/cosi.resource.State/Create"), Role::Admin);
/// assert_eq!(required_role("/some.Other/Method"), Role::Admin);
/// ```
pub fn required_role(method: &str) -> Role {
    match method {
        "/cosi.resource.State/Get"
        | "/cosi.resource.State/List"
        | "/cosi.resource.State/Watch"
        | "/cosi.machine.MachineService/Logs"
        | "/cosi.machine.MachineService/Events"
        | "/cosi.machine.MachineService/ServiceList"
        | "/cosi.machine.MachineService/Version" => Role::Reader,
        "/cosi.machine.MachineService/ServiceStart"
        | "/cosi.machine.MachineService/ServiceStop"
        | "/cosi.machine.MachineService/ServiceRestart" => Role::Operator,
        _ => Role::Admin,
    }
}

/// What a node in maintenance mode answers any call but `ApplyConfiguration` (clients can
/// recognise it and say what to do: apply a config first).
pub const MAINTENANCE_REFUSAL: &str = "maintenance mode accepts only ApplyConfiguration";

/// Whether `caller` may call `method`; the refusal otherwise.
pub fn authorize_method(caller: &Caller, method: &str) -> Result<(), Status> {
    if caller.transport == Transport::Maintenance {
        return if method == APPLY_CONFIGURATION {
            Ok(())
        } else {
            Err(not_authorized(method, MAINTENANCE_REFUSAL))
        };
    }
    let needed = required_role(method);
    if caller.has(needed) {
        Ok(())
    } else {
        Err(not_authorized(
            method,
            &format!(
                "{} may not call {method} (needs {needed})",
                caller.describe()
            ),
        ))
    }
}

/// The caller of a request (fails closed when the connection carried none).
pub fn caller_of<T>(request: &tonic::Request<T>) -> Result<&Caller, Status> {
    request
        .extensions()
        .get::<Caller>()
        .ok_or_else(|| not_authorized("request", "the connection carries no identity"))
}

/// Which owners are controllers (resources they own are never written over the API).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum ControllerOwners {
    /// Every owner is a controller (the default, and the safe choice).
    #[default]
    Any,
    /// Exactly these owners are controllers (a node passes its engine's controller names).
    Named(BTreeSet<String>),
}

impl ControllerOwners {
    /// Whether `owner` is a controller.
    pub fn is_controller(&self, owner: &str) -> bool {
        match self {
            ControllerOwners::Any => true,
            ControllerOwners::Named(names) => names.contains(owner),
        }
    }
}

/// The State service's resource rules for callers that are not trusted.
#[derive(Clone, Debug, Default)]
pub struct StatePolicy {
    /// Types that only `ApplyConfiguration` writes (the machine config): the State service
    /// refuses every write of them, so validation cannot be bypassed.
    pub apply_only_types: BTreeSet<String>,
    /// Which owners are controllers.
    pub controller_owners: ControllerOwners,
    /// The types controllers write (their outputs, exclusive or shared), each with the names
    /// of the controllers that write it: the State service refuses every write of them, since
    /// a resource an admin creates there meets the controller's own (an `AlreadyExists` or an
    /// owner conflict in the controller's loop) and one it destroys comes back. Empty by
    /// default; a node passes its engine's outputs.
    pub controller_outputs: BTreeMap<String, BTreeSet<String>>,
}

impl StatePolicy {
    /// A policy protecting `apply_only_types`, every owner treated as a controller.
    pub fn new<I, S>(apply_only_types: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        StatePolicy {
            apply_only_types: apply_only_types.into_iter().map(Into::into).collect(),
            controller_owners: ControllerOwners::Any,
            controller_outputs: BTreeMap::new(),
        }
    }

    /// Sets which owners are controllers.
    pub fn with_controller_owners(mut self, owners: ControllerOwners) -> Self {
        self.controller_owners = owners;
        self
    }

    /// Sets the types controllers write, each with its writers' names (see
    /// [`StatePolicy::controller_outputs`]).
    ///
    /// ```
    /// use cosi_api::auth::{Caller, StatePolicy};
    /// let policy = StatePolicy::new(["MachineConfigs.config.cosi.dev"]).with_controller_outputs([(
    ///     "Addresses.net.cosi.dev".to_string(),
    ///     ["AddressController".to_string()].into(),
    /// )]);
    /// let admin = Caller::from_certificate("admin", ["os:admin"]);
    /// let refused = policy
    ///     .check_write(&admin, "net/Addresses.net.cosi.dev/eth0", "Addresses.net.cosi.dev", None, None)
    ///     .unwrap_err();
    /// assert!(cosi_api::status::is_not_authorized(&refused));
    /// assert!(policy.check_write(&admin, "test/Notes/a", "Notes.test.cosi.dev", None, None).is_ok());
    /// ```
    pub fn with_controller_outputs<I>(mut self, outputs: I) -> Self
    where
        I: IntoIterator<Item = (String, BTreeSet<String>)>,
    {
        self.controller_outputs = outputs.into_iter().collect();
        self
    }

    /// Whether `caller` may read resources of a type with this sensitivity.
    pub fn check_read(
        &self,
        caller: &Caller,
        subject: &str,
        sensitivity: cosi_core::Sensitivity,
    ) -> Result<(), Status> {
        if caller.is_trusted()
            || sensitivity == cosi_core::Sensitivity::Public
            || caller.has(Role::Admin)
        {
            return Ok(());
        }
        Err(not_authorized(
            subject,
            &format!("{} may not read a sensitive type", caller.describe()),
        ))
    }

    /// Whether `caller` may write `resource_type`, claiming `owner`, to a resource stored with
    /// `stored_owner` (`None` when it does not exist or is not known yet).
    pub fn check_write(
        &self,
        caller: &Caller,
        subject: &str,
        resource_type: &str,
        owner: Option<&str>,
        stored_owner: Option<&str>,
    ) -> Result<(), Status> {
        if caller.is_trusted() {
            return Ok(());
        }
        if !caller.has(Role::Admin) {
            return Err(not_authorized(
                subject,
                &format!("{} may not write", caller.describe()),
            ));
        }
        if self.apply_only_types.contains(resource_type) {
            return Err(not_authorized(
                subject,
                &format!("{resource_type} is written only by ApplyConfiguration"),
            ));
        }
        if let Some(writers) = self.controller_outputs.get(resource_type) {
            let names: Vec<&str> = writers.iter().map(String::as_str).collect();
            return Err(not_authorized(
                subject,
                &format!(
                    "{resource_type} is written by controller {}; change its inputs instead \
                     (on a node: the machine config, through ApplyConfiguration)",
                    names.join(", ")
                ),
            ));
        }
        for owner in [owner, stored_owner].into_iter().flatten() {
            if self.controller_owners.is_controller(owner) {
                return Err(not_authorized(
                    subject,
                    &format!("the resource is owned by controller {owner:?}"),
                ));
            }
        }
        Ok(())
    }
}

/// A tower layer that checks every call against the method table ([`authorize_method`])
/// before it reaches a service, so a method no service knows is refused too.
#[derive(Clone, Copy, Debug, Default)]
pub struct MethodGate;

impl<S> tower::Layer<S> for MethodGate {
    type Service = MethodGateService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        MethodGateService { inner }
    }
}

/// The service [`MethodGate`] wraps around the routes.
#[derive(Clone, Debug)]
pub struct MethodGateService<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for MethodGateService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let verdict = match request.extensions().get::<Caller>() {
            Some(caller) => authorize_method(caller, request.uri().path()),
            None => Err(not_authorized(
                request.uri().path(),
                "the connection carries no identity",
            )),
        };
        match verdict {
            Ok(()) => Box::pin(self.inner.call(request)),
            Err(status) => {
                tracing::info!(
                    method = request.uri().path(),
                    "refused: {}",
                    status.message()
                );
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(org: &str) -> Caller {
        Caller::from_certificate("c", [org])
    }

    #[test]
    fn roles_nest_admin_over_operator_over_reader() {
        assert!(cert("os:admin").has(Role::Operator));
        assert!(cert("os:operator").has(Role::Reader));
        assert!(!cert("os:operator").has(Role::Admin));
        assert!(!cert("os:reader").has(Role::Operator));
        assert_eq!(cert("os:future").role(), None);
        assert_eq!(
            Caller::from_certificate("c", [" ", "os:reader "]).role(),
            Some(Role::Reader)
        );
    }

    #[test]
    fn method_table_by_role() {
        let cases = [
            ("/cosi.resource.State/Get", "os:reader", true),
            ("/cosi.resource.State/Watch", "os:reader", true),
            ("/cosi.resource.State/Create", "os:reader", false),
            ("/cosi.resource.State/Create", "os:operator", false),
            ("/cosi.resource.State/Create", "os:admin", true),
            (
                "/cosi.machine.MachineService/ServiceRestart",
                "os:reader",
                false,
            ),
            (
                "/cosi.machine.MachineService/ServiceRestart",
                "os:operator",
                true,
            ),
            (
                "/cosi.machine.MachineService/ApplyConfiguration",
                "os:operator",
                false,
            ),
            (
                "/cosi.machine.MachineService/ApplyConfiguration",
                "os:admin",
                true,
            ),
            ("/cosi.machine.MachineService/Version", "os:reader", true),
            ("/unknown.Service/Method", "os:operator", false),
            ("/unknown.Service/Method", "os:admin", true),
        ];
        for (method, org, allowed) in cases {
            assert_eq!(
                authorize_method(&cert(org), method).is_ok(),
                allowed,
                "{org} {method}"
            );
        }
    }

    #[test]
    fn maintenance_accepts_only_apply() {
        let c = Caller::maintenance();
        assert!(authorize_method(&c, APPLY_CONFIGURATION).is_ok());
        for method in [
            "/cosi.resource.State/Get",
            "/cosi.machine.MachineService/Version",
        ] {
            let refused = authorize_method(&c, method).unwrap_err();
            assert!(crate::status::is_not_authorized(&refused));
        }
    }

    #[test]
    fn writes_refused_for_apply_only_types_and_controller_owners() {
        let policy = StatePolicy::new(["MachineConfigs.config.cosi.dev"]).with_controller_owners(
            ControllerOwners::Named(["AddressController".to_string()].into()),
        );
        let admin = cert("os:admin");
        let w = |t: &str, o: Option<&str>, s: Option<&str>| {
            policy.check_write(&admin, "x", t, o, s).is_ok()
        };
        assert!(w("Notes.test.cosi.dev", None, None));
        assert!(w("Notes.test.cosi.dev", Some("someone"), None));
        assert!(!w("MachineConfigs.config.cosi.dev", None, None));
        assert!(!w("Notes.test.cosi.dev", Some("AddressController"), None));
        assert!(!w("Notes.test.cosi.dev", None, Some("AddressController")));
        assert!(policy
            .check_write(&cert("os:operator"), "x", "Notes.test.cosi.dev", None, None)
            .is_err());
        let policy = policy.with_controller_outputs([(
            "Addresses.net.cosi.dev".to_string(),
            ["AddressController".to_string()].into(),
        )]);
        let w = |t: &str, o: Option<&str>, s: Option<&str>| {
            policy.check_write(&admin, "x", t, o, s).is_ok()
        };
        assert!(!w("Addresses.net.cosi.dev", None, None));
        assert!(!w(
            "Addresses.net.cosi.dev",
            Some("someone"),
            Some("someone")
        ));
        assert!(w("Notes.test.cosi.dev", None, None));
        assert!(policy
            .check_write(
                &Caller::trusted(),
                "x",
                "MachineConfigs.config.cosi.dev",
                None,
                None
            )
            .is_ok());
    }
}
