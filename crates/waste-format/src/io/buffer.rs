//! Aligned, reusable read buffers for O_DIRECT, and the pool that bounds how
//! many bytes of them exist at once. The pool is the engine's backpressure:
//! a read needs a buffer before it is issued, and a buffer comes back only
//! when its last user drops it (for the store: after the gRPC encoder has
//! copied the chunk out), so a slow consumer slows the reads instead of
//! growing memory. Owns no files and no threads.
//!
//! A buffer of a record's size (megabytes) is an anonymous mapping of its
//! own, 2 MiB-aligned and advised as transparent huge pages. An O_DIRECT
//! read is DMA into the buffer's physical pages: each physically contiguous
//! run is one scatter-gather segment, and a device request holds a bounded
//! number of segments (254 on the development VM's virtio disk). Scattered
//! 4 KiB pages cut a 13.4 MB record into requests of about 550 KiB; in huge
//! pages it is 4 requests of 3.2 MiB, and one read at a time ran 2.3x faster
//! (/sys/block/vda/stat, docs/BENCH.md). Anonymous memory, not a file
//! mapping: nothing on the expert path goes through the page cache.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::{ALIGNMENT, align_up};

/// The transparent huge page size buffers are laid out for (x86-64, arm64 with 4 KiB pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// How a buffer's memory is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pages {
    /// From one huge page up: a 2 MiB-aligned mapping advised as huge pages.
    #[default]
    Huge,
    /// Heap memory of ordinary pages, as a plain program reads into (kept
    /// for benchmarks to compare against).
    Small,
}

/// A buffer whose start and capacity are multiples of [`ALIGNMENT`]
/// (what O_DIRECT requires), holding `len <= capacity` valid bytes.
#[derive(Debug)]
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    len: usize,
    /// Its own huge-page-aligned mapping (else a heap block).
    mapped: bool,
}

// SAFETY: the buffer owns its allocation exclusively (no aliasing pointer is
// kept anywhere), like a `Vec<u8>`, so moving or sharing it across threads is sound.
unsafe impl Send for AlignedBuf {}
// SAFETY: `&AlignedBuf` only gives out `&[u8]`; mutation needs `&mut`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// The capacity [`AlignedBuf::new`] gives for `min_cap`: rounded up to
    /// the alignment (at least one page), and from one huge page up, to
    /// whole huge pages when that adds at most an eighth.
    pub fn capacity_for(min_cap: usize) -> usize {
        Self::capacity_with(min_cap, Pages::Huge)
    }

    /// The capacity [`AlignedBuf::with_pages`] gives.
    pub fn capacity_with(min_cap: usize, pages: Pages) -> usize {
        let cap = align_up(min_cap.max(1) as u64) as usize;
        if cap < HUGE_PAGE || pages == Pages::Small {
            return cap;
        }
        let whole = cap.next_multiple_of(HUGE_PAGE);
        if whole - cap <= cap / 8 { whole } else { cap }
    }

    /// A zeroed buffer of `capacity_for(min_cap)` bytes, with `len` 0.
    pub fn new(min_cap: usize) -> Self {
        Self::with_pages(min_cap, Pages::Huge)
    }

    /// A zeroed buffer of `capacity_with(min_cap, pages)` bytes, with `len` 0.
    pub fn with_pages(min_cap: usize, pages: Pages) -> Self {
        let cap = Self::capacity_with(min_cap, pages);
        if cap >= HUGE_PAGE
            && pages == Pages::Huge
            && let Some(ptr) = map_huge(cap)
        {
            return Self {
                ptr,
                cap,
                len: 0,
                mapped: true,
            };
        }
        let layout = Layout::from_size_align(cap, ALIGNMENT).expect("aligned size fits isize");
        // SAFETY: `layout` has a non-zero size (cap >= ALIGNMENT).
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        Self {
            ptr,
            cap,
            len: 0,
            mapped: false,
        }
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Whether the buffer starts on a huge page boundary in a mapping of
    /// its own (advised as huge pages; the kernel may still use small ones).
    pub fn is_huge_aligned(&self) -> bool {
        self.mapped
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Marks the first `len` bytes valid. Panics past the capacity (a bug:
    /// callers size reads from the capacity).
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap, "len {len} beyond capacity {}", self.cap);
        self.len = len;
    }

    /// The whole capacity, to read into. Zeroed at allocation and never
    /// exposed uninitialised, so stale bytes are at worst old record bytes.
    pub fn spare_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `cap` initialised (zeroed at allocation)
        // bytes owned by `self`, borrowed mutably for the borrow of `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len <= cap` bytes at `ptr` are initialised and owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

/// `len` bytes (a multiple of the page size) of fresh anonymous memory,
/// zero-filled by the kernel, starting on a huge page boundary and advised
/// as huge pages; `None` if the kernel refuses the mapping (the caller falls
/// back to the heap).
fn map_huge(len: usize) -> Option<NonNull<u8>> {
    let span = len.checked_add(HUGE_PAGE)?;
    // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    let start = (base as usize).next_multiple_of(HUGE_PAGE);
    let (head, tail) = (start - base as usize, base as usize + span - (start + len));
    // SAFETY: both ranges lie inside the mapping made above, are page-aligned
    // (mmap returns page-aligned memory; `start` and `len` are page multiples)
    // and nothing refers to them: trimming leaves exactly `start..start+len`.
    unsafe {
        if head > 0 {
            libc::munmap(base, head);
        }
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
        // Advice only: where transparent huge pages are off this fails
        // harmlessly and the buffer is plain pages.
        #[cfg(target_os = "linux")]
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    NonNull::new(start as *mut u8)
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: `ptr..ptr+cap` is exactly the mapping `map_huge` left, unmapped once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.cap) };
            return;
        }
        let layout = Layout::from_size_align(self.cap, ALIGNMENT).expect("as allocated");
        // SAFETY: `ptr` was allocated in `new` with this exact layout and is freed once.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

