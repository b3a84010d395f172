//! The nodes a command talks to: `host[:port]` addresses (default port [`DEFAULT_PORT`]), each
//! **dialled directly** with the context's credentials. Unlike talosctl, nothing is proxied
//! through an endpoint: a node that the client cannot reach itself is unreachable.
//!
//! Every call to a node goes through [`Node::call`] (or [`Node::within`]), which gives it the
//! node's deadline (`--request-timeout`, default [`DEFAULT_DEADLINE`]): a node that accepts
//! the connection and never answers costs the operator the deadline, not the terminal.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use cosi_api::auth::Role;
use cosi_api::client::{channel, ClientSecurity, MachineClient, RemoteOptions, RemoteState};
use cosi_api::codec::Codec;
use cosi_core::Registry;

use crate::error::CliError;

/// The API port a node address without one means (Talos's).
pub const DEFAULT_PORT: u16 = 50000;

/// The most one list from a node may bring in, encoded: far more than any node's kind, and a
/// bound for a node whose list never ends.
pub const MAX_LIST_BYTES: usize = cosi_api::client::DEFAULT_MAX_LIST_BYTES;

/// How long one call to a node may take unless `--request-timeout` says otherwise: long
/// enough for a node under load to answer, short enough that a stuck one is noticed.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

/// A node as the operator named it, connected lazily (nothing is dialled before the first
/// call).
#[derive(Clone, Debug)]
pub struct Node {
    /// The name as given (what NODE columns and messages show).
    pub name: String,
    /// The address dialled.
    pub address: SocketAddr,
    /// Its State service.
    pub state: RemoteState,
    /// Its machine service.
    pub machine: MachineClient,
    /// How long one call may take (`None`: no deadline); for a stream, how long it may take
    /// to open (see [`Node::within`]).
    pub deadline: Option<Duration>,
}

impl Node {
    /// Runs `call` within this node's deadline: its result, or [`CliError::Deadline`] naming
    /// the node and `what` was asked of it when the deadline passes first (the call is then
    /// dropped, which cancels it on the wire). A call that opens a stream (`logs`, `events`,
    /// a watch) returns once the node answered it, so the deadline bounds the opening and not
    /// the stream's life.
    pub async fn within<T>(
        &self,
        what: impl Into<String>,
        call: impl Future<Output = T>,
    ) -> Result<T, CliError> {
        let Some(deadline) = self.deadline else {
            return Ok(call.await);
        };
        tokio::time::timeout(deadline, call)
            .await
            .map_err(|_| CliError::Deadline {
                node: self.name.clone(),
                what: what.into(),
                deadline,
                started: false,
            })
    }

    /// [`Node::within`] for a call that fails as a node error: what was asked (`what`) and
    /// the role it needs name the failure.
    pub async fn call<T>(
        &self,
        what: impl Into<String>,
        needs: Role,
        call: impl Future<Output = cosi_core::Result<T>>,
    ) -> Result<T, CliError> {
        let what = what.into();
        match self.within(what.clone(), call).await? {
            Ok(value) => Ok(value),
            Err(error) => Err(CliError::node(&self.name, what, error, needs)),
        }
    }
}

/// Splits `host[:port]` (`[v6]:port` for IPv6 with a port, `v6` or `[v6]` without); no port
/// means [`DEFAULT_PORT`].
///
/// ```
/// use cosi_cli::nodes::split_address;
/// assert_eq!(split_address("10.0.0.1").unwrap(), ("10.0.0.1".to_string(), 50000));
/// assert_eq!(split_address("[fd00::1]:7").unwrap(), ("fd00::1".to_string(), 7));
/// assert_eq!(split_address("[fd00::1]").unwrap(), ("fd00::1".to_string(), 50000));
/// assert!(split_address("node:port").is_err());
/// ```
pub fn split_address(text: &str) -> Result<(String, u16), CliError> {
    let bad = |why: &str| CliError::Usage(format!("node address {text:?}: {why}"));
    let text = text.trim();
    if text.is_empty() {
        return Err(bad("empty"));
    }
    // `[v6]` alone is how an IPv6 address is written where a port could follow.
    let bare = text
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(text);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok((ip.to_string(), DEFAULT_PORT));
    }
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok((address.ip().to_string(), address.port()));
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) => (
            host,
            port.parse::<u16>()
                .map_err(|_| bad("the port is not a number from 0 to 65535"))?,
        ),
        None => (text, DEFAULT_PORT),
    };
    if host.is_empty() || host.contains([':', '/', ' ']) {
        return Err(bad("expected host[:port]"));
    }
    Ok((host.to_string(), port))
}

