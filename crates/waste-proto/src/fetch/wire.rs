//! The bytes of `ExpertChunk` messages on the wire, without the payload:
//! [`chunk_prefix`] writes what precedes a chunk's data (gRPC message prefix,
//! fields 1 to 5, field 6's key and length), [`ChunkDecoder`] cuts a
//! response's DATA frames back into chunks whose data are slices of those
//! frames. Both follow the protobuf encoding rules, so they interoperate
//! with any gRPC implementation: the prefix plus the data equals what prost
//! encodes, and the decoder accepts fields in any order, unknown fields,
//! and repeated fields (the last one wins), as prost does.

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding::{WireType, decode_varint, encode_key, encode_varint};
use tonic::Status;

/// gRPC message prefix: a compressed flag byte and a big-endian u32 length.
pub const MESSAGE_PREFIX: usize = 5;

/// Every field of an `ExpertChunk` but `data`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkHead {
    pub layer: u32,
    pub expert: u32,
    pub offset: u64,
    pub total_len: u64,
    pub checksum: u64,
}

/// One received chunk: its head and its data, as slices of the DATA
/// frames it arrived in (in order; their lengths sum to the data length).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkParts {
    pub head: ChunkHead,
    pub data: Vec<Bytes>,
}

impl ChunkParts {
    pub fn data_len(&self) -> usize {
        self.data.iter().map(Bytes::len).sum()
    }
}

/// The gRPC-framed bytes that precede `data_len` bytes of data in the
/// message `ExpertChunk { head.., data }`: prefix + this + data is exactly
/// prost's encoding of the message in a gRPC frame. Fields equal to their
/// default are left out, as proto3 encoders do.
pub fn chunk_prefix(head: &ChunkHead, data_len: usize) -> Bytes {
    let mut fields = BytesMut::with_capacity(64);
    if head.layer != 0 {
        prost::encoding::uint32::encode(1, &head.layer, &mut fields);
    }
    if head.expert != 0 {
        prost::encoding::uint32::encode(2, &head.expert, &mut fields);
    }
    if head.offset != 0 {
        prost::encoding::uint64::encode(3, &head.offset, &mut fields);
    }
    if head.total_len != 0 {
        prost::encoding::uint64::encode(4, &head.total_len, &mut fields);
    }
    if head.checksum != 0 {
        prost::encoding::fixed64::encode(5, &head.checksum, &mut fields);
    }
    if data_len != 0 {
        encode_key(6, WireType::LengthDelimited, &mut fields);
        encode_varint(data_len as u64, &mut fields);
    }
    let message_len = fields.len() + data_len;
    let mut out = BytesMut::with_capacity(MESSAGE_PREFIX + fields.len());
    out.put_u8(0);
    out.put_u32(u32::try_from(message_len).expect("a chunk is at most a few MiB"));
    out.extend_from_slice(&fields);
    out.freeze()
}

/// Cuts the DATA frames of a FetchExperts response into chunks. Bounded:
/// a message longer than `max_message` is refused from its prefix, before
/// its bytes are waited for, so memory never exceeds about that much plus
/// one frame.
#[derive(Debug)]
pub struct ChunkDecoder {
    /// Frames received and not yet consumed, in order.
    buffered: Segments,
    /// Length of the message whose prefix was consumed.
    message_len: Option<usize>,
    max_message: usize,
}

impl ChunkDecoder {
    pub fn new(max_message: usize) -> Self {
        Self {
            buffered: Segments::default(),
            message_len: None,
            max_message,
        }
    }

    /// Adds one DATA frame's bytes.
    pub fn push(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.buffered.remaining += data.len();
            self.buffered.parts.push_back(data);
        }
    }

    /// Whether nothing is buffered: a stream may end only here.
    pub fn is_idle(&self) -> bool {
        self.buffered.remaining == 0 && self.message_len.is_none()
    }

    /// The next chunk, once all of it has been pushed.
    pub fn next_chunk(&mut self) -> Result<Option<ChunkParts>, Status> {
        let len = match self.message_len {
            Some(len) => len,
            None => {
                if self.buffered.remaining < MESSAGE_PREFIX {
                    return Ok(None);
                }
                let compressed = self.buffered.get_u8();
                let len = self.buffered.get_u32() as usize;
                if compressed != 0 {
                    // No compression is negotiated on this call (as tonic says it).
                    return Err(Status::internal(
                        "protocol error: received message with compressed-flag but no grpc-encoding was specified",
                    ));
                }
                if len > self.max_message {
                    return Err(Status::out_of_range(format!(
                        "Error, decoded message length too large: found {len} bytes, the limit is: {} bytes",
                        self.max_message
                    )));
                }
                self.message_len = Some(len);
                len
            }
        };
        if self.buffered.remaining < len {
            return Ok(None);
        }
        self.message_len = None;
        let message = Segments::new(self.buffered.take_slices(len).into());
        parse_chunk(message)
            .map(Some)
            .map_err(|reason| Status::internal(format!("failed to decode ExpertChunk: {reason}")))
    }
}

