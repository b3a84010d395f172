//! [`RemoteState`]: a [`State`] over the network, so every `StateExt` helper and the
//! controller engine run against a remote node unchanged.
//!
//! Errors come back as the exact [`cosi_core::Error`] the server's store returned (through
//! [`crate::status`]); a transport failure is a retryable backend error. Watches survive
//! dropped connections and server restarts ([`super::watch`]).

use std::sync::Arc;
use std::time::Duration;

use cosi_core::{
    AnyResource, Call as StateCall, CreateOptions, DestroyOptions, Kind, ListOptions, Pointer,
    Result, SharedResource, State, UpdateOptions, Watch, WatchKindOptions, WatchOptions,
};
use tonic::transport::Channel;
use tonic::Request;

use crate::codec::{Codec, Reader, Tombstones};
use crate::proto::resource::{self as pb, state_client::StateClient};
use crate::query::{encode_ids, encode_labels};
use crate::server::{MAX_MESSAGE_SIZE, OMIT_YAML_HEADER};
use crate::status::{from_status, has_detail, Call, CallContext};

use super::answer::{after, same_kind, same_resource};
use super::deadline::{within, DEFAULT_CALL_TIMEOUT};
use super::raw_answer::{self, resource_of, Method};
use super::watch::{start_watch, Backoff, WatchClient, WatchTarget};

/// The default bound of one List, encoded ([`RemoteOptions::max_list_bytes`]): far more than
/// any node's kind (a message is at most 32 MiB), and a bound for a list that never ends.
pub const DEFAULT_MAX_LIST_BYTES: usize = 256 << 20;

/// Where a [`RemoteState`]'s deadline is set, as its errors name it.
const CALL_TIMEOUT: &str = "RemoteOptions::call_timeout";

/// Options of a [`RemoteState`].
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// Send the YAML spec with writes (the original's servers store it for generic
    /// clients; this crate's server ignores it). Default: true.
    pub yaml_on_write: bool,
    /// How watches reconnect.
    pub reconnect: Backoff,
    /// Events buffered per watch between the connection and the consumer (at least 1).
    pub watch_buffer: usize,
    /// The most encoded bytes one List may bring in; past it the list is an error. A server's
    /// list need never end: trusted or not, a peer with a bug must not grow this process's
    /// memory without limit (each message arriving in time, the call deadline does not end
    /// it). Default: [`DEFAULT_MAX_LIST_BYTES`]; `None`: no bound.
    pub max_list_bytes: Option<usize>,
    /// How long a call waits for the server: a unary call for its answer, a List for each
    /// message, a watch for its first (established) message. A server that accepts a call and
    /// never answers would otherwise hang the caller (a controller's reconcile) for good; past
    /// it the call fails with a retryable error. `None`: no deadline. Default:
    /// [`DEFAULT_CALL_TIMEOUT`] (30 s).
    /// [`RemoteState::teardown_and_destroy_remote`] waits for finalizers and has none.
    pub call_timeout: Option<Duration>,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            yaml_on_write: true,
            reconnect: Backoff::default(),
            watch_buffer: 256,
            max_list_bytes: Some(DEFAULT_MAX_LIST_BYTES),
            call_timeout: Some(DEFAULT_CALL_TIMEOUT),
        }
    }
}

/// A [`State`] served by a remote node.
///
/// ```no_run
/// use std::sync::Arc;
/// use cosi_api::client::{channel, ClientSecurity, RemoteState};
/// use cosi_api::codec::Codec;
/// # async fn demo() -> cosi_core::Result<()> {
/// let channel = channel("127.0.0.1:50000".parse().unwrap(), None, ClientSecurity::Plaintext)?;
/// let state = RemoteState::new(channel, Codec::new(Arc::new(cosi_core::Registry::new())));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RemoteState {
    client: StateClient<Channel>,
    /// For the calls whose answers are read in place ([`super::raw_answer`]): Get, Create,
    /// Update, Watch.
    channel: Channel,
    codec: Codec,
    options: RemoteOptions,
}