/// Connects (lazily) to `name` with `security`; resolves host names first.
pub async fn connect(name: &str, security: ClientSecurity) -> Result<Node, CliError> {
    let (host, port) = split_address(name)?;
    let (address, server_name) = match host.parse::<IpAddr>() {
        Ok(ip) => (SocketAddr::new(ip, port), None),
        Err(_) => {
            let resolved = tokio::net::lookup_host((host.as_str(), port))
                .await
                .ok()
                .and_then(|mut addresses| addresses.next());
            match resolved {
                Some(address) => (address, Some(host.as_str())),
                None => {
                    return Err(CliError::Other(format!(
                        "node {name} is unreachable: the name {host:?} does not resolve; \
                         check the address in -n or the context's nodes"
                    )))
                }
            }
        }
    };
    let channel = channel(address, server_name, security)
        .map_err(|e| CliError::Other(format!("node {name}: cannot set up the connection: {e}")))?;
    Ok(Node {
        name: name.to_string(),
        address,
        state: RemoteState::with_options(
            channel.clone(),
            codec(),
            RemoteOptions {
                max_list_bytes: Some(MAX_LIST_BYTES),
                // The node's deadline (`--request-timeout`, 0: none) bounds every call whole.
                call_timeout: None,
                ..RemoteOptions::default()
            },
        ),
        // As for the state: `--request-timeout` is the one deadline.
        machine: MachineClient::new(channel).with_call_timeout(None),
        deadline: Some(DEFAULT_DEADLINE),
    })
}

/// The client's codec: it registers no type of its own (types come from the nodes'
/// definitions), so every resource but a definition decodes as a dynamic one.
fn codec() -> Codec {
    Codec::new(Arc::new(Registry::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_take_the_default_port_when_they_name_none() {
        assert_eq!(
            split_address("10.0.0.1").unwrap(),
            ("10.0.0.1".into(), 50000)
        );
        assert_eq!(split_address("10.0.0.1:7").unwrap(), ("10.0.0.1".into(), 7));
        assert_eq!(split_address("::1").unwrap(), ("::1".into(), 50000));
        assert_eq!(split_address("[::1]:9").unwrap(), ("::1".into(), 9));
        assert_eq!(split_address("node-1").unwrap(), ("node-1".into(), 50000));
        assert_eq!(split_address("node-1:80").unwrap(), ("node-1".into(), 80));
    }

    proptest::proptest! {
        /// Every socket address, as Rust writes it, splits into its own host and port; every
        /// bare IP address gets the default port.
        #[test]
        fn socket_addresses_split_into_their_host_and_port(address: SocketAddr) {
            let (host, port) = split_address(&address.to_string()).unwrap();
            proptest::prop_assert_eq!(host.parse::<IpAddr>().unwrap(), address.ip());
            proptest::prop_assert_eq!(port, address.port());
            let (bare, default) = split_address(&address.ip().to_string()).unwrap();
            proptest::prop_assert_eq!(bare.parse::<IpAddr>().unwrap(), address.ip());
            proptest::prop_assert_eq!(default, DEFAULT_PORT);
        }

        /// Whatever the text, splitting it answers (an address or a usage error), never panics.
        #[test]
        fn any_text_splits_or_is_refused(text in "\\PC{0,40}") {
            let _ = split_address(&text);
        }
    }

    /// A node on an address nothing listens on (nothing is dialled before a call).
    async fn lazy_node(deadline: Option<Duration>) -> Node {
        let mut node = connect("127.0.0.1:9", ClientSecurity::Plaintext)
            .await
            .unwrap();
        node.deadline = deadline;
        node
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_outlasts_the_deadline_is_a_deadline_error_naming_node_and_call() {
        let node = lazy_node(Some(Duration::from_millis(300))).await;
        let started = tokio::time::Instant::now();
        // On the paused clock a guard of an hour costs nothing, and fails a call never cut.
        let call = node.within("list services", std::future::pending::<()>());
        let late = tokio::time::timeout(Duration::from_secs(3600), call)
            .await
            .expect("the call ends at its deadline")
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        assert!(matches!(
            &late,
            CliError::Deadline { node, what, deadline, started: false }
                if node == "127.0.0.1:9"
                    && what == "list services"
                    && *deadline == Duration::from_millis(300)
        ));
    }

    #[tokio::test]
    async fn the_machine_client_keeps_no_deadline_of_its_own_so_request_timeout_is_the_one() {
        let node = lazy_node(Some(Duration::from_secs(120))).await;
        assert_eq!(node.machine.call_timeout(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_within_the_deadline_is_its_own_result() {
        let node = lazy_node(Some(Duration::from_millis(300))).await;
        let answer = node.within("version", async {
            tokio::time::sleep(Duration::from_millis(299)).await;
            7
        });
        assert_eq!(answer.await.unwrap(), 7);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_deadline_a_call_takes_as_long_as_it_takes() {
        let node = lazy_node(None).await;
        let answer = node.within("version", async {
            tokio::time::sleep(Duration::from_secs(86_400)).await;
            7
        });
        assert_eq!(answer.await.unwrap(), 7);
    }

    #[test]
    fn a_bracketed_ipv6_address_without_a_port_takes_the_default_port() {
        assert_eq!(
            split_address("[fd00::1]").unwrap(),
            ("fd00::1".into(), 50000)
        );
    }

    #[test]
    fn a_bad_port_is_a_usage_error_naming_the_address() {
        assert_eq!(
            split_address("node-1:http").unwrap_err().to_string(),
            "node address \"node-1:http\": the port is not a number from 0 to 65535"
        );
    }
}
