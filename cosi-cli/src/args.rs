//! The command line, as clap (derive) parses it: global flags ([`Cli`]) and one variant per
//! command ([`Command`]). This module only describes; [`crate::run`] dispatches.
//!
//! Names (types, ids, namespaces, services) are never empty: an empty one names nothing, and
//! is refused here rather than asked of a node (or, with `get -w`, watched forever).

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use clap::{Args, Parser, Subcommand, ValueEnum};

/// `cosictl`: the operator's client of a node that has no shell.
#[derive(Parser, Debug, Clone)]
#[command(name = "cosictl", version, about, long_about = None)]
pub struct Cli {
    /// The client config file (default: $COSICONFIG, else ~/.cosi/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The context of the client config to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The nodes to talk to, `host[:port]` (default port 50000), comma separated or repeated;
    /// each is dialled directly (default: the context's nodes, else its first endpoint).
    #[arg(
        short,
        long,
        global = true,
        value_delimiter = ',',
        value_name = "ADDRESS"
    )]
    pub nodes: Vec<String>,
    // Named as kubectl's: `--timeout` is the rollback timeout of `--mode try`.
    /// How long one call to a node may take before cosictl gives up on it (e.g. 10s, 2m;
    /// 0: no deadline). For a stream (get -w, logs -f, events) it bounds the opening only.
    #[arg(
        long,
        global = true,
        value_name = "DURATION",
        default_value = "30s",
        value_parser = humantime::parse_duration
    )]
    pub request_timeout: Duration,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The deadline of one call to a node (`--request-timeout`); `None` for `0`.
    pub fn deadline(&self) -> Option<Duration> {
        (!self.request_timeout.is_zero()).then_some(self.request_timeout)
    }
}

/// Every command.
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Reads resources of any type the node defines (`get rd` lists the types).
    Get(GetArgs),
    /// Applies a whole machine config from a file.
    ApplyConfig(ApplyConfigArgs),
    /// Patches the machine config: the node applies the patches to its own config.
    Patch(PatchArgs),
    /// Edits the machine config in $COSICTL_EDITOR, $EDITOR or vi, and applies the result.
    Edit(EditArgs),
    /// Lists the node's services.
    Services,
    /// Shows one service, or starts, stops or restarts it.
    Service(ServiceArgs),
    /// Prints a service's log.
    Logs(LogsArgs),
    /// Streams the node's machine events (until interrupted).
    Events(EventsArgs),
    /// Prints the client's and the nodes' versions.
    Version(VersionArgs),
    /// Generates certificates, machine configs and a client config.
    #[command(subcommand)]
    Gen(GenCommand),
    /// Reads and changes the client config file.
    #[command(subcommand)]
    Config(ConfigCommand),
}

/// How `get` prints.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// Aligned columns: NODE NAMESPACE TYPE ID VERSION and the type's print columns.
    #[default]
    Table,
    /// `node:` and the `{metadata, spec}` document, `---` between resources.
    Yaml,
    /// One JSON object per resource, with `node` first.
    Json,
}

/// `get TYPE [ID]`.
#[derive(Args, Debug, Clone)]
pub struct GetArgs {
    /// The type: its full name, plural, singular or an alias (`mc`, `rd`).
    #[arg(value_name = "TYPE", value_parser = NonEmptyStringValueParser::new())]
    pub resource_type: String,
    /// One resource's id.
    #[arg(value_parser = NonEmptyStringValueParser::new())]
    pub id: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: OutputFormat,
    /// The namespace (default: the type's default namespace).
    #[arg(long, value_parser = NonEmptyStringValueParser::new())]
    pub namespace: Option<String>,
    /// Keep watching: `+` created, `-` destroyed, space updated (until interrupted).
    #[arg(short, long)]
    pub watch: bool,
}

/// How a config change takes effect.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Live when possible, otherwise persist and restart.
    #[default]
    Auto,
    /// Live; refused when a change needs a restart.
    NoReboot,
    /// Persist, then restart the node runtime.
    Reboot,
    /// Persist only; active at the next start.
    Staged,
    /// Live, rolled back after --timeout unless confirmed by a later apply.
    Try,
}

