//! Generates the gRPC messages, clients and servers from `proto/` with protoc: the one `PROTOC`
//! names if it is set, otherwise the one the `protoc-bin-vendored` crate carries, so a fresh
//! machine builds the API (and the demo) without installing anything. The well-known types it
//! imports are under `proto/google/protobuf`, so no system include files are needed.
//!
//! Two passes. The first generates every message. The second generates the services (clients
//! and servers) over the first pass's messages, except that the State service's List and Watch
//! responses are the twins of `proto/cosi_rs/encoded.proto`, which hold each resource as its
//! encoded bytes and are the same on the wire (see that file): so a server encodes a resource
//! once for every response that carries it, and a client decodes it from the frame's bytes. The
//! services decode with `bounded_codec::BoundedCodec`: prost's, each request's repeated entries
//! counted on its bytes before it is built.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=PROTOC");
    if std::env::var_os("PROTOC").is_none() {
        // prost-build reads `PROTOC`; the build script is the only thread of its process.
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }
    let messages = [
        "proto/v1alpha1/resource.proto",
        "proto/v1alpha1/state.proto",
        "proto/v1alpha1/meta.proto",
        "proto/cosi_rs/errors.proto",
        "proto/cosi_rs/encoded.proto",
        "proto/cosi_rs/machine.proto",
        "proto/google/rpc/status.proto",
    ];
    for proto in messages {
        println!("cargo:rerun-if-changed={proto}");
    }
    println!("cargo:rerun-if-changed=proto/google/protobuf");
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        // Deterministic maps: labels and annotations compare and print in key order.
        .btree_map(".")
        // Slices of the received frame, not copies.
        .bytes(".cosi_rs.encoded.ListResponse.resource")
        .bytes(".cosi_rs.encoded.Event.resource")
        .bytes(".cosi_rs.encoded.Event.old")
        .compile_protos(&messages, &["proto"])?;

    let services = PathBuf::from(std::env::var("OUT_DIR")?).join("services");
    std::fs::create_dir_all(&services)?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Each received message's repeated entries are counted before it is built.
        .codec_path("crate::bounded_codec::BoundedCodec")
        .out_dir(&services)
        .extern_path(".cosi.resource", "crate::proto::resource")
        .extern_path(".cosi.machine", "crate::proto::machine")
        .extern_path(".cosi_rs", "crate::proto::cosi_rs")
        .extern_path(".google.rpc", "crate::proto::google::rpc")
        .extern_path(
            ".cosi.resource.ListResponse",
            "crate::proto::encoded::ListResponse",
        )
        .extern_path(
            ".cosi.resource.WatchResponse",
            "crate::proto::encoded::WatchResponse",
        )
        .compile_protos(
            &["proto/v1alpha1/state.proto", "proto/cosi_rs/machine.proto"],
            &["proto"],
        )?;
    Ok(())
}
