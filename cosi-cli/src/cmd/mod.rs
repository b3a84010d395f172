//! One module per command (or family of commands); each prints through [`crate::session::Io`]
//! and returns a [`crate::session::Report`] of the nodes that failed.

pub mod apply;
pub mod config;
pub mod edit;
pub mod gen;
pub mod get;
pub mod services;
pub mod stream;
pub mod version;
