//! Buffers a thread reuses across calls that may nest: a product that runs
//! on rayon can, while it waits for its tasks, run another task of the same
//! kind on the same thread (work stealing), and that one needs buffers of
//! its own. A `Cell` holding one buffer gives the nested call an empty one,
//! allocated afresh and dropped after: for a prefill's large buffers an
//! `mmap`, a page fault per 4 KiB written and an `munmap` each time (page
//! faults were 8 % of the CPU of a 512-token prefill on 2 cores, most of
//! them the experts' outputs, docs/BENCH.md). A stash holds a few per
//! thread instead, so each level of nesting finds its own.

use std::cell::RefCell;
use std::thread::LocalKey;

/// Buffers held per thread: the deepest nesting a 2-16 core pool reaches
/// in practice (an expert's product stealing another expert's task), with
/// room to spare; more are dropped when returned.
const HELD: usize = 4;

/// A thread-local stack of reusable values, declared in `thread_local!`
/// and used through [`Reuse`].
#[derive(Debug)]
pub struct Stash<T>(RefCell<Vec<T>>);

impl<T> Stash<T> {
    pub const fn new() -> Self {
        Self(RefCell::new(Vec::new()))
    }
}

impl<T> Default for Stash<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Taking a value from a thread's [`Stash`] and giving it back.
pub trait Reuse<T> {
    /// The value most recently given back on this thread, or a new one.
    fn take_one(&'static self) -> T;
    /// Keeps `value` for the next [`Reuse::take_one`] on this thread (drops
    /// it if the stash already holds its share).
    fn give_back(&'static self, value: T);
}

impl<T: Default + 'static> Reuse<T> for LocalKey<Stash<T>> {
    fn take_one(&'static self) -> T {
        self.with(|s| s.0.borrow_mut().pop()).unwrap_or_default()
    }

    fn give_back(&'static self, value: T) {
        self.with(|s| {
            let mut held = s.0.borrow_mut();
            if held.len() < HELD {
                held.push(value);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static BUFS: Stash<Vec<u8>> = const { Stash::new() };
    }

    /// A nested take gets a buffer of its own, and both are reused after:
    /// no allocation once each level has had one.
    #[test]
    fn nested_takes_each_reuse_their_own_buffer() {
        let mut outer = BUFS.take_one();
        outer.reserve(1 << 20);
        let mut inner = BUFS.take_one();
        assert_eq!(
            inner.capacity(),
            0,
            "the nested call does not share the outer's buffer"
        );
        inner.reserve(1 << 16);
        let (po, pi) = (outer.as_ptr(), inner.as_ptr());
        BUFS.give_back(inner);
        BUFS.give_back(outer);
        let again_outer = BUFS.take_one();
        let again_inner = BUFS.take_one();
        assert_eq!((again_outer.as_ptr(), again_inner.as_ptr()), (po, pi));
        BUFS.give_back(again_inner);
        BUFS.give_back(again_outer);
    }

    /// A thread holds at most `HELD` values.
    #[test]
    fn a_stash_holds_a_bounded_number() {
        for _ in 0..HELD + 3 {
            BUFS.give_back(vec![1]);
        }
        let mut n = 0;
        while !BUFS.take_one().is_empty() {
            n += 1;
        }
        assert_eq!(n, HELD);
    }
}
