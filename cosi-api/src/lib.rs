//! # cosi-api
//!
//! The remote API of a node: the COSI v1alpha1 State service (`cosi.resource.State`, wire
//! compatible with the original runtime's clients and servers) and a machine service
//! (`cosi.machine.MachineService`: configuration, services, logs, events, version), served
//! over mutual TLS with roles read from client certificates, and a client whose
//! [`RemoteState`](client::RemoteState) is a [`cosi_core::State`].
//!
//! This crate owns the wire: the `.proto` files under `proto/` (compiled at build time), the
//! conversions ([`codec`], [`query`], [`events`]), the one error mapping ([`status`]), the
//! authorization rules ([`auth`]), TLS and certificates ([`tls`], [`pki`]). It knows no node
//! types: a node plugs in through [`machine::Machine`] and serves its own [`cosi_core::State`];
//! the configuration travels as YAML bytes.
//!
//! A tour:
//! - [`server::ApiServer`] serves [`server::StateService`] and a [`machine::Machine`] on a
//!   listener, in a [`server::Security`] mode: plaintext (loopback, tests), mutual TLS, or
//!   maintenance (server-only TLS, apply only).
//! - [`client::channel`] connects; [`client::RemoteState`] and [`client::MachineClient`] call.
//!   Remote watches resume after a dropped connection or a server restart, exactly after the
//!   last event they delivered.
//! - [`pki::CertificateAuthority`] issues the CA, server and per-role client certificates.
//! - With the `testing` feature, `testing::TestMachine` is an in-memory node behind the machine
//!   service, for other crates' tests.
//!
//! What a remote caller can make the server spend is bounded: messages of 32 MiB each way
//! ([`server::MAX_MESSAGE_SIZE`]; a watch event that would not fit goes without its YAML copies,
//! then without its old resource), 512 open connections ([`server::DEFAULT_MAX_CONNECTIONS`]; more
//! wait in the listen queue) and 64 per caller ([`server::DEFAULT_MAX_CONNECTIONS_PER_CALLER`];
//! more are closed after the handshake), 256 open calls per caller over all its connections, a
//! watch or log follow holding its place until it ends ([`server::DEFAULT_MAX_CALLS_PER_CALLER`];
//! more are refused with `ResourceExhausted`), 64 MiB of responses per caller held in the server at
//! once, over all its streams and unary answers ([`server::DEFAULT_MAX_BYTES_PER_CALLER`]; past it
//! the caller's streams and answers wait for it to read, a watch falling behind in the store and
//! caught up from it as any lagging watcher), 1,024 streams per connection
//! ([`server::MAX_CONCURRENT_STREAMS`]), 64 handshakes at once of at most 10 s; and a request past
//! these is refused with an error naming the bound: id query patterns of 4 KiB
//! ([`cosi_core::id_query`]), label queries of 64 × 64 × 1,024 terms and 4,096 values in all
//! ([`request_bounds::MAX_LABEL_QUERIES`] and the next three), 1,024 finalizers and 4,096 labels
//! and annotations each in a created or updated resource, 256 patches in an ApplyConfiguration;
//! these repeated entries are counted on the request's bytes before its message is built
//! ([`request_bounds`]); status texts are cut at 1 KiB ([`status::MAX_STATUS_TEXT`]).
//!
//! A server over an in-memory store and a client, on a loopback port (the `remote` program in
//! the workspace's `examples` package does the same over mutual TLS, with a controller in the
//! server and the role rules refusing a reader and an admin: `cargo run -p examples --bin
//! remote`):
//!
//! ```
//! use std::sync::Arc;
//! use cosi_api::auth::StatePolicy;
//! use cosi_api::client::{channel, ClientSecurity, RemoteState};
//! use cosi_api::codec::Codec;
//! use cosi_api::server::{ApiServer, Security, StateService};
//! use cosi_core::{CreateOptions, Registry, Resource, ResourceSpec, State, StateExt};
//! # use serde::{Deserialize, Serialize};
//! #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
//! struct Hostname { name: String }
//! impl ResourceSpec for Hostname {
//!     const TYPE: &'static str = "Hostnames.net.cosi.dev";
//!     const DEFAULT_NAMESPACE: &'static str = "network";
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let mut registry = Registry::new();
//! registry.register::<Hostname>().unwrap();
//! let codec = Codec::new(Arc::new(registry));
//! let store = Arc::new(cosi_state::MemoryState::default());
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! let server = ApiServer::new(Security::Plaintext)
//!     .with_state(StateService::new(store, codec.clone(), StatePolicy::default()))
//!     .serve(listener)
//!     .unwrap();
//!
//! let remote = RemoteState::new(
//!     channel(server.local_addr(), None, ClientSecurity::Plaintext).unwrap(),
//!     codec,
//! );
//! let created = Resource::new("hostname", Hostname { name: "node-1".into() });
//! remote.create(created.into_shared(), CreateOptions::default()).await.unwrap();
//! let read = remote.get_typed::<Hostname>(&Hostname::kind().pointer("hostname")).await.unwrap();
//! assert_eq!((read.spec.name.as_str(), read.metadata.version().get()), ("node-1", 1));
//! server.shutdown().await.unwrap();
//! # });
//! ```

pub mod auth;
mod bounded_codec;
pub mod client;
pub mod codec;
pub mod events;
pub mod machine;
pub mod pki;
pub mod proto;
pub mod query;
pub mod request_bounds;
mod resource_wire;
pub mod server;
pub mod status;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
mod yaml;