impl std::fmt::Debug for RemoteState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteState")
            .field("codec", &self.codec)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RemoteState {
    /// A state over `channel`, decoding with `codec` (types it does not know come back as
    /// dynamic resources).
    pub fn new(channel: Channel, codec: Codec) -> Self {
        Self::with_options(channel, codec, RemoteOptions::default())
    }

    /// [`RemoteState::new`] with options.
    pub fn with_options(channel: Channel, codec: Codec, options: RemoteOptions) -> Self {
        let client = StateClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE);
        RemoteState {
            client,
            channel,
            codec,
            options,
        }
    }

    fn watch_client(&self) -> WatchClient {
        WatchClient {
            channel: self.channel.clone(),
            codec: self.codec.clone(),
            call_timeout: self.options.call_timeout,
        }
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.metadata_mut().insert(
            OMIT_YAML_HEADER,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        request
    }

    /// The error of a failed write. A peer's server sends only a code, so a conflict lacks what
    /// the store knew (the stored version, owner or finalizers): read them back, so the error
    /// says as much as one from this crate's server.
    async fn write_error(&self, status: tonic::Status, ctx: &CallContext) -> cosi_core::Error {
        use cosi_core::Error;
        let error = from_status(&status, ctx);
        let incomplete = !has_detail(&status)
            && matches!(
                error,
                Error::VersionConflict { .. }
                    | Error::OwnerConflict { .. }
                    | Error::PendingFinalizers { .. }
            );
        if !incomplete {
            return error;
        }
        let Ok(stored) = self.get(&ctx.pointer).await else {
            return error;
        };
        let md = stored.metadata();
        match error {
            Error::VersionConflict {
                pointer, expected, ..
            } => Error::VersionConflict {
                pointer,
                expected,
                actual: md.version(),
            },
            Error::OwnerConflict {
                pointer, writer, ..
            } => Error::OwnerConflict {
                pointer,
                owner: md.owner().map(str::to_string),
                writer,
            },
            Error::PendingFinalizers { pointer, .. } => Error::PendingFinalizers {
                pointer,
                finalizers: md.finalizers().clone(),
            },
            other => other,
        }
    }

    /// The resource of an answer (its bytes: see [`super::raw_answer`]) to a call about
    /// `ctx.pointer`: that resource, none other.
    fn decode(&self, answer: &[u8], ctx: &CallContext) -> Result<SharedResource> {
        let resource = resource_of(answer)
            .map_err(|message| {
                cosi_core::Error::invalid(ctx.pointer.to_string(), "response", message)
            })?
            .ok_or_else(|| missing_resource(ctx))?;
        let resource = self
            .codec
            .decode_bytes(&resource, Reader::Client, Tombstones::Typed)?;
        same_resource(&ctx.pointer, resource.metadata().pointer())?;
        Ok(resource)
    }

    fn encode(&self, resource: &dyn AnyResource) -> Result<pb::Resource> {
        self.codec.encode(resource, self.options.yaml_on_write)
    }

    /// Deletes after a teardown: the server's native `TeardownAndDestroy` (one call).
    pub async fn teardown_and_destroy_remote(
        &self,
        pointer: &Pointer,
        owner: Option<&str>,
    ) -> Result<()> {
        let ctx = CallContext::new(Call::TeardownAndDestroy, pointer.clone());
        self.client
            .clone()
            .teardown_and_destroy(self.request(pb::TeardownAndDestroyRequest {
                namespace: pointer.namespace().to_string(),
                r#type: pointer.resource_type().to_string(),
                id: pointer.id().to_string(),
                options: Some(pb::TeardownAndDestroyOptions {
                    owner: owner.unwrap_or_default().to_string(),
                }),
            }))
            .await
            .map_err(|s| from_status(&s, &ctx))?;
        Ok(())
    }

    /// The server's native `Teardown`: returns whether the resource can be destroyed now.
    pub async fn teardown_remote(&self, pointer: &Pointer, owner: Option<&str>) -> Result<bool> {
        let ctx = CallContext::new(Call::Teardown, pointer.clone());
        let mut client = self.client.clone();
        let call = client.teardown(self.request(pb::TeardownRequest {
            namespace: pointer.namespace().to_string(),
            r#type: pointer.resource_type().to_string(),
            id: pointer.id().to_string(),
            options: Some(pb::TeardownOptions {
                owner: owner.unwrap_or_default().to_string(),
            }),
        }));
        let response = within(self.options.call_timeout, CALL_TIMEOUT, call)
            .await
            .map_err(|s| from_status(&s, &ctx))?;
        Ok(response.into_inner().destroy_ready)
    }
}

fn missing_resource(ctx: &CallContext) -> cosi_core::Error {
    cosi_core::Error::Backend {
        subject: ctx.pointer.to_string(),
        message: "the server answered without a resource".into(),
        retryable: false,
        source: None,
    }
}

impl State for RemoteState {
    fn get<'a>(&'a self, pointer: &'a Pointer) -> StateCall<'a, SharedResource> {
        StateCall::pending(async move {
            let ctx = CallContext::new(Call::Get, pointer.clone());
            let request = self.request(pb::GetRequest {
                namespace: pointer.namespace().to_string(),
                r#type: pointer.resource_type().to_string(),
                id: pointer.id().to_string(),
                options: Some(pb::GetOptions {}),
            });
            let call = raw_answer::unary(&self.channel, Method::GET, request);
            let answer = within(self.options.call_timeout, CALL_TIMEOUT, call)
                .await
                .map_err(|s| from_status(&s, &ctx))?;
            self.decode(&answer, &ctx)
        })
    }