/// The flags every config change shares.
#[derive(Args, Debug, Clone)]
pub struct ApplyFlags {
    /// How the change takes effect.
    #[arg(short, long, value_enum, default_value_t)]
    pub mode: Mode,
    /// With --mode try: when the node rolls the change back (e.g. 30s, 5m; default: the node's).
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,
    /// Validate and show the diff; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `apply-config -f FILE`.
#[derive(Args, Debug, Clone)]
pub struct ApplyConfigArgs {
    /// The machine config file (multi-document YAML).
    #[arg(short, long, value_name = "FILE")]
    pub file: PathBuf,
    /// Mode, timeout, dry run.
    #[command(flatten)]
    pub flags: ApplyFlags,
    /// Reach a node in maintenance mode (no config yet: server-only TLS, no client
    /// certificate); needs --cert-fingerprint and -n.
    #[arg(short, long)]
    pub insecure: bool,
    /// With --insecure: the SHA-256 fingerprint (hex) of the node's server key, as the node
    /// logs it; repeatable.
    #[arg(long, value_name = "FINGERPRINT")]
    pub cert_fingerprint: Vec<String>,
}

/// `patch TYPE [ID] -p PATCH...`.
#[derive(Args, Debug, Clone)]
pub struct PatchArgs {
    /// The machine config's type (`mc`).
    #[arg(value_name = "TYPE", value_parser = NonEmptyStringValueParser::new())]
    pub resource_type: String,
    /// Which config (default: `active`, or `persisted` with --mode staged).
    #[arg(value_parser = NonEmptyStringValueParser::new())]
    pub id: Option<String>,
    /// A patch: strategic-merge YAML or an RFC 6902 JSON patch, inline or `@file`;
    /// repeatable, applied in order.
    #[arg(short, long = "patch", value_name = "PATCH", required = true)]
    pub patches: Vec<String>,
    /// Mode, timeout, dry run.
    #[command(flatten)]
    pub flags: ApplyFlags,
}

/// `edit TYPE [ID]`.
#[derive(Args, Debug, Clone)]
pub struct EditArgs {
    /// The machine config's type (`mc`).
    #[arg(value_name = "TYPE", value_parser = NonEmptyStringValueParser::new())]
    pub resource_type: String,
    /// Which config (default: `active`, or `persisted` with --mode staged).
    #[arg(value_parser = NonEmptyStringValueParser::new())]
    pub id: Option<String>,
    /// Mode, timeout, dry run.
    #[command(flatten)]
    pub flags: ApplyFlags,
}

/// A service action.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceActionArg {
    /// Start the service.
    Start,
    /// Stop the service.
    Stop,
    /// Stop and start the service.
    Restart,
}

/// `service ID [start|stop|restart]`.
#[derive(Args, Debug, Clone)]
pub struct ServiceArgs {
    /// The service.
    #[arg(value_parser = NonEmptyStringValueParser::new())]
    pub id: String,
    /// What to do (default: show it).
    #[arg(value_enum)]
    pub action: Option<ServiceActionArg>,
}

/// `logs SERVICE`.
#[derive(Args, Debug, Clone)]
pub struct LogsArgs {
    /// The service.
    #[arg(value_parser = NonEmptyStringValueParser::new())]
    pub service: String,
    /// Keep printing new lines (until interrupted).
    #[arg(short, long)]
    pub follow: bool,
    /// Start with the last N lines (default: every kept line).
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
}

/// `events`.
#[derive(Args, Debug, Clone)]
pub struct EventsArgs {
    /// Start with the last N past events (default 0: only new ones; -1: every kept one).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub tail: i64,
}

/// `version`.
#[derive(Args, Debug, Clone)]
pub struct VersionArgs {
    /// The client's version only (no node is called).
    #[arg(long)]
    pub client: bool,
}

