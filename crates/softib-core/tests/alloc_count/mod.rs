//! A global allocator that counts the bytes live on the heap, for the memory measurements
//! (`qp_memory`, the RD scaling bench). A binary that includes this module installs it with
//! `#[global_allocator] static GLOBAL: Counting = Counting;` and reads [`live_bytes`] or
//! [`allocations`].

// Each measuring binary reads some of these, not all.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static CALLS: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    // Const-initialized and without a destructor: safe to touch from the allocator.
    static THREAD_CALLS: Cell<isize> = const { Cell::new(0) };
}

/// Bytes allocated and not yet freed, over the whole process.
pub fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Allocations (`alloc` and `realloc` calls) made so far, over the whole process.
pub fn allocations() -> isize {
    CALLS.load(Ordering::Relaxed)
}

/// Allocations made so far by the calling thread: the test harness's own threads (which
/// allocate now and then while a test runs) do not count.
pub fn thread_allocations() -> isize {
    THREAD_CALLS.with(Cell::get)
}

/// The heap bytes `f` leaves allocated (its result included, if it keeps any).
pub fn retained_by<T>(f: impl FnOnce() -> T) -> (T, isize) {
    let before = live_bytes();
    let out = f();
    (out, live_bytes() - before)
}

// SAFETY: forwards to the system allocator and only counts bytes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        CALLS.fetch_add(1, Ordering::Relaxed);
        THREAD_CALLS.with(|c| c.set(c.get() + 1));
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        CALLS.fetch_add(1, Ordering::Relaxed);
        THREAD_CALLS.with(|c| c.set(c.get() + 1));
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, new) }
    }
}