    fn list<'a>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> StateCall<'a, Vec<SharedResource>> {
        StateCall::pending(async move {
            let ctx = CallContext::new(Call::List, kind.pointer(""));
            let mut client = self.client.clone();
            let call = client.list(self.request(pb::ListRequest {
                namespace: kind.namespace().to_string(),
                r#type: kind.resource_type().to_string(),
                options: Some(pb::ListOptions {
                    label_query: encode_labels(&options.labels),
                    id_query: encode_ids(options.ids.as_ref()),
                }),
            }));
            let mut stream = within(self.options.call_timeout, CALL_TIMEOUT, call)
                .await
                .map_err(|s| from_status(&s, &ctx))?
                .into_inner();
            let mut out: Vec<SharedResource> = Vec::new();
            let mut read = 0usize;
            // The deadline is per message: a long list is not cut, a stalled one is.
            while let Some(item) = within(self.options.call_timeout, CALL_TIMEOUT, stream.message())
                .await
                .map_err(|s| from_status(&s, &ctx))?
            {
                let bytes = item.resource.ok_or_else(|| missing_resource(&ctx))?;
                read = read.saturating_add(bytes.len());
                if let Some(max) = self.options.max_list_bytes.filter(|&max| read > max) {
                    return Err(cosi_core::Error::Backend {
                        subject: ctx.pointer.to_string(),
                        message: format!(
                            "the list passed {max} bytes, the most this client reads in one \
                             list (RemoteOptions::max_list_bytes)"
                        ),
                        retryable: false,
                        source: None,
                    });
                }
                let resource =
                    self.codec
                        .decode_bytes(&bytes, Reader::Client, Tombstones::Typed)?;
                same_kind(kind, resource.metadata().pointer())?;
                if let Some(previous) = out.last() {
                    after(
                        kind,
                        previous.metadata().pointer(),
                        resource.metadata().pointer(),
                    )?;
                }
                out.push(resource);
            }
            Ok(out)
        })
    }

    fn create<'a>(
        &'a self,
        resource: SharedResource,
        options: CreateOptions,
    ) -> StateCall<'a, SharedResource> {
        StateCall::pending(async move {
            let pointer = resource.metadata().pointer().clone();
            let mut ctx = CallContext::new(Call::Create, pointer);
            ctx.writer = options.owner.as_deref().map(str::to_string);
            let message = pb::CreateRequest {
                resource: Some(self.encode(&*resource)?),
                options: Some(pb::CreateOptions {
                    owner: options.owner.as_deref().unwrap_or_default().to_string(),
                }),
            };
            let call = raw_answer::unary(&self.channel, Method::CREATE, self.request(message));
            let answer = within(self.options.call_timeout, CALL_TIMEOUT, call).await;
            let answer = match answer {
                Ok(answer) => answer,
                Err(status) => return Err(self.write_error(status, &ctx).await),
            };
            self.decode(&answer, &ctx)
        })
    }

    fn update<'a>(
        &'a self,
        resource: SharedResource,
        options: UpdateOptions,
    ) -> StateCall<'a, SharedResource> {
        StateCall::pending(async move {
            let md = resource.metadata();
            let mut ctx = CallContext::new(Call::Update, md.pointer().clone());
            ctx.version = md.version();
            ctx.expected_phase = options.expected_phase;
            ctx.writer = options.owner.as_deref().map(str::to_string);
            let message = pb::UpdateRequest {
                new_resource: Some(self.encode(&*resource)?),
                options: Some(pb::UpdateOptions {
                    owner: options.owner.as_deref().unwrap_or_default().to_string(),
                    expected_phase: options.expected_phase.map(|p| p.to_string()),
                }),
            };
            let call = raw_answer::unary(&self.channel, Method::UPDATE, self.request(message));
            let answer = within(self.options.call_timeout, CALL_TIMEOUT, call).await;
            let answer = match answer {
                Ok(answer) => answer,
                Err(status) => return Err(self.write_error(status, &ctx).await),
            };
            self.decode(&answer, &ctx)
        })
    }

    fn destroy<'a>(&'a self, pointer: &'a Pointer, options: DestroyOptions) -> StateCall<'a, ()> {
        StateCall::pending(async move {
            let mut ctx = CallContext::new(Call::Destroy, pointer.clone());
            ctx.writer = options.owner.as_deref().map(str::to_string);
            let mut client = self.client.clone();
            let call = client.destroy(self.request(pb::DestroyRequest {
                namespace: pointer.namespace().to_string(),
                r#type: pointer.resource_type().to_string(),
                id: pointer.id().to_string(),
                options: Some(pb::DestroyOptions {
                    owner: options.owner.as_deref().unwrap_or_default().to_string(),
                }),
            }));
            let result = within(self.options.call_timeout, CALL_TIMEOUT, call).await;
            match result {
                Ok(_) => Ok(()),
                Err(status) => Err(self.write_error(status, &ctx).await),
            }
        })
    }

    fn watch<'a>(&'a self, pointer: &'a Pointer, options: WatchOptions) -> StateCall<'a, Watch> {
        StateCall::pending(async move {
            start_watch(
                &self.watch_client(),
                WatchTarget::Pointer {
                    pointer: pointer.clone(),
                    strict: options.strict,
                },
                self.options.reconnect.clone(),
                self.options.watch_buffer,
            )
            .await
        })
    }

    fn watch_kind<'a>(&'a self, kind: &'a Kind, options: WatchKindOptions) -> StateCall<'a, Watch> {
        StateCall::pending(async move {
            start_watch(
                &self.watch_client(),
                WatchTarget::Kind {
                    kind: kind.clone(),
                    options: Arc::new(options),
                },
                self.options.reconnect.clone(),
                self.options.watch_buffer,
            )
            .await
        })
    }
}
