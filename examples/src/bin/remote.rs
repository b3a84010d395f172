//! `remote`: a store served over the remote API with mutual TLS, and used from the other side of
//! the connection as a [`State`]. It is the shape of a node: the store and its controllers run
//! in the server, and callers read, watch and write through `cosi.resource.State` with a
//! certificate whose Organization is their role.
//!
//! Run it with `cargo run -p examples --bin remote`. In order, it
//!
//! 1. makes a cluster CA ([`CertificateAuthority`]), a server certificate for 127.0.0.1 and
//!    two client certificates, one `os:admin` and one `os:reader`;
//! 2. serves an in-memory store on a loopback port ([`ApiServer`], [`Security::MutualTls`]),
//!    with a [`Transform`] under an [`Engine`] deriving a label for every disk;
//! 3. as the admin, through [`RemoteState`] (a `State`, so every [`StateExt`] helper works),
//!    watches the labels, writes disks and a sensitive token, and reads what the controller
//!    derived;
//! 4. shows the rules: the reader reads disks but not the token, and may not write; the admin
//!    may not write a controller's output; nothing changed.
//!
//! Every line it prints comes from a call that succeeded or from the refusal it describes.

use std::error::Error;
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use cosi_api::auth::{Role, StatePolicy};
use cosi_api::client::{channel, ClientSecurity, RemoteState};
use cosi_api::codec::Codec;
use cosi_api::pki::{CertificateAuthority, CertifiedKey, CERT_VALIDITY};
use cosi_api::server::{ApiServer, Security, StateService};
use cosi_controllers::{Engine, Transform};
use cosi_core::{
    CreateOptions, Event, ListOptions, Registry, Resource, ResourceDefinition, ResourceSpec,
    Sensitivity, State, StateExt, UpdateOptions, WatchKindOptions,
};
use cosi_state::MemoryState;
use serde::{Deserialize, Serialize};

/// A disk (written by callers).
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Disk {
    size_gib: u64,
}

impl ResourceSpec for Disk {
    const TYPE: &'static str = "Disks.block.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "block";
}

/// A disk as a person reads it (derived by the transform, in the server).
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct DiskLabel {
    text: String,
}

impl ResourceSpec for DiskLabel {
    const TYPE: &'static str = "DiskLabels.block.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "block";
}

/// A secret: only admins read it, because its definition says it is sensitive.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct ApiToken {
    token: String,
}

impl ResourceSpec for ApiToken {
    const TYPE: &'static str = "ApiTokens.secrets.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "secrets";
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_sensitivity(Sensitivity::Sensitive)
    }
}

/// Bounds the wait for the labels; only a broken build takes this long.
const WAIT: Duration = Duration::from_secs(30);

/// A client of the server at `address` presenting `identity`.
fn client(
    address: std::net::SocketAddr,
    ca_pem: &str,
    identity: CertifiedKey,
    codec: &Codec,
) -> Result<RemoteState, Box<dyn Error>> {
    let security = ClientSecurity::MutualTls {
        ca_pem: ca_pem.to_string(),
        identity,
    };
    Ok(RemoteState::new(
        channel(address, None, security)?,
        codec.clone(),
    ))
}

/// The refusal `result` must be, as one line; an unexpected success is an error.
fn refusal<T>(result: cosi_core::Result<T>) -> Result<String, Box<dyn Error>> {
    match result {
        Ok(_) => Err("a call the rules refuse succeeded".into()),
        Err(error) => Ok(error.to_string()),
    }
}

