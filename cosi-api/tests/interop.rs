//! Wire compatibility with the reference runtime, both ways, using its own binaries in
//! `../shared/peer/` (relative to the repository root; `COSI_PEER_DIR` overrides):
//!
//! - the reference client (`cosi-go-interop -addr`) runs its 33-step scenario against this
//!   crate's State server, over h2c and over mutual TLS;
//! - `RemoteState` runs the backend conformance rules against the reference server
//!   (`cosi-go-interop -serve`) — those that server implements; the others are listed in
//!   [`RULES_THE_REFERENCE_DOES_NOT_IMPLEMENT`] with the reason.
//!
//! A plain harness (`harness = false`): where the peer binary is absent (a user's clone) it
//! prints that loudly and runs nothing, so nothing is counted as passed;
//! `scripts/interop.sh` turns that into a failure in CI.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use cosi_api::auth::{ControllerOwners, Role, StatePolicy};
use cosi_api::client::{channel, ClientSecurity, RemoteState};
use cosi_api::codec::{Codec, SpecCodec};
use cosi_api::pki::{CertificateAuthority, CERT_VALIDITY};
use cosi_api::server::{ApiServer, Security, StateService};
use cosi_core::{Registry, ResourceSpec, State};
use cosi_state::conformance::{self, Gadget, Subject, Widget};
use cosi_state::MemoryState;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::Command;

const STEP_TIMEOUT: Duration = Duration::from_secs(180);

/// The reference client's resource type, as a serde type.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct InteropResource {
    label: String,
    value: i64,
}

impl ResourceSpec for InteropResource {
    const TYPE: &'static str = "InteropResources.interop.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "interop";
}

/// Its protobuf form (`proto_spec`): `{string label = 1; int64 value = 2;}`.
#[derive(Clone, PartialEq, prost::Message)]
struct InteropSpecProto {
    #[prost(string, tag = "1")]
    label: String,
    #[prost(int64, tag = "2")]
    value: i64,
}

struct InteropCodec;

impl SpecCodec for InteropCodec {
    fn encode(&self, spec: &serde_json::Value) -> Result<Vec<u8>, String> {
        let spec: InteropResource =
            serde_json::from_value(spec.clone()).map_err(|e| e.to_string())?;
        Ok(prost::Message::encode_to_vec(&InteropSpecProto {
            label: spec.label,
            value: spec.value,
        }))
    }

    fn decode(&self, bytes: &[u8]) -> Result<serde_json::Value, String> {
        let spec: InteropSpecProto = prost::Message::decode(bytes).map_err(|e| e.to_string())?;
        serde_json::to_value(InteropResource {
            label: spec.label,
            value: spec.value,
        })
        .map_err(|e| e.to_string())
    }
}

/// `COSI_PEER_DIR`, else `shared/peer` beside the repository (a worktree one level further
/// down, `wt/NAME`, finds it beside its parent).
fn peer_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("COSI_PEER_DIR") {
        return PathBuf::from(dir);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let beside = root.join("../shared/peer");
    let above = root.join("../../shared/peer");
    if !beside.join("cosi-go-interop").exists() && above.join("cosi-go-interop").exists() {
        above
    } else {
        beside
    }
}

fn interop_binary() -> PathBuf {
    peer_dir().join("cosi-go-interop")
}

fn interop_codec() -> Codec {
    let mut registry = Registry::new();
    registry.register::<InteropResource>().unwrap();
    Codec::new(Arc::new(registry)).with_spec_codec(InteropResource::TYPE, InteropCodec)
}

/// Runs the reference client with `args`; returns its output, failing unless it reports all
/// 33 steps.
async fn run_reference_client(args: &[&str]) -> Result<(), String> {
    let output = tokio::time::timeout(
        STEP_TIMEOUT,
        Command::new(interop_binary())
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| format!("the reference client did not finish within {STEP_TIMEOUT:?}"))?
    .map_err(|e| format!("cannot run the reference client: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success() && stdout.contains("interop: 33 steps ok") {
        Ok(())
    } else {
        Err(format!(
            "the reference client failed ({}):\n{stdout}\n{stderr}",
            output.status
        ))
    }
}

async fn reference_client_passes_over_h2c() -> Result<(), String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let state = Arc::new(MemoryState::default());
    let server = ApiServer::new(Security::Plaintext)
        .with_state(StateService::new(
            state,
            interop_codec(),
            StatePolicy::default(),
        ))
        .serve(listener)
        .map_err(|e| e.to_string())?;
    let result = run_reference_client(&["-addr", &address.to_string()]).await;
    server.shutdown().await.map_err(|e| e.to_string())?;
    result
}