/// `gen ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum GenCommand {
    /// A cluster CA: ca.pem and ca-key.pem.
    Ca(GenCaArgs),
    /// A node's server certificate and the admin, operator and reader client certificates,
    /// signed by the CA.
    Certs(GenCertsArgs),
    /// Starter machine configs (controlplane.yaml, worker.yaml) and, from the certificates in
    /// --pki, a client config with a context for the cluster.
    Config(GenConfigArgs),
}

/// `gen ca`.
#[derive(Args, Debug, Clone)]
pub struct GenCaArgs {
    /// Where to write.
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub out: PathBuf,
    /// The CA's Organization.
    #[arg(long, default_value = "cosi")]
    pub organization: String,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

/// `gen certs`.
#[derive(Args, Debug, Clone)]
pub struct GenCertsArgs {
    /// Where ca.pem and ca-key.pem are (default: --out).
    #[arg(long, value_name = "DIR")]
    pub ca_dir: Option<PathBuf>,
    /// Where to write.
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub out: PathBuf,
    /// IP addresses the node's server certificate is for (comma separated or repeated).
    #[arg(long = "address", value_delimiter = ',', value_name = "IP")]
    pub addresses: Vec<std::net::IpAddr>,
    /// DNS names the node's server certificate is for (comma separated or repeated).
    #[arg(long = "name", value_delimiter = ',', value_name = "NAME")]
    pub names: Vec<String>,
    /// The server certificate's file name (`<name>.pem`, `<name>-key.pem`).
    #[arg(long, default_value = "server")]
    pub server_file: String,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

/// The kubelet image of the starter configs (`gen config --kubelet-image`).
pub const DEFAULT_KUBELET_IMAGE: &str = "ghcr.io/siderolabs/kubelet:v1.31.1";

/// `gen config CLUSTER ENDPOINT`.
#[derive(Args, Debug, Clone)]
pub struct GenConfigArgs {
    /// The cluster name.
    pub cluster: String,
    /// The cluster's control plane endpoint, `https://host:port`.
    pub endpoint: String,
    /// Where to write.
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub out: PathBuf,
    /// The hostname to put in the configs.
    #[arg(long)]
    pub hostname: Option<String>,
    /// The kubelet's image (`machine.kubelet.image`); the reference `node` daemon runs its
    /// demo kubelet for `ghcr.io/siderolabs/kubelet`. `none` leaves the kubelet out.
    #[arg(long, default_value = DEFAULT_KUBELET_IMAGE, value_name = "IMAGE")]
    pub kubelet_image: String,
    /// Where the certificates are (ca.pem, admin.pem, ...): writes `cosiconfig` with a context
    /// per client certificate found there.
    #[arg(long, value_name = "DIR")]
    pub pki: Option<PathBuf>,
    /// The API endpoints the client config names (default: the endpoint's host, port 50000).
    #[arg(long, value_delimiter = ',', value_name = "ADDRESS")]
    pub endpoints: Vec<String>,
    /// Embed the certificates in the client config instead of naming their files.
    #[arg(long)]
    pub inline: bool,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

/// `config ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum ConfigCommand {
    /// Lists the contexts.
    Contexts,
    /// Makes a context the current one.
    UseContext {
        /// The context.
        name: String,
    },
    /// Describes the current (or --context) context and its certificate.
    Info,
    /// Adds (or replaces) a context.
    Add(ConfigAddArgs),
}

/// `config add NAME`.
#[derive(Args, Debug, Clone)]
pub struct ConfigAddArgs {
    /// The context's name.
    pub name: String,
    /// The cluster CA certificate file.
    #[arg(long, value_name = "FILE")]
    pub ca: PathBuf,
    /// The client certificate file.
    #[arg(long, value_name = "FILE")]
    pub crt: PathBuf,
    /// The client key file.
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
    /// Endpoints (comma separated or repeated).
    #[arg(long, value_delimiter = ',', value_name = "ADDRESS")]
    pub endpoints: Vec<String>,
    /// Default nodes (comma separated or repeated).
    #[arg(long = "default-nodes", value_delimiter = ',', value_name = "ADDRESS")]
    pub default_nodes: Vec<String>,
    /// Embed the certificates instead of naming their files.
    #[arg(long)]
    pub inline: bool,
}
