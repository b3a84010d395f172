//! What a hostile or broken node sends cannot take over the operator's terminal: control
//! characters (and bidirectional controls and invisible spaces) in ids, values, messages and
//! error texts reach the output escaped (`\u{1b}`, `\u{202e}`),
//! never raw (`logs` prints a service's raw output on purpose and is not covered here); and a
//! resource the CLI cannot print does not hide the others.

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use cosi_api::machine::{
    ApplyMode, ApplyOutcome, ApplyRequest, EventStream, EventTail, LogRequest, LogStream, Machine,
    ServiceAction, ServiceEvent, ServiceHealth, ServiceStatus, VersionInfo,
};
use cosi_api::server::ServerHandle;
use cosi_core::{CreateOptions, Error, Resource, ResourceDefinition, ResourceSpec, State};
use support::{run_at, serve, Cluster, Note};

/// What a hostile node puts in every text it sends: a window title, a screen clear, a carriage
/// return that would overwrite the line, a C1 CSI, a newline that would forge a line, a
/// right-to-left override that would make the rest read backwards and a zero-width space.
const HOSTILE: &str =
    "\u{1b}]0;owned\u{7}\u{1b}[2J\rx\u{9b}1m\nerror: forged\u{202e}dekcol\u{200b}";

/// [`HOSTILE`] as the operator must see it.
const ESCAPED: &str =
    "\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\rx\\u{9b}1m\\nerror: forged\\u{202e}dekcol\\u{200b}";

/// A machine service whose every answer carries its text ([`HOSTILE`] unless a test says
/// otherwise): version fields and apply accounts, and refusals for everything else.
struct HostileMachine(String);

impl HostileMachine {
    fn refusal(&self) -> Error {
        Error::AccessDenied {
            subject: "machine".into(),
            message: self.0.clone(),
        }
    }
}

#[async_trait]
impl Machine for HostileMachine {
    async fn apply_configuration(&self, _: ApplyRequest) -> cosi_core::Result<ApplyOutcome> {
        Ok(ApplyOutcome {
            mode: ApplyMode::NoReboot,
            details: self.0.clone(),
            warnings: vec![self.0.clone()],
            diff: String::new(),
            version: 2,
        })
    }
    async fn services(&self) -> cosi_core::Result<Vec<ServiceStatus>> {
        Err(self.refusal())
    }
    async fn service_action(&self, _: &str, _: ServiceAction) -> cosi_core::Result<String> {
        Err(self.refusal())
    }
    async fn logs(&self, _: LogRequest) -> cosi_core::Result<LogStream> {
        Err(self.refusal())
    }
    async fn events(&self, _: EventTail) -> cosi_core::Result<EventStream> {
        Err(self.refusal())
    }
    async fn version(&self) -> cosi_core::Result<VersionInfo> {
        Ok(VersionInfo {
            tag: self.0.clone(),
            sha: "abc".into(),
            built: "today".into(),
            rust_version: "1.0".into(),
            arch: "amd64".into(),
            os: "linux".into(),
        })
    }
}

/// A node serving [`HostileMachine`] with [`HOSTILE`].
async fn start_hostile_node(cluster: &Cluster) -> (String, ServerHandle) {
    start_node_saying(cluster, HOSTILE).await
}

