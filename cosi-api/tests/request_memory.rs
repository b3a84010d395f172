//! One request costs the server about its size, however many repeated entries it packs: the
//! requests whose messages have repeated fields (State Create and Update, List and Watch label
//! queries, the machine service's ApplyConfiguration, which a maintenance-mode node takes from
//! any caller) have their repeated entries counted on the received bytes before the message is
//! built, and are refused (`InvalidArgument`, naming the field) past the documented limits
//! (`cosi_api::request_bounds`). The generated decoder builds a heap value per entry: for one
//! 4 MiB request of 2-byte empty entries the server's peak grew 13 to 20 times the request
//! (Create and Update 80 MiB, List, Watch and ApplyConfiguration 52 MiB), and 30 times for
//! labels or annotations of distinct 4-byte keys (121 MiB); now 4 to 6 MiB. The bound asserted
//! is three times the request.
//!
//! Each case runs against a server process of its own (this binary again,
//! `COSI_REQUEST_SERVER` naming the directory of its certificate), as it measures that
//! process's peak resident memory. A plain harness (`harness = false`), so that the server is
//! not a test that passes by doing nothing.

mod support;

use std::io::{BufRead, Write};
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes};
use cosi_api::auth::StatePolicy;
use cosi_api::client::{channel, ClientSecurity};
use cosi_api::pki::CertifiedKey;
use cosi_api::server::{ApiServer, Security, StateService};
use cosi_api::testing::TestMachine;
use cosi_api::tls::fingerprint_of_pem;
use cosi_core::ResourceSpec;
use cosi_state::MemoryState;
use support::memory::{serve_or_test, status_kib, ServerChild};
use support::raw_state::field;
use support::{blob_codec, Blob};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

/// The size of each request on the wire.
const MESSAGE_MIB: usize = 4;

/// A case: which call, and what its request is full of.
#[derive(Clone, Copy, Debug)]
enum Case {
    /// Create, a resource of empty finalizers (`4a 00` each).
    CreateEmptyFinalizers,
    /// Update, a resource of empty finalizers.
    UpdateEmptyFinalizers,
    /// Create, a resource of labels of distinct 4-byte keys, empty values (`52 06 0a 04 ..`):
    /// prost folds repeated keys only.
    CreateDistinctLabels,
    /// Update, a resource of annotations of distinct 4-byte keys.
    UpdateDistinctAnnotations,
    /// List, empty label queries (`0a 00` each).
    ListEmptyLabelQueries,
    /// List, one query of one `in` term of empty values (`1a 00` each).
    ListEmptyLabelValues,
    /// Watch, empty label queries (`1a 00` each).
    WatchEmptyLabelQueries,
    /// ApplyConfiguration on a maintenance-mode node, empty patches (`32 00` each).
    ApplyEmptyPatches,
}

const CASES: [Case; 8] = [
    Case::CreateEmptyFinalizers,
    Case::UpdateEmptyFinalizers,
    Case::CreateDistinctLabels,
    Case::UpdateDistinctAnnotations,
    Case::ListEmptyLabelQueries,
    Case::ListEmptyLabelValues,
    Case::WatchEmptyLabelQueries,
    Case::ApplyEmptyPatches,
];

/// `MESSAGE_MIB` MiB of empty entries of field `tag`.
fn empty_entries(tag: u32, out: &mut Vec<u8>) {
    for _ in 0..(MESSAGE_MIB << 20) / 2 {
        field(tag, &[], out);
    }
}

/// `MESSAGE_MIB` MiB of map entries of field `tag`: distinct 4-byte keys, empty values.
fn distinct_entries(tag: u32, out: &mut Vec<u8>) {
    let start = out.len();
    for i in 0u32.. {
        if out.len() - start >= MESSAGE_MIB << 20 {
            break;
        }
        let digit = |place: u32| b'a' + (i / 26u32.pow(place) % 26) as u8;
        let mut entry = Vec::new();
        field(1, &[digit(0), digit(1), digit(2), digit(3)], &mut entry);
        field(tag, &entry, out);
    }
}

/// Blob's kind, fields 1 and 2 of a request.
fn kind(out: &mut Vec<u8>) {
    field(1, Blob::kind().namespace().as_bytes(), out);
    field(2, Blob::TYPE.as_bytes(), out);
}

