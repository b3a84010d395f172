//! The protocol's messages, clients and servers, generated from `proto/` at build time. Modules
//! follow the proto packages: `cosi.resource` (the State service), `cosi.resource.meta`,
//! `cosi.machine` (the machine service), `cosi_rs` (this project's error detail),
//! `cosi_rs.encoded` (the State service's stream responses with each resource as its encoded
//! bytes, the same on the wire; see `proto/cosi_rs/encoded.proto`) and `google.rpc` (the rich
//! status that carries it).
#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// Packages under `cosi.`.
pub mod cosi {
    /// `cosi.resource`: the COSI v1alpha1 State service and resource messages.
    pub mod resource {
        tonic::include_proto!("cosi.resource");
        include!(concat!(env!("OUT_DIR"), "/services/cosi.resource.rs"));
        /// `cosi.resource.meta`: namespace and resource definition specs.
        pub mod meta {
            tonic::include_proto!("cosi.resource.meta");
        }
    }
    /// `cosi.machine`: the machine service.
    pub mod machine {
        tonic::include_proto!("cosi.machine");
        include!(concat!(env!("OUT_DIR"), "/services/cosi.machine.rs"));
    }
}

/// `cosi_rs`: this project's structured error detail.
pub mod cosi_rs {
    tonic::include_proto!("cosi_rs");
    /// `cosi_rs.encoded`: the State service's List and Watch responses as the generated
    /// services use them, each resource as its encoded `cosi.resource.Resource` message.
    pub mod encoded {
        tonic::include_proto!("cosi_rs.encoded");
    }
}

/// `google.rpc`: the rich status.
pub mod google {
    /// `google.rpc`.
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

pub use cosi::machine;
pub use cosi::resource;
pub use cosi_rs::encoded;
