//! `cosictl gen` and `cosictl config`: the files a cluster starts from, and the client config.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use support::Cluster;

fn organizations(path: &Path) -> Vec<String> {
    let pem = std::fs::read(path).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
    let cert = pem.parse_x509().unwrap();
    cert.subject()
        .iter_organization()
        .map(|o| o.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gen_certs_issues_one_role_per_client_certificate_and_private_keys() {
    let cluster = Cluster::start(0).await;
    let pki = cluster.dir.path().join("pki");
    for (file, role) in [
        ("admin.pem", "os:admin"),
        ("operator.pem", "os:operator"),
        ("reader.pem", "os:reader"),
    ] {
        assert_eq!(organizations(&pki.join(file)), [role]);
    }
    for key in [
        "ca-key.pem",
        "server-key.pem",
        "admin-key.pem",
        "reader-key.pem",
    ] {
        let mode = std::fs::metadata(pki.join(key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    let pem = std::fs::read(pki.join("server.pem")).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
    let cert = pem.parse_x509().unwrap();
    let san = cert.subject_alternative_name().unwrap().unwrap();
    assert_eq!(
        format!("{:?}", san.value.general_names),
        "[IPAddress([127, 0, 0, 1])]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gen_never_overwrites_without_force() {
    let cluster = Cluster::start(0).await;
    let pki = cluster.dir.path().join("pki");
    let before = std::fs::read_to_string(pki.join("ca.pem")).unwrap();
    let out = cluster
        .cosictl(&["gen", "ca", "--out", pki.to_str().unwrap()])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: {}/ca.pem exists: remove it or pass --force to overwrite\n",
            pki.display()
        )
    );
    assert_eq!(std::fs::read_to_string(pki.join("ca.pem")).unwrap(), before);
    let out = cluster
        .cosictl(&["gen", "ca", "--out", pki.to_str().unwrap(), "--force"])
        .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_ne!(std::fs::read_to_string(pki.join("ca.pem")).unwrap(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_starter_configs_are_valid_machine_configs_of_their_role() {
    let cluster = Cluster::start(0).await;
    for (file, role) in [
        ("controlplane.yaml", "controlplane"),
        ("worker.yaml", "worker"),
    ] {
        let text = std::fs::read_to_string(cluster.dir.path().join(file)).unwrap();
        let config = cosi_node::config::MachineConfig::from_text(&text).unwrap();
        let validation = cosi_node::config::validate::validate(config.config());
        assert!(validation.is_ok(), "{file}: {:?}", validation.errors);
        assert_eq!(validation.warnings, [], "{file}");
        assert_eq!(
            config.config().machine().machine_type.unwrap().as_str(),
            role
        );
        assert_eq!(config.config().cluster().name.as_deref(), Some("demo"));
        assert_eq!(
            config.config().machine().network.hostname.as_deref(),
            Some("node-1")
        );
    }
}

/// What `gen config` is given is written as one value each, whatever its characters: a line
/// break in a hostname does not become keys of the config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gen_config_writes_a_multi_line_argument_as_one_value() {
    let cluster = Cluster::start(0).await;
    let out = cluster.dir.path().join("odd");
    let hostname = "w-1\nmachine:\n  type: controlplane";
    let cli = cluster
        .cosictl(&[
            "gen",
            "config",
            "demo",
            "https://127.0.0.1:6443",
            "--hostname",
            hostname,
            "--out",
            out.to_str().unwrap(),
        ])
        .await;
    assert_eq!((cli.code, cli.stderr.as_str()), (0, ""));
    let text = std::fs::read_to_string(out.join("worker.yaml")).unwrap();
    let config: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(config["machine"]["type"].as_str(), Some("worker"));
    assert_eq!(
        config["machine"]["network"]["hostname"].as_str(),
        Some(hostname)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_contexts_lists_one_context_per_role_with_the_current_one_marked() {
    let cluster = Cluster::start(0).await;
    let out = cluster.cosictl(&["config", "contexts"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    assert_eq!(
        out.stdout,
        "CURRENT   NAME            ENDPOINTS         NODES\n\
         *         demo            127.0.0.1:50000\n\
         \x20         demo-operator   127.0.0.1:50000\n\
         \x20         demo-reader     127.0.0.1:50000\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_context_changes_the_current_context() {
    let cluster = Cluster::start(0).await;
    let out = cluster
        .cosictl(&["config", "use-context", "demo-reader"])
        .await;
    assert_eq!(
        (out.code, out.stderr.as_str(), out.stdout.as_str()),
        (0, "", "")
    );
    let out = cluster.cosictl(&["config", "info"]).await;
    assert!(
        out.stdout.starts_with("Current context:     demo-reader\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("\nRoles:               os:reader\n"),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_context_of_an_unknown_name_lists_the_known_ones() {
    let cluster = Cluster::start(0).await;
    let out = cluster.cosictl(&["config", "use-context", "prod"]).await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        format!(
            "error: client config {}: has no context \"prod\" (contexts: demo, demo-operator, demo-reader)\n",
            cluster.config_path().display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_info_describes_the_context_and_its_certificate() {
    let cluster = Cluster::start(0).await;
    let out = cluster.cosictl(&["config", "info"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "Current context:     demo",
            "Nodes:               not defined",
            "Endpoints:           127.0.0.1:50000",
            "Roles:               os:admin"
        ]
    );
    assert!(
        lines[4].starts_with("Certificate expires: 365 days from now ("),
        "{}",
        lines[4]
    );
}

/// The client config is outside input too: what `config info` quotes from it (the context's
/// name, nodes and endpoints) is printed with its control characters escaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_info_shows_control_characters_of_the_config_escaped() {
    let cluster = Cluster::start(0).await;
    let path = cluster.config_path();
    let text = std::fs::read_to_string(&path).unwrap().replacen(
        "  demo:\n    endpoints:\n    - 127.0.0.1:50000\n",
        "  \"demo\\e[2J\":\n    endpoints:\n    - \"\\e]0;x\\a127.0.0.1\"\n    nodes: [\"a\\rb\"]\n",
        1,
    );
    std::fs::write(&path, text).unwrap();
    let out = cluster
        .cosictl(&["--context", "demo\u{1b}[2J", "config", "info"])
        .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "Current context:     demo\\u{1b}[2J",
            "Nodes:               a\\rb",
            "Endpoints:           \\u{1b}]0;x\\u{7}127.0.0.1",
            "Roles:               os:admin"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_added_with_inline_certificates_reaches_the_node() {
    let cluster = Cluster::start(1).await;
    let pki = cluster.dir.path().join("pki");
    let node = &cluster.nodes[0].name;
    let file = |name: &str| pki.join(name).to_str().unwrap().to_string();
    let out = cluster
        .cosictl(&[
            "config",
            "add",
            "inline-reader",
            "--ca",
            &file("ca.pem"),
            "--crt",
            &file("reader.pem"),
            "--key",
            &file("reader-key.pem"),
            "--default-nodes",
            node,
            "--inline",
        ])
        .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    let text = std::fs::read_to_string(cluster.config_path()).unwrap();
    assert!(text.contains("-----BEGIN CERTIFICATE-----"), "{text}");
    let out = cluster
        .cosictl(&[
            "--context",
            "inline-reader",
            "get",
            "notes",
            "a",
            "-o",
            "json",
        ])
        .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""));
    assert!(
        out.stdout
            .starts_with(&format!("{{\n  \"node\": \"{node}\",")),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_client_config_says_how_to_make_one() {
    let cluster = Cluster::start(0).await;
    let out = cluster
        .cosictl(&[
            "--config",
            "/nonexistent/config",
            "-n",
            "127.0.0.1",
            "get",
            "mc",
        ])
        .await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "error: client config /nonexistent/config: does not exist: make one with `cosictl gen \
         config --pki DIR` or `cosictl config add`, or name another with --config or $COSICONFIG\n"
    );
}

/// A file named as the client config that is far too large (a log named by mistake, or
/// `/dev/zero`, which never ends) is refused after the limit, not read into memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_config_larger_than_the_limit_is_refused_naming_the_file() {
    let cluster = Cluster::start(0).await;
    let path = cluster.dir.path().join("huge");
    let mut text = vec![b'x'; cosi_cli::files::MAX_CLIENT_CONFIG as usize + 1];
    text[0] = b'#';
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap();
    let out = cluster
        .cosictl(&["--config", path, "-n", "127.0.0.1", "get", "mc"])
        .await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        format!(
            "error: client config {path}: is larger than 16 MiB, more than a client config \
             holds; is it the right file?\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_file_larger_than_the_limit_is_refused_naming_the_context_and_field() {
    let cluster = Cluster::start(0).await;
    let dir = cluster.dir.path();
    let huge = dir.join("huge.pem");
    std::fs::write(&huge, vec![b'-'; cosi_cli::files::MAX_PEM as usize + 1]).unwrap();
    let config = dir.join("config");
    std::fs::write(
        &config,
        format!(
            "context: demo\ncontexts:\n  demo:\n    caFile: {}\n    crtFile: pki/admin.pem\n    \
             keyFile: pki/admin-key.pem\n",
            huge.display()
        ),
    )
    .unwrap();
    let out = cluster
        .cosictl(&[
            "--config",
            config.to_str().unwrap(),
            "-n",
            "127.0.0.1",
            "get",
            "mc",
        ])
        .await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        format!(
            "error: client config {}: context \"demo\": caFile {}: is larger than 1 MiB, more \
             than a PEM file holds; is it the right file?\n",
            config.display(),
            huge.display()
        )
    );
}

/// A private key others can read is warned about (as helm warns of a group- or world-readable
/// kubeconfig), with the command that fixes it; the command still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_key_others_can_read_is_warned_about_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = Cluster::start(1).await;
    let key = cluster.dir.path().join("pki").join("admin-key.pem");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = cluster
        .cosictl(&["-n", &cluster.nodes[0].name, "get", "notes"])
        .await;
    assert_eq!(out.code, 0);
    assert_eq!(out.stdout.lines().count(), 3);
    let key = key.display();
    assert_eq!(
        out.stderr,
        format!(
            "warning: the private key of context \"demo\" can be read by others: {key} has \
             mode 644; make it its owner's alone: chmod 600 {key}\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_error_exits_with_one() {
    let cluster = Cluster::start(0).await;
    let out = cluster.cosictl(&["get"]).await;
    assert_eq!(out.code, 1);
    assert!(
        out.stderr
            .starts_with("error: the following required arguments were not provided:"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starter_configs_run_the_kubelet_image_unless_told_none() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let image = |file: &str| {
        let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
        let config = cosi_node::config::MachineConfig::from_text(&text).unwrap();
        config
            .config()
            .machine()
            .kubelet
            .as_ref()
            .and_then(|k| k.image.clone())
    };
    for (extra, expected) in [
        (&[][..], Some("ghcr.io/siderolabs/kubelet:v1.31.1")),
        (&["--kubelet-image", "none"][..], None),
    ] {
        let mut argv = vec!["cosictl", "gen", "config", "demo", "https://127.0.0.1:6443"];
        argv.extend_from_slice(&["--out", out, "--force"]);
        argv.extend_from_slice(extra);
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let cli = <cosi_cli::args::Cli as clap::Parser>::parse_from(argv);
        let code = cosi_cli::run(cli, &mut cosi_cli::session::Io::new(&mut o, &mut e)).await;
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&e));
        for file in ["controlplane.yaml", "worker.yaml"] {
            assert_eq!(image(file).as_deref(), expected, "{file} with {extra:?}");
        }
    }
}

/// A writer whose reader went away.
struct ClosedPipe;

impl std::io::Write for ClosedPipe {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_into_a_closed_pipe_ends_quietly_with_success() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let cli = <cosi_cli::args::Cli as clap::Parser>::parse_from([
        "cosictl",
        "gen",
        "ca",
        "--out",
        pki.to_str().unwrap(),
    ]);
    let mut err = Vec::new();
    let code = cosi_cli::run(
        cli,
        &mut cosi_cli::session::Io::new(&mut ClosedPipe, &mut err),
    )
    .await;
    assert_eq!((code, String::from_utf8(err).unwrap()), (0, String::new()));
}