#[derive(Debug, Default)]
struct PoolState {
    /// Buffers ready for reuse.
    free: Vec<AlignedBuf>,
    /// Capacity of every buffer that exists: free plus checked out.
    total: usize,
    /// Capacity of the buffers checked out.
    out: usize,
}

#[derive(Debug)]
struct PoolInner {
    limit: usize,
    pages: Pages,
    state: Mutex<PoolState>,
    returned: Condvar,
}

impl PoolInner {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // A panic while holding this lock leaves only counters behind, which
        // stay consistent (each update is one statement), so poisoning is ignored.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A bounded set of reusable [`AlignedBuf`]s, shared by clones.
#[derive(Debug, Clone)]
pub struct BufferPool {
    inner: Arc<PoolInner>,
}

impl BufferPool {
    /// A pool that never holds more than `limit_bytes` of buffers at once,
    /// except that one buffer is always granted when none is checked out, so
    /// a record larger than the limit still makes progress.
    pub fn new(limit_bytes: usize) -> Self {
        Self::with_pages(limit_bytes, Pages::Huge)
    }

    /// Like [`BufferPool::new`], its buffers laid out as `pages` says.
    pub fn with_pages(limit_bytes: usize, pages: Pages) -> Self {
        Self {
            inner: Arc::new(PoolInner {
                limit: limit_bytes,
                pages,
                state: Mutex::new(PoolState::default()),
                returned: Condvar::new(),
            }),
        }
    }

    pub fn limit_bytes(&self) -> usize {
        self.inner.limit
    }

    /// Bytes of buffers checked out now (reads in flight plus records not yet consumed).
    pub fn in_use_bytes(&self) -> usize {
        self.inner.lock().out
    }

    /// Bytes of every buffer the pool has made and keeps: checked out plus
    /// free for reuse (it frees them only to make room for a larger one).
    pub fn total_bytes(&self) -> usize {
        self.inner.lock().total
    }

    /// Bytes of the buffers ready for reuse.
    pub fn free_bytes(&self) -> usize {
        let st = self.inner.lock();
        st.total - st.out
    }

    /// Bytes of the limit no buffer holds now (never made, or detached).
    pub fn idle_bytes(&self) -> usize {
        self.inner.limit.saturating_sub(self.inner.lock().total)
    }

    /// How much of [`Self::idle_bytes`] handing out `count` more buffers
    /// for `len` bytes each would take now: what the free buffers do not
    /// cover.
    pub fn growth_for(&self, count: usize, len: usize) -> usize {
        let need = count.saturating_mul(AlignedBuf::capacity_with(len, self.inner.pages));
        let st = self.inner.lock();
        let (free, idle) = (st.total - st.out, self.inner.limit.saturating_sub(st.total));
        need.saturating_sub(free).min(idle)
    }

