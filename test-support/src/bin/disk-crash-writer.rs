//! Crash-test writer for the disk backend (used by `tests/disk_crash.rs`).
//!
//! `disk-crash-writer <store> <round> <writers> <checkpoint-interval>` opens the store (with
//! that `DiskOptions::checkpoint_interval`) and runs `writers` concurrent writers until it is
//! killed. Each writer repeatedly creates `r<round>-w<w>-<i>` with spec
//! `{"value": i}`, bumps its counter `c<w>` (whose spec value always equals its version), and
//! destroys every third resource it created. After each call returns successfully it prints one
//! line, so every printed line is an acknowledged write:
//!
//! ```text
//! created r3-w1-17 17
//! updated c1 42
//! destroyed r3-w1-15
//! ```

use std::io::Write;
use std::sync::Arc;

use cosi_core::{
    CreateOptions, DestroyOptions, DynamicResource, Metadata, Pointer, SharedResource, State,
    UpdateOptions, Version,
};
use cosi_state::{DiskOptions, DiskState};

const NAMESPACE: &str = "crash";
const TYPE: &str = "Entries.test.cosi.dev";

fn entry(id: &str, value: u64, version: Version) -> SharedResource {
    let mut metadata = Metadata::new(Pointer::new(NAMESPACE, TYPE, id));
    metadata.set_version(version);
    Arc::new(DynamicResource {
        metadata,
        spec: serde_json::json!({ "value": value }),
    })
}

fn ack(line: String) {
    let mut out = std::io::stdout().lock();
    // The test reads acknowledgements from this pipe; if it is gone, there is nobody to tell.
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

fn fail(message: String) -> ! {
    eprintln!("disk-crash-writer: {message}");
    std::process::exit(2);
}

async fn writer(state: Arc<DiskState>, round: u64, w: u64) {
    let counter = Pointer::new(NAMESPACE, TYPE, format!("c{w}"));
    for i in 0u64.. {
        let id = format!("r{round}-w{w}-{i}");
        if let Err(e) = state
            .create(entry(&id, i, Version::UNSET), CreateOptions::default())
            .await
        {
            fail(format!("create {id}: {e}"));
        }
        ack(format!("created {id} {i}"));

        let next = match state.get(&counter).await {
            Ok(stored) => {
                let version = stored.metadata().version();
                state
                    .update(
                        entry(counter.id(), version.get() + 1, version),
                        UpdateOptions::default(),
                    )
                    .await
            }
            Err(e) if e.is_not_found() => {
                state
                    .create(
                        entry(counter.id(), 1, Version::UNSET),
                        CreateOptions::default(),
                    )
                    .await
            }
            Err(e) => Err(e),
        };
        match next {
            Ok(stored) => ack(format!(
                "updated {} {}",
                counter.id(),
                stored.metadata().version()
            )),
            Err(e) => fail(format!("counter {counter}: {e}")),
        }

        if i % 3 == 2 {
            let gone = Pointer::new(NAMESPACE, TYPE, format!("r{round}-w{w}-{}", i - 2));
            if let Err(e) = state.destroy(&gone, DestroyOptions::default()).await {
                fail(format!("destroy {gone}: {e}"));
            }
            ack(format!("destroyed {}", gone.id()));
        }
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, round, writers, checkpoint_interval] = args.as_slice() else {
        fail("usage: disk-crash-writer <store> <round> <writers> <checkpoint-interval>".into());
    };
    let round: u64 = round
        .parse()
        .unwrap_or_else(|e| fail(format!("round: {e}")));
    let writers: u64 = writers
        .parse()
        .unwrap_or_else(|e| fail(format!("writers: {e}")));
    let checkpoint_interval: usize = checkpoint_interval
        .parse()
        .unwrap_or_else(|e| fail(format!("checkpoint interval: {e}")));
    let options = DiskOptions {
        checkpoint_interval,
        ..DiskOptions::default()
    };
    let state = DiskState::open(
        path,
        options,
        std::sync::Arc::new(cosi_core::Registry::new()),
    )
    .await
    .unwrap_or_else(|e| fail(format!("open: {e}")));
    let state = Arc::new(state);
    let tasks: Vec<_> = (0..writers)
        .map(|w| tokio::spawn(writer(state.clone(), round, w)))
        .collect();
    for task in tasks {
        if let Err(e) = task.await {
            fail(format!("writer task: {e}"));
        }
    }
}
