//! Large blocks freed go back to the system. An expert record and its
//! cached copy are megabytes each, allocated on IO and compute threads and
//! freed when the cache evicts. glibc raises its mmap threshold to the
//! largest block freed (up to 32 MiB), after which such blocks come from the
//! per-thread heap arenas, which keep what is freed: a node on a 380 MiB
//! budget whose cache evicted held 43 MB (11 %) more than with the threshold
//! fixed, and more than its RAM plan (docs/BENCH.md, "The plan is honest").
//! Fixing the threshold turns the adjustment off, so the resident set is
//! what the node holds.

/// The threshold the node fixes: glibc's own default (128 KiB), where every
/// record, tensor and cached copy lies far above it.
pub const MMAP_THRESHOLD: i32 = 128 << 10;

/// Fixes the allocator's mmap threshold at [`MMAP_THRESHOLD`] for the whole
/// process; a no-op with an allocator other than glibc's. Call once at start.
pub fn return_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt takes two integers and changes only allocator
        // tuning; it fails (returns 0) on a value it rejects, leaving the
        // default behaviour, which is still correct.
        let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) };
        debug_assert!(ok == 1, "mallopt(M_MMAP_THRESHOLD) rejected");
    }
}
