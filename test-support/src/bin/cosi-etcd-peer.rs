//! A peer process for the multi-process etcd tests: it opens an [`EtcdState`] and runs
//! line commands from stdin, answering on stdout, so a test can drive two real processes that
//! share one etcd.
//!
//! Usage: `cosi-etcd-peer ENDPOINT PREFIX`. Commands (one per line):
//! - `watch`: starts a kind watch on `Counters.test.cosi.dev`; answers `watching`, then prints
//!   `event TYPE ID VALUE BOOKMARK` for every event.
//! - `create ID VALUE`: answers `created ID VERSION` or `error MESSAGE`.
//! - `read ID`: remembers the stored resource; answers `read ID VERSION VALUE` or `error MESSAGE`.
//! - `update ID VALUE`: updates the remembered resource to VALUE; answers `updated ID VERSION`,
//!   `conflict EXPECTED ACTUAL` or `error MESSAGE`.
//! - `quit`: exits.

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::Arc;

use cosi_core::{
    downcast, CreateOptions, Error, Event, Resource, ResourceSpec, State, UpdateOptions,
    WatchKindOptions,
};
use cosi_state::etcd::{EtcdOptions, EtcdState};
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Counter {
    value: i64,
}

impl ResourceSpec for Counter {
    const TYPE: &'static str = "Counters.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

fn value(event: &Event) -> String {
    event
        .resource()
        .and_then(|r| cosi_core::downcast_ref::<Counter>(&**r).ok())
        .map_or("-".to_string(), |c| c.spec.value.to_string())
}

fn one_line(error: &Error) -> String {
    error.to_string().replace('\n', " ")
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, endpoint, prefix] = &args[..] else {
        eprintln!("usage: cosi-etcd-peer ENDPOINT PREFIX");
        std::process::exit(2);
    };
    let options = EtcdOptions::new([endpoint.clone()]).with_prefix(prefix.clone());
    let registry = match cosi_core::Registry::new().with::<Counter>() {
        Ok(registry) => Arc::new(registry),
        Err(e) => {
            eprintln!("cannot register Counter: {e}");
            std::process::exit(1);
        }
    };
    let state = match EtcdState::connect(options, registry).await {
        Ok(state) => Arc::new(state),
        Err(e) => {
            eprintln!("cannot connect: {e}");
            std::process::exit(1);
        }
    };

    let (lines_tx, mut lines) = tokio::sync::mpsc::channel::<String>(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines_tx.blocking_send(line).is_err() {
                break;
            }
        }
    });

    let mut remembered: HashMap<String, Arc<Resource<Counter>>> = HashMap::new();
    while let Some(line) = lines.recv().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["watch"] => {
                let options = WatchKindOptions::default();
                match state.watch_kind(&Counter::kind(), options).await {
                    Ok(mut watch) => {
                        println!("watching");
                        tokio::spawn(async move {
                            while let Some(event) = watch.recv().await {
                                let id = event
                                    .resource()
                                    .map_or("-".to_string(), |r| r.metadata().id().to_string());
                                let bookmark =
                                    event.bookmark().map_or("-".to_string(), |b| b.to_string());
                                println!(
                                    "event {} {id} {} {bookmark}",
                                    event.type_name(),
                                    value(&event)
                                );
                            }
                        });
                    }
                    Err(e) => println!("error {}", one_line(&e)),
                }
            }
            ["create", id, value] => {
                let value = value.parse().unwrap_or_default();
                let resource = Resource::new(id, Counter { value }).into_shared();
                match state.create(resource, CreateOptions::default()).await {
                    Ok(stored) => println!("created {id} {}", stored.metadata().version()),
                    Err(e) => println!("error {}", one_line(&e)),
                }
            }
            ["read", id] => {
                let read = state.get(&Counter::kind().pointer(id)).await;
                match read.and_then(downcast::<Counter>) {
                    Ok(stored) => {
                        println!(
                            "read {id} {} {}",
                            stored.metadata.version(),
                            stored.spec.value
                        );
                        remembered.insert(id.to_string(), stored);
                    }
                    Err(e) => println!("error {}", one_line(&e)),
                }
            }
            ["update", id, value] => {
                let Some(stored) = remembered.get(id) else {
                    println!("error {id} was not read");
                    continue;
                };
                let mut next = (**stored).clone();
                next.spec.value = value.parse().unwrap_or_default();
                match state
                    .update(next.into_shared(), UpdateOptions::default())
                    .await
                {
                    Ok(stored) => println!("updated {id} {}", stored.metadata().version()),
                    Err(Error::VersionConflict {
                        expected, actual, ..
                    }) => println!("conflict {expected} {actual}"),
                    Err(e) => println!("error {}", one_line(&e)),
                }
            }
            ["quit"] => break,
            _ => println!("error unknown command {line:?}"),
        }
    }
}
