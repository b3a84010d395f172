//! One answer costs the client about its size, however many entries its resource packs: the
//! resource of a Get, Create or Update answer is read from the received bytes, and its repeated
//! metadata (finalizers, labels, annotations) folded as it is read, so a wrong or hostile
//! server's message of many tiny entries is not built up entry by entry into structures many
//! times its size. For one 4 MiB answer of 2-byte empty entries the client's peak grew 82 MiB
//! on Get (the generated message: a `String` per finalizer) and 70 MiB on List and Watch (the
//! in-place view: a slice pair per label); now 6-9 MiB on each, the received message and the
//! transport's copy of it. The bound asserted is three times the answer.
//!
//! Each case runs in a client process of its own (this binary again, `COSI_ANSWER_CLIENT`
//! set), as it measures the process's peak resident memory; the server runs in another
//! (`COSI_ANSWER_SERVER`), so that its memory is not counted. A plain harness
//! (`harness = false`), so that neither is a test that passes by doing nothing.

mod support;

use std::io::BufRead;
use std::process::{Command, Stdio};

use bytes::Bytes;
use cosi_api::client::{channel, ClientSecurity, RemoteState};
use cosi_api::proto::resource as pb;
use cosi_core::{Event, ListOptions, ResourceSpec, State, WatchKindOptions};
use prost::Message;
use support::memory::{passed, runtime, status_kib};
use support::raw_state::{field, serve, RawState};
use support::{blob_codec, Blob};

/// The size of each answer on the wire.
const MESSAGE_MIB: usize = 4;

/// A case: which call, and what its resource is full of.
#[derive(Clone, Copy, Debug)]
enum Case {
    /// Get, answered with a resource of empty finalizers (`4a 00` each).
    GetEmptyFinalizers,
    /// Get, answered with a resource of empty label entries (`52 00` each): one label, `""`.
    GetEmptyLabels,
    /// Get, answered with a resource of empty annotation entries (`5a 00` each).
    GetEmptyAnnotations,
    /// List, answered with one resource of empty label entries.
    ListEmptyLabels,
    /// Watch, answered with the creation of a resource of empty label entries.
    WatchEmptyLabels,
}

const CASES: [Case; 5] = [
    Case::GetEmptyFinalizers,
    Case::GetEmptyLabels,
    Case::GetEmptyAnnotations,
    Case::ListEmptyLabels,
    Case::WatchEmptyLabels,
];

impl Case {
    fn name(self) -> String {
        format!("{self:?}")
    }

    fn parse(name: &str) -> Case {
        CASES.into_iter().find(|c| c.name() == name).unwrap()
    }

    /// The metadata field repeated.
    fn tag(self) -> u32 {
        match self {
            Case::GetEmptyFinalizers => 9,
            Case::GetEmptyAnnotations => 11,
            _ => 10,
        }
    }

    /// A Blob's `Resource` message with `MESSAGE_MIB` MiB of empty entries of field `tag`.
    fn resource(self) -> Vec<u8> {
        let mut metadata = Vec::new();
        for (tag, value) in [
            (1, "test"),
            (2, Blob::TYPE),
            (3, "a"),
            (4, "1"),
            (6, "running"),
        ] {
            field(tag, value.as_bytes(), &mut metadata);
        }
        let entries = (MESSAGE_MIB << 20) / 2;
        for _ in 0..entries {
            field(self.tag(), &[], &mut metadata);
        }
        let mut spec = Vec::new();
        field(2, b"data: a\n", &mut spec);
        let mut resource = Vec::new();
        field(1, &metadata, &mut resource);
        field(2, &spec, &mut resource);
        resource
    }

    /// The answer's message.
    fn message(self) -> Bytes {
        let resource = self.resource();
        let mut message = Vec::new();
        match self {
            Case::WatchEmptyLabels => {
                let mut event = Vec::new();
                field(1, &resource, &mut event);
                event.extend(
                    pb::Event {
                        event_type: pb::EventType::Created as i32,
                        bookmark: Some(b"1".to_vec()),
                        ..Default::default()
                    }
                    .encode_to_vec(),
                );
                field(1, &event, &mut message);
            }
            _ => field(1, &resource, &mut message),
        }
        Bytes::from(message)
    }
}

