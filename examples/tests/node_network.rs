//! The daemon's addresses, with real `node` processes on the in-memory network (links `lo` and
//! `eth0`): a `--cmdline` address for a link that does not exist is accepted — the link may
//! come later — but not silently: the log names the link it waits for, and an operator can
//! read the wait as a `PendingAddress`.

mod node_support;

use cosi_api::auth::Role;
use cosi_node::network::PendingAddress;
use node_support::*;
use tokio::io::{AsyncBufReadExt, BufReader};

/// An address for `eth9`, a link the in-memory network does not have.
const ON_A_MISSING_LINK: &str = "ip=192.0.2.10:::24::eth9:off";

#[tokio::test]
async fn an_address_for_a_missing_link_is_logged_at_start_naming_the_link() {
    // Given a node started with an address for eth9, its logs at the default level
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let mut command = command(
        &pki,
        state.path(),
        "127.0.0.1:0",
        &["--cmdline", ON_A_MISSING_LINK],
    );
    command
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped());
    let mut node = Daemon::spawn(command);
    let mut stderr = BufReader::new(node.child.stderr.take().unwrap()).lines();

    // Then it starts (in maintenance: no config yet)
    let (_, mode) = node.ready().await;
    assert!(matches!(mode, Mode::Maintenance { .. }), "{mode:?}");

    // And its first log line is a warning that the address waits for eth9
    let line = tokio::time::timeout(PATIENCE, stderr.next_line())
        .await
        .expect("the daemon logs the waiting address")
        .unwrap()
        .expect("the daemon's stderr is open");
    let (_time, message) = line.split_once(' ').unwrap();
    assert_eq!(
        message.trim_start(),
        "WARN cosi_node::network::controllers::apply: address 192.0.2.10/24: waiting for link \
         \"eth9\", which does not exist spec=network/AddressSpecs.net.cosi.dev/eth9/192.0.2.10/24",
        "{line}"
    );
}

#[tokio::test]
async fn an_address_for_a_missing_link_is_a_pending_address_an_operator_can_get() {
    // Given a configured node started with an address for eth9
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let node = configured(
        &pki,
        state.path(),
        &config("node-1", "worker"),
        &["--cmdline", ON_A_MISSING_LINK],
    )
    .await;

    // Then a reader gets it as pending, naming the link it waits for
    let reader = mtls(&pki, node.address(), Role::Reader);
    let pending =
        wait_for::<PendingAddress>(&reader, "eth9/192.0.2.10/24", "pending", |_| true).await;
    assert_eq!(
        pending.spec,
        PendingAddress {
            address: "192.0.2.10/24".parse().unwrap(),
            link_name: "eth9".into(),
            reason: "waiting for link \"eth9\", which does not exist".into(),
        }
    );
}