/// Bytes as a sequence of slices, read with [`Buf`].
#[derive(Debug, Default)]
struct Segments {
    parts: VecDeque<Bytes>,
    remaining: usize,
}

impl Segments {
    fn new(parts: VecDeque<Bytes>) -> Self {
        let remaining = parts.iter().map(Bytes::len).sum();
        Self { parts, remaining }
    }

    /// The next `n` bytes (n <= remaining) as slices, without a copy.
    fn take_slices(&mut self, mut n: usize) -> Vec<Bytes> {
        let mut out = Vec::new();
        self.remaining -= n;
        while n > 0 {
            let front = self.parts.front_mut().expect("n <= remaining");
            if front.len() <= n {
                n -= front.len();
                out.push(self.parts.pop_front().expect("front exists"));
            } else {
                out.push(front.split_to(n));
                n = 0;
            }
        }
        out
    }
}

impl Buf for Segments {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map_or(&[], |b| &b[..])
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.remaining, "advance past the end of a message");
        self.remaining -= cnt;
        while cnt > 0 {
            let front = self.parts.front_mut().expect("cnt <= remaining");
            if front.len() <= cnt {
                cnt -= front.len();
                self.parts.pop_front();
            } else {
                front.advance(cnt);
                cnt = 0;
            }
        }
    }
}