/// A node serving [`HostileMachine`] with `text`.
async fn start_node_saying(cluster: &Cluster, text: &str) -> (String, ServerHandle) {
    let machine = Arc::new(HostileMachine(text.to_string()));
    serve(cluster, |server| server.with_machine(machine)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_cells_from_a_node_show_control_characters_escaped() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let now = SystemTime::now();
    node.machine.services.set_service(ServiceStatus {
        id: "zz".into(),
        state: "Running".into(),
        health: ServiceHealth {
            unknown: true,
            healthy: false,
            last_message: String::new(),
            last_change: now,
        },
        events: vec![ServiceEvent {
            message: HOSTILE.into(),
            state: "Running".into(),
            time: now - Duration::from_secs(3),
        }],
    });
    let (code, out, err) = run_at(&cluster, now, &["-n", &node.name, "services"]).await;
    assert_eq!((code, err.as_str()), (0, ""));
    let last = out.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "{}   zz        Running   ?        3s ago        {ESCAPED}",
            node.name
        )
    );
    assert_eq!(out.lines().count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_lines_show_the_node_s_text_with_control_characters_escaped() {
    let cluster = Cluster::start(0).await;
    let (hostile, _serving) = start_hostile_node(&cluster).await;
    let (code, out, err) = run_at(&cluster, SystemTime::now(), &["-n", &hostile, "services"]).await;
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!(
            "error: node {hostile} refused list services: {ESCAPED}; it needs a client \
             certificate with role os:reader (see `cosictl config contexts`)\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_fields_from_a_node_show_control_characters_escaped() {
    let cluster = Cluster::start(0).await;
    let (hostile, _serving) = start_hostile_node(&cluster).await;
    let (code, out, err) = run_at(&cluster, SystemTime::now(), &["-n", &hostile, "version"]).await;
    assert_eq!((code, err.as_str()), (0, ""));
    let server = out.split_once("Server:\n").unwrap().1;
    assert_eq!(
        server,
        format!(
            "\tNODE:        {hostile}\n\tTag:         {ESCAPED}\n\tSHA:         abc\n\t\
             Built:       today\n\tRust:        1.0\n\tOS/Arch:     linux/amd64\n"
        )
    );
}

/// The node's account of an apply is lines (the newline stays); a warning is one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_account_from_a_node_shows_control_characters_escaped() {
    let cluster = Cluster::start(0).await;
    let (hostile, _serving) = start_hostile_node(&cluster).await;
    let file = cluster.dir.path().join("controlplane.yaml");
    let (code, out, err) = run_at(
        &cluster,
        SystemTime::now(),
        &["-n", &hostile, "apply-config", "-f", file.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(err, format!("Warning: {ESCAPED}\n"));
    let (first, second) = ESCAPED.split_once("\\n").unwrap();
    assert_eq!(out, format!("{first}\n{second}\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_the_client_cannot_use_is_named_with_control_characters_escaped() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    // A space makes the client refuse the name (and quote it in its warning).
    let name = "Bad \u{1b}]0;owned\u{7}.test.cosi.dev";
    node.state
        .create(
            Resource::new(name, ResourceDefinition::new(name, "test")).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let (code, _, err) = run_at(
        &cluster,
        SystemTime::now(),
        &["-n", &node.name, "get", "notes"],
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "warning: node {} publishes a definition this client cannot use: \
             Bad \\u{{1b}}]0;owned\\u{{7}}.test.cosi.dev: ",
            node.name
        )),
        "{err}"
    );
    assert!(!err.contains('\u{1b}'), "{err}");
}

/// Note `c`, whose text holds a one-character CSI (U+009B), DEL and an ESC sequence.
fn control_note() -> cosi_core::SharedResource {
    let note = Note {
        text: "\u{9b}2J\u{7f}\u{1b}[0m".into(),
        tags: vec![],
    };
    Resource::new("c", note).into_shared()
}

/// `get notes c -o FORMAT` of [`control_note`] on a node that holds it: what the CLI prints,
/// once it succeeded with nothing on stderr.
async fn control_note_as(format: &str) -> String {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    node.state
        .create(control_note(), CreateOptions::default())
        .await
        .unwrap();
    let (code, out, err) = run_at(
        &cluster,
        SystemTime::now(),
        &["-n", &node.name, "get", "notes", "c", "-o", format],
    )
    .await;
    assert_eq!((code, err.as_str()), (0, ""));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_escapes_every_control_character_a_node_sends() {
    let out = control_note_as("json").await;
    assert!(
        out.contains("\"text\": \"\\u009b2J\\u007f\\u001b[0m\""),
        "{out}"
    );
    let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(parsed["spec"]["text"], "\u{9b}2J\u{7f}\u{1b}[0m");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_output_escapes_every_control_character_a_node_sends() {
    let out = control_note_as("yaml").await;
    assert!(!out.chars().any(|c| c.is_control() && c != '\n'), "{out:?}");
    assert!(out.contains("  text: \"\\x9B2J\\x7F\\e[0m\"\n"), "{out}");
}

/// A node's store that dates note `a` before 1970 (which RFC 3339, so YAML and JSON output,
/// cannot write); everything else is the test node's store.
struct MisdatedNotes(Arc<cosi_state::MemoryState>);

fn misdated(resource: cosi_core::SharedResource) -> cosi_core::SharedResource {
    if resource.metadata().id() != "a" || resource.metadata().resource_type() != Note::TYPE {
        return resource;
    }
    let mut metadata = resource.metadata().clone();
    let before_1970 = SystemTime::UNIX_EPOCH - Duration::from_secs(86_400);
    metadata.set_timestamps(before_1970, before_1970);
    Arc::new(cosi_core::DynamicResource {
        metadata,
        spec: resource.spec_value().unwrap(),
    })
}

impl State for MisdatedNotes {
    fn get<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
    ) -> cosi_core::Call<'a, cosi_core::SharedResource> {
        cosi_core::Call::pending(async move { self.0.get(pointer).await.map(misdated) })
    }
    fn list<'a>(
        &'a self,
        kind: &'a cosi_core::Kind,
        options: &'a cosi_core::ListOptions,
    ) -> cosi_core::Call<'a, Vec<cosi_core::SharedResource>> {
        cosi_core::Call::pending(async move {
            let listed = self.0.list(kind, options).await?;
            Ok(listed.into_iter().map(misdated).collect())
        })
    }
    fn create(
        &self,
        resource: cosi_core::SharedResource,
        options: CreateOptions,
    ) -> cosi_core::Call<'_, cosi_core::SharedResource> {
        self.0.create(resource, options)
    }
    fn update(
        &self,
        resource: cosi_core::SharedResource,
        options: cosi_core::UpdateOptions,
    ) -> cosi_core::Call<'_, cosi_core::SharedResource> {
        self.0.update(resource, options)
    }
    fn destroy<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
        options: cosi_core::DestroyOptions,
    ) -> cosi_core::Call<'a, ()> {
        self.0.destroy(pointer, options)
    }
    fn watch<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
        options: cosi_core::WatchOptions,
    ) -> cosi_core::Call<'a, cosi_core::Watch> {
        self.0.watch(pointer, options)
    }
    fn watch_kind<'a>(
        &'a self,
        kind: &'a cosi_core::Kind,
        options: cosi_core::WatchKindOptions,
    ) -> cosi_core::Call<'a, cosi_core::Watch> {
        self.0.watch_kind(kind, options)
    }
}

