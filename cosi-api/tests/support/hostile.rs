//! A State server implementing the generated service by hand, answering with crafted
//! messages whatever it is asked: what the client does with wrong answers.
#![allow(dead_code)]

use std::pin::Pin;
use std::sync::Arc;

use cosi_api::proto::encoded;
use cosi_api::proto::resource::{self as pb, state_server};
use cosi_core::SharedResource;
use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::blob_codec as codec;

/// What the server answers, whatever it is asked.
#[derive(Default)]
pub struct Answers {
    pub get: Option<SharedResource>,
    pub list: Vec<SharedResource>,
    pub watch: Vec<encoded::WatchResponse>,
    /// Get never answers; List sends its resources, then nothing more, without ending.
    pub silent: bool,
    /// Get fails with this.
    pub get_error: Option<Status>,
    /// A watch ends after its messages (instead of staying open).
    pub watch_ends: bool,
    /// The watch requests received, in order.
    pub watch_requests: std::sync::Mutex<Vec<pb::WatchRequest>>,
}

pub struct Hostile(pub Arc<Answers>);

pub type Responses<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl state_server::State for Hostile {
    async fn get(&self, _: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        if self.0.silent {
            futures::future::pending::<()>().await;
        }
        if let Some(status) = &self.0.get_error {
            return Err(status.clone());
        }
        let resource = self
            .0
            .get
            .as_ref()
            .map(|r| codec().encode(&**r, false).unwrap());
        Ok(Response::new(pb::GetResponse { resource }))
    }

    type ListStream = Responses<encoded::ListResponse>;

    async fn list(
        &self,
        _: Request<pb::ListRequest>,
    ) -> Result<Response<Self::ListStream>, Status> {
        let items: Vec<_> = self
            .0
            .list
            .iter()
            .map(|r| {
                Ok(encoded::ListResponse {
                    resource: Some(codec().encode_bytes(&**r, false).unwrap()),
                })
            })
            .collect();
        if self.0.silent {
            let items = futures::stream::iter(items).chain(futures::stream::pending());
            return Ok(Response::new(Box::pin(items)));
        }
        Ok(Response::new(Box::pin(futures::stream::iter(items))))
    }

    async fn create(
        &self,
        _: Request<pb::CreateRequest>,
    ) -> Result<Response<pb::CreateResponse>, Status> {
        Err(Status::unimplemented("create"))
    }

    async fn update(
        &self,
        _: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::UpdateResponse>, Status> {
        Err(Status::unimplemented("update"))
    }

    async fn destroy(
        &self,
        _: Request<pb::DestroyRequest>,
    ) -> Result<Response<pb::DestroyResponse>, Status> {
        Err(Status::unimplemented("destroy"))
    }

    type WatchStream = Responses<encoded::WatchResponse>;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.0
            .watch_requests
            .lock()
            .unwrap()
            .push(request.into_inner());
        let messages: Vec<_> = self.0.watch.iter().cloned().map(Ok).collect();
        if self.0.watch_ends {
            return Ok(Response::new(Box::pin(futures::stream::iter(messages))));
        }
        // The crafted messages, then a stream that stays open (no reconnect muddles the test).
        Ok(Response::new(Box::pin(
            futures::stream::iter(messages).chain(futures::stream::pending()),
        )))
    }

    async fn teardown(
        &self,
        _: Request<pb::TeardownRequest>,
    ) -> Result<Response<pb::TeardownResponse>, Status> {
        Err(Status::unimplemented("teardown"))
    }

    async fn teardown_and_destroy(
        &self,
        _: Request<pb::TeardownAndDestroyRequest>,
    ) -> Result<Response<pb::TeardownAndDestroyResponse>, Status> {
        Err(Status::unimplemented("teardown_and_destroy"))
    }
}
