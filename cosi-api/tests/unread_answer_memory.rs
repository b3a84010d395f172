//! The answers of one-request-one-answer calls count in their caller's byte budget as its
//! streams' responses do: a caller that opens as many Gets of a large resource as it may and
//! reads none of their answers pins at most its budget ([`DEFAULT_MAX_BYTES_PER_CALLER`]) of
//! answers in the server; the Gets past it wait for room, and each is answered, whole, once
//! the caller reads. Before, every answer was built at once and held until HTTP/2 could write
//! it: 256 unread Gets of a 2 MiB resource held over 512 MiB (and of a 32 MiB one, 8 GiB).
//!
//! The client speaks HTTP/2 itself (the `h2` crate over mutual TLS) so that it can leave the
//! answers unread: it never gives the server flow-control credit until it reads, so the server
//! can write no more than the first 64 KiB of the connection's window.
//!
//! Its own test binary with a plain harness (`harness = false`): it measures the server's peak
//! resident memory, and the server runs in a child process (this binary again, with
//! `COSI_UNREAD_ANSWER_SERVER` naming the directory of its certificates), so that the client's
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
    ApiServer, Security, StateService, DEFAULT_MAX_BYTES_PER_CALLER, DEFAULT_MAX_CALLS_PER_CALLER,
    OMIT_YAML_HEADER,
};
use cosi_core::{CreateOptions, Resource, ResourceSpec, State};
use cosi_state::MemoryState;
use prost::Message;
use support::memory::{report_peak_then_serve, serve_or_test, status_kib, ServerChild};
use support::Blob;

/// The size of the resource every Get reads (its spec's one string).
const BLOB_BYTES: usize = 2 << 20;