    /// A buffer of capacity >= `len`, waiting while the pool is at its limit.
    pub fn acquire(&self, len: usize) -> PooledBuf {
        let mut st = self.inner.lock();
        loop {
            if let Some(buf) = Self::take(&self.inner, &mut st, len) {
                return PooledBuf::new(buf, &self.inner);
            }
            st = self
                .inner
                .returned
                .wait(st)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Like [`BufferPool::acquire`] but `None` instead of waiting.
    pub fn try_acquire(&self, len: usize) -> Option<PooledBuf> {
        let mut st = self.inner.lock();
        Self::take(&self.inner, &mut st, len).map(|buf| PooledBuf::new(buf, &self.inner))
    }

    fn take(inner: &PoolInner, st: &mut PoolState, len: usize) -> Option<AlignedBuf> {
        let need = AlignedBuf::capacity_with(len, inner.pages);
        // Best fit among the free buffers: records of one store share a few sizes.
        let fit = st
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= need)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        if let Some(i) = fit {
            let mut buf = st.free.swap_remove(i);
            buf.set_len(0);
            st.out += buf.capacity();
            return Some(buf);
        }
        // Make room by freeing idle buffers that are too small.
        while st.total + need > inner.limit && !st.free.is_empty() {
            let b = st.free.pop().expect("non-empty");
            st.total -= b.capacity();
        }
        if st.total + need <= inner.limit || st.out == 0 {
            let buf = AlignedBuf::with_pages(need, inner.pages);
            st.total += buf.capacity();
            st.out += buf.capacity();
            return Some(buf);
        }
        None
    }
}

/// A buffer checked out of a [`BufferPool`]; returns to it on drop.
#[derive(Debug)]
pub struct PooledBuf {
    buf: Option<AlignedBuf>,
    pool: Arc<PoolInner>,
    /// Off the pool's count ([`PooledBuf::detach`]).
    detached: AtomicBool,
}

impl PooledBuf {
    fn new(buf: AlignedBuf, pool: &Arc<PoolInner>) -> Self {
        Self {
            buf: Some(buf),
            pool: Arc::clone(pool),
            detached: AtomicBool::new(false),
        }
    }

    /// Takes the buffer off its pool's count where it lies: its memory is
    /// now its holder's (the node's cache keeps records in the buffers they
    /// were read into instead of copying them out), and the pool may make
    /// another in its place. On drop it is freed, not returned: a pool
    /// keeps free buffers for the reads to come, and memory a cache lets go
    /// is what the cache borrowed from the pool's share (under a 300 MB cap
    /// rejoining kept about 40 MB of buffers idle through a decode: BENCH.md).
    pub fn detach(&self) {
        if self.detached.swap(true, Ordering::AcqRel) {
            return;
        }
        let cap = self.buf().capacity();
        let mut st = self.pool.lock();
        st.out -= cap;
        st.total -= cap;
        drop(st);
        self.pool.returned.notify_all();
    }

    pub fn is_detached(&self) -> bool {
        self.detached.load(Ordering::Acquire)
    }

    /// The pool this buffer returns to.
    pub fn pool(&self) -> BufferPool {
        BufferPool {
            inner: Arc::clone(&self.pool),
        }
    }

    pub fn buf(&self) -> &AlignedBuf {
        self.buf.as_ref().expect("present until drop")
    }

    pub fn buf_mut(&mut self) -> &mut AlignedBuf {
        self.buf.as_mut().expect("present until drop")
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        self.buf().as_slice()
    }
}

impl std::ops::Deref for PooledBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.buf().as_slice()
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let Some(buf) = self.buf.take() else { return };
        let cap = buf.capacity();
        let mut st = self.pool.lock();
        let freed = if *self.detached.get_mut() {
            Some(buf)
        } else {
            st.out -= cap;
            if st.total <= self.pool.limit {
                st.free.push(buf);
                None
            } else {
                // The pool went over its limit for one oversized buffer: shrink back.
                st.total -= cap;
                Some(buf)
            }
        };
        drop(st);
        // Unmapped outside the lock.
        drop(freed);
        self.pool.returned.notify_all();
    }
}

/// The bytes of one record: owned, or still in a pool's aligned buffer
/// (local reads hand their buffer over rather than copy megabytes on the IO
/// thread, and fetched records are put together in one; the buffer returns
/// to its pool when the last user drops it). What the node's cache keeps is
/// owned or [detached](PooledBuf::detach) from its pool, so the cache never
/// holds memory the pool counts on for reads in flight.
#[derive(Debug)]
pub enum RecordBytes {
    Owned(Vec<u8>),
    Pooled(PooledBuf),
}

