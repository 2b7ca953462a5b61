//! The codec of `waste.node.v1`: prost's, except that a message which does
//! not decode is blamed on its sender. tonic answers an undecodable request
//! with INTERNAL (the server's fault, by gRPC's status guide); the node's
//! protocol says a malformed request is INVALID_ARGUMENT, so the server side
//! reports that, and a client that cannot decode a reply still sees
//! INTERNAL. Which side decodes is told by the message type ([`Sender`]).
//! Owns no protocol logic; the store's protocol keeps prost's codec.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use crate::node::v1 as pb;

/// Who sends a message of `waste.node.v1`.
pub trait Sender {
    /// True for a request (decoded by the server), false for a reply.
    const CLIENT: bool;
}

macro_rules! sent_by {
    ($client:literal: $($t:ty),*) => {
        $(impl Sender for $t {
            const CLIENT: bool = $client;
        })*
    };
}
sent_by!(true: pb::GenerateRequest, pb::TokenizeRequest, pb::InfoRequest);
sent_by!(false: pb::GenerateResponse, pb::TokenizeResponse, pb::InfoResponse);

/// [`ProstCodec`] with the decode error blamed on the sender.
#[derive(Debug, Clone)]
pub struct NodeCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for NodeCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for NodeCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Sender + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = NodeDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        NodeDecoder(ProstCodec::<T, U>::default().decoder())
    }
}

/// Decodes `U` with prost; see the module docs for the status.
#[derive(Debug, Clone)]
pub struct NodeDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default + Sender> Decoder for NodeDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|s| {
            if U::CLIENT && s.code() == Code::Internal {
                Status::invalid_argument(format!("the request does not decode: {}", s.message()))
            } else {
                s
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
