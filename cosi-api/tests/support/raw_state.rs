//! A State server that answers every call with one crafted message, given as its bytes: what
//! the client does with an answer no generated message could hold (many entries for one map
//! key, unknown fields). A unary call gets the message; a List gets it as its one message; a
//! Watch gets it as its first message, then a stream that stays open.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;

use bytes::{Buf, Bytes};
use futures::StreamExt;
use prost::encoding::{encode_key, encode_varint, WireType};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

type Responses = Pin<Box<dyn futures::Stream<Item = Result<Bytes, Status>> + Send>>;

/// The server: `message` is the answer to every call.
#[derive(Clone)]
pub struct RawState {
    pub message: Bytes,
}

impl NamedService for RawState {
    const NAME: &'static str = "cosi.resource.State";
}

impl tower::Service<http::Request<tonic::body::Body>> for RawState {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let message = self.message.clone();
        Box::pin(async move {
            let path = request.uri().path().to_string();
            let mut grpc = tonic::server::Grpc::new(RawCodec);
            let watch = path.ends_with("/Watch");
            if watch || path.ends_with("/List") {
                let answer = tower::service_fn(move |_: Request<Bytes>| {
                    let message = message.clone();
                    async move {
                        let one = futures::stream::iter([Ok::<_, Status>(message)]);
                        // A list ends; a watch stays open (no reconnect muddles a test).
                        let answer: Responses = if watch {
                            Box::pin(one.chain(futures::stream::pending()))
                        } else {
                            Box::pin(one)
                        };
                        Ok::<_, Status>(Response::new(answer))
                    }
                });
                Ok(grpc.server_streaming(answer, request).await)
            } else {
                let answer = tower::service_fn(move |_: Request<Bytes>| {
                    let message = message.clone();
                    async move { Ok::<_, Status>(Response::new(message)) }
                });
                Ok(grpc.unary(answer, request).await)
            }
        })
    }
}

/// Messages as their bytes, both ways.
#[derive(Clone, Copy, Debug, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        bytes::BufMut::put_slice(dst, &item);
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

/// Serves `server` on a loopback port until the runtime ends; its address.
pub async fn serve(server: RawState) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(server)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    address
}

/// Field `tag` of a message: length-delimited `content`.
pub fn field(tag: u32, content: &[u8], out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(content.len() as u64, out);
    out.extend_from_slice(content);
}