impl Case {
    /// The method's path.
    fn path(self) -> &'static str {
        match self {
            Case::CreateEmptyFinalizers | Case::CreateDistinctLabels => {
                "/cosi.resource.State/Create"
            }
            Case::UpdateEmptyFinalizers | Case::UpdateDistinctAnnotations => {
                "/cosi.resource.State/Update"
            }
            Case::ListEmptyLabelQueries | Case::ListEmptyLabelValues => "/cosi.resource.State/List",
            Case::WatchEmptyLabelQueries => "/cosi.resource.State/Watch",
            Case::ApplyEmptyPatches => "/cosi.machine.MachineService/ApplyConfiguration",
        }
    }

    /// The field the request repeats, as the refusal names it.
    fn field(self) -> &'static str {
        match self {
            Case::CreateEmptyFinalizers => "resource.metadata.finalizers",
            Case::UpdateEmptyFinalizers => "new_resource.metadata.finalizers",
            Case::CreateDistinctLabels => "resource.metadata.labels",
            Case::UpdateDistinctAnnotations => "new_resource.metadata.annotations",
            Case::ListEmptyLabelQueries | Case::WatchEmptyLabelQueries => "label_query",
            Case::ListEmptyLabelValues => "label_query[0].terms[0].value",
            Case::ApplyEmptyPatches => "patches",
        }
    }

    /// A Blob's `Resource` message full of the case's entries.
    fn resource(self) -> Vec<u8> {
        let mut metadata = Vec::new();
        kind(&mut metadata);
        field(3, b"a", &mut metadata);
        match self {
            Case::CreateDistinctLabels => distinct_entries(10, &mut metadata),
            Case::UpdateDistinctAnnotations => distinct_entries(11, &mut metadata),
            _ => empty_entries(9, &mut metadata),
        }
        let mut spec = Vec::new();
        field(2, b"data: a\n", &mut spec);
        let mut resource = Vec::new();
        field(1, &metadata, &mut resource);
        field(2, &spec, &mut resource);
        resource
    }

    /// The request's message.
    fn message(self) -> Bytes {
        let mut message = Vec::new();
        match self {
            Case::CreateEmptyFinalizers | Case::CreateDistinctLabels => {
                field(1, &self.resource(), &mut message)
            }
            Case::UpdateEmptyFinalizers | Case::UpdateDistinctAnnotations => {
                field(2, &self.resource(), &mut message)
            }
            Case::ListEmptyLabelQueries => {
                kind(&mut message);
                let mut options = Vec::new();
                empty_entries(1, &mut options);
                field(3, &options, &mut message);
            }
            Case::ListEmptyLabelValues => {
                kind(&mut message);
                let mut term = Vec::new();
                field(1, b"k", &mut term);
                term.extend([0x10, 0x03]); // op: IN
                empty_entries(3, &mut term);
                let mut query = Vec::new();
                field(1, &term, &mut query);
                let mut options = Vec::new();
                field(1, &query, &mut options);
                field(3, &options, &mut message);
            }
            Case::WatchEmptyLabelQueries => {
                kind(&mut message);
                let mut options = Vec::new();
                empty_entries(3, &mut options);
                field(4, &options, &mut message);
            }
            Case::ApplyEmptyPatches => empty_entries(6, &mut message),
        }
        Bytes::from(message)
    }
}