async fn run() -> Result<(), Box<dyn Error>> {
    println!("== 1. certificates");
    let ca = CertificateAuthority::generate("example cluster")?;
    let localhost = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let server_identity = ca.issue_server(&[localhost], &[], CERT_VALIDITY)?;
    let admin_identity = ca.issue_client("admin", Role::Admin, CERT_VALIDITY)?;
    let reader_identity = ca.issue_client("dashboard", Role::Reader, CERT_VALIDITY)?;
    println!("   cluster CA, server certificate for {localhost}, clients admin (os:admin) and dashboard (os:reader)");

    println!(
        "== 2. the server: an in-memory store, a transform, the State service over mutual TLS"
    );
    let registry = Registry::new()
        .with::<Disk>()?
        .with::<DiskLabel>()?
        .with::<ApiToken>()?;
    let codec = Codec::new(Arc::new(registry));
    let store: Arc<dyn State> = Arc::new(MemoryState::default());
    let engine = Engine::new(store.clone());
    engine.register(Transform::<Disk, DiskLabel>::same_id(
        "DiskLabels",
        |disk: &Disk| {
            Some(DiskLabel {
                text: format!("{} GiB", disk.size_gib),
            })
        },
    ))?;
    engine.start();
    // The node's rule: what a controller writes, callers may not.
    let policy = StatePolicy::default().with_controller_outputs([(
        DiskLabel::TYPE.to_string(),
        ["DiskLabels".to_string()].into(),
    )]);
    let listener = tokio::net::TcpListener::bind((localhost, 0)).await?;
    let server = ApiServer::new(Security::MutualTls {
        identity: server_identity,
        client_ca_pem: ca.cert_pem().to_string(),
    })
    .with_state(StateService::new(store.clone(), codec.clone(), policy))
    .serve(listener)?;
    let address = server.local_addr();
    println!("   serving cosi.resource.State on {address}");

    println!("== 3. the admin, through RemoteState");
    let admin = client(address, ca.cert_pem(), admin_identity, &codec)?;
    let mut labels = admin
        .watch_kind(&DiskLabel::kind(), WatchKindOptions::default())
        .await?;
    for (id, size_gib) in [("sda", 100), ("sdb", 400)] {
        let disk = Resource::new(id, Disk { size_gib });
        let written = admin
            .modify(disk, UpdateOptions::default(), |d| {
                d.spec.size_gib = size_gib;
                Ok(())
            })
            .await?;
        println!(
            "   wrote disk {id}: {size_gib} GiB, version {}",
            written.metadata.version().get()
        );
    }
    let token = Resource::new(
        "ci",
        ApiToken {
            token: "s3cret".into(),
        },
    );
    admin
        .create(token.into_shared(), CreateOptions::default())
        .await?;
    println!("   wrote token ci (a sensitive type)");
    let mut seen = 0;
    while seen < 2 {
        let event = tokio::time::timeout(WAIT, labels.recv())
            .await?
            .ok_or("the label watch ended")?;
        if let Event::Created { resource, .. } = &event {
            let label = cosi_core::downcast_ref::<DiskLabel>(&**resource)?;
            println!(
                "   watch: the server's controller created label {}: {}",
                resource.metadata().id(),
                label.spec.text
            );
            seen += 1;
        }
    }

    println!("== 4. the rules");
    let reader = client(address, ca.cert_pem(), reader_identity, &codec)?;
    let disks = reader.list(&Disk::kind(), &ListOptions::default()).await?;
    println!("   reader lists disks: {} of them", disks.len());
    let read_token = reader
        .get_typed::<ApiToken>(&ApiToken::kind().pointer("ci"))
        .await;
    println!("   reader reads the token: {}", refusal(read_token)?);
    let reader_write = reader
        .create(
            Resource::new("sdc", Disk { size_gib: 50 }).into_shared(),
            CreateOptions::default(),
        )
        .await;
    println!("   reader writes a disk: {}", refusal(reader_write)?);
    let admin_write = admin
        .modify(
            Resource::new("sda", DiskLabel::default()),
            UpdateOptions::default(),
            |l| {
                l.spec.text = "hand-written".into();
                Ok(())
            },
        )
        .await;
    println!("   admin writes a label: {}", refusal(admin_write)?);
    let disks = store.list(&Disk::kind(), &ListOptions::default()).await?;
    let label = store
        .get_typed::<DiskLabel>(&DiskLabel::kind().pointer("sda"))
        .await?;
    println!(
        "   in the store: {} disks, label sda still {:?}",
        disks.len(),
        label.spec.text
    );

    engine.shutdown().await;
    server.shutdown().await?;
    println!("== server and engine stopped");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("remote: {error}");
            ExitCode::FAILURE
        }
    }
}
