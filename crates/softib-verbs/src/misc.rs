//! The pure helpers of libibverbs: names of enum values, rate conversions, fork support, the
//! sysfs readers.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::util::{minus_one, ret_errno};
use crate::verbs_h::*;

macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr().cast::<libc::c_char>()
    };
}

symver!(ibv_wc_status_str);
#[export_name = "softib_ibv_wc_status_str"]
pub extern "C" fn ibv_wc_status_str(status: ibv_wc_status) -> *const libc::c_char {
    // The strings rdma-core prints.
    match status {
        IBV_WC_SUCCESS => cstr!("success"),
        IBV_WC_LOC_LEN_ERR => cstr!("local length error"),
        IBV_WC_LOC_QP_OP_ERR => cstr!("local QP operation error"),
        IBV_WC_LOC_EEC_OP_ERR => cstr!("local EE context operation error"),
        IBV_WC_LOC_PROT_ERR => cstr!("local protection error"),
        IBV_WC_WR_FLUSH_ERR => cstr!("Work Request Flushed Error"),
        IBV_WC_MW_BIND_ERR => cstr!("memory management operation error"),
        IBV_WC_BAD_RESP_ERR => cstr!("bad response error"),
        IBV_WC_LOC_ACCESS_ERR => cstr!("local access error"),
        IBV_WC_REM_INV_REQ_ERR => cstr!("remote invalid request error"),
        IBV_WC_REM_ACCESS_ERR => cstr!("remote access error"),
        IBV_WC_REM_OP_ERR => cstr!("remote operation error"),
        IBV_WC_RETRY_EXC_ERR => cstr!("transport retry counter exceeded"),
        IBV_WC_RNR_RETRY_EXC_ERR => cstr!("RNR retry counter exceeded"),
        IBV_WC_LOC_RDD_VIOL_ERR => cstr!("local RDD violation error"),
        IBV_WC_REM_INV_RD_REQ_ERR => cstr!("remote invalid RD request"),
        IBV_WC_REM_ABORT_ERR => cstr!("aborted error"),
        IBV_WC_INV_EECN_ERR => cstr!("invalid EE context number"),
        IBV_WC_INV_EEC_STATE_ERR => cstr!("invalid EE context state"),
        IBV_WC_FATAL_ERR => cstr!("fatal error"),
        IBV_WC_RESP_TIMEOUT_ERR => cstr!("response timeout error"),
        IBV_WC_GENERAL_ERR => cstr!("general error"),
        IBV_WC_TM_ERR => cstr!("TM error"),
        IBV_WC_TM_RNDV_INCOMPLETE => cstr!("TM software rendezvous"),
        _ => cstr!("unknown"),
    }
}

symver!(ibv_event_type_str);
#[export_name = "softib_ibv_event_type_str"]
pub extern "C" fn ibv_event_type_str(event: ibv_event_type) -> *const libc::c_char {
    match event {
        IBV_EVENT_CQ_ERR => cstr!("CQ error"),
        IBV_EVENT_QP_FATAL => cstr!("local work queue catastrophic error"),
        IBV_EVENT_QP_REQ_ERR => cstr!("invalid request local work queue error"),
        IBV_EVENT_QP_ACCESS_ERR => cstr!("local access violation work queue error"),
        IBV_EVENT_COMM_EST => cstr!("communication established"),
        IBV_EVENT_SQ_DRAINED => cstr!("send queue drained"),
        IBV_EVENT_PATH_MIG => cstr!("path migrated"),
        IBV_EVENT_PATH_MIG_ERR => cstr!("path migration request error"),
        IBV_EVENT_DEVICE_FATAL => cstr!("local catastrophic error"),
        IBV_EVENT_PORT_ACTIVE => cstr!("port active"),
        IBV_EVENT_PORT_ERR => cstr!("port error"),
        IBV_EVENT_LID_CHANGE => cstr!("LID change"),
        IBV_EVENT_PKEY_CHANGE => cstr!("P_Key change"),
        IBV_EVENT_SM_CHANGE => cstr!("SM change"),
        IBV_EVENT_SRQ_ERR => cstr!("SRQ catastrophic error"),
        IBV_EVENT_SRQ_LIMIT_REACHED => cstr!("SRQ limit reached"),
        IBV_EVENT_QP_LAST_WQE_REACHED => cstr!("last WQE reached"),
        IBV_EVENT_CLIENT_REREGISTER => cstr!("client reregistration"),
        IBV_EVENT_GID_CHANGE => cstr!("GID table change"),
        IBV_EVENT_WQ_FATAL => cstr!("WQ fatal"),
        _ => cstr!("unknown"),
    }
}

