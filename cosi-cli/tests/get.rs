//! `cosictl get`: tables, YAML, JSON, definitions, several nodes, refusals, watches — the real
//! binary (and, for watches, the library) against real nodes over mutual TLS.

mod support;

use std::sync::Arc;

use clap::Parser;
use cosi_core::{
    DynamicResource, Resource, ResourceDefinition, ResourceSpec, State, StateExt, UpdateOptions,
};
use support::{dead_address, stamp, Cluster, Note};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_prints_a_table_with_the_node_and_the_print_columns() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0].name;
    let out = cluster.cosictl(&["-n", node, "get", "notes"]).await;
    assert_eq!(out.stderr, "");
    assert_eq!(out.code, 0);
    let pad = " ".repeat(node.len() - 4);
    assert_eq!(
        out.stdout,
        format!(
            "NODE{pad}   NAMESPACE   TYPE   ID   VERSION   TEXT    FIRST TAG\n\
             {node}   test        Note   a    1         hello   x\n\
             {node}   test        Note   b    1         world\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_yaml_puts_the_node_first_and_separates_resources() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = cluster
        .cosictl(&["-n", &node.name, "get", "nt", "-o", "yaml"])
        .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let mut expected = String::new();
    for (id, text, tags) in [("a", "hello", "\n  - x\n  - y"), ("b", "world", " []")] {
        let md = node
            .read(&Note::kind().pointer(id))
            .await
            .metadata()
            .clone();
        if id == "b" {
            expected.push_str("---\n");
        }
        expected.push_str(&format!(
            "node: {}\nmetadata:\n  namespace: test\n  type: Notes.test.cosi.dev\n  id: {id}\n  \
             version: 1\n  phase: running\n  created: {}\n  updated: {}\nspec:\n  tags:{tags}\n  \
             text: {text}\n",
            node.name,
            stamp(md.created()),
            stamp(md.updated()),
        ));
    }
    assert_eq!(out.stdout, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_json_prints_one_object_per_resource_with_the_node_first() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = cluster
        .cosictl(&["-n", &node.name, "get", "notes", "b", "-o", "json"])
        .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let md = node
        .read(&Note::kind().pointer("b"))
        .await
        .metadata()
        .clone();
    assert_eq!(
        out.stdout,
        format!(
            "{{\n  \"node\": \"{}\",\n  \"metadata\": {{\n    \"namespace\": \"test\",\n    \
             \"type\": \"Notes.test.cosi.dev\",\n    \"id\": \"b\",\n    \"version\": 1,\n    \
             \"phase\": \"running\",\n    \"created\": \"{}\",\n    \"updated\": \"{}\"\n  }},\n  \
             \"spec\": {{\n    \"tags\": [],\n    \"text\": \"world\"\n  }}\n}}\n",
            node.name,
            stamp(md.created()),
            stamp(md.updated()),
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_rd_lists_the_definitions_with_their_aliases() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0].name;
    let out = cluster.cosictl(&["-n", node, "get", "rd"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let lines: Vec<&str> = out.stdout.lines().collect();
    let pad = " ".repeat(node.len() - 4);
    assert_eq!(
        lines[0],
        format!(
            "NODE{pad}   NAMESPACE   TYPE                 ID                                  \
             VERSION   ALIASES                  DEFAULT NAMESPACE"
        )
    );
    let cells = |line: &str| -> Vec<String> {
        line.split("   ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mc = lines
        .iter()
        .find(|l| l.contains(" MachineConfigs.config.cosi.dev "))
        .unwrap();
    assert_eq!(
        cells(mc),
        [
            node.as_str(),
            "meta",
            "ResourceDefinition",
            "MachineConfigs.config.cosi.dev",
            "1",
            "[\"mc\",\"machineconfig\"]",
            "config"
        ]
    );
}

/// A node of a later version publishes definitions with a field this client does not know:
/// the client reads what a node wrote tolerantly, so types still resolve and print.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_with_a_field_this_client_does_not_know_still_resolves() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let pointer = ResourceDefinition::definition().kind().pointer(Note::TYPE);
    let published = node.read(&pointer).await;
    let mut spec = published.spec_value().unwrap();
    spec["description"] = "Short texts a test leaves behind".into();
    let newer = DynamicResource {
        metadata: published.metadata().clone(),
        spec,
    };
    node.state
        .update(
            Arc::new(newer),
            UpdateOptions::owned_by(Some(cosi_core::registry::PUBLISHER)),
        )
        .await
        .unwrap();

    let out = cluster.cosictl(&["-n", &node.name, "get", "nt", "a"]).await;

    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let pad = " ".repeat(node.name.len() - 4);
    assert_eq!(
        out.stdout,
        format!(
            "NODE{pad}   NAMESPACE   TYPE   ID   VERSION   TEXT    FIRST TAG\n\
             {}   test        Note   a    1         hello   x\n",
            node.name
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_of_an_unknown_type_names_the_node_and_the_name() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0].name;
    let out = cluster.cosictl(&["-n", node, "get", "widgets"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        format!(
            "error: node {node}: \"widgets\": invalid resource type: no registered type has this \
             full name, plural, singular or alias (list the types it defines with `cosictl get rd`)\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_of_a_missing_id_is_not_found_naming_the_resource() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0].name;
    let out = cluster.cosictl(&["-n", node, "get", "notes", "zzz"]).await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {node}: test/Notes.test.cosi.dev/zzz not found (get test/Notes.test.cosi.dev/zzz)\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_in_another_namespace_reads_that_namespace() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let note = Note {
        text: "elsewhere".into(),
        tags: vec![],
    };
    node.state
        .create(
            Resource::new_in("other", "c", note).into_shared(),
            Default::default(),
        )
        .await
        .unwrap();
    let out = cluster
        .cosictl(&["-n", &node.name, "get", "notes", "--namespace", "other"])
        .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let pad = " ".repeat(node.name.len() - 4);
    assert_eq!(
        out.stdout,
        format!(
            "NODE{pad}   NAMESPACE   TYPE   ID   VERSION   TEXT        FIRST TAG\n\
             {}   other       Note   c    1         elsewhere\n",
            node.name
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sensitive_type_is_refused_to_a_reader_naming_the_role_it_needs() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0].name;
    let out = cluster
        .cosictl(&["--context", "demo-reader", "-n", node, "get", "mc"])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {node} refused get config/MachineConfigs.config.cosi.dev: not \
             authorized: reader (os:reader) may not read a sensitive type; it needs a client \
             certificate with role os:admin (see `cosictl config contexts`)\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_machine_config_prints_as_its_text_for_an_admin() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = cluster
        .cosictl(&["-n", &node.name, "get", "mc", "active", "-o", "json"])
        .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let printed: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        printed["spec"].as_str().unwrap(),
        support::starter_config(cluster.dir.path())
    );
    assert_eq!(printed["metadata"]["version"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_nodes_print_together_and_a_dead_one_is_an_error_line() {
    let cluster = Cluster::start(2).await;
    let dead = dead_address().await;
    let (a, b) = (&cluster.nodes[0].name, &cluster.nodes[1].name);
    let nodes = format!("{a},{dead},{b}");
    let out = cluster.cosictl(&["-n", &nodes, "get", "notes", "a"]).await;
    assert_eq!(out.code, 1);
    let pad = " ".repeat(a.len() - 4);
    assert_eq!(
        out.stdout,
        format!(
            "NODE{pad}   NAMESPACE   TYPE   ID   VERSION   TEXT    FIRST TAG\n\
             {a}   test        Note   a    1         hello   x\n\
             {b}   test        Note   a    1         hello   x\n"
        )
    );
    let prefix = format!("error: node {dead} is unreachable (list the resource definitions): ");
    assert!(out.stderr.starts_with(&prefix), "{}", out.stderr);
    assert!(
        out.stderr.ends_with(&format!(
            "; check that the node runs and listens at {dead}, that -n or the context's nodes \
             name it, and that the cluster CA of the context signed both the node's certificate \
             and the context's client certificate\n"
        )),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.lines().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_after_the_type_is_resolved_still_leaves_the_others() {
    let mut cluster = Cluster::start(2).await;
    let stopped = cluster.nodes[1].name.clone();
    cluster.nodes[1].stop().await;
    let nodes = cluster.all_nodes();
    let out = cluster.cosictl(&["-n", &nodes, "get", "notes", "b"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(out.stdout.lines().count(), 2, "{}", out.stdout);
    assert!(out
        .stderr
        .starts_with(&format!("error: node {stopped} is unreachable")));
}

/// Runs `args` through the library until `drive` is done, then stops it; returns the exit code
/// and both outputs.
async fn watching<F: std::future::Future<Output = ()>>(
    cluster: &Cluster,
    args: &[&str],
    drive: impl FnOnce(support::SharedOutput) -> F,
) -> (i32, String, String) {
    let out = support::SharedOutput::default();
    let err = support::SharedOutput::default();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (mut o, mut e) = (out.clone(), err.clone());
    let cli = support::cli(cluster, args);
    let run = async {
        let mut io = cosi_cli::session::Io::new(&mut o, &mut e).with_stop(async {
            let _ = stop_rx.await;
        });
        cosi_cli::run(cli, &mut io).await
    };
    let driver = async {
        drive(out.clone()).await;
        let _ = stop_tx.send(());
    };
    let (code, ()) = tokio::join!(run, driver);
    (code, out.text(), err.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_marks_created_updated_and_destroyed_rows() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let (code, out, err) = watching(
        &cluster,
        &["-n", &node.name, "get", "notes", "-w"],
        |out| async move {
            out.wait_for_lines(3).await;
            let state = &node.state;
            let template = Resource::new(
                "a",
                Note {
                    text: String::new(),
                    tags: vec![],
                },
            );
            state
                .modify(template, Default::default(), |r| {
                    r.spec.text = "HELLO".into();
                    Ok(())
                })
                .await
                .unwrap();
            out.wait_for_lines(4).await;
            state
                .destroy(&Note::kind().pointer("b"), Default::default())
                .await
                .unwrap();
            out.wait_for_lines(5).await;
            let note = Note {
                text: "new".into(),
                tags: vec![],
            };
            state
                .create(Resource::new("c", note).into_shared(), Default::default())
                .await
                .unwrap();
            out.wait_for_lines(6).await;
        },
    )
    .await;
    assert_eq!((code, err.as_str()), (0, ""));
    let n = &node.name;
    let pad = " ".repeat(n.len() - 4);
    assert_eq!(
        out,
        format!(
            "NODE{pad}   *   NAMESPACE   TYPE   ID   VERSION   TEXT    FIRST TAG\n\
             {n}   +   test        Note   a    1         hello   x\n\
             {n}   +   test        Note   b    1         world\n\
             {n}       test        Note   a    2         HELLO   x\n\
             {n}   -   test        Note   b    1         world\n\
             {n}   +   test        Note   c    1         new\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_of_one_id_shows_only_that_resource_with_its_event_in_yaml() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let (code, out, err) = watching(
        &cluster,
        &["-n", &node.name, "get", "notes", "b", "-w", "-o", "yaml"],
        |out| async move {
            out.wait_for_lines(1).await;
            node.state
                .destroy(&Note::kind().pointer("a"), Default::default())
                .await
                .unwrap();
            node.state
                .destroy(&Note::kind().pointer("b"), Default::default())
                .await
                .unwrap();
            out.wait_for_lines(27).await;
        },
    )
    .await;
    assert_eq!((code, err.as_str()), (0, ""));
    let events: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("event: ") || l.starts_with("  id: "))
        .collect();
    assert_eq!(
        events,
        ["event: created", "  id: b", "event: destroyed", "  id: b"]
    );
    assert!(out.starts_with(&format!("node: {}\nevent: created\nmetadata:\n", node.name)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_certificate_another_ca_signed_is_unreachable_saying_why() {
    let cluster = Cluster::start(0).await;
    let stranger = cosi_api::pki::CertificateAuthority::generate("elsewhere").unwrap();
    let identity = stranger
        .issue_server(
            &["127.0.0.1".parse().unwrap()],
            &[],
            cosi_api::pki::CERT_VALIDITY,
        )
        .unwrap();
    let node = support::start_node(
        &identity,
        stranger.cert_pem(),
        &support::starter_config(cluster.dir.path()),
    )
    .await;
    let out = cluster.cosictl(&["-n", &node.name, "get", "notes"]).await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert!(
        out.stderr.starts_with(&format!(
            "error: node {} is unreachable (list the resource definitions): ",
            node.name
        )),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("UnknownIssuer"), "{}", out.stderr);
    assert!(out
        .stderr
        .ends_with("signed both the node's certificate and the context's client certificate\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_of_several_nodes_prints_both_and_reports_a_dead_one() {
    let cluster = Cluster::start(2).await;
    let dead = dead_address().await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let nodes = format!("{},{dead},{}", a.name, b.name);
    let (code, out, err) = watching(
        &cluster,
        &["-n", &nodes, "get", "notes", "a", "-w"],
        |out| async move {
            out.wait_for_lines(3).await;
            b.state
                .destroy(&Note::kind().pointer("a"), Default::default())
                .await
                .unwrap();
            out.wait_for_lines(4).await;
        },
    )
    .await;
    assert_eq!(code, 1);
    let pad = " ".repeat(a.name.len() - 4);
    let mut bootstrap: Vec<&str> = out.lines().skip(1).take(2).collect();
    bootstrap.sort();
    let mut expected = [
        format!(
            "{}   +   test        Note   a    1         hello   x",
            a.name
        ),
        format!(
            "{}   +   test        Note   a    1         hello   x",
            b.name
        ),
    ];
    expected.sort();
    assert_eq!(
        out.lines().next().unwrap(),
        format!("NODE{pad}   *   NAMESPACE   TYPE   ID   VERSION   TEXT    FIRST TAG")
    );
    assert_eq!(bootstrap, expected);
    assert_eq!(
        out.lines().nth(3).unwrap(),
        format!(
            "{}   -   test        Note   a    1         hello   x",
            b.name
        )
    );
    assert!(
        err.starts_with(&format!("error: node {dead} is unreachable")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_of_another_ca_is_turned_away_with_the_ca_hint() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0].name;
    let stranger = cosi_api::pki::CertificateAuthority::generate("elsewhere").unwrap();
    let dir = cluster.dir.path();
    let client = stranger
        .issue_client(
            "mallory",
            cosi_api::auth::Role::Admin,
            cosi_api::pki::CERT_VALIDITY,
        )
        .unwrap();
    let (crt, key) = client.write_pem(dir, "mallory").unwrap();
    let ca = dir.join("pki/ca.pem");
    let added = cluster
        .cosictl(&[
            "config",
            "add",
            "mallory",
            "--ca",
            ca.to_str().unwrap(),
            "--crt",
            crt.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ])
        .await;
    assert_eq!(added.code, 0, "{}", added.stderr);
    let out = cluster
        .cosictl(&["--context", "mallory", "-n", node, "get", "notes"])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert!(
        out.stderr.starts_with(&format!(
            "error: node {node} is unreachable (list the resource definitions): "
        )),
        "{}",
        out.stderr
    );
    assert!(out
        .stderr
        .ends_with("signed both the node's certificate and the context's client certificate\n"));
}

/// An empty id (or type, namespace, service) names nothing: it is refused when the command line is parsed, for every
/// command that takes one. (`get -w TYPE ""` used to watch an id that can never exist until
/// interrupted, and the others asked the node.)
#[test]
fn an_empty_name_is_refused_when_the_command_line_is_parsed() {
    for args in [
        &["get", ""][..],
        &["get", "notes", ""],
        &["get", "notes", "--namespace", ""],
        &["get", "notes", "", "-w"],
        &["patch", "mc", "", "-p", "{}"],
        &["edit", "mc", ""],
        &["service", ""],
        &["logs", ""],
    ] {
        let argv = std::iter::once("cosictl").chain(args.iter().copied());
        let error = cosi_cli::args::Cli::try_parse_from(argv).unwrap_err();
        assert_eq!(
            error.kind(),
            clap::error::ErrorKind::InvalidValue,
            "{args:?}"
        );
    }
}
