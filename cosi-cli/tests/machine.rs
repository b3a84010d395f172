//! `cosictl services`, `service`, `logs`, `events` and `version` against real nodes.

mod support;

use std::time::{Duration, SystemTime};

use cosi_api::machine::{ServiceEvent, ServiceHealth, ServiceStatus};
use support::{run_at, Cluster, SharedOutput};

/// A kubelet that crash-loops: two events, the newest naming the flag.
fn crashing_kubelet(now: SystemTime) -> ServiceStatus {
    ServiceStatus {
        id: "kubelet".into(),
        state: "Waiting".into(),
        health: ServiceHealth {
            unknown: false,
            healthy: false,
            last_message: "service not running".into(),
            last_change: now - Duration::from_secs(90),
        },
        events: vec![
            ServiceEvent {
                message: "Process kubelet started with PID 41".into(),
                state: "Running".into(),
                time: now - Duration::from_secs(1167),
            },
            ServiceEvent {
                message: "Error running kubelet: unknown flag --bogus".into(),
                state: "Waiting".into(),
                time: now - Duration::from_secs(7),
            },
        ],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_show_state_health_and_the_newest_event_with_its_age() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let now = SystemTime::now();
    node.machine.services.set_service(crashing_kubelet(now));
    let (code, out, err) = run_at(&cluster, now, &["-n", &node.name, "services"]).await;
    assert_eq!((code, err.as_str()), (0, ""));
    let n = &node.name;
    let pad = " ".repeat(n.len() - 4);
    assert_eq!(
        out,
        format!(
            "NODE{pad}   SERVICE   STATE     HEALTH   LAST CHANGE   LAST EVENT\n\
             {n}   etcd      Running   OK                     <none>\n\
             {n}   kubelet   Waiting   Fail     7s ago        Error running kubelet: unknown flag --bogus\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_shows_its_events_newest_first() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let now = SystemTime::now();
    node.machine.services.set_service(crashing_kubelet(now));
    let (code, out, err) = run_at(&cluster, now, &["-n", &node.name, "service", "kubelet"]).await;
    assert_eq!((code, err.as_str()), (0, ""));
    let expected = [
        format!("NODE                  {}", node.name),
        "ID                    kubelet".to_string(),
        "STATE                 Waiting".to_string(),
        "HEALTH                Fail".to_string(),
        "LAST HEALTH MESSAGE   service not running".to_string(),
        "EVENTS                [Waiting]: Error running kubelet: unknown flag --bogus (7s ago)"
            .to_string(),
        "                      [Running]: Process kubelet started with PID 41 (19m27s ago)"
            .to_string(),
    ];
    assert_eq!(out, expected.join("\n") + "\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_through_the_binary_age_by_the_real_clock() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let set = SystemTime::now();
    node.machine.services.set_service(crashing_kubelet(set));
    let before = SystemTime::now();
    let out = cluster.cosictl(&["-n", &node.name, "services"]).await;
    let after = SystemTime::now();
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let event = set - Duration::from_secs(7);
    let kubelet = out.stdout.lines().last().unwrap().to_string();
    let candidates: Vec<String> = [before, after]
        .iter()
        .map(|now| {
            format!(
                "{}   kubelet   Waiting   Fail     {} ago        Error running kubelet: unknown flag --bogus",
                node.name,
                cosi_cli::print::age(*now, event)
            )
        })
        .collect();
    assert!(
        candidates.contains(&kubelet),
        "{kubelet:?} not in {candidates:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_service_is_an_error_naming_it_and_the_node() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0].name;
    let out = cluster.cosictl(&["-n", node, "service", "nope"]).await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {node}: service \"nope\" not found (list them with `cosictl services`)\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restarts_a_service_and_sees_the_node_response() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = cluster
        .cosictl(&[
            "--context",
            "demo-operator",
            "-n",
            &node.name,
            "service",
            "kubelet",
            "restart",
        ])
        .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let pad = " ".repeat(node.name.len() - 4);
    assert_eq!(
        out.stdout,
        format!(
            "NODE{pad}   RESPONSE\n{}   Service \"kubelet\" Restart\n",
            node.name
        )
    );
    assert_eq!(
        node.machine.services.snapshot().services[1],
        ("kubelet".to_string(), "Running".to_string(), 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_may_not_restart_a_service_and_is_told_the_role_it_needs() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = cluster
        .cosictl(&[
            "--context",
            "demo-reader",
            "-n",
            &node.name,
            "service",
            "etcd",
            "stop",
        ])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {} refused stop service etcd: not authorized: reader (os:reader) may not \
             call /cosi.machine.MachineService/ServiceStop (needs os:operator); it needs a client \
             certificate with role os:operator (see `cosictl config contexts`)\n",
            node.name
        )
    );
    assert_eq!(node.machine.services.snapshot().services[0].1, "Running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_tail_prints_the_last_lines() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0].name;
    let out = cluster
        .cosictl(&["-n", node, "logs", "etcd", "--tail", "2"])
        .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    assert_eq!(out.stdout, "etcd line 4\netcd line 5\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_several_nodes_prefix_each_line_with_its_node() {
    let cluster = Cluster::start(2).await;
    let nodes = cluster.all_nodes();
    let out = cluster
        .cosictl(&["-n", &nodes, "logs", "etcd", "--tail", "1"])
        .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let mut lines: Vec<&str> = out.stdout.lines().collect();
    lines.sort();
    let mut expected: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("{}: etcd line 5", n.name))
        .collect();
    expected.sort();
    assert_eq!(lines, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_prints_new_lines_as_they_come() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = SharedOutput::default();
    let (mut o, mut e) = (out.clone(), Vec::new());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let cli = support::cli(
        &cluster,
        &["-n", &node.name, "logs", "kubelet", "-f", "--tail", "1"],
    );
    let run = async {
        let mut io = cosi_cli::session::Io::new(&mut o, &mut e).with_stop(async {
            let _ = stop_rx.await;
        });
        cosi_cli::run(cli, &mut io).await
    };
    let drive = async {
        out.wait_for_lines(1).await;
        node.machine
            .services
            .log("kubelet", "unknown flag: --bogus");
        out.wait_for_lines(2).await;
        let _ = stop_tx.send(());
    };
    let (code, ()) = tokio::join!(run, drive);
    assert_eq!(code, 0);
    assert_eq!(out.text(), "kubelet line 5\nunknown flag: --bogus\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_print_past_and_new_events_one_line_each() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    node.machine
        .services
        .publish_event(cosi_api::machine::MachineEventPayload::Config {
            version: 2,
            mode: cosi_api::machine::ApplyMode::NoReboot,
            message: "applied by admin".into(),
        });
    let out = SharedOutput::default();
    let (mut o, mut e) = (out.clone(), Vec::new());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let cli = support::cli(&cluster, &["-n", &node.name, "events", "--tail", "5"]);
    let run = async {
        let mut io = cosi_cli::session::Io::new(&mut o, &mut e).with_stop(async {
            let _ = stop_rx.await;
        });
        cosi_cli::run(cli, &mut io).await
    };
    let drive = async {
        out.wait_for_lines(2).await;
        use cosi_api::machine::Machine;
        node.machine
            .service_action("etcd", cosi_api::machine::ServiceAction::Stop)
            .await
            .unwrap();
        out.wait_for_lines(3).await;
        let _ = stop_tx.send(());
    };
    let (code, ()) = tokio::join!(run, drive);
    assert_eq!(code, 0);
    let n = &node.name;
    let pad = " ".repeat(n.len() - 4);
    assert_eq!(
        out.text(),
        format!(
            // The later row's wider EVENT cell widens that column from then on.
            "NODE{pad}   ID         EVENT    SOURCE      MESSAGE\n\
             {n}   00000001   config   version 2   applied by admin\n\
             {n}   00000002   service   etcd        Stopped: Stop\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_prints_the_client_and_every_node() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0].name;
    let out = cluster.cosictl(&["-n", node, "version"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let (os, arch) = (std::env::consts::OS, std::env::consts::ARCH);
    assert_eq!(
        out.stdout,
        format!(
            "Client:\n\tTag:         v{}\n\tOS/Arch:     {os}/{arch}\nServer:\n\tNODE:        {node}\n\t\
             Tag:         v0.1.0\n\tSHA:         abc123\n\tBuilt:       2026-12-02\n\tRust:        1.90\n\t\
             OS/Arch:     {os}/{arch}\n",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_client_needs_no_node() {
    let cluster = Cluster::start(0).await;
    let out = cluster
        .cosictl(&["--config", "/nonexistent", "version", "--client"])
        .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    assert!(out.stdout.starts_with("Client:\n\tTag:         v"));
}