/// Sends a request as the given bytes; reads an answer as its bytes.
#[derive(Default)]
struct RawCodec(PhantomData<()>);

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec::default()
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec::default()
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The server, in a process of its own: the State service over plaintext (an admin, as far as
/// its roles go) and a maintenance-mode machine service with the certificate in `dir`. Prints
/// `STATE port`, `MACHINE port`, then on each line `peak` its peak memory (`PEAK kib`).
async fn server_process(dir: &Path) {
    let identity =
        CertifiedKey::read_pem(&dir.join("server.pem"), &dir.join("server-key.pem")).unwrap();
    let state_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let machine_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let state_port = state_listener.local_addr().unwrap().port();
    let machine_port = machine_listener.local_addr().unwrap().port();
    let _state = ApiServer::new(Security::Plaintext)
        .with_state(StateService::new(
            Arc::new(MemoryState::default()),
            blob_codec(),
            StatePolicy::default(),
        ))
        .serve(state_listener)
        .unwrap();
    let _machine = ApiServer::new(Security::Maintenance { identity })
        .with_machine(Arc::new(TestMachine::new()))
        .serve(machine_listener)
        .unwrap();
    println!("STATE {state_port}");
    println!("MACHINE {machine_port}");
    // Serve until the parent is done.
    for line in std::io::stdin().lock().lines() {
        if line.unwrap().trim() != "peak" {
            break;
        }
        println!("PEAK {}", status_kib("VmHWM"));
        std::io::stdout().flush().unwrap();
    }
}

fn main() {
    serve_or_test(
        "COSI_REQUEST_SERVER",
        |dir| async move { server_process(Path::new(&dir)).await },
        "a_request_of_many_tiny_entries_costs_the_server_about_its_size",
        a_request_of_many_tiny_entries_costs_the_server_about_its_size,
    );
}

/// Sends `case`'s request to a fresh server; the server's peak growth, in KiB, and the status.
async fn measure(
    case: Case,
    dir: &Path,
    fingerprint: &cosi_api::tls::Fingerprint,
) -> (u64, Status) {
    let mut server = ServerChild::spawn(&[("COSI_REQUEST_SERVER", dir.as_os_str())]);
    let state_port = server.figure("STATE") as u16;
    let machine_port = server.figure("MACHINE") as u16;
    let message = case.message();
    let (port, security) = match case {
        Case::ApplyEmptyPatches => (
            machine_port,
            ClientSecurity::Pinned {
                fingerprints: vec![*fingerprint],
            },
        ),
        _ => (state_port, ClientSecurity::Plaintext),
    };
    let channel = channel(([127, 0, 0, 1], port).into(), None, security).unwrap();
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20);
    grpc.ready().await.unwrap();
    // The base: the server after a first (small) call of the same method, so that what a
    // call costs anyway (a connection, a stream, the service's first use) is not counted.
    let mut small = Vec::new();
    kind(&mut small);
    let path = http::uri::PathAndQuery::from_static(case.path());
    let call = |message: Bytes| {
        let mut grpc = grpc.clone();
        let path = path.clone();
        async move {
            grpc.ready().await.unwrap();
            let request = tonic::Request::new(message);
            match case {
                Case::ListEmptyLabelQueries
                | Case::ListEmptyLabelValues
                | Case::WatchEmptyLabelQueries => {
                    match grpc
                        .server_streaming(request, path, RawCodec::default())
                        .await
                    {
                        Ok(response) => {
                            let mut stream = response.into_inner();
                            loop {
                                match stream.message().await {
                                    Ok(Some(_)) if case.path().ends_with("Watch") => {
                                        return Status::ok("watching")
                                    }
                                    Ok(Some(_)) => {}
                                    Ok(None) => return Status::ok("listed"),
                                    Err(status) => return status,
                                }
                            }
                        }
                        Err(status) => status,
                    }
                }
                _ => match grpc.unary(request, path, RawCodec::default()).await {
                    Ok(_) => Status::ok("answered"),
                    Err(status) => status,
                },
            }
        }
    };
    let _ = call(Bytes::from(small)).await;
    server.say("peak");
    let base = server.figure("PEAK");
    let status = call(message).await;
    server.say("peak");
    let peak = server.figure("PEAK");
    server.finish();
    (peak.saturating_sub(base), status)
}

async fn a_request_of_many_tiny_entries_costs_the_server_about_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let identity = cosi_api::pki::self_signed_server(&["127.0.0.1".parse().unwrap()], &[]).unwrap();
    identity.write_pem(dir.path(), "server").unwrap();
    let fingerprint = fingerprint_of_pem(&identity.cert_pem).unwrap();
    let bound_kib = (3 * MESSAGE_MIB as u64) << 10;
    let mut failures = Vec::new();
    for case in CASES {
        let (grown, status) = measure(case, dir.path(), &fingerprint).await;
        eprintln!(
            "{case:?}: server peak +{} MiB for a {MESSAGE_MIB} MiB request ({:.1}x): {:?} {}",
            grown >> 10,
            grown as f64 / (MESSAGE_MIB << 10) as f64,
            status.code(),
            status.message()
        );
        if grown > bound_kib {
            failures.push(format!("{case:?}: +{} MiB", grown >> 10));
        }
        if status.code() != Code::InvalidArgument || !status.message().contains(case.field()) {
            failures.push(format!(
                "{case:?}: {:?} {:?}, expected InvalidArgument naming {}",
                status.code(),
                status.message(),
                case.field()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
