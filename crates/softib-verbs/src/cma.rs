//! The connection manager behind softib's `librdmacm.so.1` (`crates/softib-rdmacm`): the
//! `softib_rdmacm_<name>` functions its trampolines resolve in this library, where the devices,
//! their QP1 and their progress threads are (docs/cm.md). So far: event names, event channels
//! and the device list; every other rdma_cm function still fails with `ENOSYS` in the
//! trampoline.

use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};

use crate::cma_h::rdma_event_channel;
use crate::registry::{self, Kind};
use crate::util::{null_errno, set_errno};
use crate::verbs_h::*;

/// An event channel: rdma_cm's structure first (the application reads `fd`), then the queue.
/// `fd` is an eventfd semaphore holding one count per queued event, so `poll`/`epoll` wake on
/// it and `O_NONBLOCK` set by the application turns a wait into `EAGAIN`.
#[repr(C)]
pub struct SoftCmChannel {
    /// What the application sees.
    pub c: rdma_event_channel,
    /// Queued events (their addresses), oldest first.
    pub events: Mutex<VecDeque<usize>>,
}

macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr().cast::<libc::c_char>()
    };
}

/// `rdma_event_str`: the name of an event type, as rdma-core prints it.
#[export_name = "softib_rdmacm_rdma_event_str"]
pub extern "C" fn rdma_event_str(event: libc::c_int) -> *const libc::c_char {
    match event {
        0 => cstr!("RDMA_CM_EVENT_ADDR_RESOLVED"),
        1 => cstr!("RDMA_CM_EVENT_ADDR_ERROR"),
        2 => cstr!("RDMA_CM_EVENT_ROUTE_RESOLVED"),
        3 => cstr!("RDMA_CM_EVENT_ROUTE_ERROR"),
        4 => cstr!("RDMA_CM_EVENT_CONNECT_REQUEST"),
        5 => cstr!("RDMA_CM_EVENT_CONNECT_RESPONSE"),
        6 => cstr!("RDMA_CM_EVENT_CONNECT_ERROR"),
        7 => cstr!("RDMA_CM_EVENT_UNREACHABLE"),
        8 => cstr!("RDMA_CM_EVENT_REJECTED"),
        9 => cstr!("RDMA_CM_EVENT_ESTABLISHED"),
        10 => cstr!("RDMA_CM_EVENT_DISCONNECTED"),
        11 => cstr!("RDMA_CM_EVENT_DEVICE_REMOVAL"),
        12 => cstr!("RDMA_CM_EVENT_MULTICAST_JOIN"),
        13 => cstr!("RDMA_CM_EVENT_MULTICAST_ERROR"),
        14 => cstr!("RDMA_CM_EVENT_ADDR_CHANGE"),
        15 => cstr!("RDMA_CM_EVENT_TIMEWAIT_EXIT"),
        _ => cstr!("UNKNOWN EVENT"),
    }
}

/// `rdma_create_event_channel`: a new channel; NULL and errno on failure.
#[export_name = "softib_rdmacm_rdma_create_event_channel"]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    let fd = match crate::util::semaphore_eventfd() {
        Ok(fd) => fd,
        Err(e) => return null_errno(e.raw_os_error().unwrap_or(libc::EMFILE)),
    };
    let ch = Box::into_raw(Box::new(SoftCmChannel {
        c: rdma_event_channel { fd },
        events: Mutex::new(VecDeque::new()),
    }));
    registry::add(ch, Kind::CmChannel);
    ch.cast()
}

/// `rdma_destroy_event_channel`: closes the channel (its ids must be gone, as rdma-core
/// requires). A pointer this library did not hand out, or one already destroyed, is left
/// alone (errno `EINVAL`).
#[export_name = "softib_rdmacm_rdma_destroy_event_channel"]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    let ch = channel.cast::<SoftCmChannel>();
    if !registry::remove(ch, Kind::CmChannel) {
        set_errno(libc::EINVAL);
        return;
    }
    // SAFETY: a live channel this library allocated with Box; removed from the registry above,
    // so no other call reaches it.
    let ch = unsafe { Box::from_raw(ch) };
    crate::util::close(ch.c.fd);
}

/// The contexts `rdma_get_devices` hands out: one per softib device, opened on first use and
/// kept for the life of the process (as librdmacm keeps its device array).
static CONTEXTS: OnceLock<Vec<usize>> = OnceLock::new();

fn contexts() -> &'static [usize] {
    CONTEXTS.get_or_init(crate::device::open_all)
}

/// `rdma_get_devices`: a NULL-terminated array of the open contexts of every device (freed by
/// `rdma_free_devices`); `num_devices`, if not NULL, receives their number.
#[export_name = "softib_rdmacm_rdma_get_devices"]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut libc::c_int) -> *mut *mut ibv_context {
    let ctxs = contexts();
    // SAFETY: calloc of len+1 pointers; rdma_free_devices frees it with free().
    let arr = unsafe { libc::calloc(ctxs.len() + 1, std::mem::size_of::<usize>()) }
        .cast::<*mut ibv_context>();
    if arr.is_null() {
        return null_errno(libc::ENOMEM);
    }
    for (i, &c) in ctxs.iter().enumerate() {
        // SAFETY: within the len+1 array just allocated.
        unsafe { *arr.add(i) = c as *mut ibv_context };
    }
    if !num_devices.is_null() {
        // SAFETY: the caller's int.
        unsafe { *num_devices = ctxs.len() as libc::c_int };
    }
    arr
}

/// `rdma_free_devices`: frees the array (the contexts stay open).
#[export_name = "softib_rdmacm_rdma_free_devices"]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    if !list.is_null() {
        // SAFETY: an array rdma_get_devices allocated with calloc.
        unsafe { libc::free(list.cast()) };
    }
}