impl AsRef<[u8]> for RecordBytes {
    fn as_ref(&self) -> &[u8] {
        match self {
            Self::Owned(v) => v,
            Self::Pooled(b) => b,
        }
    }
}

impl RecordBytes {
    /// Empty bytes with room for `len`: a buffer of `pool` when it has one
    /// free (never waits for one), else a vector.
    pub fn with_capacity(len: usize, pool: Option<&BufferPool>) -> Self {
        match pool.and_then(|p| p.try_acquire(len)) {
            Some(buf) => Self::Pooled(buf),
            None => Self::Owned(Vec::with_capacity(len)),
        }
    }

    /// `len` bytes to be overwritten in place (a record read straight from
    /// a socket): a buffer of `pool` when it has one free, holding stale
    /// bytes of an earlier record, else a zeroed vector.
    pub fn to_fill(len: usize, pool: Option<&BufferPool>) -> Self {
        match pool.and_then(|p| p.try_acquire(len)) {
            Some(mut buf) => {
                buf.buf_mut().set_len(len);
                Self::Pooled(buf)
            }
            None => Self::Owned(vec![0; len]),
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Self::Owned(v) => v,
            Self::Pooled(b) => {
                let buf = b.buf_mut();
                let len = buf.len();
                &mut buf.spare_mut()[..len]
            }
        }
    }

    pub fn len(&self) -> usize {
        self.as_ref().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `bytes`; a pooled buffer must have room for them.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        match self {
            Self::Owned(v) => v.extend_from_slice(bytes),
            Self::Pooled(b) => {
                let buf = b.buf_mut();
                let at = buf.len();
                buf.spare_mut()[at..at + bytes.len()].copy_from_slice(bytes);
                buf.set_len(at + bytes.len());
            }
        }
    }

    /// Still counted by a pool (pooled and not detached).
    pub fn is_pooled(&self) -> bool {
        matches!(self, Self::Pooled(b) if !b.is_detached())
    }

    /// Takes pooled bytes off their pool's count ([`PooledBuf::detach`]);
    /// owned bytes are left as they are.
    pub fn detach(&self) {
        if let Self::Pooled(b) = self {
            b.detach();
        }
    }

