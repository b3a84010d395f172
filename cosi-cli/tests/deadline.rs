//! Every call to a node has a deadline (`--request-timeout`): a node that accepts the
//! connection and then never answers costs the operator the deadline, and the error names the
//! node, the call, the deadline and the flag. A stream that goes on until interrupted is bounded
//! only while it opens.
//!
//! The nodes here are real servers on loopback sockets (mutual TLS, the cluster's certificate)
//! whose machine service (or kind watch) never answers; the deadline is the rule's parameter,
//! and the tests wait on what cosictl prints, never on time. It is 300ms where nothing has to
//! answer in time, and 1s where something must (a connection, a list, a stream's opening), so
//! that a loaded machine does not make the answer late.

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use cosi_api::machine::{
    ApplyOutcome, ApplyRequest, EventStream, EventTail, LogRequest, LogStream, Machine,
    MachineEventPayload, ServiceAction, ServiceStatus, VersionInfo,
};
use cosi_api::server::ServerHandle;
use futures::StreamExt;
use support::{serve, Cluster, SharedOutput};

/// A machine service that takes every call and never answers it; only a log opens, sends its
/// first line and then nothing more (a log that never ends).
struct StuckMachine;

#[async_trait]
impl Machine for StuckMachine {
    async fn apply_configuration(&self, _: ApplyRequest) -> cosi_core::Result<ApplyOutcome> {
        std::future::pending().await
    }
    async fn services(&self) -> cosi_core::Result<Vec<ServiceStatus>> {
        std::future::pending().await
    }
    async fn service_action(&self, _: &str, _: ServiceAction) -> cosi_core::Result<String> {
        std::future::pending().await
    }
    async fn logs(&self, _: LogRequest) -> cosi_core::Result<LogStream> {
        let first = futures::stream::iter([Ok(b"first line\n".to_vec())]);
        Ok(Box::pin(first.chain(futures::stream::pending())))
    }
    async fn events(&self, _: EventTail) -> cosi_core::Result<EventStream> {
        std::future::pending().await
    }
    async fn version(&self) -> cosi_core::Result<VersionInfo> {
        std::future::pending().await
    }
}

/// A node serving [`StuckMachine`].
async fn start_stuck_node(cluster: &Cluster) -> (String, ServerHandle) {
    serve(cluster, |server| {
        server.with_machine(Arc::new(StuckMachine))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_node_never_answers_fails_at_the_deadline_naming_node_call_and_flag() {
    let cluster = Cluster::start(0).await;
    let (stuck, _serving) = start_stuck_node(&cluster).await;
    let out = cluster
        .cosictl(&["-n", &stuck, "--request-timeout", "300ms", "services"])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {stuck} did not answer list services within 300ms; wait longer with \
             --request-timeout DURATION (0: no deadline)\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_the_node_never_opens_fails_at_the_deadline() {
    let cluster = Cluster::start(0).await;
    let (stuck, _serving) = start_stuck_node(&cluster).await;
    let out = cluster
        .cosictl(&["-n", &stuck, "--request-timeout", "300ms", "events"])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {stuck} did not answer events within 300ms; wait longer with \
             --request-timeout DURATION (0: no deadline)\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_the_node_never_opens_fails_at_the_deadline() {
    let cluster = Cluster::start(1).await;
    let watches = support::KindWatches {
        state: cluster.nodes[0].state.clone(),
        watch: support::KindWatch::Hang,
    };
    let (stuck, _serving) = support::serve_state(&cluster, watches).await;
    let out = cluster
        .cosictl(&[
            "-n",
            &stuck,
            "--request-timeout",
            "1s",
            "get",
            "notes",
            "-w",
        ])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {stuck} did not answer watch test/Notes.test.cosi.dev within 1s; \
             wait longer with --request-timeout DURATION (0: no deadline)\n"
        )
    );
}

/// `logs` without `-f` ends by itself, so it is one call: the lines that came are printed,
/// and a log that has not ended by the deadline is an error saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_without_follow_that_does_not_end_fails_at_the_deadline_after_its_lines() {
    let cluster = Cluster::start(0).await;
    let (stuck, _serving) = start_stuck_node(&cluster).await;
    let out = cluster
        .cosictl(&["-n", &stuck, "--request-timeout", "1s", "logs", "kubelet"])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, "first line\n"));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {stuck} did not finish logs kubelet within 1s; wait longer with \
             --request-timeout DURATION (0: no deadline)\n"
        )
    );
}

/// A stream that opened in time goes on past the deadline. The open node is named first, so
/// its deadline starts no later than the stuck node's: once the stuck node's error is printed,
/// the open node's deadline has passed too; an event published after that still arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_opened_in_time_goes_on_past_the_deadline() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let (stuck, _serving) = start_stuck_node(&cluster).await;
    let nodes = format!("{},{stuck}", node.name);
    let out = SharedOutput::default();
    let err = SharedOutput::default();
    let (mut o, mut e) = (out.clone(), err.clone());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let cli = support::cli(
        &cluster,
        &["-n", &nodes, "--request-timeout", "1s", "events"],
    );
    let run = async {
        let mut io = cosi_cli::session::Io::new(&mut o, &mut e).with_stop(async {
            let _ = stop_rx.await;
        });
        cosi_cli::run(cli, &mut io).await
    };
    let drive = async {
        err.wait_for_lines(1).await;
        node.machine
            .services
            .publish_event(MachineEventPayload::Config {
                version: 2,
                mode: cosi_api::machine::ApplyMode::NoReboot,
                message: "applied by admin".into(),
            });
        out.wait_for_lines(2).await;
        let _ = stop_tx.send(());
    };
    let (code, ()) = tokio::join!(run, drive);
    assert_eq!(code, 1);
    assert_eq!(
        err.text(),
        format!(
            "error: node {stuck} did not answer events within 1s; wait longer with \
             --request-timeout DURATION (0: no deadline)\n"
        )
    );
    let n = &node.name;
    let pad = " ".repeat(n.len() - 4);
    assert_eq!(
        out.text(),
        format!(
            "NODE{pad}   ID         EVENT    SOURCE      MESSAGE\n\
             {n}   00000001   config   version 2   applied by admin\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_that_is_not_a_duration_is_a_usage_error() {
    let cluster = Cluster::start(0).await;
    let out = cluster
        .cosictl(&["-n", "127.0.0.1", "--request-timeout", "soon", "services"])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr.lines().next(),
        Some(
            "error: invalid value 'soon' for '--request-timeout <DURATION>': expected number at 0"
        )
    );
}

/// A deadline past what the clock can count (humantime reads up to about 584 billion years) is
/// no deadline: the command runs, it does not panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_beyond_the_clock_is_no_deadline() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0].name;
    let out = cluster
        .cosictl(&[
            "-n",
            node,
            "--request-timeout",
            "500000000000years",
            "logs",
            "kubelet",
            "--tail",
            "1",
        ])
        .await;
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (0, "kubelet line 5\n", "")
    );
}