symver!(ibv_node_type_str);
#[export_name = "softib_ibv_node_type_str"]
pub extern "C" fn ibv_node_type_str(t: ibv_node_type) -> *const libc::c_char {
    match t {
        IBV_NODE_CA => cstr!("InfiniBand channel adapter"),
        IBV_NODE_SWITCH => cstr!("InfiniBand switch"),
        IBV_NODE_ROUTER => cstr!("InfiniBand router"),
        IBV_NODE_RNIC => cstr!("iWARP NIC"),
        IBV_NODE_USNIC => cstr!("usNIC"),
        IBV_NODE_USNIC_UDP => cstr!("usNIC UDP"),
        IBV_NODE_UNSPECIFIED => cstr!("unspecified"),
        _ => cstr!("unknown"),
    }
}

symver!(ibv_port_state_str);
#[export_name = "softib_ibv_port_state_str"]
pub extern "C" fn ibv_port_state_str(s: ibv_port_state) -> *const libc::c_char {
    match s {
        IBV_PORT_NOP => cstr!("no state change (NOP)"),
        IBV_PORT_DOWN => cstr!("down"),
        IBV_PORT_INIT => cstr!("init"),
        IBV_PORT_ARMED => cstr!("armed"),
        IBV_PORT_ACTIVE => cstr!("active"),
        IBV_PORT_ACTIVE_DEFER => cstr!("active defer"),
        _ => cstr!("unknown"),
    }
}

/// (rate, multiple of 2.5 Gb/s, Mb/s) for every `enum ibv_rate`, as rdma-core 44's
/// verbs.c: the rates that are not a whole multiple of 2.5 Gb/s (FDR, EDR, HDR lanes) have
/// no multiple (0 here: `ibv_rate_to_mult` gives -1 and `mult_to_ibv_rate` never returns
/// them).
const RATES: &[(ibv_rate, i32, i32)] = &[
    (IBV_RATE_2_5_GBPS, 1, 2500),
    (IBV_RATE_5_GBPS, 2, 5000),
    (IBV_RATE_10_GBPS, 4, 10000),
    (IBV_RATE_20_GBPS, 8, 20000),
    (IBV_RATE_30_GBPS, 12, 30000),
    (IBV_RATE_40_GBPS, 16, 40000),
    (IBV_RATE_60_GBPS, 24, 60000),
    (IBV_RATE_80_GBPS, 32, 80000),
    (IBV_RATE_120_GBPS, 48, 120000),
    (IBV_RATE_14_GBPS, 0, 14062),
    (IBV_RATE_56_GBPS, 0, 56250),
    (IBV_RATE_112_GBPS, 0, 112500),
    (IBV_RATE_168_GBPS, 0, 168750),
    (IBV_RATE_25_GBPS, 0, 25781),
    (IBV_RATE_100_GBPS, 0, 103125),
    (IBV_RATE_200_GBPS, 0, 206250),
    (IBV_RATE_300_GBPS, 0, 309375),
    (IBV_RATE_28_GBPS, 11, 28125),
    (IBV_RATE_50_GBPS, 20, 53125),
    (IBV_RATE_400_GBPS, 160, 425000),
    (IBV_RATE_600_GBPS, 240, 637500),
    (IBV_RATE_800_GBPS, 320, 850000),
    (IBV_RATE_1200_GBPS, 480, 1275000),
];

symver!(ibv_rate_to_mult);
#[export_name = "softib_ibv_rate_to_mult"]
pub extern "C" fn ibv_rate_to_mult(rate: ibv_rate) -> i32 {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.1 > 0)
        .map_or(-1, |r| r.1)
}

symver!(mult_to_ibv_rate);
#[export_name = "softib_mult_to_ibv_rate"]
pub extern "C" fn mult_to_ibv_rate(mult: i32) -> ibv_rate {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult > 0)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