fn main() {
    let runtime = runtime();
    if let Some(case) = std::env::var_os("COSI_ANSWER_SERVER") {
        let case = Case::parse(case.to_str().unwrap());
        runtime.block_on(async {
            let address = serve(RawState {
                message: case.message(),
            })
            .await;
            println!("PORT {}", address.port());
            std::future::pending::<()>().await;
        });
        return;
    }
    if let Some(case) = std::env::var_os("COSI_ANSWER_CLIENT") {
        let case = Case::parse(case.to_str().unwrap());
        let port = std::env::var("COSI_ANSWER_PORT").unwrap().parse().unwrap();
        let grown = runtime.block_on(client(case, port));
        println!("GROWN {grown}");
        return;
    }
    an_answer_of_many_tiny_entries_costs_the_client_about_its_size();
    passed("an_answer_of_many_tiny_entries_costs_the_client_about_its_size");
}

/// Runs this binary with `variable` set to `case`; its child process and its stdout's lines.
fn child(
    variable: &str,
    case: Case,
    port: Option<u16>,
) -> (
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.env(variable, case.name()).stdout(Stdio::piped());
    if let Some(port) = port {
        command.env("COSI_ANSWER_PORT", port.to_string());
    }
    let mut child = command.spawn().unwrap();
    let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// A child process, killed when this is dropped (a failed test leaves no server behind).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The line of `lines` that starts with `prefix`, without it.
fn line(lines: &mut impl Iterator<Item = std::io::Result<String>>, prefix: &str) -> String {
    loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.to_string();
        }
    }
}

fn an_answer_of_many_tiny_entries_costs_the_client_about_its_size() {
    let mut failures = Vec::new();
    for case in CASES {
        let (server, mut lines) = child("COSI_ANSWER_SERVER", case, None);
        let _server = Killed(server);
        let port: u16 = line(&mut lines, "PORT ").parse().unwrap();
        let (mut client, mut lines) = child("COSI_ANSWER_CLIENT", case, Some(port));
        let grown_kib: u64 = line(&mut lines, "GROWN ").parse().unwrap();
        assert!(
            client.wait().unwrap().success(),
            "{case:?}: the client failed"
        );
        let grown = grown_kib as f64 / 1024.0;
        eprintln!(
            "{case:?}: peak resident memory grew {grown:.1} MiB for one {MESSAGE_MIB} MiB answer \
             ({:.1}x)",
            grown / MESSAGE_MIB as f64
        );
        if grown > (3 * MESSAGE_MIB) as f64 {
            failures.push(format!("{case:?}: {grown:.1} MiB"));
        }
    }
    assert!(
        failures.is_empty(),
        "answers of {MESSAGE_MIB} MiB cost more than {}: {failures:?}",
        3 * MESSAGE_MIB
    );
}

/// The client's side of `case` against the server on `port`: the growth of its peak resident
/// memory, in KiB, over the call.
async fn client(case: Case, port: u16) -> u64 {
    let client = RemoteState::new(
        channel(
            ([127, 0, 0, 1], port).into(),
            None,
            ClientSecurity::Plaintext,
        )
        .unwrap(),
        blob_codec(),
    );
    let before = status_kib("VmHWM");
    match case {
        Case::GetEmptyFinalizers | Case::GetEmptyLabels | Case::GetEmptyAnnotations => {
            let resource = client.get(&Blob::kind().pointer("a")).await.unwrap();
            let md = resource.metadata();
            let kept = md.finalizers().len() + md.labels().len() + md.annotations().len();
            assert_eq!(kept, 1, "{case:?}: one entry of its field, the empty one");
        }
        Case::ListEmptyLabels => {
            let list = client
                .list(&Blob::kind(), &ListOptions::default())
                .await
                .unwrap();
            assert_eq!(list.len(), 1);
        }
        Case::WatchEmptyLabels => {
            let mut watch = client
                .watch_kind(&Blob::kind(), WatchKindOptions::default())
                .await
                .unwrap();
            let first = watch.recv().await.unwrap();
            assert!(matches!(first, Event::Created { .. }), "{first:?}");
        }
    }
    status_kib("VmHWM") - before
}
