//! The connection-manager functions this library implements for softib's librdmacm.so.1
//! (`softib_rdmacm_<name>`, reached through its trampolines), called here by name from the
//! built library: event names, event channels (a pollable descriptor; a bad or repeated
//! destroy is refused, not a crash) and the device array.

mod common;

use std::ffi::{c_char, c_int, c_void, CStr};

fn sym<T: Copy>(lib: *mut c_void, name: &CStr) -> T {
    // SAFETY: dlsym on an open handle with a NUL-terminated name.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    assert!(!p.is_null(), "{name:?} is not exported");
    // SAFETY: the caller names the function's type.
    unsafe { std::mem::transmute_copy(&p) }
}

#[test]
fn names_channels_devices() {
    let Some(path) = common::built_lib() else {
        common::skip("libibverbs.so was not built");
        return;
    };
    let cpath = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: loading the library this crate built.
    let lib = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!lib.is_null());

    let event_str: extern "C" fn(c_int) -> *const c_char =
        sym(lib, c"softib_rdmacm_rdma_event_str");
    // SAFETY: static strings.
    let name = |e| {
        unsafe { CStr::from_ptr(event_str(e)) }
            .to_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(name(0), "RDMA_CM_EVENT_ADDR_RESOLVED");
    assert_eq!(name(4), "RDMA_CM_EVENT_CONNECT_REQUEST");
    assert_eq!(name(15), "RDMA_CM_EVENT_TIMEWAIT_EXIT");
    assert_eq!(name(16), "UNKNOWN EVENT");
    assert_eq!(name(-1), "UNKNOWN EVENT");

    let create: extern "C" fn() -> *mut c_int =
        sym(lib, c"softib_rdmacm_rdma_create_event_channel");
    let destroy: unsafe extern "C" fn(*mut c_int) =
        sym(lib, c"softib_rdmacm_rdma_destroy_event_channel");
    let ch = create();
    assert!(!ch.is_null());
    // SAFETY: `fd` is the first field of struct rdma_event_channel.
    let fd = unsafe { *ch };
    assert!(fd >= 0);
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd.
    assert_eq!(
        unsafe { libc::poll(&mut p, 1, 0) },
        0,
        "no event queued: not readable"
    );
    // SAFETY: the channel just created; then the same pointer again, and one never handed out.
    unsafe {
        destroy(ch);
        *libc::__errno_location() = 0;
        destroy(ch);
        assert_eq!(
            *libc::__errno_location(),
            libc::EINVAL,
            "a repeated destroy is refused"
        );
        let mut bogus = 7;
        destroy(&mut bogus);
        assert_eq!(bogus, 7);
    }
    // SAFETY: fcntl on a closed descriptor only reports EBADF.
    assert_eq!(
        unsafe { libc::fcntl(fd, libc::F_GETFD) },
        -1,
        "the descriptor is closed"
    );

    let get: unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void =
        sym(lib, c"softib_rdmacm_rdma_get_devices");
    let free: unsafe extern "C" fn(*mut *mut c_void) = sym(lib, c"softib_rdmacm_rdma_free_devices");
    let mut n = -1;
    // SAFETY: the array the library returns, NULL-terminated, freed by its own call.
    unsafe {
        let arr = get(&mut n);
        assert!(!arr.is_null());
        assert!(n >= 1, "softib0 at least");
        for i in 0..n as usize {
            assert!(!(*arr.add(i)).is_null());
        }
        assert!((*arr.add(n as usize)).is_null(), "NULL-terminated");
        let again = get(std::ptr::null_mut());
        assert_eq!(*again, *arr, "the same contexts every time");
        free(arr);
        free(again);
        free(std::ptr::null_mut());
    }
}
