//! From the machine config to [`ServiceSpec`]s: the controllers that say what the node runs.
//!
//! - [`kubelet_service`] (a [`Transform`] named [`KUBELET_SERVICE_CONTROLLER`], mapping with
//!   [`kubelet_spec`]): the [`KubeletSpec`] fan-out resource (namespace `config`) becomes the
//!   built-in `kubelet` service, running its image with its `extraArgs` as `--key=value`. An image is mapped to
//!   a program by the supervisor's [`super::ImageResolver`] when the service is prepared; an
//!   absolute path (`/usr/bin/kubelet`) is run as it is, as the config allows. With no image
//!   the kubelet is `Skipped` (a disabled spec), which still counts as up for the services
//!   that depend on it. No `KubeletSpec` (no active config) means no kubelet spec.
//! - [`ServiceConfigController`]: each `ServiceConfig` document of the **active**
//!   [`MachineConfig`] becomes one spec with the document's name as id ([`service_spec`]
//!   says how the fields map). It tracks its outputs, so a removed document removes its
//!   spec, and with it the service.
//!
//! Both write `ServiceSpec` as a *shared* output and each tears down only what it wrote. The
//! names cannot collide: validation refuses a `ServiceConfig` named `kubelet`, and this
//! controller skips one that got stored anyway. Outputs are written only when they differ,
//! so an apply that leaves a service's document alone does not touch its spec, and the
//! supervisor restarts only the services whose spec changed.
//!
//! This module reads the config family's public resources only; it must not touch the
//! supervisor (that is [`super::ServiceSpecController`]'s job).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use async_trait::async_trait;
use cosi_controllers::{
    Controller, ControllerState, Engine, Input, Output, Reconciled, RegistrationError, Transform,
};
use cosi_core::{Resource, ResourceSpec, Result, StateExt};

use super::spec::{HealthCheck, Probe, Program, RestartPolicy, ServiceSpec};
use crate::config::document::{DocumentId, SERVICE_CONFIG_KIND};
use crate::config::schema::{self, ServiceConfig};
use crate::config::validate::KUBELET_SERVICE;
use crate::config::{FieldError, KubeletSpec, MachineConfig, ACTIVE};

/// The name of the controller from [`KubeletSpec`] to the `kubelet` spec.
pub const KUBELET_SERVICE_CONTROLLER: &str = "services.KubeletServiceController";

/// The kubelet's health port when its flags do not move it (the kubelet's default).
const KUBELET_HEALTHZ_PORT: u16 = 10248;

/// The `kubelet` spec for `kubelet`. See the module docs.
///
/// The health check is an HTTP GET of the kubelet's `/healthz`, where its own flags put it:
/// `healthz-bind-address` (default `127.0.0.1`; an unspecified address is probed on
/// loopback) and `healthz-port` (default 10248; `0` turns the endpoint off, and with it the
/// check).
///
/// ```
/// use cosi_node::config::KubeletSpec;
/// use cosi_node::services::{kubelet_spec, Probe, Program};
/// let kubelet = KubeletSpec {
///     image: Some("ghcr.io/siderolabs/kubelet:v1.31.0".into()),
///     extra_args: [("max-pods".to_string(), "110".to_string())].into(),
/// };
/// let spec = kubelet_spec(&kubelet);
/// assert_eq!(spec.program, Program::Image("ghcr.io/siderolabs/kubelet:v1.31.0".into()));
/// assert_eq!(spec.args, ["--max-pods=110"]);
/// assert_eq!(
///     spec.health.unwrap().probe,
///     Probe::Http { url: "http://127.0.0.1:10248/healthz".into() }
/// );
/// assert!(!kubelet_spec(&KubeletSpec::default()).enabled);
/// ```
pub fn kubelet_spec(kubelet: &KubeletSpec) -> ServiceSpec {
    let image = kubelet.image.as_deref().filter(|image| !image.is_empty());
    let (program, enabled) = match image {
        Some(path) if path.starts_with('/') => (Program::Command(path.into()), true),
        Some(image) => (Program::Image(image.into()), true),
        // Never run: the spec only says that the kubelet exists and is skipped.
        None => (Program::Image(String::new()), false),
    };
    let mut spec = ServiceSpec::new(program).with_args(kubelet.args());
    spec.enabled = enabled;
    if let Some(url) = kubelet_healthz(kubelet) {
        spec = spec.with_health(HealthCheck::new(Probe::Http { url }));
    }
    spec
}