async fn reference_client_passes_over_mutual_tls() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ca = CertificateAuthority::generate("cosi").map_err(|e| e.to_string())?;
    let server_identity = ca
        .issue_server(&["127.0.0.1".parse().unwrap()], &[], CERT_VALIDITY)
        .map_err(|e| e.to_string())?;
    let admin = ca
        .issue_client("interop", Role::Admin, CERT_VALIDITY)
        .map_err(|e| e.to_string())?;
    let (ca_path, _) = ca
        .certified()
        .write_pem(dir.path(), "ca")
        .map_err(|e| e.to_string())?;
    let (cert, key) = admin
        .write_pem(dir.path(), "admin")
        .map_err(|e| e.to_string())?;

    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    // The scenario writes a resource owned by "interop-owner", which is no controller here:
    // the node names its controllers, and only their resources are out of reach.
    let policy = StatePolicy::new(["MachineConfigs.config.cosi.dev"]).with_controller_owners(
        ControllerOwners::Named(["AddressController".to_string()].into()),
    );
    let state = Arc::new(MemoryState::default());
    let server = ApiServer::new(Security::MutualTls {
        identity: server_identity,
        client_ca_pem: ca.cert_pem().to_string(),
    })
    .with_state(StateService::new(state, interop_codec(), policy))
    .serve(listener)
    .map_err(|e| e.to_string())?;
    let result = run_reference_client(&[
        "-addr",
        &address.to_string(),
        "-ca",
        ca_path.to_str().unwrap(),
        "-cert",
        cert.to_str().unwrap(),
        "-key",
        key.to_str().unwrap(),
    ])
    .await;
    server.shutdown().await.map_err(|e| e.to_string())?;
    result
}

/// Conformance rules the reference server does not implement, and why.
const RULES_THE_REFERENCE_DOES_NOT_IMPLEMENT: &[(&str, &str)] = &[
    ("kind_watch_tails_recent_events", "tail_events replays a different window (its inmem history is 100 events with a gap of 5, not the suite's 32)"),
    ("watcher_behind_window_receives_compacted_catch_up", "no catch-up: a watcher that falls behind its inmem history gets a fatal buffer overrun"),
    ("watch_resumed_from_bookmark_behind_window_converges", "no catch-up: a bookmark outside its history is refused"),
    ("strict_watcher_behind_window_gets_overrun_error", "no strict mode (the option is this project's addition); overruns end watches with a plain error"),
    ("single_watch_behind_window_catches_up_to_latest_state", "no catch-up (buffer overrun instead)"),
    ("strict_single_watch_behind_window_gets_overrun_error", "no strict mode"),
    ("timestamps_are_set_by_the_store", "it keeps the created timestamp the client sends instead of stamping its own"),
    ("update_cannot_change_owner", "Update writes the owner the client sends (the owner check compares the option, not the stored value against the new one)"),
    ("typed_downcast_mismatch_is_an_error", "not a server rule: the typed check is this client's decoding, covered by the loopback suite"),
    ("label_operators_select_on_list", "numeric comparisons read unit suffixes differently there (mem=1.5k is not below-or-equal 1500 on the reference)"),
    ("label_operators_select_on_watch", "the same numeric comparison difference, on watch filters"),
];

type Rule = fn(&Subject) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

macro_rules! rules {
    ($($rule:ident),* $(,)?) => {
        &[$((stringify!($rule), (|s: &Subject| Box::pin(conformance::$rule(s))) as Rule)),*]
    };
}

/// The rules run against the reference server.
const RULES: &[(&str, Rule)] = rules![
    create_get_list_destroy,
    list_is_sorted_by_id,
    create_of_existing_resource_conflicts,
    update_of_missing_resource_is_not_found,
    update_with_stale_version_conflicts,
    update_with_future_version_conflicts,
    update_of_tearing_down_resource_is_phase_conflict_unless_expected,
    update_checks_owner,
    teardown_checks_owner,
    destroy_checks_owner,
    finalizers_are_changed_without_owner_in_any_phase,
    destroy_with_finalizers_conflicts,
    teardown_is_idempotent_and_ready_only_without_finalizers,
    id_regex_selects_on_list,
    concurrent_finalizer_changes_converge,
    concurrent_modifies_lose_no_update,
    concurrent_creates_one_succeeds_rest_already_exist,
    modify_creates_updates_and_skips_unchanged,
    teardown_and_destroy_completes_when_another_task_destroys,
    single_watch_starts_with_tombstone_for_missing_resource,
    single_watch_starts_with_current_state,
    kind_watch_bootstraps_contents_in_id_order,
    kind_watch_resumes_after_every_bookmark,
    kind_watch_resumes_after_bootstrap_bookmark,
    label_filtered_kind_watch_turns_transitions_into_created_and_destroyed,
    aggregated_watch_delivers_same_events_in_batches,
    id_regex_selects_on_watch,
    concurrent_writers_produce_one_total_order,
    teardown_and_destroy_completes_when_last_finalizer_is_removed,
    concurrent_destroys_one_succeeds_rest_not_found,
];

/// The reference server on a fresh loopback port, ready when it says so on stdout.
struct ReferenceServer {
    child: tokio::process::Child,
    address: std::net::SocketAddr,
}

impl ReferenceServer {
    async fn start() -> Result<Self, String> {
        Self::start_with(&[]).await
    }

