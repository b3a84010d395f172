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

pub mod auth;
pub mod client;
pub mod codec;
pub mod events;
pub mod machine;
pub mod pki;
pub mod proto;
pub mod query;
pub mod server;
pub mod status;
pub mod tls;
mod yaml;