/// The URL of the kubelet's health endpoint, or none when its flags turn it off.
fn kubelet_healthz(kubelet: &KubeletSpec) -> Option<String> {
    let port = match kubelet.extra_args.get("healthz-port") {
        // A port the kubelet cannot parse makes it refuse to start; the check never runs.
        Some(port) => port.parse::<u16>().unwrap_or(KUBELET_HEALTHZ_PORT),
        None => KUBELET_HEALTHZ_PORT,
    };
    if port == 0 {
        return None;
    }
    let address = kubelet
        .extra_args
        .get("healthz-bind-address")
        .and_then(|a| a.parse::<IpAddr>().ok())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    // An unspecified address listens on loopback too; probe there.
    let host = match address {
        IpAddr::V4(v4) if v4.is_unspecified() => Ipv4Addr::LOCALHOST.to_string(),
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) if v6.is_unspecified() => format!("[{}]", Ipv6Addr::LOCALHOST),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    Some(format!("http://{host}:{port}/healthz"))
}

/// The transform from the [`KubeletSpec`] to the `kubelet` spec ([`kubelet_spec`]).
pub fn kubelet_service() -> Transform<KubeletSpec, ServiceSpec> {
    Transform::new(KUBELET_SERVICE_CONTROLLER, |kubelet| {
        (kubelet.metadata.id() == KubeletSpec::ID)
            .then(|| (Arc::from(KUBELET_SERVICE), kubelet_spec(&kubelet.spec)))
    })
    .shared_output()
}

/// The spec of one `ServiceConfig` document, or the field that keeps it from being one.
///
/// The fields map one to one (`workingDirectory` is the spec's `workingDir`, `healthCheck`
/// its `health`); a health check's `exec: [command, args…]` is an exec probe, `tcp` and
/// `http` are the probes of the same name, and the durations left out take the defaults of
/// [`HealthCheck::new`] and [`ServiceSpec::new`]. The config was validated when it was
/// applied, so an error here means a stored config the current rules would refuse.
///
/// ```
/// use cosi_node::config::schema::{HealthCheck, ServiceConfig};
/// use cosi_node::services::{service_spec, Probe, Program};
/// let document = ServiceConfig {
///     name: "db".into(),
///     command: Some("/usr/bin/db".into()),
///     args: vec!["--port=5432".into()],
///     health_check: Some(HealthCheck {
///         exec: Some(vec!["/usr/bin/db-ping".into(), "-q".into()]),
///         ..HealthCheck::default()
///     }),
///     ..ServiceConfig::default()
/// };
/// let spec = service_spec(&document).unwrap();
/// assert_eq!(spec.program, Program::Command("/usr/bin/db".into()));
/// assert_eq!(
///     spec.health.unwrap().probe,
///     Probe::Exec { command: "/usr/bin/db-ping".into(), args: vec!["-q".into()] }
/// );
///
/// let nothing = ServiceConfig { name: "x".into(), ..ServiceConfig::default() };
/// assert_eq!(
///     service_spec(&nothing).unwrap_err().to_string(),
///     "ServiceConfig/x.command: required: the program to run"
/// );
/// ```
pub fn service_spec(service: &ServiceConfig) -> std::result::Result<ServiceSpec, FieldError> {
    let at = DocumentId::Named {
        kind: SERVICE_CONFIG_KIND.into(),
        name: service.name.clone(),
    }
    .path();
    let command = service
        .command
        .clone()
        .ok_or_else(|| FieldError::new(format!("{at}.command"), "required: the program to run"))?;
    let mut spec = ServiceSpec::command(command)
        .with_args(service.args.iter().cloned())
        .with_depends_on(service.depends_on.iter().cloned())
        .with_restart(match service.restart {
            schema::RestartPolicy::Always => RestartPolicy::Always,
            schema::RestartPolicy::OnFailure => RestartPolicy::OnFailure,
            schema::RestartPolicy::Never => RestartPolicy::Never,
        });
    spec.environment = service.environment.clone();
    spec.working_dir = service.working_directory.clone();
    if let Some(timeout) = service.stop_timeout {
        spec.stop_timeout = timeout;
    }
    if let Some(check) = &service.health_check {
        spec.health = Some(health_check(check, &format!("{at}.healthCheck"))?);
    }
    Ok(spec)
}

fn health_check(
    check: &schema::HealthCheck,
    at: &str,
) -> std::result::Result<HealthCheck, FieldError> {
    let probe = match (&check.exec, &check.tcp, &check.http) {
        (Some(argv), None, None) => match argv.split_first() {
            Some((command, args)) if !command.is_empty() => Probe::Exec {
                command: command.clone(),
                args: args.to_vec(),
            },
            _ => return Err(FieldError::new(format!("{at}.exec"), "needs a command")),
        },
        (None, Some(address), None) => Probe::Tcp {
            address: address.clone(),
        },
        (None, None, Some(url)) => Probe::Http { url: url.clone() },
        _ => {
            return Err(FieldError::new(
                at,
                "needs exactly one probe: exec, tcp or http",
            ))
        }
    };
    let mut health = HealthCheck::new(probe);
    if let Some(delay) = check.initial_delay {
        health.initial_delay = delay;
    }
    if let Some(period) = check.period {
        health.period = period;
    }
    if let Some(timeout) = check.timeout {
        health.timeout = timeout;
    }
    Ok(health)
}

