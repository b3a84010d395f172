//! Bad input to the `node` daemon: each is refused at start, with exit code 1 and a message
//! that names the flag, before anything is served or written.

mod node_support;

use std::process::Output;

use node_support::*;

/// Runs the daemon to its exit with `pki`'s files, `state` and `extra` flags.
async fn run(pki: &Pki, state: &std::path::Path, extra: &[&str]) -> Output {
    run_on(pki, state, "127.0.0.1:0", extra).await
}

async fn run_on(pki: &Pki, state: &std::path::Path, listen: &str, extra: &[&str]) -> Output {
    let child = command(pki, state, listen, extra)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("the daemon exits")
        .unwrap()
}

fn refused(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(output.stdout.is_empty(), "nothing served: {output:?}");
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// Runs the daemon with `extra` flags, expects them refused as bad flags (exit 2) before
/// anything is served or written to `state`, and returns what it said.
async fn bad_flag(pki: &Pki, state: &std::path::Path, extra: &[&str]) -> String {
    let output = run(pki, state, extra).await;
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(output.stdout.is_empty(), "nothing served: {output:?}");
    assert_eq!(std::fs::read_dir(state).unwrap().count(), 0);
    String::from_utf8(output.stderr).unwrap()
}

#[tokio::test]
async fn a_missing_certificate_file_is_named_by_its_flag() {
    let mut pki = Pki::new();
    pki.cert_path = pki.dir.path().join("missing.pem");
    let state = tempfile::tempdir().unwrap();

    let stderr = refused(&run(&pki, state.path(), &[]).await);

    assert_eq!(
        stderr,
        format!(
            "node: --cert {}: No such file or directory (os error 2)\n",
            pki.cert_path.display()
        )
    );
    assert_eq!(std::fs::read_dir(state.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_key_that_does_not_match_the_certificate_is_refused_at_start() {
    let mut pki = Pki::new();
    let other = pki
        .ca
        .issue_server(
            &["127.0.0.1".parse().unwrap()],
            &[],
            cosi_api::pki::CERT_VALIDITY,
        )
        .unwrap();
    let (_, other_key) = other.write_pem(pki.dir.path(), "other").unwrap();
    pki.key_path = other_key;
    let state = tempfile::tempdir().unwrap();

    let stderr = refused(&run(&pki, state.path(), &[]).await);

    assert!(
        stderr.starts_with(&format!(
            "node: --cert {}, --key {}, --ca {}: ",
            pki.cert_path.display(),
            pki.key_path.display(),
            pki.ca_path.display()
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_bad_command_line_address_is_refused_naming_the_flag() {
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();

    let stderr = refused(
        &run(
            &pki,
            state.path(),
            &["--cmdline", "ip=300.1.2.3:::24::eth0:off"],
        )
        .await,
    );

    assert!(stderr.starts_with("node: --cmdline: "), "{stderr}");
}

#[tokio::test]
async fn a_state_directory_in_use_by_another_daemon_is_refused() {
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let mut first = Daemon::start(&pki, state.path(), &[]);
    first.ready().await;

    let stderr = refused(&run(&pki, state.path(), &[]).await);

    assert!(
        stderr.starts_with(&format!("node: --state-dir {}: ", state.path().display())),
        "{stderr}"
    );
    assert!(first.is_running());
}

#[tokio::test]
async fn a_listen_address_in_use_is_refused_before_anything_starts() {
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();

    let stderr = refused(&run_on(&pki, state.path(), &address, &[]).await);
    assert!(
        stderr.starts_with(&format!("node: --listen {address}: ")),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(state.path()).unwrap().count(),
        0,
        "no state was opened"
    );
}

#[tokio::test]
async fn a_certificate_the_ca_did_not_issue_is_refused_at_start() {
    // Given the server certificate of one cluster and the CA of another
    let mut pki = Pki::new();
    let other = cosi_api::pki::CertificateAuthority::generate("other").unwrap();
    let (other_ca, _) = other
        .certified()
        .write_pem(pki.dir.path(), "other-ca")
        .unwrap();
    pki.ca_path = other_ca;
    let state = tempfile::tempdir().unwrap();

    // Then the node refuses to start (once out of maintenance, no client trusting that CA
    // could reach it), naming both files, and writes nothing
    let stderr = refused(&run(&pki, state.path(), &[]).await);

    assert!(
        stderr.starts_with(&format!(
            "node: --cert {} was not issued by --ca {}: ",
            pki.cert_path.display(),
            pki.ca_path.display()
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(state.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_ca_file_that_is_not_the_ca_is_refused_at_start() {
    // Given the server certificate given as the CA too
    let mut pki = Pki::new();
    pki.ca_path = pki.cert_path.clone();
    let state = tempfile::tempdir().unwrap();

    let stderr = refused(&run(&pki, state.path(), &[]).await);

    assert!(
        stderr.starts_with(&format!(
            "node: --cert {} was not issued by --ca {}: ",
            pki.cert_path.display(),
            pki.ca_path.display()
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(state.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_hostname_the_config_would_refuse_is_a_bad_flag() {
    // Given a --hostname that is not an RFC 1123 name (a config naming it is refused; as the
    // node's name, its member would be left out)
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();

    let stderr = bad_flag(&pki, state.path(), &["--hostname", "Node/1"]).await;

    // Then it is refused as a bad flag, naming the rule, before anything is served or written
    assert!(
        stderr.starts_with(
            "error: invalid value 'Node/1' for '--hostname <HOSTNAME>': \
             \"Node/1\" is not an RFC 1123 hostname: "
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_link_name_the_config_would_refuse_is_a_bad_flag() {
    // Given an empty --link (no config could name that link)
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();

    let stderr = bad_flag(&pki, state.path(), &["--link", ""]).await;

    // Then it is refused as a bad flag, naming the rule, before anything is served or written
    assert!(
        stderr.starts_with(
            "error: invalid value '' for '--link <LINKS>': \"\" is not a link name \
             (1-15 characters, no '/', ':' or whitespace)"
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_registry_ttl_under_a_second_is_a_bad_flag() {
    // Given a registry TTL of zero (every entry expired at once: nodes would delete each
    // other's entries, rewriting their own every few milliseconds, and find no member)
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let registry = state.path().join("registry");
    let registry = registry.to_str().unwrap();

    let stderr = bad_flag(
        &pki,
        state.path(),
        &["--registry-dir", registry, "--registry-ttl", "0s"],
    )
    .await;

    // Then it is refused as a bad flag, before anything is served or written
    assert!(
        stderr.starts_with(
            "error: invalid value '0s' for '--registry-ttl <REGISTRY_TTL>': \
             a registry TTL is at least 1s"
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_refusal_exits_one_even_when_stderr_is_closed() {
    // Given a missing certificate, and a stderr whose reader has gone
    let mut pki = Pki::new();
    pki.cert_path = pki.dir.path().join("missing.pem");
    let state = tempfile::tempdir().unwrap();
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);

    // When the daemon refuses to start
    let status = command(&pki, state.path(), "127.0.0.1:0", &[])
        .stderr(std::process::Stdio::from(writer))
        .kill_on_drop(true)
        .status();
    let status = tokio::time::timeout(PATIENCE, status)
        .await
        .expect("the daemon exits")
        .unwrap();

    // Then its exit code still says so (1, not a panic's 101)
    assert_eq!(status.code(), Some(1), "{status:?}");
}