    /// The reference server with extra arguments (`-cert`, `-key`, `-ca` for mutual TLS).
    async fn start_with(extra: &[&str]) -> Result<Self, String> {
        // A free port: bind, read it, release it for the peer.
        let address = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?;
        let mut child = Command::new(interop_binary())
            .args(["-serve", &address.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start the reference server: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(STEP_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("# serving") {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        if !ready {
            return Err("the reference server did not report that it is serving".into());
        }
        // Keep draining its stdout so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(ReferenceServer { child, address })
    }
}

fn fixture_codec() -> Codec {
    let mut registry = Registry::new();
    registry.register::<Widget>().unwrap();
    registry.register::<Gadget>().unwrap();
    Codec::new(Arc::new(registry))
}

async fn remote_state_passes_conformance_against_the_reference_server(
    rule: Rule,
) -> Result<(), String> {
    let mut server = ReferenceServer::start().await?;
    let client: Arc<dyn State> = Arc::new(RemoteState::new(
        channel(server.address, None, ClientSecurity::Plaintext).map_err(|e| e.to_string())?,
        fixture_codec(),
    ));
    let subject = Subject::new(client);
    let outcome = tokio::spawn(async move { rule(&subject).await }).await;
    let _ = server.child.kill().await;
    outcome.map_err(|e| match e.try_into_panic() {
        Ok(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "the rule panicked".into()),
        Err(e) => e.to_string(),
    })
}

/// This crate's TLS client (rustls, ALPN h2, a client certificate from its own CA) against the
/// reference server's mutual TLS (Go's crypto/tls and grpc-go).
async fn remote_state_speaks_mutual_tls_with_the_reference_server() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ca = CertificateAuthority::generate("cosi").map_err(|e| e.to_string())?;
    let server_identity = ca
        .issue_server(&["127.0.0.1".parse().unwrap()], &[], CERT_VALIDITY)
        .map_err(|e| e.to_string())?;
    let (ca_path, _) = ca
        .certified()
        .write_pem(dir.path(), "ca")
        .map_err(|e| e.to_string())?;
    let (cert, key) = server_identity
        .write_pem(dir.path(), "server")
        .map_err(|e| e.to_string())?;
    let mut server = ReferenceServer::start_with(&[
        "-cert",
        cert.to_str().unwrap(),
        "-key",
        key.to_str().unwrap(),
        "-ca",
        ca_path.to_str().unwrap(),
    ])
    .await?;
    let identity = ca
        .issue_client("rust", Role::Admin, CERT_VALIDITY)
        .map_err(|e| e.to_string())?;
    let security = ClientSecurity::MutualTls {
        ca_pem: ca.cert_pem().to_string(),
        identity,
    };
    let client: Arc<dyn State> = Arc::new(RemoteState::new(
        channel(server.address, None, security).map_err(|e| e.to_string())?,
        fixture_codec(),
    ));
    let subject = Subject::new(client);
    let outcome = tokio::spawn(async move {
        conformance::create_get_list_destroy(&subject).await;
        conformance::kind_watch_resumes_after_every_bookmark(&subject).await;
    })
    .await;
    let _ = server.child.kill().await;
    outcome.map_err(|e| format!("a rule failed over mutual TLS: {e}"))
}

fn main() {
    let binary = interop_binary();
    if !binary.exists() {
        eprintln!();
        eprintln!(
            "################################################################################"
        );
        eprintln!("# interop: NOT RUN: {} is absent.", binary.display());
        eprintln!(
            "# Wire compatibility with the reference runtime was NOT checked, and nothing here"
        );
        eprintln!("# counts as passed. Set COSI_PEER_DIR to the folder holding cosi-go-interop.");
        eprintln!(
            "################################################################################"
        );
        eprintln!();
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Panics inside rules are reported as failures, not printed twice.
    std::panic::set_hook(Box::new(|_| {}));
    let mut passed = 0;
    let mut failed = Vec::new();
    let mut record = |name: String, result: Result<(), String>| match result {
        Ok(()) => {
            println!("test {name} ... ok");
            passed += 1;
        }
        Err(e) => {
            println!("test {name} ... FAILED");
            failed.push((name, e));
        }
    };
    runtime.block_on(async {
        record(
            "reference_client_passes_over_h2c".into(),
            reference_client_passes_over_h2c().await,
        );
        record(
            "reference_client_passes_over_mutual_tls".into(),
            reference_client_passes_over_mutual_tls().await,
        );
        record(
            "remote_state_speaks_mutual_tls_with_the_reference_server".into(),
            remote_state_speaks_mutual_tls_with_the_reference_server().await,
        );
        for (name, rule) in RULES {
            record(
                format!("remote_state_against_reference_server::{name}"),
                remote_state_passes_conformance_against_the_reference_server(*rule).await,
            );
        }
    });
    for (rule, why) in RULES_THE_REFERENCE_DOES_NOT_IMPLEMENT {
        println!("# not run against the reference server: {rule}: {why}");
    }
    for (name, error) in &failed {
        println!("\n---- {name} ----\n{error}");
    }
    let verdict = if failed.is_empty() { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {verdict}. {passed} passed; {} failed; 0 ignored; 0 measured; 0 filtered out",
        failed.len()
    );
    if !failed.is_empty() {
        std::process::exit(1);
    }
}