    /// Whether holding these bytes a while (a staged prefetch) keeps at
    /// least half of their IO pool for the reads needed now: owned bytes
    /// always do; pooled ones while the pool's buffers in use are at most
    /// half its limit (the node's pool holds 2 layers' top-k, so demand
    /// still has a layer's worth).
    pub fn may_stay(&self) -> bool {
        match self {
            Self::Owned(_) => true,
            Self::Pooled(b) => {
                let pool = b.pool();
                pool.in_use_bytes().saturating_mul(2) <= pool.limit_bytes()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_reused_and_bounded() {
        let pool = BufferPool::new(3 * 4096);
        let a = pool.acquire(5000); // 8192
        assert_eq!(a.buf().as_slice().as_ptr() as usize % ALIGNMENT, 0);
        assert_eq!(a.buf().capacity(), 8192);
        let b = pool.acquire(10); // 4096: at the limit now
        assert!(pool.try_acquire(1).is_none());
        assert_eq!(pool.in_use_bytes(), 3 * 4096);
        let ptr = a.buf().as_slice().as_ptr();
        drop(a);
        let c = pool.acquire(8000);
        assert_eq!(c.buf().as_slice().as_ptr(), ptr, "reused");
        drop((b, c));
        // One oversized buffer is granted when nothing is out, then released.
        let big = pool.acquire(1 << 20);
        assert_eq!(big.buf().capacity(), 1 << 20);
        drop(big);
        assert_eq!(pool.in_use_bytes(), 0);
        assert!(pool.inner.lock().total <= pool.limit_bytes());
    }

    #[test]
    fn a_detached_buffer_leaves_the_count_and_is_freed_not_returned() {
        let pool = BufferPool::new(2 * 4096);
        let (a, b) = (pool.acquire(4096), pool.acquire(4096));
        assert!(pool.try_acquire(1).is_none(), "at the limit");
        a.detach();
        a.detach(); // once only
        assert!(a.is_detached());
        assert_eq!((pool.total_bytes(), pool.in_use_bytes()), (4096, 4096));
        assert_eq!((pool.idle_bytes(), pool.growth_for(2, 4096)), (4096, 4096));
        // The pool makes another in its place while `a` is still held.
        let c = pool.acquire(4096);
        assert_eq!(pool.total_bytes(), 2 * 4096);
        drop(a);
        assert_eq!(pool.total_bytes(), 2 * 4096, "a is not the pool's");
        drop(c);
        assert_eq!((pool.free_bytes(), pool.growth_for(1, 100)), (4096, 0));
        // Even with room for it, a detached buffer does not come back.
        b.detach();
        drop(b);
        assert_eq!((pool.total_bytes(), pool.free_bytes()), (4096, 4096));
        let d = RecordBytes::Pooled(pool.acquire(10));
        assert!(d.is_pooled());
        d.detach();
        assert!(!d.is_pooled());
        assert!(!RecordBytes::Owned(vec![1]).is_pooled());
    }

    #[test]
    fn record_sized_buffers_start_on_a_huge_page_and_round_up_to_whole_ones() {
        assert_eq!(AlignedBuf::capacity_for(0), ALIGNMENT);
        assert_eq!(AlignedBuf::capacity_for(HUGE_PAGE - 1), HUGE_PAGE);
        // 13.42 MB (a Kimi K3 q3 record) -> 14 MiB: 9 % more, whole huge pages.
        assert_eq!(AlignedBuf::capacity_for(13_422_592), 14 << 20);
        // Just past one huge page: rounding would double it, so pages only.
        assert_eq!(
            AlignedBuf::capacity_for(HUGE_PAGE + 1),
            HUGE_PAGE + ALIGNMENT
        );
        for len in [1, 4097, HUGE_PAGE + 1, 13_422_592, 17_891_328] {
            let cap = AlignedBuf::capacity_for(len);
            assert!(
                cap >= len && cap.is_multiple_of(ALIGNMENT),
                "{len} -> {cap}"
            );
            assert!(cap - align_up(len as u64) as usize <= len / 8 + ALIGNMENT);
        }

        let mut b = AlignedBuf::new(13_422_592);
        assert_eq!(b.capacity(), 14 << 20);
        assert!(b.is_huge_aligned(), "mmap of 14 MiB refused");
        assert_eq!(b.spare_mut().as_ptr() as usize % HUGE_PAGE, 0);
        assert!(b.spare_mut().iter().all(|&x| x == 0), "zeroed");
        b.spare_mut().fill(7);
        b.set_len(b.capacity());
        assert!(b.as_slice().iter().all(|&x| x == 7));

        // The pool counts what was allocated, not what was asked for.
        let pool = BufferPool::new(20 << 20);
        let a = pool.acquire(13_422_592);
        assert_eq!(pool.in_use_bytes(), 14 << 20);
        assert!(pool.try_acquire(13_422_592).is_none(), "28 MiB > 20 MiB");
        drop(a);
        // Returned buffers are kept: made, not checked out.
        assert_eq!((pool.in_use_bytes(), pool.total_bytes()), (0, 14 << 20));
        let again = pool.acquire(13_000_000);
        assert_eq!(again.buf().capacity(), 14 << 20, "reused");
        assert_eq!(pool.total_bytes(), 14 << 20);

        let small = BufferPool::with_pages(20 << 20, Pages::Small).acquire(13_422_592);
        assert_eq!(small.buf().capacity(), 13_422_592);
        assert!(!small.buf().is_huge_aligned());
    }

    #[test]
    fn acquire_waits_for_a_return() {
        let pool = BufferPool::new(4096);
        let held = pool.acquire(4096);
        let p2 = pool.clone();
        let t = std::thread::spawn(move || p2.acquire(4096).buf().capacity());
        drop(held);
        assert_eq!(t.join().unwrap(), 4096);
    }

    /// Staged records may keep their IO buffer only while at most half of
    /// the pool is in use, so the reads needed now always find buffers.
    #[test]
    fn pooled_bytes_may_stay_only_while_half_the_pool_is_free() {
        let pool = BufferPool::new(4 * 4096);
        let first = RecordBytes::Pooled(pool.acquire(4096));
        assert!(first.may_stay(), "1 of 4 buffers in use");
        let second = pool.acquire(4096);
        assert!(first.may_stay(), "2 of 4 buffers in use: exactly half");
        let third = pool.acquire(4096);
        assert!(!first.may_stay(), "3 of 4 buffers in use");
        drop((second, third));
        assert!(first.may_stay(), "back to 1 of 4");
        assert!(RecordBytes::Owned(vec![0; 8]).may_stay());
    }
}