/// The server, in a process of its own: serves mutual TLS with the certificates in `dir` over
/// a store holding one resource of [`BLOB_BYTES`], prints `PORT`, then `BASE` (its peak memory
/// so far), and on the line `measure` prints `PEAK` once its memory has settled.
async fn server_process(dir: &Path) {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let identity =
        CertifiedKey::read_pem(&dir.join("server.pem"), &dir.join("server-key.pem")).unwrap();
    let store = Arc::new(MemoryState::default());
    let blob = Resource::new(
        "big",
        Blob {
            data: "x".repeat(BLOB_BYTES),
        },
    );
    store
        .create(blob.into_shared(), CreateOptions::default())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let _server = ApiServer::new(Security::MutualTls {
        identity,
        client_ca_pem: read("ca.pem"),
    })
    .with_state(StateService::new(
        store,
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
        "COSI_UNREAD_ANSWER_SERVER",
        |dir| async move { server_process(Path::new(&dir)).await },
        "one_caller_s_unread_answers_pin_at_most_its_byte_budget",
        one_caller_s_unread_answers_pin_at_most_its_byte_budget,
    );
}

/// A Get of the resource, as a gRPC request body: the message behind its 5-byte header.
fn get_request_body() -> Bytes {
    let message = pb::GetRequest {
        namespace: Blob::kind().namespace().to_string(),
        r#type: Blob::TYPE.to_string(),
        id: "big".to_string(),
        ..pb::GetRequest::default()
    }
    .encode_to_vec();
    let mut body = BytesMut::with_capacity(5 + message.len());
    body.put_u8(0);
    body.put_u32(message.len() as u32);
    body.put_slice(&message);
    body.freeze()
}

/// One Get's answer, read whole once `go` says so (its bytes given back to the connection's
/// window as they are read): the length of its resource's spec, or what went wrong. `head`
/// hears when the answer's head has arrived.
async fn read_answer(
    response: h2::client::ResponseFuture,
    head: tokio::sync::mpsc::UnboundedSender<()>,
    mut go: tokio::sync::watch::Receiver<bool>,
) -> Result<usize, String> {
    let response = response.await.map_err(|e| e.to_string())?;
    let _ = head.send(());
    let status = |headers: &http::HeaderMap| {
        headers
            .get("grpc-status")
            .map(|s| s.to_str().unwrap_or("?").to_string())
    };
    if let Some(code) = status(response.headers()) {
        return Err(format!("answered at once with status {code}"));
    }
    go.wait_for(|go| *go).await.map_err(|e| e.to_string())?;
    let mut body = response.into_body();
    let mut data = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        body.flow_control()
            .release_capacity(chunk.len())
            .map_err(|e| e.to_string())?;
        data.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.map_err(|e| e.to_string())?;
    match trailers.as_ref().and_then(status).as_deref() {
        Some("0") => {}
        other => return Err(format!("ended with status {other:?}")),
    }
    if data.len() < 5 {
        return Err(format!("an answer of {} bytes", data.len()));
    }
    let answer = pb::GetResponse::decode(data.split_off(5).freeze()).map_err(|e| e.to_string())?;
    let spec = answer
        .resource
        .and_then(|r| r.spec)
        .ok_or("an answer without a spec")?;
    Ok(spec.proto_spec.len())
}

async fn one_caller_s_unread_answers_pin_at_most_its_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("cosi").unwrap();
    let server = ca
        .issue_server(&["127.0.0.1".parse().unwrap()], &[], CERT_VALIDITY)
        .unwrap();
    server.write_pem(dir.path(), "server").unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.cert_pem()).unwrap();
    let reader = ca
        .issue_client("slow-reader", Role::Reader, CERT_VALIDITY)
        .unwrap();

    let mut server = ServerChild::spawn(&[("COSI_UNREAD_ANSWER_SERVER", dir.path().as_os_str())]);
    let port = server.figure("PORT") as u16;
    let base = server.figure("BASE");

    // One connection, HTTP/2 spoken by hand: nothing is read, so no window is given back.
    let tls = cosi_api::tls::client_mutual(ca.cert_pem(), &reader).unwrap();
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

    // As many Gets as the caller may hold open, none of them read until `go`.
    let body = get_request_body();
    let (head, mut heads) = tokio::sync::mpsc::unbounded_channel();
    let (go, going) = tokio::sync::watch::channel(false);
    let mut answers = Vec::new();
    for _ in 0..DEFAULT_MAX_CALLS_PER_CALLER {
        send = send.ready().await.unwrap();
        let request =
            http::Request::post(format!("https://127.0.0.1:{port}/cosi.resource.State/Get"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .header(OMIT_YAML_HEADER, "1")
                .body(())
                .unwrap();
        let (answer, mut stream) = send.send_request(request, false).unwrap();
        stream.send_data(body.clone(), true).unwrap();
        answers.push(tokio::spawn(read_answer(
            answer,
            head.clone(),
            going.clone(),
        )));
    }
    // The server answers: an answer's head has arrived.
    heads.recv().await.unwrap();
    server.say("measure");
    let peak = server.figure("PEAK");

    // The caller reads: every Get is answered, whole (those that waited for room too).
    go.send(true).unwrap();
    for (i, answer) in answers.into_iter().enumerate() {
        let spec = answer
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("Get {}: {e}", i + 1));
        assert!(spec > BLOB_BYTES, "Get {}: a spec of {spec} bytes", i + 1);
    }
    server.finish();

    let grown = peak - base;
    let budget = (DEFAULT_MAX_BYTES_PER_CALLER >> 20) as u64;
    let unread = (DEFAULT_MAX_CALLS_PER_CALLER * BLOB_BYTES) >> 20;
    eprintln!(
        "server peak {base} MiB -> {peak} MiB (+{grown} MiB) for {} unread Gets of {} MiB \
         ({unread} MiB of answers); budget {budget} MiB",
        DEFAULT_MAX_CALLS_PER_CALLER,
        BLOB_BYTES >> 20
    );
    assert!(
        grown < budget + 32,
        "server peak {base} MiB -> {peak} MiB for {} unread Gets of {} MiB",
        DEFAULT_MAX_CALLS_PER_CALLER,
        BLOB_BYTES >> 20
    );
}
