//! A file mapped read-write and shared between processes: the same-host inboxes' rings
//! ([`crate::shm`]) and the host-wide devices' tables ([`crate::host`]). Its words are only
//! read and written as atomics, its byte ranges copied at offsets checked against its length.

// Shared memory needs raw pointers; they stay in this file, behind checked accessors.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use rustix::fd::OwnedFd;
use rustix::mm::{MapFlags, ProtFlags};

/// A shared mapping of `len` bytes of a file.
pub(crate) struct SharedMap {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: plain shared memory, accessed only through atomics and raw copies: it may move
// between threads and be shared by them.
unsafe impl Send for SharedMap {}
// SAFETY: as above.
unsafe impl Sync for SharedMap {}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: `base` is the start of a live mapping of `len` bytes made by `map`.
        unsafe {
            let _ = rustix::mm::munmap(self.base.as_ptr().cast::<c_void>(), self.len);
        }
    }
}

impl SharedMap {
    /// Maps the first `len` bytes of `fd`'s file, which the caller has checked (or made) to be
    /// at least that long. The page tables are filled at once (`MAP_POPULATE`): a page first
    /// touched on the data path would cost its process a page fault in the middle of a
    /// message (every 32 slots of an inbox's ring on its first lap: a round trip in every 16
    /// of a small-message ping-pong took 6-8 us more).
    pub(crate) fn map(fd: &OwnedFd, len: usize) -> io::Result<SharedMap> {
        // SAFETY: a new mapping at an address of the kernel's choosing, of a range the file
        // backs (the caller's contract).
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::POPULATE,
                fd,
                0,
            )?
        };
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap"))?;
        Ok(SharedMap { base, len })
    }

    /// The 64-bit atomic at byte `off` (8-aligned, inside the mapping: the offsets are the
    /// callers' own layouts, never read from the shared bytes).
    #[inline]
    pub(crate) fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: in bounds and aligned (the mapping is page-aligned, `off` a multiple of 8);
        // the shared words are only ever accessed atomically.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// The 32-bit atomic at byte `off` (4-aligned, inside the mapping).
    #[inline]
    pub(crate) fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: as for `u64_at`.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU32>() }
    }

    /// Copies `src` into the mapping at `off`.
    #[inline]
    pub(crate) fn write(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.len);
        // SAFETY: in bounds (checked); the caller's protocol gives it these bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.as_ptr().add(off), src.len());
        }
    }

    /// Copies `dst.len()` bytes from the mapping at `off`. What another process wrote there is
    /// untrusted: only its value can be wrong, never where it is read.
    #[inline]
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.len);
        // SAFETY: in bounds (checked).
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.as_ptr().add(off), dst.as_mut_ptr(), dst.len());
        }
    }
}