/// A node serving the store of `node` through [`MisdatedNotes`].
async fn start_misdating_node(
    cluster: &Cluster,
    node: &support::TestNode,
) -> (String, ServerHandle) {
    let state = cosi_api::server::StateService::new(
        Arc::new(MisdatedNotes(node.state.clone())),
        cosi_api::codec::Codec::new(Arc::new(support::registry())),
        cosi_api::auth::StatePolicy::default(),
    );
    serve(cluster, |server| server.with_state(state)).await
}

/// A resource that cannot be written in the output format is reported on its own error line,
/// naming the node and the resource; the node's other resources, and other nodes, still print.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_that_cannot_be_printed_is_an_error_line_and_the_rest_still_print() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let (misdating, _serving) = start_misdating_node(&cluster, node).await;
    let nodes = format!("{misdating},{}", node.name);
    let (code, out, err) = run_at(
        &cluster,
        SystemTime::now(),
        &["-n", &nodes, "get", "notes", "-o", "json"],
    )
    .await;
    assert_eq!(code, 1);
    let printed: Vec<(String, String)> = serde_json::Deserializer::from_str(&out)
        .into_iter::<serde_json::Value>()
        .map(|v| {
            let v = v.unwrap();
            (
                v["node"].as_str().unwrap().to_string(),
                v["metadata"]["id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        printed,
        [
            (misdating.clone(), "b".to_string()),
            (node.name.clone(), "a".to_string()),
            (node.name.clone(), "b".to_string()),
        ]
    );
    assert_eq!(
        err,
        format!(
            "error: node {misdating}: cannot print test/Notes.test.cosi.dev/a as JSON: invalid \
             metadata.created: SystemTime {{ tv_sec: -86400, tv_nsec: 0 }} is outside the years \
             1970 to 9999 that RFC 3339 can write (`-o table` shows it)\n"
        )
    );
}

/// A megabyte of error text from a node reaches the operator as one short line that still
/// says what to do: this project's node cuts the texts it sends at 1 KiB (`cosi_api::status::
/// MAX_STATUS_TEXT`). cosictl's own cap on a line (4 KiB, `terminal::message_line`) is for nodes
/// that do not: the warning and definition tests below reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_of_a_megabyte_from_a_node_arrives_cut_on_one_line_that_says_what_to_do() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let message = format!("\u{1b}{}", "A".repeat(1 << 20));
    let watches = support::KindWatches {
        state: node.state.clone(),
        watch: support::KindWatch::Fail(Error::AccessDenied {
            subject: "notes".into(),
            message,
        }),
    };
    let (failing, _serving) = support::serve_state(&cluster, watches).await;
    let out = cluster
        .cosictl(&["-n", &failing, "get", "notes", "-w"])
        .await;
    assert_eq!(out.code, 1);
    // The node's 1,024 bytes of the message (the escape and 1,023 A's) and its ellipsis.
    assert_eq!(
        out.stderr,
        format!(
            "error: node {failing} refused watch test/Notes.test.cosi.dev: \\u{{1b}}{}…; it \
             needs a client certificate with role os:reader (see `cosictl config contexts`)\n",
            "A".repeat(1023)
        )
    );
}

/// The structured formats keep a node's text exact, however long: only error lines are cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_keeps_a_megabyte_of_text_exact() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let text = format!("\u{1b}{}", "A".repeat(1 << 20));
    let note = Note {
        text: text.clone(),
        tags: vec![],
    };
    node.state
        .create(
            Resource::new("long", note).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let (code, out, err) = run_at(
        &cluster,
        SystemTime::now(),
        &["-n", &node.name, "get", "notes", "long", "-o", "json"],
    )
    .await;
    assert_eq!((code, err.as_str()), (0, ""));
    let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(parsed["spec"]["text"].as_str(), Some(text.as_str()));
}

/// A warning is one line too, and as short: a node's megabyte warning shows its first 3 KiB,
/// the number of bytes cut and its last 1 KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warning_line_shows_a_megabyte_from_a_node_cut_to_4_kib_with_a_marker() {
    let cluster = Cluster::start(0).await;
    let text = format!("\u{1b}{}", "A".repeat(1 << 20));
    let (long, _serving) = start_node_saying(&cluster, &text).await;
    let file = cluster.dir.path().join("controlplane.yaml");
    let out = cluster
        .cosictl(&["-n", &long, "apply-config", "-f", file.to_str().unwrap()])
        .await;
    assert_eq!(out.code, 0);
    assert!(
        out.stderr.len() < 8192,
        "{} bytes of stderr",
        out.stderr.len()
    );
    // The escaped warning: `\u{1b}` (6 bytes) and 2^20 A's.
    let cut = 6 + (1 << 20) - 4096;
    assert_eq!(
        out.stderr,
        format!(
            "Warning: \\u{{1b}}{}[... {cut} bytes cut ...]{}\n",
            "A".repeat(3072 - 6),
            "A".repeat(1024)
        )
    );
}