/// Writes one [`ServiceSpec`] per `ServiceConfig` document of the active machine config, and
/// removes the specs of documents that are gone. See the module docs.
#[derive(Debug, Default)]
pub struct ServiceConfigController;

impl ServiceConfigController {
    /// The controller's name (the owner of the specs it writes).
    pub const NAME: &'static str = "services.ServiceConfigController";
}

#[async_trait]
impl Controller for ServiceConfigController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<MachineConfig>().with_id(ACTIVE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared_of::<ServiceSpec>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let config = match state
            .get_typed::<MachineConfig>(&MachineConfig::pointer(ACTIVE))
            .await
        {
            Ok(config) => Some(config),
            Err(error) if error.is_not_found() => None,
            Err(error) => return Err(error),
        };
        state.start_tracking();
        let documents = config
            .as_ref()
            .map_or(&[][..], |c| c.spec.config().services());
        for document in documents {
            if document.name == KUBELET_SERVICE {
                tracing::warn!(
                    service = %document.name,
                    "skipping a ServiceConfig document named after the built-in kubelet"
                );
                continue;
            }
            let spec = match service_spec(document) {
                Ok(spec) => spec,
                Err(error) => {
                    // The others still run; the stored config predates a validation rule.
                    tracing::warn!(service = %document.name, %error, "skipping a ServiceConfig document");
                    continue;
                }
            };
            state
                .modify_output(Resource::new(document.name.as_str(), spec.clone()), |r| {
                    r.spec = spec.clone();
                    Ok(())
                })
                .await?;
        }
        state.cleanup_outputs(&[ServiceSpec::kind()]).await?;
        Ok(Reconciled::Done)
    }
}

/// Registers both controllers that derive specs from the config ([`kubelet_service`] and
/// [`ServiceConfigController`]).
pub fn register_config_controllers(engine: &Engine) -> std::result::Result<(), RegistrationError> {
    engine.register(kubelet_service())?;
    engine.register(ServiceConfigController)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubelet(args: &[(&str, &str)]) -> KubeletSpec {
        KubeletSpec {
            image: Some("kubelet:v1".into()),
            extra_args: args
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn the_kubelet_healthz_defaults_to_loopback_port_10248() {
        assert_eq!(
            kubelet_healthz(&kubelet(&[])).as_deref(),
            Some("http://127.0.0.1:10248/healthz")
        );
    }

    #[test]
    fn an_unspecified_healthz_address_is_probed_on_loopback() {
        let v4 = kubelet(&[("healthz-bind-address", "0.0.0.0")]);
        assert_eq!(
            kubelet_healthz(&v4).as_deref(),
            Some("http://127.0.0.1:10248/healthz")
        );
        let v6 = kubelet(&[("healthz-bind-address", "::"), ("healthz-port", "9000")]);
        assert_eq!(
            kubelet_healthz(&v6).as_deref(),
            Some("http://[::1]:9000/healthz")
        );
    }

    #[test]
    fn healthz_port_zero_turns_the_health_check_off() {
        let spec = kubelet_spec(&kubelet(&[("healthz-port", "0")]));
        assert_eq!(spec.health, None);
        assert_eq!(spec.args, ["--healthz-port=0"]);
    }

    #[test]
    fn an_unparsable_healthz_port_keeps_the_default_check() {
        assert_eq!(
            kubelet_healthz(&kubelet(&[("healthz-port", "http")])).as_deref(),
            Some("http://127.0.0.1:10248/healthz")
        );
    }

    #[test]
    fn a_document_with_two_probes_names_its_health_check() {
        let document = ServiceConfig {
            name: "web".into(),
            command: Some("/usr/bin/web".into()),
            health_check: Some(schema::HealthCheck {
                tcp: Some("127.0.0.1:80".into()),
                http: Some("http://127.0.0.1/".into()),
                ..schema::HealthCheck::default()
            }),
            ..ServiceConfig::default()
        };
        assert_eq!(
            service_spec(&document).unwrap_err().to_string(),
            "ServiceConfig/web.healthCheck: needs exactly one probe: exec, tcp or http"
        );
    }
}
