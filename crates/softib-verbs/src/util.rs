//! errno, eventfds and small helpers of the C boundary.

use std::os::fd::RawFd;

/// Sets the calling thread's errno.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Sets errno to `e` and returns NULL (for verbs returning an object pointer).
pub fn null_errno<T>(e: i32) -> *mut T {
    set_errno(e);
    std::ptr::null_mut()
}

/// Sets errno to `e` and returns -1 (for the verbs that report failure as -1 + errno).
pub fn minus_one(e: i32) -> i32 {
    set_errno(e);
    -1
}

/// Sets errno to `e` and returns `e` (for the verbs that return an errno value).
pub fn ret_errno(e: i32) -> i32 {
    set_errno(e);
    e
}

/// A semaphore eventfd: every `signal` makes one `read` of 8 bytes succeed. Close-on-exec.
pub fn semaphore_eventfd() -> std::io::Result<RawFd> {
    // SAFETY: plain system call.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
    if fd < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// A counting (non-semaphore) non-blocking eventfd for wake-ups.
pub fn wake_eventfd() -> std::io::Result<RawFd> {
    // SAFETY: plain system call.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// Adds one to an eventfd.
pub fn signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a local.
    unsafe {
        libc::write(fd, (&one as *const u64).cast(), 8);
    }
}

/// Reads an eventfd once (blocking unless the fd is non-blocking). Returns 0 or -1 with
/// errno (EAGAIN for an empty non-blocking fd).
pub fn wait_one(fd: RawFd) -> i32 {
    let mut v: u64 = 0;
    loop {
        // SAFETY: reads 8 bytes into a local.
        let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            return 0;
        }
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if n < 0 && e == libc::EINTR {
            continue;
        }
        return minus_one(e);
    }
}

/// Drains a non-blocking eventfd.
pub fn drain(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a local.
    unsafe {
        libc::read(fd, (&mut v as *mut u64).cast(), 8);
    }
}

/// Closes a file descriptor this library opened.
pub fn close(fd: RawFd) {
    if fd >= 0 {
        // SAFETY: the fd is ours.
        unsafe {
            libc::close(fd);
        }
    }
}

/// Copies a Rust string into a fixed C char array, NUL-terminated (truncating).
pub fn copy_cstr(dst: &mut [core::ffi::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as core::ffi::c_char;
    }
    if let Some(z) = dst.get_mut(n) {
        *z = 0;
    }
}

/// A zeroed value of a C struct.
pub fn zeroed<T>() -> T {
    // SAFETY: only used for the plain-old-data structs of verbs.h (integers, raw pointers,
    // nullable function pointers and zero-initialisable pthread objects).
    unsafe { std::mem::zeroed() }
}

/// Takes one count from an eventfd if it has one, without blocking.
pub fn wait_one_nonblocking(fd: RawFd) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one local pollfd.
    if unsafe { libc::poll(&mut p, 1, 0) } == 1 {
        wait_one(fd);
    }
}

/// The calling thread's errno (after a call of this library that failed).
pub fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .filter(|&e| e != 0)
        .unwrap_or(libc::EIO)
}
