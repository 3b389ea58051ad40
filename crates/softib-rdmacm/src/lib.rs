//! softib's `librdmacm.so.1`: rdma-core 44's librdmacm ABI (68 functions at `RDMACM_1.0` …
//! `RDMACM_1.3`), each a trampoline into softib's `libibverbs.so.1`, which implements the
//! connection manager beside the devices it serves (their QP1, progress thread and event
//! plumbing are there). `rdma_create_id` here calls `softib_rdmacm_rdma_create_id` there, and
//! so on, resolved once per symbol.
//!
//! The trampolines pass six integer registers through and return one: on x86-64 (System V)
//! and AArch64 that forwards any function whose arguments and result are integers or pointers,
//! which is every function of this ABI (no floating point, no structures by value; `rfcntl`'s
//! variadic third argument travels in the third register as a variadic call puts it there).
//!
//! When the process's libibverbs is not softib's (or lacks the function), a call fails the
//! way the function documents failure, with errno `ENOSYS`: -1, NULL, 0 for a port, or the
//! string `"UNKNOWN EVENT"` for `rdma_event_str`. Never an abort.

#![allow(clippy::missing_safety_doc)]

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("softib-rdmacm's trampolines assume the x86-64 or AArch64 calling convention");

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How the forwarded C function reports failure.
#[derive(Clone, Copy)]
enum Ret {
    /// `int` / `ssize_t` / `off_t`: -1.
    Int,
    /// A pointer: NULL.
    Ptr,
    /// `rdma_event_str`: a static string.
    Str,
    /// `rdma_get_src_port` / `rdma_get_dst_port`: 0.
    Port,
    /// No result.
    Void,
}

type Target = unsafe extern "C" fn(usize, usize, usize, usize, usize, usize) -> usize;

/// Not resolved yet.
const UNRESOLVED: usize = 0;
/// Looked for and absent.
const ABSENT: usize = 1;

/// The implementation of `name` in the process's libibverbs.so.1: from the global scope, or
/// from libibverbs.so.1 opened by name (the loader finds softib's first where `softib run` or
/// LD_LIBRARY_PATH put it).
fn resolve(slot: &AtomicUsize, name: &CStr) -> Option<Target> {
    let mut p = slot.load(Ordering::Acquire);
    if p == UNRESOLVED {
        // SAFETY: dlsym/dlopen with NUL-terminated names; the handle is kept open for the
        // life of the process (libibverbs.so.1 is never unloaded under its users).
        let f = unsafe {
            let mut f = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
            if f.is_null() {
                let h = libc::dlopen(
                    c"libibverbs.so.1".as_ptr(),
                    libc::RTLD_NOW | libc::RTLD_GLOBAL,
                );
                if !h.is_null() {
                    f = libc::dlsym(h, name.as_ptr());
                }
            }
            f
        };
        p = if f.is_null() { ABSENT } else { f as usize };
        slot.store(p, Ordering::Release);
    }
    if p == ABSENT {
        return None;
    }
    // SAFETY: `p` is the address dlsym gave for a function of this ABI.
    Some(unsafe { std::mem::transmute::<usize, Target>(p) })
}

/// Calls `name`'s implementation with the six argument registers, or fails as `ret` says.
fn forward(slot: &AtomicUsize, name: &CStr, ret: Ret, a: [usize; 6]) -> usize {
    match resolve(slot, name) {
        // SAFETY: the implementation takes at most six integer/pointer arguments; extra
        // registers are ignored by the callee, as in any C call.
        Some(f) => unsafe { f(a[0], a[1], a[2], a[3], a[4], a[5]) },
        None => {
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            match ret {
                Ret::Int => usize::MAX,
                Ret::Ptr | Ret::Port | Ret::Void => 0,
                Ret::Str => c"UNKNOWN EVENT".as_ptr() as usize,
            }
        }
    }
}

/// One exported entry point: `softib_<name>`, aliased to `<name>@@<node>` (a module per
/// symbol keeps the definition and its `.symver` in one codegen unit).
macro_rules! trampoline {
    ($name:ident, $node:literal, $ret:expr, $target:literal, $sym:literal) => {
        #[allow(non_snake_case)]
        mod $name {
            use super::*;

            #[export_name = $sym]
            unsafe extern "C" fn entry(
                a: usize,
                b: usize,
                c: usize,
                d: usize,
                e: usize,
                f: usize,
            ) -> usize {
                static SLOT: AtomicUsize = AtomicUsize::new(UNRESOLVED);
                forward(&SLOT, $target, $ret, [a, b, c, d, e, f])
            }

            std::arch::global_asm!(concat!(
                ".symver ",
                $sym,
                ", ",
                stringify!($name),
                "@@",
                $node
            ));
        }
    };
}

include!(concat!(env!("OUT_DIR"), "/trampolines.rs"));