/// The warning about a definition the client cannot use quotes the node's name for it as
/// every error quotes caller text: its first bytes and how many were cut (a megabyte name made
/// a line the CLI had to cut to 4 KiB before the library cut what it quotes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warning_quoting_a_megabyte_definition_name_quotes_its_start() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    // A space makes the client refuse the name.
    let name = format!("Bad {}.test.cosi.dev", "A".repeat(1 << 20));
    let definition = ResourceDefinition::new(&name, "test");
    node.state
        .create(
            Resource::new(name.as_str(), definition).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let (code, _, err) = run_at(
        &cluster,
        SystemTime::now(),
        &["-n", &node.name, "get", "notes"],
    )
    .await;
    assert_eq!(code, 0);
    let quoted = cosi_core::text::QUOTED_BYTES;
    let cut = name.len() - quoted;
    assert_eq!(
        err,
        format!(
            "warning: node {} publishes a definition this client cannot use: {}… ({cut} bytes \
             cut): invalid resource type: \"{}\"… ({cut} bytes cut) contains ' ': names have \
             no whitespace, control characters, bidirectional controls, invisible spaces or \
             '/'\n",
            node.name,
            &name[..quoted],
            &name[..quoted],
        )
    );
    assert!(err.len() < 1024, "{} bytes of stderr", err.len());
}

/// An error line is cut at 4 KiB however it grows long, here by quoting twice an 8 KiB id the
/// operator typed: its first 3 KiB, a marker with the number of bytes cut, its last 1 KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_line_longer_than_4_kib_is_cut_in_the_middle_with_a_marker() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let id = "a".repeat(8192);
    let out = cluster
        .cosictl(&["-n", &node.name, "get", "notes", &id])
        .await;
    assert_eq!(out.code, 1);
    let pointer = format!("test/Notes.test.cosi.dev/{id}");
    let whole = format!("node {}: {pointer} not found (get {pointer})", node.name);
    assert_eq!(
        out.stderr,
        format!(
            "error: {}[... {} bytes cut ...]{}\n",
            &whole[..3072],
            whole.len() - 4096,
            &whole[whole.len() - 1024..]
        )
    );
}
