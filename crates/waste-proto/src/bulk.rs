//! The bulk channel (`BulkFetchRequest` in `proto/waste/store/v1`): the
//! records of FetchExperts on a plain TCP stream, each after a short header,
//! so a client reads them straight into their buffers. Over loopback
//! FetchExperts through HTTP/2 cost a fetching node 2.3 x the CPU per GB of
//! a plain socket transfer (framing, flow control, the copy out of h2's
//! frames, tokio wake-ups per frame; docs/BENCH.md); this is the socket
//! transfer plus one small frame per record.
//!
//! The framing (both ends) and the client live here, beside
//! [`crate::fetch`], because the store and the node (which may not depend
//! on each other) both need them; the store's accept loop and answers are
//! `waste-store`'s `bulk.rs`, and what a record is and how it is checked
//! stays with the two daemons.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tonic::{Code, Status};

use crate::store::v1::{
    BulkFetchReply, BulkFetchRequest, BulkRecord, BulkStatus, FetchExpertsRequest,
    bulk_fetch_reply::Reply,
};

/// The first bytes a client sends on a bulk connection. An HTTP/2 client
/// starts with `PRI * HTTP/2.0` and a TLS one with the byte 0x16, so the
/// store tells the three apart by the first byte.
pub const MAGIC: &[u8; 8] = b"WASTEBK1";

/// Largest reply frame a client reads: a record header or a status with
/// its message (the store's messages are a few hundred bytes).
pub const MAX_REPLY_FRAME: usize = 64 << 10;

/// How long the client waits for a connection to the store.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A dead peer is noticed within about 40 s (20 s idle, then 4 probes 5 s
/// apart), as HTTP/2 keep-alive notices one on the gRPC connection.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(20);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 4;

/// Why a frame could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// The connection failed or closed inside a frame.
    Io(io::Error),
    /// The length prefix is over the reader's limit (checked before any allocation).
    TooLong { len: u32, max: usize },
    /// The bytes are not the message expected.
    Undecodable(prost::DecodeError),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "bulk channel: {e}"),
            Self::TooLong { len, max } => {
                write!(
                    f,
                    "bulk channel: a {len}-byte frame, at most {max} accepted"
                )
            }
            Self::Undecodable(e) => write!(f, "bulk channel: undecodable frame: {e}"),
        }
    }
}

impl std::error::Error for FrameError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            Self::TooLong { .. } => None,
            Self::Undecodable(e) => Some(e),
        }
    }
}

/// `msg` as one frame: its length (u32, little-endian), then its bytes.
fn encode_frame(msg: &impl Message) -> io::Result<Vec<u8>> {
    let len = msg.encoded_len();
    let prefix = u32::try_from(len).map_err(|_| io::Error::other("frame over 4 GiB"))?;
    let mut buf = Vec::with_capacity(4 + len);
    buf.extend_from_slice(&prefix.to_le_bytes());
    msg.encode(&mut buf).expect("a Vec grows as needed");
    Ok(buf)
}

/// The length a frame's prefix announces, if at most `max`.
fn frame_len(prefix: [u8; 4], max: usize) -> Result<usize, FrameError> {
    let len = u32::from_le_bytes(prefix);
    if len as usize > max {
        return Err(FrameError::TooLong { len, max });
    }
    Ok(len as usize)
}

/// Writes `msg` as one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, msg: &impl Message) -> io::Result<()> {
    w.write_all(&encode_frame(msg)?).await
}

/// Reads one frame of at most `max` bytes; `Ok(None)` when the peer closed
/// the connection between frames.
pub async fn read_frame<R: AsyncRead + Unpin, M: Message + Default>(
    r: &mut R,
    max: usize,
) -> Result<Option<M>, FrameError> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < prefix.len() {
        match r.read(&mut prefix[got..]).await.map_err(FrameError::Io)? {
            0 if got == 0 => return Ok(None),
            0 => return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into())),
            n => got += n,
        }
    }
    let mut body = vec![0u8; frame_len(prefix, max)?];
    r.read_exact(&mut body).await.map_err(FrameError::Io)?;
    M::decode(&body[..])
        .map(Some)
        .map_err(FrameError::Undecodable)
}

