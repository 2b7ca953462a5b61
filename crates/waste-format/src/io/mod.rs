//! The IO engine that both daemons read expert records with (the store to
//! serve them, the node's local mode to compute on them), and the client
//! side of a streamed fetch.
//!
//! - [`buffer`]: 4 KiB-aligned reusable buffers and the pool that bounds
//!   the bytes in flight (the backpressure).
//! - [`direct`]: files opened with `O_DIRECT` and one record read into a buffer.
//! - [`heap`]: large blocks freed go back to the system (the node's RSS
//!   is what it holds).
//! - [`engine`]: the queue of reads (demand in disk-offset order) before
//!   prefetch, served by `io-{i}` threads.
//! - [`nice`]: compute threads lower their CPU priority below the IO threads'.
//! - [`reader`]: an `experts/` folder read through the engine, each record
//!   verified against its checksum.
//! - [`reassemble`]: streamed chunks back into verified records (node side).
//! - [`space`]: free bytes of a file system (writers check before a big store).
//!
//! No mmap on this path (it was 5x slower than pread for expert reads in
//! flash-moe), and no async runtime: completions are callbacks on IO threads.

pub mod buffer;
pub mod direct;
pub mod engine;
pub mod heap;
pub mod nice;
pub mod reader;
pub mod reassemble;
pub mod space;

pub use buffer::{AlignedBuf, BufferPool, Pages, PooledBuf, RecordBytes};
pub use direct::{DirectFile, DirectMode};
pub use engine::{EngineConfig, EngineStats, IoEngine, Priority, ReadJob, Settle};
pub use nice::give_way_to_io;
pub use reader::{Check, OnRecord, Record, RecordReader};
pub use reassemble::{ChunkView, FetchedRecord, Reassembler, WholeRecord};
pub use space::available_bytes;
