//! prost's codec with a look at each received message's bytes before it is built
//! ([`BoundedCodec`]): the generated services decode with it (build.rs sets it as their codec),
//! and [`crate::request_bounds`] says, per request type ([`Bounded`]), what it counts there and
//! refuses.

use std::marker::PhantomData;

use bytes::Buf;
use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::{ProstDecoder, ProstEncoder};

/// A message whose repeated entries are counted before it is built.
pub trait Bounded {
    /// Refuses `message` (the received bytes) if a repeated field of it has more entries than
    /// allowed; the default allows everything.
    fn check(message: &[u8]) -> Result<(), Status> {
        let _ = message;
        Ok(())
    }
}

/// prost's codec, each received message first checked by its [`Bounded::check`].
#[derive(Debug)]
pub struct BoundedCodec<T, U>(PhantomData<fn(T) -> U>);

impl<T, U> Default for BoundedCodec<T, U> {
    fn default() -> Self {
        BoundedCodec(PhantomData)
    }
}

impl<T, U> Codec for BoundedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Bounded + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = BoundedDecoder<U>;

    fn encoder(&mut self) -> ProstEncoder<T> {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> BoundedDecoder<U> {
        BoundedDecoder::default()
    }
}

/// prost's decoder after [`Bounded::check`].
#[derive(Debug)]
pub struct BoundedDecoder<U>(ProstDecoder<U>);

impl<U> Default for BoundedDecoder<U> {
    fn default() -> Self {
        BoundedDecoder(ProstDecoder::default())
    }
}

impl<U: Message + Default + Bounded> Decoder for BoundedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // The received message is one contiguous buffer; were it not, it is copied whole.
        if src.chunk().len() == src.remaining() {
            U::check(src.chunk())?;
            self.0.decode(src)
        } else {
            let bytes = src.copy_to_bytes(src.remaining());
            U::check(&bytes)?;
            U::decode(bytes)
                .map(Some)
                .map_err(|e| Status::internal(e.to_string()))
        }
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