/// [`read_frame`] on a blocking stream, for a reply that must be there.
fn read_frame_blocking<M: Message + Default>(
    r: &mut impl Read,
    max: usize,
) -> Result<M, FrameError> {
    let mut prefix = [0u8; 4];
    r.read_exact(&mut prefix).map_err(FrameError::Io)?;
    let mut body = vec![0u8; frame_len(prefix, max)?];
    r.read_exact(&mut body).map_err(FrameError::Io)?;
    M::decode(&body[..]).map_err(FrameError::Undecodable)
}

/// The frame that ends a request with `status`.
pub fn end_frame(status: &Status) -> BulkFetchReply {
    BulkFetchReply {
        reply: Some(Reply::End(BulkStatus {
            code: status.code() as i32,
            message: status.message().to_string(),
        })),
    }
}

/// A status made on this side from a failed connection: it carries the
/// error as its source, as tonic's own do, so a caller tells it from a
/// status the store sent (which never has one) and retries.
fn transport_status(e: FrameError) -> Status {
    Status::from_error(Box::new(e))
}

/// Connections to one store's bulk channel, kept open between calls. The
/// client blocks: a record is read with plain blocking socket reads, as a
/// plain socket transfer reads it, each 256 KiB straight into the record
/// (an async read of the same blocks waits on the reactor between reads
/// and costs more CPU per GB, docs/BENCH.md). Call it from a thread that
/// may block (`tokio::task::spawn_blocking`).
#[derive(Debug)]
pub struct BulkClient {
    /// `host:port` of the store.
    authority: String,
    /// Sent in every request: `Bearer <token>`, or empty.
    authorization: String,
    idle: Mutex<Vec<TcpStream>>,
}

impl BulkClient {
    /// For the store whose gRPC address is `uri` (`http://host:port`; the
    /// channel is plain text, so not `https`), sending `token` as a bearer
    /// token when given.
    pub fn new(uri: &str, token: Option<&str>) -> Result<Self, String> {
        let parsed: http::Uri = uri
            .parse()
            .map_err(|e| format!("store address {uri:?}: {e}"))?;
        if parsed.scheme_str() != Some("http") {
            return Err(format!(
                "store address {uri:?}: the bulk channel is plain text (http://)"
            ));
        }
        let authority = parsed
            .authority()
            .ok_or_else(|| format!("store address {uri:?} has no host"))?;
        let port = authority.port_u16().unwrap_or(80);
        Ok(Self {
            authority: format!("{}:{port}", authority.host()),
            authorization: token.map_or_else(String::new, |t| format!("Bearer {t}")),
            idle: Mutex::new(Vec::new()),
        })
    }

