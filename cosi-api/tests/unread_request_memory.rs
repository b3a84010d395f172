//! The request bodies a caller sends count in its byte budget as its answers do: a caller that
//! opens as many Creates of a large resource as it likes and holds back the last byte of each
//! pins at most its budget ([`DEFAULT_MAX_BYTES_PER_CALLER`]) of request bytes in the server;
//! the server stops reading the bodies past it (HTTP/2 flow control then holds the client), and
//! each Create completes once the caller finishes its bodies and reads its answers. Before,
//! every body was read and buffered whole as it arrived, before any service saw it: 256 calls
//! of a 32 MiB body could hold 8 GiB.
//!
//! The client speaks HTTP/2 itself (the `h2` crate over mutual TLS) so that it can leave every
//! body one byte short of its end.
//!
//! Its own test binary with a plain harness (`harness = false`): it measures the server's peak
//! resident memory, and the server runs in a child process (this binary again, with
//! `COSI_UNREAD_REQUEST_SERVER` naming the directory of its certificates), so that the client's
//! memory is not counted.

mod support;

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use cosi_api::auth::{Role, StatePolicy};
use cosi_api::pki::{CertificateAuthority, CertifiedKey, CERT_VALIDITY};
use cosi_api::proto::resource as pb;
use cosi_api::server::{
    ApiServer, Security, StateService, DEFAULT_MAX_BYTES_PER_CALLER, OMIT_YAML_HEADER,
};
use cosi_core::Resource;
use cosi_state::MemoryState;
use prost::Message;
use support::memory::{report_peak_then_serve, serve_or_test, status_kib, ServerChild};
use support::Blob;

/// The size of the resource every Create carries (its spec's one string).
const BLOB_BYTES: usize = 2 << 20;

/// The Creates the caller holds open, each one byte short of its end.
const CREATES: usize = 96;

/// The server, in a process of its own: serves mutual TLS with the certificates in `dir` over
/// an empty store, prints `PORT`, then `BASE` (its peak memory so far), and on the line
/// `measure` prints `PEAK` once its memory has settled.
async fn server_process(dir: &Path) {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let identity =
        CertifiedKey::read_pem(&dir.join("server.pem"), &dir.join("server-key.pem")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let _server = ApiServer::new(Security::MutualTls {
        identity,
        client_ca_pem: read("ca.pem"),
    })
    .with_state(StateService::new(
        Arc::new(MemoryState::default()),
        support::blob_codec(),
        StatePolicy::default(),
    ))
    .serve(listener)
    .unwrap();
    println!("PORT {port}");
    println!("BASE {}", status_kib("VmHWM") / 1024);
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "measure");
    report_peak_then_serve().await;
}

fn main() {
    serve_or_test(
        "COSI_UNREAD_REQUEST_SERVER",
        |dir| async move { server_process(Path::new(&dir)).await },
        "one_caller_s_unfinished_requests_pin_at_most_its_byte_budget",
        one_caller_s_unfinished_requests_pin_at_most_its_byte_budget,
    );
}

/// A Create of the resource `id` of [`BLOB_BYTES`], as a gRPC request body: the message
/// behind its 5-byte header.
fn create_request_body(id: &str) -> Bytes {
    let resource = Resource::new(
        id,
        Blob {
            data: "x".repeat(BLOB_BYTES),
        },
    );
    let message = pb::CreateRequest {
        resource: Some(support::blob_codec().encode(&resource, false).unwrap()),
        options: None,
    }
    .encode_to_vec();
    let mut body = BytesMut::with_capacity(5 + message.len());
    body.put_u8(0);
    body.put_u32(message.len() as u32);
    body.put_slice(&message);
    body.freeze()
}

/// One Create's answer, read whole (its bytes given back to the connection's window as they
/// are read): its gRPC status, or what went wrong.
async fn read_answer(response: h2::client::ResponseFuture) -> Result<String, String> {
    let response = response.await.map_err(|e| e.to_string())?;
    let status = |headers: &http::HeaderMap| {
        headers
            .get("grpc-status")
            .map(|s| s.to_str().unwrap_or("?").to_string())
    };
    if let Some(code) = status(response.headers()) {
        return Ok(code);
    }
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        body.flow_control()
            .release_capacity(chunk.len())
            .map_err(|e| e.to_string())?;
    }
    let trailers = body.trailers().await.map_err(|e| e.to_string())?;
    trailers
        .as_ref()
        .and_then(status)
        .ok_or_else(|| "no grpc-status".to_string())
}

async fn one_caller_s_unfinished_requests_pin_at_most_its_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("cosi").unwrap();
    let server = ca
        .issue_server(&["127.0.0.1".parse().unwrap()], &[], CERT_VALIDITY)
        .unwrap();
    server.write_pem(dir.path(), "server").unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.cert_pem()).unwrap();
    let writer = ca
        .issue_client("slow-writer", Role::Admin, CERT_VALIDITY)
        .unwrap();

    let mut server = ServerChild::spawn(&[("COSI_UNREAD_REQUEST_SERVER", dir.path().as_os_str())]);
    let port = server.figure("PORT") as u16;
    let base = server.figure("BASE");

    // One connection, HTTP/2 spoken by hand.
    let tls = cosi_api::tls::client_mutual(ca.cert_pem(), &writer).unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name =
        rustls_pki_types::ServerName::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]).into());
    let tls = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .unwrap();
    let (mut send, connection) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(connection);

    // Creates, each body sent but for its last byte (as flow control lets it through).
    let mut open = Vec::new();
    for i in 0..CREATES {
        send = send.ready().await.unwrap();
        let request = http::Request::post(format!(
            "https://127.0.0.1:{port}/cosi.resource.State/Create"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header(OMIT_YAML_HEADER, "1")
        .body(())
        .unwrap();
        let (answer, mut stream) = send.send_request(request, false).unwrap();
        let body = create_request_body(&format!("blob-{i}"));
        let last = body.slice(body.len() - 1..);
        stream
            .send_data(body.slice(..body.len() - 1), false)
            .unwrap();
        open.push((answer, stream, last));
    }
    server.say("measure");
    let peak = server.figure("PEAK");

    // The caller finishes its bodies and reads: every Create completes.
    let mut answers = Vec::new();
    for (answer, mut stream, last) in open {
        stream.send_data(last, true).unwrap();
        answers.push((tokio::spawn(read_answer(answer)), stream));
    }
    for (i, (answer, _stream)) in answers.into_iter().enumerate() {
        let status = answer
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("Create {}: {e}", i + 1));
        assert_eq!(status, "0", "Create {}", i + 1);
    }
    server.finish();

    let grown = peak - base;
    let budget = (DEFAULT_MAX_BYTES_PER_CALLER >> 20) as u64;
    let sent = (CREATES * BLOB_BYTES) >> 20;
    eprintln!(
        "server peak {base} MiB -> {peak} MiB (+{grown} MiB) for {CREATES} unfinished Creates \
         of {} MiB ({sent} MiB of requests); budget {budget} MiB",
        BLOB_BYTES >> 20
    );
    assert!(
        grown < budget + 32,
        "server peak {base} MiB -> {peak} MiB for {CREATES} unfinished Creates of {} MiB",
        BLOB_BYTES >> 20
    );
}