symver!(ibv_rate_to_mbps);
#[export_name = "softib_ibv_rate_to_mbps"]
pub extern "C" fn ibv_rate_to_mbps(rate: ibv_rate) -> i32 {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

symver!(mbps_to_ibv_rate);
#[export_name = "softib_mbps_to_ibv_rate"]
pub extern "C" fn mbps_to_ibv_rate(mbps: i32) -> ibv_rate {
    RATES
        .iter()
        .find(|r| r.2 == mbps)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

static FORK_INIT: AtomicBool = AtomicBool::new(false);

symver!(ibv_fork_init);
/// softib never pins memory: a child after fork() sees a copy-on-write image like any other
/// memory, so fork needs no preparation. `ibv_fork_init` succeeds and is remembered.
#[export_name = "softib_ibv_fork_init"]
pub extern "C" fn ibv_fork_init() -> i32 {
    FORK_INIT.store(true, Ordering::Relaxed);
    0
}

symver!(ibv_is_fork_initialized);
#[export_name = "softib_ibv_is_fork_initialized"]
pub extern "C" fn ibv_is_fork_initialized() -> ibv_fork_status {
    // No pinned pages: fork is safe without ibv_fork_init (what rdma-core reports on kernels
    // with copy-on-fork for pinned pages).
    IBV_FORK_UNNEEDED
}

symver!(ibv_dontfork_range);
#[export_name = "softib_ibv_dontfork_range"]
pub extern "C" fn ibv_dontfork_range(_base: *mut libc::c_void, _size: usize) -> i32 {
    0
}

symver!(ibv_dofork_range);
#[export_name = "softib_ibv_dofork_range"]
pub extern "C" fn ibv_dofork_range(_base: *mut libc::c_void, _size: usize) -> i32 {
    0
}

symver!(ibv_get_sysfs_path);
#[export_name = "softib_ibv_get_sysfs_path"]
pub extern "C" fn ibv_get_sysfs_path() -> *const libc::c_char {
    cstr!("/sys")
}

/// Reads `dir/file` into `buf` as rdma-core's sysfs.c does: one read of at most `size`
/// bytes (never more: a file such as /dev/zero is not read to its end), a trailing newline
/// replaced by NUL, else NUL-terminated when it fits; contents that fill `buf` without a
/// newline cannot be terminated and fail (-1). -1 with errno when the file cannot be read.
/// softib devices have no sysfs directory, so reads under their paths fail with ENOENT.
unsafe fn read_file(path: &str, buf: *mut libc::c_char, size: usize) -> i32 {
    use std::io::Read as _;
    if buf.is_null() || size == 0 {
        return minus_one(libc::EINVAL);
    }
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return minus_one(e.raw_os_error().unwrap_or(libc::ENOENT)),
    };
    let mut v = vec![0u8; size];
    let mut len = match f.read(&mut v) {
        Ok(n) => n,
        Err(e) => return minus_one(e.raw_os_error().unwrap_or(libc::EIO)),
    };
    std::ptr::copy_nonoverlapping(v.as_ptr(), buf.cast::<u8>(), len);
    if len > 0 {
        if v[len - 1] == b'\n' {
            len -= 1;
            *buf.add(len) = 0;
        } else if len < size {
            *buf.add(len) = 0;
        } else {
            return minus_one(libc::EOVERFLOW);
        }
    }
    i32::try_from(len).unwrap_or(i32::MAX)
}

symver!(ibv_read_sysfs_file);
#[export_name = "softib_ibv_read_sysfs_file"]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const libc::c_char,
    file: *const libc::c_char,
    buf: *mut libc::c_char,
    size: usize,
) -> i32 {
    if dir.is_null() || file.is_null() {
        return minus_one(libc::EINVAL);
    }
    let d = CStr::from_ptr(dir).to_string_lossy();
    let f = CStr::from_ptr(file).to_string_lossy();
    read_file(&format!("{d}/{f}"), buf, size)
}

symver!(ibv_read_ibdev_sysfs_file);
/// `ibv_read_ibdev_sysfs_file(buf, size, dev, fmt, ...)`: softib devices have no sysfs
/// attributes; the call fails with ENOENT (the variadic arguments are not read).
#[export_name = "softib_ibv_read_ibdev_sysfs_file"]
pub unsafe extern "C" fn ibv_read_ibdev_sysfs_file(
    _buf: *mut libc::c_char,
    _size: usize,
    _dev: *mut libc::c_void,
    _fmt: *const libc::c_char,
) -> i32 {
    minus_one(libc::ENOENT)
}

symver!(ibv_resolve_eth_l2_from_gid);
#[export_name = "softib_ibv_resolve_eth_l2_from_gid"]
pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    _ctx: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> i32 {
    // softib's RoCEv2 runs over UDP sockets: the kernel resolves layer 2.
    ret_errno(libc::EOPNOTSUPP)
}

symver!(verbs_allow_disassociate_destroy);
/// `verbs_allow_disassociate_destroy`: rdma-core's flag that lets destroy calls succeed
/// after a device is disassociated; softib devices never are.
#[export_name = "softib_verbs_allow_disassociate_destroy"]
pub static mut verbs_allow_disassociate_destroy: bool = false;