    fn dial(&self) -> Result<TcpStream, FrameError> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolves to nothing");
        let addrs = self.authority.to_socket_addrs().map_err(FrameError::Io)?;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(mut conn) => {
                    conn.set_nodelay(true).map_err(FrameError::Io)?;
                    let keepalive = socket2::TcpKeepalive::new()
                        .with_time(KEEPALIVE_IDLE)
                        .with_interval(KEEPALIVE_INTERVAL)
                        .with_retries(KEEPALIVE_RETRIES);
                    socket2::SockRef::from(&conn)
                        .set_tcp_keepalive(&keepalive)
                        .map_err(FrameError::Io)?;
                    conn.write_all(MAGIC).map_err(FrameError::Io)?;
                    return Ok(conn);
                }
                Err(e) => last = e,
            }
        }
        Err(FrameError::Io(last))
    }

    /// Sends `fetch` on an idle connection or a new one, and returns the
    /// reply once its first frame came. A kept connection the store has
    /// closed since (a restart) is found out here and replaced once.
    pub fn fetch(&self, fetch: FetchExpertsRequest) -> Result<BulkFetch<'_>, Status> {
        let request = encode_frame(&BulkFetchRequest {
            authorization: self.authorization.clone(),
            fetch: Some(fetch),
        })
        .map_err(|e| transport_status(FrameError::Io(e)))?;
        let kept = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let reused = kept.is_some();
        let conn = match kept {
            Some(c) => c,
            None => self.dial().map_err(transport_status)?,
        };
        match BulkFetch::start(self, conn, &request) {
            Err(_) if reused => {
                let conn = self.dial().map_err(transport_status)?;
                BulkFetch::start(self, conn, &request).map_err(transport_status)
            }
            started => started.map_err(transport_status),
        }
    }

    /// Whether the store answers on its bulk channel: an empty request must
    /// come back as INVALID_ARGUMENT (after the bearer check, so a wrong
    /// token shows as UNAUTHENTICATED). A path that carries only HTTP/2 (a
    /// proxy between node and store) fails here, with the reason.
    pub fn probe(&self) -> Result<(), Status> {
        let mut reply = self.fetch(FetchExpertsRequest::default())?;
        match reply.next_record() {
            Err(s) if s.code() == Code::InvalidArgument => Ok(()),
            Err(s) => Err(s),
            Ok(_) => Err(Status::internal(
                "bulk channel: an empty request was answered with records",
            )),
        }
    }

    fn keep(&self, conn: TcpStream) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
    }
}

/// The reply to one bulk request: record headers, each followed by the
/// record's bytes, then the store's status.
#[derive(Debug)]
pub struct BulkFetch<'a> {
    client: &'a BulkClient,
    /// None once the reply ended.
    conn: Option<TcpStream>,
    /// The frame read ahead by [`BulkFetch::start`].
    first: Option<BulkFetchReply>,
    /// Bytes of the current record not read yet.
    left: u64,
}

impl<'a> BulkFetch<'a> {
    fn start(
        client: &'a BulkClient,
        mut conn: TcpStream,
        request: &[u8],
    ) -> Result<Self, FrameError> {
        conn.write_all(request).map_err(FrameError::Io)?;
        let first = read_frame_blocking(&mut conn, MAX_REPLY_FRAME)?;
        Ok(Self {
            client,
            conn: Some(conn),
            first: Some(first),
            left: 0,
        })
    }

    /// The next record's header; `Ok(None)` after the store's OK, when the
    /// connection goes back to the client for the next call. A status
    /// other than OK is the error. Each record must be read whole first.
    pub fn next_record(&mut self) -> Result<Option<BulkRecord>, Status> {
        if self.left > 0 {
            return Err(Status::internal(format!(
                "bulk channel: {} bytes of the last record were not read",
                self.left
            )));
        }
        let Some(conn) = self.conn.as_mut() else {
            return Ok(None);
        };
        let frame = match self.first.take() {
            Some(f) => f,
            None => read_frame_blocking(conn, MAX_REPLY_FRAME).map_err(transport_status)?,
        };
        match frame.reply {
            Some(Reply::Record(r)) => {
                self.left = r.total_len;
                Ok(Some(r))
            }
            Some(Reply::End(s)) => {
                let conn = self.conn.take().expect("checked above");
                if s.code == Code::Ok as i32 {
                    self.client.keep(conn);
                    return Ok(None);
                }
                Err(Status::new(Code::from_i32(s.code), s.message))
            }
            None => Err(Status::internal("bulk channel: an empty reply frame")),
        }
    }

    /// Fills `buf` with the current record's next bytes; `buf` must not
    /// run past the record.
    pub fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), Status> {
        if buf.len() as u64 > self.left {
            return Err(Status::internal(format!(
                "bulk channel: {} bytes asked, {} left in the record",
                buf.len(),
                self.left
            )));
        }
        let conn = self
            .conn
            .as_mut()
            .ok_or_else(|| Status::internal("bulk channel: the reply has ended"))?;
        conn.read_exact(buf)
            .map_err(|e| transport_status(FrameError::Io(e)))?;
        self.left -= buf.len() as u64;
        Ok(())
    }
}
