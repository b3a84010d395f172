//! Generates the gRPC messages, clients and servers from `proto/` with protoc (installed by
//! `scripts/install-deps.sh`). The well-known types it imports are under `proto/google/protobuf`,
//! so no system include files are needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/v1alpha1/resource.proto",
        "proto/v1alpha1/state.proto",
        "proto/v1alpha1/meta.proto",
        "proto/cosi_rs/errors.proto",
        "proto/cosi_rs/machine.proto",
        "proto/google/rpc/status.proto",
    ];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    println!("cargo:rerun-if-changed=proto/google/protobuf");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Deterministic maps: labels and annotations compare and print in key order.
        .btree_map(".")
        .compile_protos(&protos, &["proto"])?;
    Ok(())
}