/// Decodes one `ExpertChunk` message; the error says what is malformed.
fn parse_chunk(mut m: Segments) -> Result<ChunkParts, String> {
    let mut chunk = ChunkParts::default();
    let varint = |m: &mut Segments| decode_varint(m).map_err(|e| e.to_string());
    let need = |m: &Segments, n: u64, what: &str| -> Result<usize, String> {
        if n > m.remaining() as u64 {
            return Err(format!(
                "{what} of {n} bytes but {} remain in the message",
                m.remaining()
            ));
        }
        Ok(n as usize)
    };
    while m.has_remaining() {
        let key = varint(&mut m)?;
        let (tag, wire_type) = (key >> 3, key & 7);
        if tag == 0 || tag > u64::from(u32::MAX >> 3) {
            return Err(format!("invalid field number {tag}"));
        }
        let expect = |wanted: u64| -> Result<(), String> {
            if wire_type != wanted {
                return Err(format!("field {tag} has wire type {wire_type}"));
            }
            Ok(())
        };
        match tag {
            // uint32 fields keep the varint's low 32 bits, as prost does.
            1 | 2 => {
                expect(0)?;
                let v = varint(&mut m)? as u32;
                if tag == 1 {
                    chunk.head.layer = v;
                } else {
                    chunk.head.expert = v;
                }
            }
            3 | 4 => {
                expect(0)?;
                let v = varint(&mut m)?;
                if tag == 3 {
                    chunk.head.offset = v;
                } else {
                    chunk.head.total_len = v;
                }
            }
            5 => {
                expect(1)?;
                need(&m, 8, "a fixed64")?;
                chunk.head.checksum = m.get_u64_le();
            }
            6 => {
                expect(2)?;
                let len = varint(&mut m)?;
                let len = need(&m, len, "data")?;
                chunk.data = m.take_slices(len);
            }
            // Unknown fields are skipped (a newer store may send more).
            _ => match wire_type {
                0 => {
                    varint(&mut m)?;
                }
                1 => m.advance(need(&m, 8, "a fixed64")?),
                2 => {
                    let len = varint(&mut m)?;
                    m.advance(need(&m, len, "a field")?);
                }
                5 => m.advance(need(&m, 4, "a fixed32")?),
                _ => return Err(format!("field {tag} has wire type {wire_type}")),
            },
        }
    }
    Ok(chunk)
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::store::v1::ExpertChunk;

    fn message(head: ChunkHead, data: &[u8]) -> ExpertChunk {
        ExpertChunk {
            layer: head.layer,
            expert: head.expert,
            offset: head.offset,
            total_len: head.total_len,
            checksum: head.checksum,
            data: Bytes::copy_from_slice(data),
        }
    }

    /// prost's encoding of the message, framed as gRPC does: the truth the
    /// zero-copy path must match byte for byte.
    fn framed(m: &ExpertChunk) -> Vec<u8> {
        let body = m.encode_to_vec();
        let mut out = vec![0];
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    fn heads() -> Vec<ChunkHead> {
        vec![
            ChunkHead::default(),
            ChunkHead {
                layer: 7,
                expert: 113,
                offset: 1 << 20,
                total_len: 13_421_772,
                checksum: 0xdead_beef_0123_4567,
            },
            ChunkHead {
                layer: u32::MAX,
                expert: 0,
                offset: u64::MAX,
                total_len: 1,
                checksum: u64::MAX,
            },
        ]
    }

    #[test]
    fn prefix_and_data_equal_prosts_encoding() {
        for head in heads() {
            for len in [0, 1, 127, 128, 16_383, 16_384, 1 << 20] {
                let data: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
                let mut ours = chunk_prefix(&head, len).to_vec();
                ours.extend_from_slice(&data);
                assert_eq!(ours, framed(&message(head, &data)), "{head:?}, {len} bytes");
            }
        }
    }

    /// Feeds `bytes` cut at `cuts` and collects every chunk decoded.
    fn decode(bytes: &[u8], cuts: &[usize], max: usize) -> Result<Vec<ChunkParts>, Status> {
        let mut d = ChunkDecoder::new(max);
        let mut out = Vec::new();
        let mut last = 0;
        for &cut in cuts.iter().chain([&bytes.len()]) {
            d.push(Bytes::copy_from_slice(&bytes[last..cut]));
            last = cut;
            while let Some(c) = d.next_chunk()? {
                out.push(c);
            }
        }
        assert!(d.is_idle(), "bytes left over");
        Ok(out)
    }

    fn joined(c: &ChunkParts) -> Vec<u8> {
        c.data.iter().flat_map(|b| b.to_vec()).collect()
    }

    #[test]
    fn decodes_messages_cut_anywhere() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let mut stream = Vec::new();
        let mut expected = Vec::new();
        for (i, head) in heads().into_iter().enumerate() {
            let d = &data[..i * 1000];
            stream.extend(framed(&message(head, d)));
            expected.push((head, d.to_vec()));
        }
        let n = stream.len();
        for cuts in [
            vec![],
            (1..n).collect::<Vec<_>>(),
            vec![3, 5, 6, 40, 1500, n - 1],
            vec![n / 2],
        ] {
            let got = decode(&stream, &cuts, 1 << 20).unwrap();
            let got: Vec<_> = got.iter().map(|c| (c.head, joined(c))).collect();
            assert_eq!(got, expected, "cuts {cuts:?}");
        }
    }

    #[test]
    fn data_slices_share_the_frames_memory() {
        let head = heads()[1];
        let frame = Bytes::from(framed(&message(head, &[9; 4096])));
        let mut d = ChunkDecoder::new(1 << 20);
        d.push(frame.clone());
        let c = d.next_chunk().unwrap().unwrap();
        assert_eq!(c.data.len(), 1);
        let range = frame.as_ptr_range();
        assert!(range.contains(&c.data[0].as_ptr()), "the data was copied");
    }

    #[test]
    fn accepts_any_field_order_unknown_and_repeated_fields_as_prost_does() {
        let mut body = Vec::new();
        prost::encoding::bytes::encode(6, &Bytes::from_static(b"old"), &mut body);
        prost::encoding::fixed64::encode(5, &42u64, &mut body);
        prost::encoding::string::encode(99, &"future".to_string(), &mut body);
        prost::encoding::uint32::encode(100, &5u32, &mut body);
        prost::encoding::fixed32::encode(101, &5u32, &mut body);
        prost::encoding::fixed64::encode(102, &5u64, &mut body);
        prost::encoding::uint64::encode(4, &10u64, &mut body);
        prost::encoding::uint32::encode(2, &3u32, &mut body);
        prost::encoding::bytes::encode(6, &Bytes::from_static(b"new data"), &mut body);
        // A uint32 field sent as a 64-bit varint keeps its low 32 bits.
        prost::encoding::uint64::encode(1, &((1u64 << 32) + 4), &mut body);
        let truth = ExpertChunk::decode(&body[..]).unwrap();
        let mut framed_body = vec![0];
        framed_body.extend_from_slice(&(body.len() as u32).to_be_bytes());
        framed_body.extend_from_slice(&body);
        let got = decode(&framed_body, &[7, 20], 1 << 20).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].head,
            ChunkHead {
                layer: truth.layer,
                expert: truth.expert,
                offset: truth.offset,
                total_len: truth.total_len,
                checksum: truth.checksum,
            }
        );
        assert_eq!(joined(&got[0]), truth.data.to_vec());
    }

    #[test]
    fn refuses_long_compressed_and_malformed_messages() {
        let long = framed(&message(heads()[1], &[0; 100]));
        let e = decode(&long, &[5], 50).unwrap_err();
        assert_eq!(e.code(), tonic::Code::OutOfRange);
        // Refused from the prefix alone, before the body arrives.
        let mut d = ChunkDecoder::new(50);
        d.push(Bytes::copy_from_slice(&long[..5]));
        assert_eq!(d.next_chunk().unwrap_err().code(), tonic::Code::OutOfRange);

        let mut compressed = long.clone();
        compressed[0] = 1;
        assert_eq!(
            decode(&compressed, &[], 1 << 20).unwrap_err().code(),
            tonic::Code::Internal
        );

        let bad_bodies: [&[u8]; 6] = [
            &[0x08],                   // truncated varint
            &[0x32, 0x05, 1, 2],       // data longer than the message
            &[0x29, 1, 2, 3],          // truncated fixed64
            &[0x0a, 0x01, 0x00],       // field 1 as length-delimited
            &[0x03],                   // field 0
            &[0x0b, 0x00, 0x00, 0x00], // a group (wire type 3)
        ];
        for body in bad_bodies {
            let mut m = vec![0];
            m.extend_from_slice(&(body.len() as u32).to_be_bytes());
            m.extend_from_slice(body);
            assert!(ExpertChunk::decode(body).is_err(), "prost accepts {body:?}");
            let e = decode(&m, &[], 1 << 20).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Internal, "{body:?}: {e}");
        }
    }
}
