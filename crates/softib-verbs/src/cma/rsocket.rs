//! rsockets: stream sockets over RC connections (`rsocket`, `rconnect`, `rsend`, `rrecv`,
//! `rpoll`, `riomap`, `riowrite`, ...), speaking rdma-core's rsocket protocol byte for byte so a
//! softib process and an rdma-core process (Linux rxe) exchange data either way.
//!
//! The protocol (rdma-core `librdmacm/rsocket.c`, documented in docs/cm.md):
//! - the REQ and REP carry `struct rs_conn_data` (40 bytes): version 1, flags (IOMAP, NET
//!   byte order), the receive credits (the receive queue size), the target-SGL array of the
//!   sender (2 `rs_sge` entries the peer writes credits into, followed by the iomap slots) and
//!   the first half of its receive buffer;
//! - data moves as RDMA WRITE WITH IMMEDIATE into the half the peer advertised, immediate
//!   `op << 29 | length` (op DATA); the receive buffer is consumed in order;
//! - credits: when a half of the receive buffer is free again, an RDMA WRITE WITH IMMEDIATE
//!   of the next half's `rs_sge` into the peer's target SGL (op SGL, data = message sequence
//!   the peer may send up to); without free buffer, the same immediate on a zero-length write;
//! - control (op CTRL): DISCONNECT, SHUTDOWN (half close), KEEPALIVE (a zero-length write);
//! - `riomap` publishes a registered buffer in the peer's iomap slots (op IOMAP_SGL) and
//!   `riowrite` writes there with plain RDMA WRITEs.
//!
//! A socket's descriptor is its connection id's event-channel descriptor, as in rdma-core, so
//! it is unique in the process and `rpoll` tells rsockets from other descriptors. Each socket
//! keeps one state lock; blocking calls wait outside it on the completion channel and the
//! event channel (one waiter at a time, as rdma-core's `cq_wait_lock`). A listening socket has
//! an accept thread (rdma-core's listen service): connections are accepted as they come, and
//! `raccept` takes them from its queue.
//!
//! Datagram rsockets (`SOCK_DGRAM`, UD QPs beside a UDP socket) are not provided: `rsocket`
//! fails with `ENOTSUP` for them.

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::{addr, complete, soft_id};
use crate::cma_h::*;
use crate::util::{self, minus_one};
use crate::verbs_h::*;

const RS_OLAP_START_SIZE: u32 = 2048;
const RS_MAX_TRANSFER: u32 = 65536;
const RS_SNDLOWAT: u32 = 2048;
const RS_QP_MIN_SIZE: u32 = 16;
const RS_QP_MAX_SIZE: u32 = 0xFFFE;
const RS_QP_CTRL_SIZE: u32 = 4;
const RS_CONN_RETRIES: u32 = 6;
const RS_SGL_SIZE: usize = 2;
/// The largest control message: an `rs_sge`.
const RS_MAX_CTRL_MSG: u32 = 16;

const RS_OP_DATA: u32 = 0;
const RS_OP_WRITE: u32 = 2;
const RS_OP_SGL: u32 = 4;
const RS_OP_IOMAP_SGL: u32 = 6;
const RS_OP_CTRL: u32 = 7;

const RS_CTRL_DISCONNECT: u32 = 0;
const RS_CTRL_KEEPALIVE: u32 = 1;
const RS_CTRL_SHUTDOWN: u32 = 2;

const RS_WR_ID_FLAG_RECV: u64 = 1 << 63;

const RS_CONN_FLAG_NET: u8 = 1;
const RS_CONN_FLAG_IOMAP: u8 = 2;
/// The size of `struct rs_conn_data` on the wire.
const CONN_DATA_LEN: usize = 40;

// rdma-core's `enum rs_state`: passive, connecting, connected, disconnected, in that order.
const RS_INIT: u32 = 0;
const RS_BOUND: u32 = 0x0001;
const RS_LISTENING: u32 = 0x0002;
const RS_OPENING: u32 = 0x0004;
const RS_RESOLVING_ADDR: u32 = RS_OPENING | 0x0010;
const RS_RESOLVING_ROUTE: u32 = RS_OPENING | 0x0020;
const RS_CONNECTING: u32 = RS_OPENING | 0x0040;
const RS_CONNECTED: u32 = 0x0100;
const RS_WRITABLE: u32 = 0x0200;
const RS_READABLE: u32 = 0x0400;
const RS_CONNECT_RDWR: u32 = RS_CONNECTED | RS_READABLE | RS_WRITABLE;
const RS_CONNECT_ERROR: u32 = 0x0800;
const RS_DISCONNECTED: u32 = 0x1000;
const RS_ERROR: u32 = 0x2000;

/// `<rdma/rsocket.h>`.
const SOL_RDMA: i32 = 0x10000;
const RDMA_SQSIZE: i32 = 0;
const RDMA_RQSIZE: i32 = 1;
const RDMA_INLINE: i32 = 2;
const RDMA_IOMAPSIZE: i32 = 3;
const RDMA_ROUTE: i32 = 4;

/// How long a blocking call spins on the CQ before it sleeps (rdma-core's `polling_time`,
/// whose default is 10 µs), unless /etc/rdma/rsocket/polling_time says otherwise. Sleeping
/// costs two thread wake-ups per message here (the progress thread's, then the caller's):
/// a blocking 64-byte rstream ping-pong took 73 µs per transfer spinning 10 µs, 22 µs
/// spinning 50 µs.
const POLLING_TIME_US: u32 = 50;
/// The longest sleep of a blocked call before it looks again (rdma-core's
/// `wake_up_interval`), unless /etc/rdma/rsocket/wake_up_interval says otherwise.
const WAKE_UP_INTERVAL_MS: u32 = 500;

fn msg_set(op: u32, data: u32) -> u32 {
    (op << 29) | data
}
fn msg_op(m: u32) -> u32 {
    m >> 29
}
fn msg_data(m: u32) -> u32 {
    m & 0x1FFF_FFFF
}

/// rdma-core's 8-bit scale for the iomap size: values up to 128 as they are, larger ones as
/// `0x80 | value >> 8`.
fn value_to_scale(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (1 << (bits - 1)) | (value >> bits)
    }
}
fn scale_to_value(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (value & !(1 << (bits - 1))) << bits
    }
}

/// `struct rs_sge` (host order unless the peer's byte order differs).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct RsSge {
    addr: u64,
    key: u32,
    length: u32,
}

/// `struct rs_iomap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RsIomap {
    offset: u64,
    sge: RsSge,
}

/// The process's defaults (rdma-core reads the same files under /etc/rdma/rsocket).
struct Defaults {
    polling_time: Duration,
    wake_up_interval_ms: i32,
    inline: u32,
    sqsize: u32,
    rqsize: u32,
    mem: u32,
    wmem: u32,
    iomap_size: u32,
}

fn defaults() -> &'static Defaults {
    static D: OnceLock<Defaults> = OnceLock::new();
    D.get_or_init(|| {
        let read = |name: &str, dflt: u32| -> u32 {
            std::fs::read_to_string(format!("/etc/rdma/rsocket/{name}"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(dflt)
        };
        let mem = read("mem_default", 1 << 17).max(1);
        let mut wmem = read("wmem_default", 1 << 17);
        if wmem < RS_SNDLOWAT {
            wmem = RS_SNDLOWAT << 1;
        }
        let iomap = read("iomap_size", 0) & 0xffff;
        Defaults {
            polling_time: Duration::from_micros(read("polling_time", POLLING_TIME_US).into()),
            wake_up_interval_ms: read("wake_up_interval", WAKE_UP_INTERVAL_MS).clamp(1, 60_000)
                as i32,
            inline: read("inline_default", 64) & 0xffff,
            sqsize: read("sqsize_default", 384) & 0xffff,
            rqsize: read("rqsize_default", 384) & 0xffff,
            mem,
            wmem,
            iomap_size: value_to_scale(scale_to_value(iomap, 8), 8) & 0xff,
        }
    })
}

/// A registered buffer that stays where it is: 8-byte aligned storage.
struct Buf {
    mem: Vec<u64>,
}

impl Buf {
    fn new(len: usize) -> Buf {
        Buf {
            mem: vec![0u64; len.div_ceil(8).max(1)],
        }
    }
    fn ptr(&mut self) -> *mut u8 {
        self.mem.as_mut_ptr().cast()
    }
}

/// A mapping `riomap` made: the MR and the offset the peer addresses it by; `index` is its
/// slot in the peer's iomap (None: a local, read-only mapping).
struct IomapMr {
    offset: u64,
    mr: *mut ibv_mr,
    index: Option<usize>,
}

/// Accepted connections waiting for `raccept`, and the accept thread's stop signal.
struct Listener {
    queue: Mutex<VecDeque<Arc<RSocket>>>,
    /// Semaphore eventfd: one count per queued connection (`rpoll` waits on it).
    ready: RawFd,
    /// Wakes the accept thread to stop.
    stop_fd: RawFd,
    stop: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// One socket's state (rdma-core's `struct rsocket`, stream part).
struct Rs {
    cm_id: *mut rdma_cm_id,
    index: RawFd,
    state: u32,
    fd_flags: i32,
    domain: i32,
    err: i32,
    retries: u32,
    so_opts: u64,
    tcp_opts: u64,
    ipv6_opts: u64,
    keepalive: bool,
    keepalive_time: u32,
    last_keepalive: Instant,

    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    sseq_no: u16,
    sseq_comp: u16,
    rseq_no: u16,
    rseq_comp: u16,

    remote_sge: u32,
    remote_sgl: RsSge,
    remote_iomap: RsSge,
    swap_sgl: bool,

    target_buf: Option<Buf>,
    target_mr: *mut ibv_mr,
    target_sge: usize,
    target_iomap_size: u32,

    rbuf: Option<Buf>,
    rmr: *mut ibv_mr,
    rbuf_bytes_avail: u32,
    rbuf_free_offset: u32,
    rbuf_offset: u32,

    sbuf: Option<Buf>,
    smr: *mut ibv_mr,
    sbuf_bytes_avail: u32,
    /// The next free byte of the send buffer (rdma-core's `ssgl[0].addr`).
    spos: u64,

    sbuf_size: u32,
    rbuf_size: u32,
    sq_size: u32,
    rq_size: u32,
    sq_inline: u32,
    sqe_avail: u32,

    rmsg: Vec<(u32, u32)>,
    rmsg_head: usize,
    rmsg_tail: usize,

    cq_armed: bool,
    unack_cqe: u32,

    remote_iomappings: Vec<Option<IomapMr>>,
    iomap_queue: VecDeque<usize>,
    local_iomaps: Vec<IomapMr>,

    /// A route given with `RDMA_ROUTE` (kept for `rgetsockopt`; softib resolves its own).
    route_opt: Option<Vec<u8>>,
}

// SAFETY: the raw pointers are objects of this library, used under the socket's lock.
unsafe impl Send for Rs {}

/// An rsocket.
pub struct RSocket {
    st: Mutex<Rs>,
    /// Held by the one thread sleeping on the socket's completion channel.
    wait: Mutex<()>,
    listener: OnceLock<Listener>,
}

fn sockets() -> MutexGuard<'static, HashMap<RawFd, Arc<RSocket>>> {
    static S: OnceLock<Mutex<HashMap<RawFd, Arc<RSocket>>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn lookup(fd: RawFd) -> Option<Arc<RSocket>> {
    sockets().get(&fd).cloned()
}

impl RSocket {
    fn lock(&self) -> MutexGuard<'_, Rs> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state, unless `rclose` freed the socket while this thread held on to it (a call
    /// racing the close of its own descriptor fails with EBADF, as a closed descriptor's).
    fn lock_live(&self) -> Option<MutexGuard<'_, Rs>> {
        let g = self.lock();
        (!g.cm_id.is_null()).then_some(g)
    }
}

fn set_nonblock(fd: RawFd, on: bool) {
    // SAFETY: fcntl on a descriptor this library owns.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            let nf = if on {
                fl | libc::O_NONBLOCK
            } else {
                fl & !libc::O_NONBLOCK
            };
            libc::fcntl(fd, libc::F_SETFL, nf);
        }
    }
}

fn poll_fds(fds: &mut [libc::pollfd], timeout_ms: i32) -> i32 {
    // SAFETY: a local array of pollfd.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }
}

impl Rs {
    fn new(inherit: Option<&Rs>) -> Rs {
        let d = defaults();
        let (sbuf_size, rbuf_size, sq_inline, sq_size, rq_size, iomap) = match inherit {
            Some(p) => (
                p.sbuf_size,
                p.rbuf_size,
                p.sq_inline,
                p.sq_size,
                p.rq_size,
                p.target_iomap_size,
            ),
            None => (d.wmem, d.mem, d.inline, d.sqsize, d.rqsize, d.iomap_size),
        };
        Rs {
            cm_id: std::ptr::null_mut(),
            index: -1,
            state: RS_INIT,
            fd_flags: 0,
            domain: libc::AF_INET,
            err: 0,
            retries: 0,
            so_opts: 0,
            tcp_opts: 0,
            ipv6_opts: 0,
            keepalive: false,
            keepalive_time: inherit.map_or(0, |p| p.keepalive_time),
            last_keepalive: Instant::now(),
            ctrl_seqno: 0,
            ctrl_max_seqno: RS_QP_CTRL_SIZE,
            sseq_no: 0,
            sseq_comp: 0,
            rseq_no: 0,
            rseq_comp: 0,
            remote_sge: 0,
            remote_sgl: RsSge::default(),
            remote_iomap: RsSge::default(),
            swap_sgl: false,
            target_buf: None,
            target_mr: std::ptr::null_mut(),
            target_sge: 0,
            target_iomap_size: iomap,
            rbuf: None,
            rmr: std::ptr::null_mut(),
            rbuf_bytes_avail: 0,
            rbuf_free_offset: 0,
            rbuf_offset: 0,
            sbuf: None,
            smr: std::ptr::null_mut(),
            sbuf_bytes_avail: 0,
            spos: 0,
            sbuf_size,
            rbuf_size,
            sq_size,
            rq_size,
            sq_inline,
            sqe_avail: 0,
            rmsg: Vec::new(),
            rmsg_head: 0,
            rmsg_tail: 0,
            cq_armed: false,
            unack_cqe: 0,
            remote_iomappings: Vec::new(),
            iomap_queue: VecDeque::new(),
            local_iomaps: Vec::new(),
            route_opt: None,
        }
    }

    fn id(&self) -> &rdma_cm_id {
        // SAFETY: the socket's id, live while the socket is.
        unsafe { &*self.cm_id }
    }

    fn id_mut(&mut self) -> &mut rdma_cm_id {
        // SAFETY: as id().
        unsafe { &mut *self.cm_id }
    }

    fn channel_fd(&self) -> RawFd {
        // SAFETY: a synchronous id always has its private channel.
        unsafe { (*self.id().channel).fd }
    }

    /// The engine of the socket's context, told when a thread sleeps for a completion (its
    /// progress thread then moves the packets).
    fn shared(&self) -> Option<Arc<crate::context::Shared>> {
        if self.cm_id.is_null() {
            return None;
        }
        crate::device::SoftContext::from_ctx(self.id().verbs).map(|sc| sc.shared.clone())
    }

    fn comp_fd(&self) -> Option<RawFd> {
        let ch = self.id().recv_cq_channel;
        // SAFETY: the channel this module made for the socket.
        (!ch.is_null()).then(|| unsafe { (*ch).fd })
    }

    // ---- the target SGL the peer writes into ------------------------------------------

    fn target_sgl(&self, i: usize) -> *mut RsSge {
        let b = self.target_buf.as_ref().expect("target SGL");
        // SAFETY: RS_SGL_SIZE entries at the start of the target buffer.
        unsafe { (b.mem.as_ptr() as *mut RsSge).add(i) }
    }

    fn tsgl(&self, i: usize) -> RsSge {
        // SAFETY: the peer writes the entry by RDMA; read it as volatile memory.
        unsafe { std::ptr::read_volatile(self.target_sgl(i)) }
    }

    fn set_tsgl(&self, i: usize, v: RsSge) {
        // SAFETY: as tsgl.
        unsafe { std::ptr::write_volatile(self.target_sgl(i), v) }
    }

    fn target_iomap(&self, i: usize) -> RsIomap {
        let b = self.target_buf.as_ref().expect("target buffer");
        // SAFETY: `target_iomap_size` entries after the SGL, written by the peer.
        unsafe {
            let p = (b.mem.as_ptr() as *const u8).add(RS_SGL_SIZE * 16) as *const RsIomap;
            std::ptr::read_volatile(p.add(i))
        }
    }

    fn rbuf_ptr(&mut self) -> *mut u8 {
        self.rbuf.as_mut().map_or(std::ptr::null_mut(), Buf::ptr)
    }

    fn sbuf_base(&self) -> u64 {
        self.sbuf.as_ref().map_or(0, |b| b.mem.as_ptr() as u64)
    }

    fn sbuf_left(&self) -> u32 {
        (self.sbuf_base() + u64::from(self.sbuf_size) - self.spos) as u32
    }

    // ---- posting -------------------------------------------------------------------------

    fn post_send(&mut self, wr: &mut ibv_send_wr) -> Result<(), i32> {
        let mut bad = std::ptr::null_mut();
        // SAFETY: the socket's QP; the WR and its SGEs live across the call.
        match unsafe { crate::qp::post_send(self.id().qp, wr, &mut bad) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    #[allow(clippy::too_many_arguments)] // the fields of one RDMA WRITE work request
    fn write_wr(
        &mut self,
        wr_id: u32,
        sgl: &mut [ibv_sge],
        opcode: ibv_wr_opcode,
        flags: u32,
        imm: u32,
        addr: u64,
        rkey: u32,
    ) -> Result<(), i32> {
        let mut wr: ibv_send_wr = util::zeroed();
        wr.wr_id = u64::from(wr_id);
        wr.sg_list = if sgl.is_empty() {
            std::ptr::null_mut()
        } else {
            sgl.as_mut_ptr()
        };
        wr.num_sge = sgl.len() as i32;
        wr.opcode = opcode;
        wr.send_flags = flags;
        wr.__bindgen_anon_1.imm_data = imm.to_be();
        wr.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: addr,
            rkey,
        };
        self.post_send(&mut wr)
    }

    /// `rs_post_msg`: a zero-length RDMA WRITE WITH IMMEDIATE carrying `msg`.
    fn post_msg(&mut self, msg: u32) -> Result<(), i32> {
        self.write_wr(msg, &mut [], IBV_WR_RDMA_WRITE_WITH_IMM, 0, msg, 0, 0)
    }

    fn post_recv(&mut self) -> Result<(), i32> {
        let mut wr = ibv_recv_wr {
            wr_id: RS_WR_ID_FLAG_RECV,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: the socket's QP.
        match unsafe { crate::qp::post_recv(self.id().qp, &mut wr, &mut bad) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Stages `data` for a write: inline when it fits, else copied into the send buffer
    /// ring (one or two SGEs). Returns the SGEs and the send flags.
    fn stage(&mut self, data: &[u8]) -> ([ibv_sge; 2], usize, u32) {
        let len = data.len() as u32;
        let mut sgl = [ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; 2];
        // SAFETY: the send MR.
        let lkey = unsafe { (*self.smr).lkey };
        if len <= self.sq_inline {
            sgl[0] = ibv_sge {
                addr: data.as_ptr() as u64,
                length: len,
                lkey: 0,
            };
            return (sgl, 1, IBV_SEND_INLINE);
        }
        let left = self.sbuf_left();
        // SAFETY: copies within the send buffer: `spos` .. end and its start, sized by
        // sbuf_bytes_avail (the caller bounded `data` by it).
        unsafe {
            if len <= left {
                std::ptr::copy_nonoverlapping(data.as_ptr(), self.spos as *mut u8, data.len());
                sgl[0] = ibv_sge {
                    addr: self.spos,
                    length: len,
                    lkey,
                };
                if len < left {
                    self.spos += u64::from(len);
                } else {
                    self.spos = self.sbuf_base();
                }
                (sgl, 1, 0)
            } else {
                let base = self.sbuf_base();
                std::ptr::copy_nonoverlapping(data.as_ptr(), self.spos as *mut u8, left as usize);
                std::ptr::copy_nonoverlapping(
                    data.as_ptr().add(left as usize),
                    base as *mut u8,
                    (len - left) as usize,
                );
                sgl[0] = ibv_sge {
                    addr: self.spos,
                    length: left,
                    lkey,
                };
                sgl[1] = ibv_sge {
                    addr: base,
                    length: len - left,
                    lkey,
                };
                self.spos = base + u64::from(len - left);
                (sgl, 2, 0)
            }
        }
    }

    /// `rs_write_data`: `data` into the peer's current target buffer.
    fn write_data(&mut self, data: &[u8]) -> Result<(), i32> {
        let len = data.len() as u32;
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        let t = self.target_sge;
        let mut sge = self.tsgl(t);
        let (addr, rkey) = (sge.addr, sge.key);
        sge.addr += u64::from(len);
        sge.length -= len;
        self.set_tsgl(t, sge);
        if sge.length == 0 {
            self.target_sge = (t + 1) % RS_SGL_SIZE;
        }
        let (mut sgl, n, flags) = self.stage(data);
        let msg = msg_set(RS_OP_DATA, len);
        self.write_wr(
            msg,
            &mut sgl[..n],
            IBV_WR_RDMA_WRITE_WITH_IMM,
            flags,
            msg,
            addr,
            rkey,
        )
    }

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    /// `rs_send_credits`: the next free half of the receive buffer (or only the message
    /// credits) to the peer.
    fn send_credits(&mut self) {
        self.ctrl_seqno += 1;
        self.rseq_comp = self.rseq_no.wrapping_add((self.rq_size >> 1) as u16);
        let msg = msg_set(
            RS_OP_SGL,
            u32::from(self.rseq_no.wrapping_add(self.rq_size as u16)),
        );
        if self.rbuf_bytes_avail >= self.rbuf_size >> 1 {
            let addr = self.rbuf_ptr() as u64 + u64::from(self.rbuf_free_offset);
            // SAFETY: the receive MR.
            let rkey = unsafe { (*self.rmr).rkey };
            let mut sge = RsSge {
                addr,
                key: rkey,
                length: self.rbuf_size >> 1,
            };
            if self.swap_sgl {
                sge = RsSge {
                    addr: sge.addr.swap_bytes(),
                    key: sge.key.swap_bytes(),
                    length: sge.length.swap_bytes(),
                };
            }
            let bytes: [u8; 16] = {
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&sge.addr.to_ne_bytes());
                b[8..12].copy_from_slice(&sge.key.to_ne_bytes());
                b[12..].copy_from_slice(&sge.length.to_ne_bytes());
                b
            };
            let (mut sgl, flags) = if self.sq_inline < RS_MAX_CTRL_MSG {
                // The control slots after the send buffer.
                let slot = self.sbuf_base()
                    + u64::from(self.sbuf_size)
                    + u64::from(RS_MAX_CTRL_MSG * (self.ctrl_seqno & (RS_QP_CTRL_SIZE - 1)));
                // SAFETY: a 16-byte control slot inside the send buffer allocation.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), slot as *mut u8, 16) };
                // SAFETY: the send MR.
                let lkey = unsafe { (*self.smr).lkey };
                (
                    [ibv_sge {
                        addr: slot,
                        length: 16,
                        lkey,
                    }],
                    0,
                )
            } else {
                (
                    [ibv_sge {
                        addr: bytes.as_ptr() as u64,
                        length: 16,
                        lkey: 0,
                    }],
                    IBV_SEND_INLINE,
                )
            };
            let raddr = self.remote_sgl.addr + u64::from(self.remote_sge) * 16;
            let rkey = self.remote_sgl.key;
            let _ = self.write_wr(
                msg,
                &mut sgl,
                IBV_WR_RDMA_WRITE_WITH_IMM,
                flags,
                msg,
                raddr,
                rkey,
            );
            self.rbuf_bytes_avail -= self.rbuf_size >> 1;
            self.rbuf_free_offset += self.rbuf_size >> 1;
            if self.rbuf_free_offset >= self.rbuf_size {
                self.rbuf_free_offset = 0;
            }
            self.remote_sge += 1;
            if self.remote_sge >= self.remote_sgl.length {
                self.remote_sge = 0;
            }
        } else {
            let _ = self.post_msg(msg);
        }
    }

    fn give_credits(&self) -> bool {
        (self.rbuf_bytes_avail >= (self.rbuf_size >> 1)
            || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0)
            && self.ctrl_avail()
            && self.state & RS_CONNECTED != 0
    }

    fn update_credits(&mut self) {
        if self.give_credits() {
            self.send_credits();
        }
        self.keepalive_tick();
    }

    /// Sends a keepalive (a zero-length RDMA WRITE) when the socket has one due: softib has
    /// no timer thread for it, so it goes out when the application calls into the socket.
    fn keepalive_tick(&mut self) {
        if self.keepalive
            && self.state & RS_CONNECTED != 0
            && self.ctrl_avail()
            && self.last_keepalive.elapsed() >= Duration::from_secs(u64::from(self.keepalive_time))
        {
            self.last_keepalive = Instant::now();
            self.ctrl_seqno += 1;
            let msg = msg_set(RS_OP_CTRL, RS_CTRL_KEEPALIVE);
            let _ = self.write_wr(msg, &mut [], IBV_WR_RDMA_WRITE, 0, 0, 0, 0);
        }
    }

    /// `rs_poll_cq`: applies the completions the CQ has; reposts the receives consumed.
    fn poll_cq(&mut self) -> Result<(), i32> {
        let mut wc: ibv_wc = util::zeroed();
        let mut rcnt = 0;
        loop {
            // SAFETY: the socket's CQ and a local completion.
            let n = unsafe { crate::cq::poll_cq(self.id().recv_cq, 1, &mut wc) };
            if n <= 0 {
                break;
            }
            if wc.wr_id & RS_WR_ID_FLAG_RECV != 0 {
                if wc.status != IBV_WC_SUCCESS {
                    continue;
                }
                rcnt += 1;
                if wc.wc_flags & IBV_WC_WITH_IMM == 0 {
                    continue;
                }
                // SAFETY: imm_data is the union member a WITH_IMM completion fills.
                let msg = u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data });
                match msg_op(msg) {
                    RS_OP_SGL => self.sseq_comp = msg_data(msg) as u16,
                    RS_OP_IOMAP_SGL | RS_OP_WRITE => {}
                    RS_OP_CTRL => {
                        if msg_data(msg) == RS_CTRL_DISCONNECT {
                            self.state = RS_DISCONNECTED;
                            return Ok(());
                        } else if msg_data(msg) == RS_CTRL_SHUTDOWN {
                            if self.state & RS_WRITABLE != 0 {
                                self.state &= !RS_READABLE;
                            } else {
                                self.state = RS_DISCONNECTED;
                                return Ok(());
                            }
                        }
                    }
                    op => {
                        // A write is never longer than the half buffer granted to it: a peer
                        // that says otherwise would have this side copy from outside it.
                        if msg_data(msg) > self.rbuf_size >> 1 {
                            self.state = RS_ERROR;
                            self.err = libc::EPROTO;
                            return Err(libc::EPROTO);
                        }
                        self.rmsg[self.rmsg_tail] = (op, msg_data(msg));
                        self.rmsg_tail += 1;
                        if self.rmsg_tail == self.rmsg.len() {
                            self.rmsg_tail = 0;
                        }
                    }
                }
            } else {
                let m = wc.wr_id as u32;
                match msg_op(m) {
                    RS_OP_SGL => self.ctrl_max_seqno += 1,
                    RS_OP_CTRL => {
                        self.ctrl_max_seqno += 1;
                        if msg_data(m) == RS_CTRL_DISCONNECT {
                            self.state = RS_DISCONNECTED;
                        }
                    }
                    RS_OP_IOMAP_SGL => {
                        self.sqe_avail += 1;
                        self.sbuf_bytes_avail += std::mem::size_of::<RsIomap>() as u32;
                    }
                    _ => {
                        self.sqe_avail += 1;
                        self.sbuf_bytes_avail += msg_data(m);
                    }
                }
                if wc.status != IBV_WC_SUCCESS && self.state & RS_CONNECTED != 0 {
                    self.state = RS_ERROR;
                    self.err = libc::EIO;
                }
            }
        }
        if self.state & RS_CONNECTED != 0 {
            for _ in 0..rcnt {
                if let Err(e) = self.post_recv() {
                    self.state = RS_ERROR;
                    self.err = e;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Takes the completion channel's event, if one is there (the channel never blocks).
    fn take_cq_event(&mut self) {
        if !self.cq_armed || self.cm_id.is_null() {
            return;
        }
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: the socket's completion channel (non-blocking).
        let r =
            unsafe { crate::cq::ibv_get_cq_event(self.id().recv_cq_channel, &mut cq, &mut ctx) };
        if r == 0 {
            self.unack_cqe += 1;
            if self.unack_cqe >= self.sq_size + self.rq_size {
                // SAFETY: the socket's CQ.
                unsafe { crate::cq::ibv_ack_cq_events(self.id().recv_cq, self.unack_cqe) };
                self.unack_cqe = 0;
            }
            self.cq_armed = false;
        }
    }

    fn arm(&mut self) {
        if !self.cq_armed {
            // SAFETY: the socket's CQ.
            unsafe { crate::cq::req_notify_cq(self.id().recv_cq, 0) };
            self.cq_armed = true;
        }
    }

    /// Reads a connection event of a connected socket, if one is queued: a DISCONNECTED
    /// ends the connection (the peer's DREQ, or the CM gave up on it).
    fn take_cm_event(&mut self) {
        let Some(sid) = soft_id(self.cm_id) else {
            return;
        };
        if complete(sid) != 0 {
            return;
        }
        let ev = self.id().event;
        // SAFETY: the event complete() left on the id.
        if !ev.is_null()
            && unsafe { (*ev).event } == RDMA_CM_EVENT_DISCONNECTED
            && self.state & RS_CONNECTED != 0
        {
            self.state = RS_DISCONNECTED;
        }
    }

    // ---- tests of rs_process_cq --------------------------------------------------------

    fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= RS_SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.tsgl(self.target_sge).length != 0
    }
    fn conn_can_send(&self) -> bool {
        self.can_send() || self.state & RS_WRITABLE == 0
    }
    fn conn_can_send_ctrl(&self) -> bool {
        self.ctrl_avail() || self.state & RS_CONNECTED == 0
    }
    fn have_rdata(&self) -> bool {
        self.rmsg_head != self.rmsg_tail
    }
    fn conn_have_rdata(&self) -> bool {
        self.have_rdata() || self.state & RS_READABLE == 0
    }
    fn conn_all_sends_done(&self) -> bool {
        (self.ctrl_max_seqno as i64 - self.ctrl_seqno as i64) + i64::from(self.sqe_avail)
            == i64::from(self.sq_size)
            || self.state & RS_CONNECTED == 0
    }

    fn nonblocking(&self, flags: i32) -> bool {
        self.fd_flags & libc::O_NONBLOCK != 0 || flags & libc::MSG_DONTWAIT != 0
    }

    // ---- connection setup --------------------------------------------------------------

    fn set_qp_size(&mut self) {
        let max = match crate::device::SoftContext::from_ctx(self.id().verbs) {
            Some(sc) => {
                (crate::device::device_attr(sc).max_qp_wr.max(0) as u32).min(RS_QP_MAX_SIZE)
            }
            None => RS_QP_MAX_SIZE,
        };
        self.sq_size = self.sq_size.clamp(RS_QP_MIN_SIZE, max.max(RS_QP_MIN_SIZE));
        self.rq_size = self.rq_size.clamp(RS_QP_MIN_SIZE, max.max(RS_QP_MIN_SIZE));
    }

    /// `rs_create_ep`: CQ with its channel, the RC QP, the buffers and their MRs, the
    /// receives posted.
    fn create_ep(&mut self) -> Result<(), i32> {
        self.set_qp_size();
        let verbs = self.id().verbs;
        // SAFETY: the id's context; objects recorded on the id as rdma-core does, so
        // rdma_destroy_qp destroys them with the QP.
        unsafe {
            let ch = crate::cq::ibv_create_comp_channel(verbs);
            if ch.is_null() {
                return Err(util::errno());
            }
            self.id_mut().recv_cq_channel = ch;
            let cq = crate::cq::ibv_create_cq(
                verbs,
                (self.sq_size + self.rq_size) as i32,
                self.cm_id.cast(),
                ch,
                0,
            );
            if cq.is_null() {
                return Err(util::errno());
            }
            set_nonblock((*ch).fd, true);
            self.id_mut().recv_cq = cq;
            self.id_mut().send_cq = cq;
            self.id_mut().send_cq_channel = ch;
            crate::cq::req_notify_cq(cq, 0);
            self.cq_armed = true;
        }
        let mut attr: ibv_qp_init_attr = util::zeroed();
        attr.send_cq = self.id().send_cq;
        attr.recv_cq = self.id().recv_cq;
        attr.qp_type = IBV_QPT_RC;
        attr.sq_sig_all = 1;
        attr.cap.max_send_wr = self.sq_size;
        attr.cap.max_recv_wr = self.rq_size;
        attr.cap.max_send_sge = 2;
        attr.cap.max_recv_sge = 1;
        attr.cap.max_inline_data = self.sq_inline;
        // SAFETY: the id and a local attribute structure.
        if unsafe { super::conn::rdma_create_qp(self.cm_id, std::ptr::null_mut(), &mut attr) } != 0
        {
            return Err(util::errno());
        }
        self.sq_inline = attr.cap.max_inline_data;
        self.init_bufs()?;
        for _ in 0..self.rq_size {
            self.post_recv()?;
        }
        Ok(())
    }

    fn reg(&mut self, p: *mut u8, len: usize, access: u32) -> Result<*mut ibv_mr, i32> {
        // SAFETY: the id's PD and a buffer the socket owns for the MR's life.
        let mr = unsafe { crate::mr::ibv_reg_mr(self.id().pd, p.cast(), len, access as i32) };
        if mr.is_null() {
            Err(util::errno())
        } else {
            Ok(mr)
        }
    }

    /// `rs_init_bufs`.
    fn init_bufs(&mut self) -> Result<(), i32> {
        self.rmsg = vec![(0, 0); self.rq_size as usize + 1];
        let mut total_sbuf = self.sbuf_size;
        if self.sq_inline < RS_MAX_CTRL_MSG {
            total_sbuf += RS_MAX_CTRL_MSG * RS_QP_CTRL_SIZE;
        }
        let mut sbuf = Buf::new(total_sbuf as usize);
        let p = sbuf.ptr();
        self.sbuf = Some(sbuf);
        self.smr = self.reg(p, total_sbuf as usize, IBV_ACCESS_LOCAL_WRITE)?;

        let len = 16 * RS_SGL_SIZE + 24 * self.target_iomap_size as usize;
        let mut tbuf = Buf::new(len);
        let p = tbuf.ptr();
        self.target_buf = Some(tbuf);
        self.target_mr = self.reg(p, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)?;

        let mut rbuf = Buf::new(self.rbuf_size as usize);
        let p = rbuf.ptr();
        self.rbuf = Some(rbuf);
        self.rmr = self.reg(
            p,
            self.rbuf_size as usize,
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
        )?;

        self.spos = self.sbuf_base();
        self.sbuf_bytes_avail = self.sbuf_size;
        self.rbuf_free_offset = self.rbuf_size >> 1;
        self.rbuf_bytes_avail = self.rbuf_size >> 1;
        self.sqe_avail = self.sq_size - self.ctrl_max_seqno;
        self.rseq_comp = (self.rq_size >> 1) as u16;
        Ok(())
    }

    /// `rs_format_conn_data`: the 40 bytes of `struct rs_conn_data`.
    fn conn_data(&mut self) -> [u8; CONN_DATA_LEN] {
        let mut c = [0u8; CONN_DATA_LEN];
        c[0] = 1;
        c[1] = RS_CONN_FLAG_IOMAP
            | if cfg!(target_endian = "big") {
                RS_CONN_FLAG_NET
            } else {
                0
            };
        c[2..4].copy_from_slice(&(self.rq_size as u16).to_be_bytes());
        c[7] = value_to_scale(self.target_iomap_size, 8) as u8;
        c[8..16].copy_from_slice(&(self.target_sgl(0) as u64).to_be_bytes());
        // SAFETY: the MRs init_bufs made.
        let (tkey, rkey) = unsafe { ((*self.target_mr).rkey, (*self.rmr).rkey) };
        c[16..20].copy_from_slice(&tkey.to_be_bytes());
        c[20..24].copy_from_slice(&(RS_SGL_SIZE as u32).to_be_bytes());
        c[24..32].copy_from_slice(&(self.rbuf_ptr() as u64).to_be_bytes());
        c[32..36].copy_from_slice(&rkey.to_be_bytes());
        c[36..40].copy_from_slice(&(self.rbuf_size >> 1).to_be_bytes());
        c
    }

    /// `rs_save_conn_data`: the peer's `rs_conn_data`.
    fn save_conn_data(&mut self, c: &[u8]) {
        let be64 = |o: usize| u64::from_be_bytes(c[o..o + 8].try_into().unwrap());
        let be32 = |o: usize| u32::from_be_bytes(c[o..o + 4].try_into().unwrap());
        self.remote_sgl = RsSge {
            addr: be64(8),
            key: be32(16),
            length: be32(20),
        };
        self.remote_sge = 1;
        let host_net = cfg!(target_endian = "big");
        self.swap_sgl = host_net != (c[1] & RS_CONN_FLAG_NET != 0);
        if c[1] & RS_CONN_FLAG_IOMAP != 0 {
            self.remote_iomap = RsSge {
                addr: self.remote_sgl.addr + 16 * u64::from(self.remote_sgl.length),
                length: scale_to_value(u32::from(c[7]), 8),
                key: self.remote_sgl.key,
            };
        }
        self.set_tsgl(
            0,
            RsSge {
                addr: be64(24),
                key: be32(32),
                length: be32(36),
            },
        );
        self.sseq_comp = u16::from_be_bytes([c[2], c[3]]);
    }

    /// The private data of the event the id holds.
    fn event_private(&self) -> Option<Vec<u8>> {
        let ev = self.id().event;
        if ev.is_null() {
            return None;
        }
        // SAFETY: the event complete()/get_request left on the id; its private data lives
        // in the event.
        unsafe {
            let p = (*ev.cast::<super::CmaEvent>()).conn();
            if p.private_data.is_null() || (p.private_data_len as usize) < CONN_DATA_LEN {
                return None;
            }
            Some(std::slice::from_raw_parts(p.private_data.cast::<u8>(), CONN_DATA_LEN).to_vec())
        }
    }

    /// Waits (unless the socket is non-blocking) for the synchronous id's next event; the
    /// event channel itself is always non-blocking.
    fn cm_complete(&mut self, blocking: bool) -> Result<(), i32> {
        loop {
            let Some(sid) = soft_id(self.cm_id) else {
                return Err(libc::EINVAL);
            };
            if complete(sid) == 0 {
                return Ok(());
            }
            let e = util::errno();
            if e != libc::EAGAIN || !blocking {
                return Err(e);
            }
            let mut p = [libc::pollfd {
                fd: self.channel_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            poll_fds(&mut p, -1);
        }
    }

    /// `rs_do_connect`: advances the connection as far as it can go without waiting (or
    /// waiting, for a blocking socket). Err(EINPROGRESS) while it is under way.
    fn do_connect(&mut self) -> Result<(), i32> {
        let blocking = self.fd_flags & libc::O_NONBLOCK == 0;
        let r = self.connect_step(blocking);
        match r {
            Err(e) if e == libc::EAGAIN || e == libc::EWOULDBLOCK => Err(libc::EINPROGRESS),
            Err(e) => {
                if self.state & RS_OPENING != 0 {
                    self.state = RS_CONNECT_ERROR;
                    self.err = e;
                }
                Err(e)
            }
            Ok(()) => Ok(()),
        }
    }

    fn connect_step(&mut self, blocking: bool) -> Result<(), i32> {
        loop {
            match self.state {
                RS_INIT | RS_BOUND => {
                    let to = 1000 << self.retries.min(10);
                    self.retries += 1;
                    let dst = &mut self.id_mut().route.addr.__bindgen_anon_2;
                    let dst: *mut libc::sockaddr = (dst as *mut rdma_addr__bindgen_ty_2).cast();
                    self.state = RS_RESOLVING_ADDR;
                    // SAFETY: the id and its destination address field.
                    if unsafe {
                        super::addr::rdma_resolve_addr(
                            self.cm_id,
                            std::ptr::null_mut(),
                            dst.cast(),
                            to,
                        )
                    } != 0
                    {
                        let e = util::errno();
                        if e != libc::EAGAIN {
                            return Err(e);
                        }
                        self.cm_complete(blocking)?;
                    }
                    self.retries = 0;
                    self.state = RS_RESOLVING_ROUTE;
                    // SAFETY: the id.
                    if unsafe { super::addr::rdma_resolve_route(self.cm_id, 1000) } != 0 {
                        let e = util::errno();
                        if e != libc::EAGAIN {
                            return Err(e);
                        }
                        self.cm_complete(blocking)?;
                    }
                    self.start_connect()?;
                }
                RS_RESOLVING_ADDR | RS_RESOLVING_ROUTE => {
                    if let Err(e) = self.cm_complete(blocking) {
                        if e == libc::ETIMEDOUT && self.retries <= RS_CONN_RETRIES {
                            self.state = RS_INIT;
                            continue;
                        }
                        return Err(e);
                    }
                    if self.state == RS_RESOLVING_ADDR {
                        self.state = RS_RESOLVING_ROUTE;
                        // SAFETY: the id.
                        if unsafe { super::addr::rdma_resolve_route(self.cm_id, 1000) } != 0 {
                            let e = util::errno();
                            if e != libc::EAGAIN {
                                return Err(e);
                            }
                            continue;
                        }
                    }
                    self.start_connect()?;
                }
                RS_CONNECTING => {
                    self.cm_complete(blocking)?;
                    return self.finish_connect();
                }
                RS_CONNECT_ERROR | RS_DISCONNECTED | RS_ERROR => return Err(libc::ENOTCONN),
                s => {
                    return if s & RS_CONNECTED != 0 {
                        Ok(())
                    } else {
                        Err(libc::EINVAL)
                    }
                }
            }
        }
    }

    /// The QP and buffers, then the REQ with this side's `rs_conn_data`.
    fn start_connect(&mut self) -> Result<(), i32> {
        self.create_ep()?;
        let data = self.conn_data();
        let mut param: rdma_conn_param = util::zeroed();
        param.private_data = data.as_ptr().cast();
        param.private_data_len = CONN_DATA_LEN as u8;
        param.flow_control = 1;
        param.retry_count = 7;
        param.rnr_retry_count = 7;
        param.responder_resources = 1;
        param.initiator_depth = 1;
        self.retries = 0;
        self.state = RS_CONNECTING;
        // SAFETY: the id and a local parameter block.
        if unsafe { super::conn::rdma_connect(self.cm_id, &mut param) } != 0 {
            let e = util::errno();
            if e != libc::EAGAIN {
                return Err(e);
            }
            return Ok(());
        }
        // The reply was there already: rdma_connect consumed it.
        self.finish_connect()
    }

    /// The peer's `rs_conn_data`, from the REP the id's event holds.
    fn finish_connect(&mut self) -> Result<(), i32> {
        let Some(c) = self.event_private() else {
            return Err(libc::ENOTSUP);
        };
        if c[0] != 1 {
            return Err(libc::ENOTSUP);
        }
        self.save_conn_data(&c);
        self.state = RS_CONNECT_RDWR;
        Ok(())
    }

    /// Releases what the socket holds, its id last (which closes the connection).
    fn free(&mut self) {
        // SAFETY: objects this socket made; the QP goes before its MRs' buffers.
        unsafe {
            for m in self.remote_iomappings.drain(..).flatten() {
                crate::mr::ibv_dereg_mr(m.mr);
            }
            for m in self.local_iomaps.drain(..) {
                crate::mr::ibv_dereg_mr(m.mr);
            }
            if !self.cm_id.is_null() && !self.id().qp.is_null() {
                if self.unack_cqe > 0 {
                    crate::cq::ibv_ack_cq_events(self.id().recv_cq, self.unack_cqe);
                }
                super::conn::rdma_destroy_qp(self.cm_id);
            }
            for mr in [self.smr, self.rmr, self.target_mr] {
                if !mr.is_null() {
                    crate::mr::ibv_dereg_mr(mr);
                }
            }
            self.smr = std::ptr::null_mut();
            self.rmr = std::ptr::null_mut();
            self.target_mr = std::ptr::null_mut();
            if !self.cm_id.is_null() {
                super::rdma_destroy_id(self.cm_id);
                self.cm_id = std::ptr::null_mut();
            }
        }
    }

    fn qp_to_err(&mut self) {
        if self.cm_id.is_null() || self.id().qp.is_null() {
            return;
        }
        let mut a: ibv_qp_attr = util::zeroed();
        a.qp_state = IBV_QPS_ERR;
        // SAFETY: the socket's QP.
        unsafe { crate::qp::ibv_modify_qp(self.id().qp, &mut a, IBV_QP_STATE as i32) };
    }
}

/// `rs_process_cq` / `rs_get_comp`: processes completions until `test` holds; a blocking
/// call sleeps on the completion channel (and the event channel, for a disconnect) between
/// looks. Returns the guard again, and Err(errno) when the wait ends without `test`.
fn get_comp<'a>(
    s: &'a RSocket,
    mut g: MutexGuard<'a, Rs>,
    nonblock: bool,
    test: fn(&Rs) -> bool,
) -> (MutexGuard<'a, Rs>, Result<(), i32>) {
    let start = Instant::now();
    loop {
        if g.cm_id.is_null() {
            // Closed by another thread meanwhile.
            return (g, Err(libc::EBADF));
        }
        g.update_credits();
        let r = g.poll_cq();
        if test(&g) {
            g.update_credits();
            return (g, Ok(()));
        }
        if let Err(e) = r {
            return (g, Err(e));
        }
        if nonblock {
            g.update_credits();
            return (g, Err(libc::EWOULDBLOCK));
        }
        if start.elapsed() <= defaults().polling_time {
            continue;
        }
        if !g.cq_armed {
            g.arm();
            continue;
        }
        g.update_credits();
        let (Some(cfd), mfd) = (g.comp_fd(), g.channel_fd()) else {
            return (g, Err(libc::ENOTCONN));
        };
        let shared = g.shared();
        drop(g);
        let w = s.wait.lock().unwrap_or_else(|e| e.into_inner());
        g = s.lock();
        if !g.cq_armed || g.cm_id.is_null() {
            // Another waiter took the event (or the socket was closed): look again.
            drop(w);
            continue;
        }
        drop(g);
        let mut p = [
            libc::pollfd {
                fd: cfd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: mfd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let n = sleep(&mut p, defaults().wake_up_interval_ms, shared.as_slice());
        g = s.lock();
        drop(w);
        if n < 0 {
            let e = util::errno();
            if e == libc::EINTR {
                return (g, Err(e));
            }
        }
        if p[0].revents != 0 {
            g.take_cq_event();
        }
        if p[1].revents != 0 {
            g.take_cm_event();
        }
    }
}

/// Waits (unless non-blocking) until the socket may send: a send queue entry, send buffer,
/// a message credit and a granted target region. ECONNRESET once the socket cannot write.
fn wait_can_send<'a>(
    s: &'a RSocket,
    g: MutexGuard<'a, Rs>,
    flags: i32,
) -> (MutexGuard<'a, Rs>, Result<(), i32>) {
    if g.can_send() {
        return (g, Ok(()));
    }
    let nb = g.nonblocking(flags);
    let (g, r) = get_comp(s, g, nb, Rs::conn_can_send);
    match r {
        Err(e) => (g, Err(e)),
        Ok(()) if g.state & RS_WRITABLE == 0 => (g, Err(libc::ECONNRESET)),
        Ok(()) => (g, Ok(())),
    }
}

/// The size of the next write of a transfer with `left` bytes to go: 2 KiB first, doubling
/// up to 64 KiB (rdma-core's overlap: the first bytes leave early), then bounded by what
/// the caller can take.
fn next_transfer(olen: &mut u32, left: usize) -> u32 {
    if (*olen as usize) < left {
        let x = *olen;
        if *olen < RS_MAX_TRANSFER {
            *olen <<= 1;
        }
        x
    } else {
        left as u32
    }
}

/// Sleeps in `poll` as a completion waiter of the engines in `shared`.
fn sleep(fds: &mut [libc::pollfd], timeout_ms: i32, shared: &[Arc<crate::context::Shared>]) -> i32 {
    for s in shared {
        s.begin_cq_wait();
    }
    let n = poll_fds(fds, timeout_ms);
    for s in shared {
        s.end_cq_wait();
    }
    n
}

fn ret_err(e: i32) -> isize {
    util::set_errno(e);
    -1
}

// ---- the API ------------------------------------------------------------------------------

#[export_name = "softib_rdmacm_rsocket"]
pub unsafe extern "C" fn rsocket(domain: i32, ty: i32, protocol: i32) -> i32 {
    let st = ty & !(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK);
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return minus_one(if domain == libc::AF_IB {
            libc::EAFNOSUPPORT
        } else {
            libc::ENOTSUP
        });
    }
    if st != libc::SOCK_STREAM || (protocol != 0 && protocol != libc::IPPROTO_TCP) {
        return minus_one(libc::ENOTSUP);
    }
    let mut rs = Rs::new(None);
    rs.domain = domain;
    if ty & libc::SOCK_NONBLOCK != 0 {
        rs.fd_flags |= libc::O_NONBLOCK;
    }
    let mut id = std::ptr::null_mut();
    // SAFETY: a local out-pointer; a synchronous id with its own channel.
    if unsafe {
        super::rdma_create_id(
            std::ptr::null_mut(),
            &mut id,
            std::ptr::null_mut(),
            RDMA_PS_TCP,
        )
    } != 0
    {
        return -1;
    }
    rs.cm_id = id;
    let fd = rs.channel_fd();
    set_nonblock(fd, true);
    rs.index = fd;
    insert(rs)
}

fn insert(rs: Rs) -> i32 {
    let fd = rs.index;
    let s = Arc::new(RSocket {
        st: Mutex::new(rs),
        wait: Mutex::new(()),
        listener: OnceLock::new(),
    });
    sockets().insert(fd, s);
    fd
}

#[export_name = "softib_rdmacm_rbind"]
pub unsafe extern "C" fn rbind(
    socket: i32,
    a: *const libc::sockaddr,
    _len: libc::socklen_t,
) -> i32 {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF);
    };
    let Some(mut g) = s.lock_live() else {
        return minus_one(libc::EBADF);
    };
    if g.state != RS_INIT {
        return minus_one(libc::EINVAL);
    }
    // SAFETY: the caller's address (checked by rdma_bind_addr).
    if unsafe { super::addr::rdma_bind_addr(g.cm_id, a.cast_mut()) } != 0 {
        return -1;
    }
    g.state = RS_BOUND;
    0
}

#[export_name = "softib_rdmacm_rlisten"]
pub unsafe extern "C" fn rlisten(socket: i32, backlog: i32) -> i32 {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF);
    };
    let Some(mut g) = s.lock_live() else {
        return minus_one(libc::EBADF);
    };
    if g.state == RS_LISTENING {
        return 0;
    }
    if g.state & !RS_BOUND != 0 {
        return minus_one(libc::EINVAL);
    }
    // SAFETY: the socket's id.
    if unsafe { super::conn::rdma_listen(g.cm_id, backlog) } != 0 {
        return -1;
    }
    let (ready, stop_fd) = match (util::semaphore_eventfd(), util::wake_eventfd()) {
        (Ok(a), Ok(b)) => (a, b),
        _ => return minus_one(libc::EMFILE),
    };
    set_nonblock(ready, g.fd_flags & libc::O_NONBLOCK != 0);
    let l = Listener {
        queue: Mutex::new(VecDeque::new()),
        ready,
        stop_fd,
        stop: AtomicBool::new(false),
        thread: Mutex::new(None),
    };
    if s.listener.set(l).is_err() {
        return minus_one(libc::EINVAL);
    }
    g.state = RS_LISTENING;
    let chan = g.channel_fd();
    drop(g);
    let s2 = s.clone();
    let t = std::thread::Builder::new()
        .name("softib-raccept".into())
        .spawn(move || accept_loop(&s2, chan));
    match t {
        Ok(h) => {
            *s.listener
                .get()
                .unwrap()
                .thread
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(h);
            0
        }
        Err(_) => minus_one(libc::EAGAIN),
    }
}

/// The accept thread of a listening socket (rdma-core's listen service): accepts each
/// request with a new socket and queues it for `raccept`.
fn accept_loop(s: &Arc<RSocket>, chan: RawFd) {
    let Some(l) = s.listener.get() else {
        return;
    };
    loop {
        let mut p = [
            libc::pollfd {
                fd: chan,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: l.stop_fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        poll_fds(&mut p, -1);
        if l.stop.load(Ordering::Acquire) {
            return;
        }
        if p[0].revents == 0 {
            continue;
        }
        let g = s.lock();
        let mut id = std::ptr::null_mut();
        // SAFETY: the listener's id (its channel non-blocking).
        let r = unsafe { super::ep::rdma_get_request(g.cm_id, &mut id) };
        let parent = Rs::new(Some(&g));
        drop(g);
        if r != 0 {
            continue;
        }
        if let Some(child) = accept_one(parent, id) {
            l.queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(child);
            util::signal(l.ready);
        }
    }
}

/// `rs_accept`: the new socket's QP and buffers, then the REP with its `rs_conn_data`.
fn accept_one(mut rs: Rs, id: *mut rdma_cm_id) -> Option<Arc<RSocket>> {
    rs.cm_id = id;
    // A new connection starts blocking, whatever the listener's flags (rdma-core 44, and
    // accept(2)).
    rs.fd_flags = 0;
    rs.index = rs.channel_fd();
    let ok = (|| -> Result<(), i32> {
        let c = rs.event_private().ok_or(libc::EINVAL)?;
        if c[0] != 1 {
            return Err(libc::EINVAL);
        }
        rs.create_ep()?;
        rs.save_conn_data(&c);
        // SAFETY: the request event the id holds.
        let mut param = unsafe { (*rs.id().event.cast::<super::CmaEvent>()).conn() };
        let data = rs.conn_data();
        param.private_data = data.as_ptr().cast();
        param.private_data_len = CONN_DATA_LEN as u8;
        // The request's channel blocks here: the accept waits for the RTU.
        // SAFETY: the id and a local parameter block.
        if unsafe { super::conn::rdma_accept(id, &mut param) } != 0 {
            return Err(util::errno());
        }
        Ok(())
    })();
    if ok.is_err() {
        // SAFETY: the request's id.
        unsafe { super::conn::rdma_reject(id, std::ptr::null(), 0) };
        rs.free();
        return None;
    }
    rs.state = RS_CONNECT_RDWR;
    set_nonblock(rs.index, true);
    let fd = insert(rs);
    lookup(fd)
}

#[export_name = "softib_rdmacm_raccept"]
pub unsafe extern "C" fn raccept(
    socket: i32,
    a: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> i32 {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF);
    };
    let Some(l) = s.listener.get() else {
        return minus_one(libc::EBADF);
    };
    if util::wait_one(l.ready) != 0 {
        return -1;
    }
    let Some(c) = l
        .queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop_front()
    else {
        return minus_one(libc::EAGAIN);
    };
    let fd = c.lock().index;
    if !a.is_null() && !len.is_null() {
        // SAFETY: the caller's buffers.
        unsafe { rgetpeername(fd, a, len) };
    }
    fd
}

#[export_name = "softib_rdmacm_rconnect"]
pub unsafe extern "C" fn rconnect(
    socket: i32,
    a: *const libc::sockaddr,
    _len: libc::socklen_t,
) -> i32 {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF);
    };
    let Some(mut g) = s.lock_live() else {
        return minus_one(libc::EBADF);
    };
    // SAFETY: the caller's address.
    let Some(dst) = (unsafe { addr::from_sockaddr(a) }) else {
        return minus_one(libc::EINVAL);
    };
    if g.state == RS_INIT || g.state == RS_BOUND {
        // SAFETY: room for a sockaddr_storage in the id's destination field.
        unsafe {
            let p = &mut g.id_mut().route.addr.__bindgen_anon_2 as *mut rdma_addr__bindgen_ty_2;
            addr::to_sockaddr(p.cast(), dst);
        }
    }
    match g.do_connect() {
        Ok(()) => 0,
        Err(e) => minus_one(e),
    }
}

/// Finishes a connection still opening (non-blocking rconnect) before data calls.
fn connected<'a>(g: &mut MutexGuard<'a, Rs>) -> Result<(), i32> {
    if g.state & RS_OPENING != 0 {
        match g.do_connect() {
            Err(libc::EINPROGRESS) => return Err(libc::EAGAIN),
            Err(e) => return Err(e),
            Ok(()) => {}
        }
    }
    Ok(())
}

/// `rsend`: stream bytes to the peer, in writes of up to 64 KiB as credits allow.
#[export_name = "softib_rdmacm_rsend"]
pub unsafe extern "C" fn rsend(
    socket: i32,
    buf: *const libc::c_void,
    len: usize,
    flags: i32,
) -> isize {
    if len > 0 && buf.is_null() {
        return ret_err(libc::EFAULT);
    }
    // SAFETY: the caller's buffer of `len` bytes.
    let data = unsafe { slice(buf.cast(), len) };
    send_bytes(socket, &[data], flags)
}

unsafe fn slice<'a>(p: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: per the caller.
        unsafe { std::slice::from_raw_parts(p, len) }
    }
}

/// Sends the concatenation of `parts` (rsend, rsendv).
fn send_bytes(socket: i32, parts: &[&[u8]], flags: i32) -> isize {
    let Some(s) = lookup(socket) else {
        return ret_err(libc::EBADF);
    };
    let Some(mut g) = s.lock_live() else {
        return ret_err(libc::EBADF);
    };
    if let Err(e) = connected(&mut g) {
        return ret_err(e);
    }
    if g.state & RS_CONNECTED == 0 && g.state & RS_OPENING == 0 {
        return ret_err(libc::ENOTCONN);
    }
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut ret = Ok(());
    if !g.iomap_queue.is_empty() {
        let (g2, r) = send_iomaps(&s, g, flags);
        g = g2;
        if let Err(e) = r {
            return ret_err(e);
        }
    }
    let mut left = total;
    let mut olen = RS_OLAP_START_SIZE;
    let (mut pi, mut po) = (0usize, 0usize);
    let mut tmp = Vec::new();
    while left > 0 {
        let (g2, r) = wait_can_send(&s, g, flags);
        g = g2;
        if let Err(e) = r {
            ret = Err(e);
            break;
        }
        let mut xfer = next_transfer(&mut olen, left);
        xfer = xfer
            .min(g.sbuf_bytes_avail)
            .min(g.tsgl(g.target_sge).length);
        // The next `xfer` bytes of the parts, contiguous.
        let chunk: &[u8] = if parts[pi].len() - po >= xfer as usize {
            let c = &parts[pi][po..po + xfer as usize];
            po += xfer as usize;
            c
        } else {
            tmp.clear();
            while tmp.len() < xfer as usize {
                let take = (xfer as usize - tmp.len()).min(parts[pi].len() - po);
                tmp.extend_from_slice(&parts[pi][po..po + take]);
                po += take;
                if po == parts[pi].len() && tmp.len() < xfer as usize {
                    pi += 1;
                    po = 0;
                }
            }
            &tmp
        };
        if po == parts[pi].len() && pi + 1 < parts.len() {
            pi += 1;
            po = 0;
            while pi + 1 < parts.len() && parts[pi].is_empty() {
                pi += 1;
            }
        }
        if let Err(e) = g.write_data(chunk) {
            ret = Err(e);
            break;
        }
        left -= xfer as usize;
    }
    match ret {
        Err(e) if left == total => ret_err(e),
        _ => (total - left) as isize,
    }
}

/// `rs_send_iomaps`: publishes queued `riomap` mappings in the peer's iomap slots.
fn send_iomaps<'a>(
    s: &'a RSocket,
    mut g: MutexGuard<'a, Rs>,
    flags: i32,
) -> (MutexGuard<'a, Rs>, Result<(), i32>) {
    while let Some(&slot) = g.iomap_queue.front() {
        let (g2, r) = wait_can_send(s, g, flags);
        g = g2;
        if let Err(e) = r {
            return (g, Err(e));
        }
        let Some(m) = g.remote_iomappings[slot].as_ref() else {
            g.iomap_queue.pop_front();
            continue;
        };
        // SAFETY: the mapping's MR.
        let (maddr, mlen, mkey) =
            unsafe { ((*m.mr).addr as u64, (*m.mr).length as u32, (*m.mr).rkey) };
        let mut iom = RsIomap {
            offset: m.offset,
            sge: RsSge {
                addr: maddr,
                key: mkey,
                length: mlen,
            },
        };
        if g.swap_sgl {
            iom = RsIomap {
                offset: iom.offset.swap_bytes(),
                sge: RsSge {
                    addr: iom.sge.addr.swap_bytes(),
                    key: iom.sge.key.swap_bytes(),
                    length: iom.sge.length.swap_bytes(),
                },
            };
        }
        let mut bytes = [0u8; 24];
        bytes[..8].copy_from_slice(&iom.offset.to_ne_bytes());
        bytes[8..16].copy_from_slice(&iom.sge.addr.to_ne_bytes());
        bytes[16..20].copy_from_slice(&iom.sge.key.to_ne_bytes());
        bytes[20..].copy_from_slice(&iom.sge.length.to_ne_bytes());
        g.sseq_no = g.sseq_no.wrapping_add(1);
        g.sqe_avail -= 1;
        g.sbuf_bytes_avail -= 24;
        let raddr = g.remote_iomap.addr + slot as u64 * 24;
        let rkey = g.remote_iomap.key;
        let (mut sgl, n, fl) = g.stage(&bytes);
        let msg = msg_set(RS_OP_IOMAP_SGL, slot as u32);
        let r = g.write_wr(
            msg,
            &mut sgl[..n],
            IBV_WR_RDMA_WRITE_WITH_IMM,
            fl,
            msg,
            raddr,
            rkey,
        );
        g.iomap_queue.pop_front();
        if let Err(e) = r {
            return (g, Err(e));
        }
    }
    (g, Ok(()))
}

#[export_name = "softib_rdmacm_rsendto"]
pub unsafe extern "C" fn rsendto(
    socket: i32,
    buf: *const libc::c_void,
    len: usize,
    flags: i32,
    dest: *const libc::sockaddr,
    dlen: libc::socklen_t,
) -> isize {
    if !dest.is_null() || dlen != 0 {
        return ret_err(libc::EISCONN);
    }
    // SAFETY: as rsend.
    unsafe { rsend(socket, buf, len, flags) }
}

unsafe fn iov_parts<'a>(iov: *const libc::iovec, n: i32) -> Result<Vec<&'a [u8]>, i32> {
    if n < 0 || (n > 0 && iov.is_null()) {
        return Err(libc::EINVAL);
    }
    let mut v = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: the caller's `n` iovecs.
        let e = unsafe { &*iov.add(i) };
        if e.iov_len > 0 && e.iov_base.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: the caller's buffer.
        v.push(unsafe { slice(e.iov_base.cast(), e.iov_len) });
    }
    Ok(v)
}

#[export_name = "softib_rdmacm_rsendmsg"]
pub unsafe extern "C" fn rsendmsg(socket: i32, msg: *const libc::msghdr, flags: i32) -> isize {
    if msg.is_null() {
        return ret_err(libc::EINVAL);
    }
    // SAFETY: the caller's msghdr.
    let m = unsafe { &*msg };
    if !m.msg_control.is_null() && m.msg_controllen > 0 {
        return ret_err(libc::ENOTSUP);
    }
    // SAFETY: its iovecs.
    match unsafe { iov_parts(m.msg_iov, m.msg_iovlen as i32) } {
        Ok(p) => send_bytes(socket, &p, flags),
        Err(e) => ret_err(e),
    }
}

#[export_name = "softib_rdmacm_rwrite"]
pub unsafe extern "C" fn rwrite(socket: i32, buf: *const libc::c_void, count: usize) -> isize {
    // SAFETY: as rsend.
    unsafe { rsend(socket, buf, count, 0) }
}

#[export_name = "softib_rdmacm_rwritev"]
pub unsafe extern "C" fn rwritev(socket: i32, iov: *const libc::iovec, n: i32) -> isize {
    // SAFETY: the caller's iovecs.
    match unsafe { iov_parts(iov, n) } {
        Ok(p) => send_bytes(socket, &p, 0),
        Err(e) => ret_err(e),
    }
}

/// `rrecv`: bytes the peer wrote, in order; after the peer's shutdown, 0 once none remain.
#[export_name = "softib_rdmacm_rrecv"]
pub unsafe extern "C" fn rrecv(
    socket: i32,
    buf: *mut libc::c_void,
    len: usize,
    flags: i32,
) -> isize {
    if len > 0 && buf.is_null() {
        return ret_err(libc::EFAULT);
    }
    let Some(s) = lookup(socket) else {
        return ret_err(libc::EBADF);
    };
    let Some(mut g) = s.lock_live() else {
        return ret_err(libc::EBADF);
    };
    if let Err(e) = connected(&mut g) {
        return ret_err(e);
    }
    if g.state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR) == 0 {
        return ret_err(libc::ENOTCONN);
    }
    let out = buf.cast::<u8>();
    let mut left = len;
    let mut ret = Ok(());
    loop {
        if !g.have_rdata() {
            let nb = g.nonblocking(flags);
            let (g2, r) = get_comp(&s, g, nb, Rs::conn_have_rdata);
            g = g2;
            if let Err(e) = r {
                ret = Err(e);
                break;
            }
        }
        let peek = flags & libc::MSG_PEEK != 0;
        let (mut head, mut off) = (g.rmsg_head, g.rbuf_offset);
        let rb = g.rbuf_ptr();
        let rsize_total = g.rbuf_size;
        while left > 0 && head != g.rmsg_tail {
            let mut rsize = g.rmsg[head].1 as usize;
            let whole = left >= rsize;
            if !whole {
                rsize = left;
                if !peek {
                    g.rmsg[head].1 -= left as u32;
                }
            } else {
                if !peek {
                    g.rseq_no = g.rseq_no.wrapping_add(1);
                }
                head += 1;
                if head == g.rmsg.len() {
                    head = 0;
                }
            }
            let done = len - left;
            let end = (rsize_total - off) as usize;
            // SAFETY: copies within the receive buffer to the caller's `len` bytes.
            unsafe {
                if rsize > end {
                    std::ptr::copy_nonoverlapping(rb.add(off as usize), out.add(done), end);
                    std::ptr::copy_nonoverlapping(rb, out.add(done + end), rsize - end);
                    off = (rsize - end) as u32;
                } else {
                    std::ptr::copy_nonoverlapping(rb.add(off as usize), out.add(done), rsize);
                    off += rsize as u32;
                }
            }
            left -= rsize;
            if !peek {
                g.rbuf_bytes_avail += rsize as u32;
            }
        }
        if !peek {
            g.rmsg_head = head;
            g.rbuf_offset = off;
        }
        if peek || left == 0 || flags & libc::MSG_WAITALL == 0 || g.state & RS_READABLE == 0 {
            break;
        }
    }
    g.update_credits();
    match ret {
        Err(e) if left == len => ret_err(e),
        _ => (len - left) as isize,
    }
}

#[export_name = "softib_rdmacm_rrecvfrom"]
pub unsafe extern "C" fn rrecvfrom(
    socket: i32,
    buf: *mut libc::c_void,
    len: usize,
    flags: i32,
    src: *mut libc::sockaddr,
    slen: *mut libc::socklen_t,
) -> isize {
    // SAFETY: as rrecv.
    let r = unsafe { rrecv(socket, buf, len, flags) };
    if r > 0 && !src.is_null() && !slen.is_null() {
        // SAFETY: the caller's buffers.
        unsafe { rgetpeername(socket, src, slen) };
    }
    r
}

/// Receives into each iovec in turn: blocking (unless asked not to) for the first, then
/// what is already there.
unsafe fn recv_iov(socket: i32, iov: *const libc::iovec, n: i32, flags: i32) -> isize {
    if n < 0 || (n > 0 && iov.is_null()) {
        return ret_err(libc::EINVAL);
    }
    let mut total = 0isize;
    for i in 0..n as usize {
        // SAFETY: the caller's iovecs.
        let e = unsafe { &*iov.add(i) };
        if e.iov_len == 0 {
            continue;
        }
        let fl = if total > 0 {
            (flags & !libc::MSG_WAITALL) | libc::MSG_DONTWAIT
        } else {
            flags
        };
        // SAFETY: the caller's buffer.
        let r = unsafe { rrecv(socket, e.iov_base, e.iov_len, fl) };
        if r < 0 {
            return if total > 0 { total } else { r };
        }
        total += r;
        if (r as usize) < e.iov_len {
            break;
        }
    }
    total
}

#[export_name = "softib_rdmacm_rrecvmsg"]
pub unsafe extern "C" fn rrecvmsg(socket: i32, msg: *mut libc::msghdr, flags: i32) -> isize {
    if msg.is_null() {
        return ret_err(libc::EINVAL);
    }
    // SAFETY: the caller's msghdr.
    let m = unsafe { &mut *msg };
    if !m.msg_control.is_null() && m.msg_controllen > 0 {
        return ret_err(libc::ENOTSUP);
    }
    m.msg_flags = 0;
    // SAFETY: its iovecs.
    unsafe { recv_iov(socket, m.msg_iov, m.msg_iovlen as i32, flags) }
}

#[export_name = "softib_rdmacm_rread"]
pub unsafe extern "C" fn rread(socket: i32, buf: *mut libc::c_void, count: usize) -> isize {
    // SAFETY: as rrecv.
    unsafe { rrecv(socket, buf, count, 0) }
}

#[export_name = "softib_rdmacm_rreadv"]
pub unsafe extern "C" fn rreadv(socket: i32, iov: *const libc::iovec, n: i32) -> isize {
    // SAFETY: the caller's iovecs.
    unsafe { recv_iov(socket, iov, n, 0) }
}

// ---- rpoll / rselect --------------------------------------------------------------------

/// `rs_poll_rs`: the socket's events now (processing its completions and connection
/// progress), and the descriptors to sleep on when there are none.
fn poll_rs(
    s: &RSocket,
    events: i16,
    wait: &mut Vec<(RawFd, Wake)>,
    engines: &mut Vec<Arc<crate::context::Shared>>,
) -> i16 {
    if let Some(l) = s.listener.get() {
        wait.push((l.ready, Wake::Look));
        let queued = !l.queue.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
        return if queued { events & libc::POLLIN } else { 0 };
    }
    let Some(mut g) = s.lock_live() else {
        return libc::POLLNVAL;
    };
    if g.state & RS_OPENING != 0 {
        if let Err(libc::EINPROGRESS) = g.do_connect() {
            wait.push((g.channel_fd(), Wake::Look));
            return 0;
        }
    }
    if g.state & RS_CONNECTED != 0 || g.state == RS_DISCONNECTED || g.state & RS_ERROR != 0 {
        g.update_credits();
        let _ = g.poll_cq();
        if !g.cq_armed && g.comp_fd().is_some() {
            g.arm();
            let _ = g.poll_cq();
        }
        g.update_credits();
        let mut rev = 0;
        if events & libc::POLLIN != 0 && g.conn_have_rdata() {
            rev |= libc::POLLIN;
        }
        if events & libc::POLLOUT != 0 && g.can_send() {
            rev |= libc::POLLOUT;
        }
        // Closed by the peer: POLLHUP once the data it sent before has been read (rdma-core
        // reports it at once, beside POLLIN, so a reader that stops at POLLHUP — rstream
        // does — can lose the tail of the stream; a TCP socket reports no hang-up then).
        if g.state & RS_CONNECTED == 0 {
            if g.state != RS_DISCONNECTED {
                rev |= libc::POLLERR;
            } else if !g.have_rdata() {
                rev |= libc::POLLHUP;
            }
        }
        if let Some(c) = g.comp_fd() {
            wait.push((c, Wake::CqEvent));
            if let Some(sh) = g.shared() {
                if !engines.iter().any(|e| Arc::ptr_eq(e, &sh)) {
                    engines.push(sh);
                }
            }
        }
        wait.push((g.channel_fd(), Wake::CmEvent));
        return rev;
    }
    if g.state == RS_CONNECT_ERROR {
        return (events & (libc::POLLIN | libc::POLLOUT)) | libc::POLLERR;
    }
    0
}

/// What a descriptor `rpoll` sleeps on means when it wakes.
#[derive(Clone, Copy, PartialEq)]
enum Wake {
    /// The socket's completion channel: take its event (the CQ is armed again later).
    CqEvent,
    /// A connected socket's event channel: read the connection event (a disconnect).
    CmEvent,
    /// Look at the socket again (a listener's queue, a connection under way).
    Look,
}

/// `rpoll`: `poll` over rsockets and other descriptors alike.
#[export_name = "softib_rdmacm_rpoll"]
pub unsafe extern "C" fn rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: i32) -> i32 {
    if nfds > 0 && fds.is_null() {
        return minus_one(libc::EFAULT);
    }
    let fds: &mut [libc::pollfd] = if nfds == 0 {
        &mut []
    } else {
        // SAFETY: the caller's `nfds` entries.
        unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) }
    };
    let socks: Vec<Option<Arc<RSocket>>> = fds.iter().map(|p| lookup(p.fd)).collect();
    let start = Instant::now();
    loop {
        // Check every descriptor once, gathering what to sleep on.
        let mut rfds: Vec<libc::pollfd> = Vec::with_capacity(fds.len() * 2);
        // Per entry of rfds: the socket it belongs to and what its waking means.
        let mut owners: Vec<Option<(usize, Wake)>> = Vec::with_capacity(fds.len() * 2);
        let mut engines = Vec::new();
        let mut cnt = 0;
        for (i, (p, s)) in fds.iter_mut().zip(&socks).enumerate() {
            p.revents = 0;
            match s {
                Some(s) => {
                    let mut wait = Vec::new();
                    p.revents = poll_rs(s, p.events, &mut wait, &mut engines);
                    for (fd, w) in wait {
                        rfds.push(libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        });
                        owners.push(Some((i, w)));
                    }
                }
                None => {
                    let mut one = [libc::pollfd {
                        fd: p.fd,
                        events: p.events,
                        revents: 0,
                    }];
                    if p.fd >= 0 {
                        poll_fds(&mut one, 0);
                    }
                    p.revents = one[0].revents;
                    rfds.push(libc::pollfd {
                        fd: p.fd,
                        events: p.events,
                        revents: 0,
                    });
                    owners.push(None);
                }
            }
            if p.revents != 0 {
                cnt += 1;
            }
        }
        if cnt > 0 || timeout == 0 {
            return cnt;
        }
        let elapsed = start.elapsed();
        if elapsed <= defaults().polling_time {
            continue;
        }
        let wake = defaults().wake_up_interval_ms;
        let sleep = if timeout < 0 {
            wake
        } else {
            let left = i64::from(timeout) - elapsed.as_millis() as i64;
            if left <= 0 {
                return 0;
            }
            left.min(i64::from(wake)) as i32
        };
        if self::sleep(&mut rfds, sleep, &engines) < 0 {
            return -1;
        }
        // Events are taken only after a sleep (the spinning above never reads a descriptor).
        for (r, o) in rfds.iter().zip(&owners) {
            let (Some((i, w)), true) = (o, r.revents != 0) else {
                continue;
            };
            let Some(s) = &socks[*i] else {
                continue;
            };
            match w {
                Wake::CqEvent => s.lock().take_cq_event(),
                Wake::CmEvent => s.lock().take_cm_event(),
                Wake::Look => {}
            }
        }
    }
}

unsafe fn fd_isset(fd: i32, set: *mut libc::fd_set) -> bool {
    // SAFETY: the caller's set.
    !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
}

#[export_name = "softib_rdmacm_rselect"]
pub unsafe extern "C" fn rselect(
    nfds: i32,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> i32 {
    if !(0..=libc::FD_SETSIZE as i32).contains(&nfds) {
        return minus_one(libc::EINVAL);
    }
    let mut fds = Vec::new();
    for fd in 0..nfds {
        let mut ev = 0;
        // SAFETY: the caller's sets.
        unsafe {
            if fd_isset(fd, readfds) {
                ev |= libc::POLLIN;
            }
            if fd_isset(fd, writefds) {
                ev |= libc::POLLOUT;
            }
            if fd_isset(fd, exceptfds) {
                ev |= libc::POLLPRI;
            }
        }
        if ev != 0 {
            fds.push(libc::pollfd {
                fd,
                events: ev,
                revents: 0,
            });
        }
    }
    let to = if timeout.is_null() {
        -1
    } else {
        // SAFETY: the caller's timeval.
        let t = unsafe { &*timeout };
        (t.tv_sec * 1000 + t.tv_usec / 1000) as i32
    };
    // SAFETY: a local array.
    let ret = unsafe { rpoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, to) };
    // SAFETY: the caller's sets.
    unsafe {
        for set in [readfds, writefds, exceptfds] {
            if !set.is_null() {
                libc::FD_ZERO(set);
            }
        }
    }
    if ret <= 0 {
        return ret;
    }
    let mut cnt = 0;
    for p in &fds {
        // SAFETY: the caller's sets.
        unsafe {
            if !readfds.is_null() && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
            {
                libc::FD_SET(p.fd, readfds);
                cnt += 1;
            }
            if !writefds.is_null() && p.revents & (libc::POLLOUT | libc::POLLERR) != 0 {
                libc::FD_SET(p.fd, writefds);
                cnt += 1;
            }
            if !exceptfds.is_null() && p.revents & libc::POLLPRI != 0 {
                libc::FD_SET(p.fd, exceptfds);
                cnt += 1;
            }
        }
    }
    cnt
}

// ---- shutdown / close -------------------------------------------------------------------

/// `rshutdown`: tells the peer (CTRL SHUTDOWN or DISCONNECT) and waits for the sends to
/// complete; a fully closed connection's QP goes to the error state.
#[export_name = "softib_rdmacm_rshutdown"]
pub unsafe extern "C" fn rshutdown(socket: i32, how: i32) -> i32 {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF);
    };
    if !(libc::SHUT_RD..=libc::SHUT_RDWR).contains(&how) {
        return minus_one(libc::EINVAL);
    }
    let Some(g) = s.lock_live() else {
        return minus_one(libc::EBADF);
    };
    match shutdown(&s, g, how) {
        Ok(()) => 0,
        Err(e) => minus_one(e),
    }
}

fn shutdown<'a>(s: &'a RSocket, mut g: MutexGuard<'a, Rs>, how: i32) -> Result<(), i32> {
    if s.listener.get().is_some() {
        return Ok(());
    }
    if g.state & RS_CONNECTED == 0 {
        if g.state & (RS_DISCONNECTED | RS_ERROR) == 0 {
            return Err(libc::ENOTCONN);
        }
    } else {
        let ctrl = if how == libc::SHUT_RDWR {
            g.state &= !(RS_READABLE | RS_WRITABLE);
            RS_CTRL_DISCONNECT
        } else if how == libc::SHUT_WR {
            g.state &= !RS_WRITABLE;
            if g.state & RS_READABLE != 0 {
                RS_CTRL_SHUTDOWN
            } else {
                RS_CTRL_DISCONNECT
            }
        } else {
            g.state &= !RS_READABLE;
            if g.state & RS_WRITABLE != 0 {
                return Ok(());
            }
            RS_CTRL_DISCONNECT
        };
        // The data sent so far is acknowledged before the control message leaves (rdma-core
        // posts it at once). rdma-core's rpoll reports POLLHUP beside POLLIN when the last
        // data and a DISCONNECT come in one batch, and a reader that stops at POLLHUP
        // (rstream) loses the data: a peer that has its data a round trip earlier has
        // normally taken it by then.
        let (g2, _) = get_comp(s, g, false, Rs::conn_all_sends_done);
        g = g2;
        if !g.ctrl_avail() {
            let (g2, r) = get_comp(s, g, false, Rs::conn_can_send_ctrl);
            g = g2;
            r?;
        }
        if g.state & RS_CONNECTED != 0 && g.ctrl_avail() {
            g.ctrl_seqno += 1;
            let _ = g.post_msg(msg_set(RS_OP_CTRL, ctrl));
        }
    }
    if g.state & RS_CONNECTED != 0 {
        let (g2, _) = get_comp(s, g, false, Rs::conn_all_sends_done);
        g = g2;
    }
    if g.state & RS_DISCONNECTED != 0 {
        g.qp_to_err();
    }
    Ok(())
}

/// `rclose`: shuts the connection down and frees the socket (its id last: the CM closes the
/// connection with a DREQ).
#[export_name = "softib_rdmacm_rclose"]
pub unsafe extern "C" fn rclose(socket: i32) -> i32 {
    let Some(s) = sockets().remove(&socket) else {
        return minus_one(libc::EBADF);
    };
    if let Some(l) = s.listener.get() {
        l.stop.store(true, Ordering::Release);
        util::signal(l.stop_fd);
        let t = l.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            let _ = t.join();
        }
        let queued: Vec<_> = l
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for c in queued {
            let fd = c.lock().index;
            // SAFETY: an accepted socket nobody took.
            unsafe { rclose(fd) };
        }
        util::close(l.ready);
        util::close(l.stop_fd);
    } else {
        let g = s.lock();
        if g.state & RS_CONNECTED != 0 {
            let _ = shutdown(&s, g, libc::SHUT_RDWR);
        }
    }
    s.lock().free();
    0
}

// ---- names and options ------------------------------------------------------------------

unsafe fn copy_addr(
    a: Option<std::net::SocketAddr>,
    dst: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> i32 {
    if dst.is_null() || len.is_null() {
        return minus_one(libc::EFAULT);
    }
    let Some(a) = a else {
        return minus_one(libc::ENOTCONN);
    };
    let mut st: libc::sockaddr_storage = util::zeroed();
    // SAFETY: a local sockaddr_storage.
    let n = unsafe { addr::to_sockaddr((&mut st as *mut libc::sockaddr_storage).cast(), a) };
    // SAFETY: the caller's buffer of *len bytes.
    unsafe {
        let size = (*len).min(n) as usize;
        std::ptr::copy_nonoverlapping(
            (&st as *const libc::sockaddr_storage).cast::<u8>(),
            dst.cast::<u8>(),
            size,
        );
        *len = n;
    }
    0
}

fn id_addrs(s: &RSocket) -> (Option<std::net::SocketAddr>, Option<std::net::SocketAddr>) {
    let Some(g) = s.lock_live() else {
        return (None, None);
    };
    match soft_id(g.cm_id) {
        Some(sid) => {
            let st = sid.state();
            (st.src, st.dst)
        }
        None => (None, None),
    }
}

#[export_name = "softib_rdmacm_rgetpeername"]
pub unsafe extern "C" fn rgetpeername(
    socket: i32,
    a: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> i32 {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF);
    };
    // SAFETY: the caller's buffers.
    unsafe { copy_addr(id_addrs(&s).1, a, len) }
}

#[export_name = "softib_rdmacm_rgetsockname"]
pub unsafe extern "C" fn rgetsockname(
    socket: i32,
    a: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> i32 {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF);
    };
    let (src, _) = id_addrs(&s);
    let src = src.or_else(|| {
        Some(if s.lock().domain == libc::AF_INET6 {
            std::net::SocketAddr::from(([0u16; 8], 0))
        } else {
            std::net::SocketAddr::from(([0u8; 4], 0))
        })
    });
    // SAFETY: the caller's buffers.
    unsafe { copy_addr(src, a, len) }
}

unsafe fn opt_int(optval: *const libc::c_void, optlen: libc::socklen_t) -> Result<i32, i32> {
    if optval.is_null() || (optlen as usize) < 4 {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least 4 bytes.
    Ok(unsafe { optval.cast::<i32>().read_unaligned() })
}

fn keepalive_default() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(7200)
}

#[export_name = "softib_rdmacm_rsetsockopt"]
pub unsafe extern "C" fn rsetsockopt(
    socket: i32,
    level: i32,
    optname: i32,
    optval: *const libc::c_void,
    optlen: libc::socklen_t,
) -> i32 {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF);
    };
    let Some(mut g) = s.lock_live() else {
        return minus_one(libc::EBADF);
    };
    let r: Result<Option<(u8, bool)>, i32> = (|| {
        // SAFETY: the caller's option value of `optlen` bytes (each case reads at most that).
        unsafe {
            match (level, optname) {
                (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
                    let v = opt_int(optval, optlen)?;
                    super::rdma_set_option(
                        g.cm_id,
                        RDMA_OPTION_ID as i32,
                        RDMA_OPTION_ID_REUSEADDR as i32,
                        optval.cast_mut(),
                        optlen as usize,
                    );
                    Ok(Some((libc::SO_REUSEADDR as u8, v != 0)))
                }
                (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
                    let v = opt_int(optval, optlen)? as u32;
                    if g.rbuf.is_none() {
                        g.rbuf_size = v.saturating_mul(2).max(2);
                    }
                    Ok(None)
                }
                (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
                    let v = opt_int(optval, optlen)? as u32;
                    if g.sbuf.is_none() {
                        g.sbuf_size = v.saturating_mul(2);
                    }
                    if g.sbuf_size < RS_SNDLOWAT {
                        g.sbuf_size = RS_SNDLOWAT << 1;
                    }
                    Ok(None)
                }
                (libc::SOL_SOCKET, libc::SO_LINGER) => {
                    if optval.is_null() || (optlen as usize) < std::mem::size_of::<libc::linger>() {
                        return Err(libc::EINVAL);
                    }
                    let l = optval.cast::<libc::linger>().read_unaligned();
                    Ok(Some((libc::SO_LINGER as u8, l.l_onoff == 0)))
                }
                (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
                    let v = opt_int(optval, optlen)? != 0;
                    if v && g.keepalive_time == 0 {
                        g.keepalive_time = keepalive_default();
                    }
                    g.keepalive = v;
                    g.last_keepalive = Instant::now();
                    Ok(Some((libc::SO_KEEPALIVE as u8, v)))
                }
                (libc::SOL_SOCKET, libc::SO_OOBINLINE) => {
                    let v = opt_int(optval, optlen)?;
                    Ok(Some((libc::SO_OOBINLINE as u8, v != 0)))
                }
                (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG) => {
                    Ok(None)
                }
                (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
                    let v = opt_int(optval, optlen)?;
                    if v <= 0 {
                        return Err(libc::EINVAL);
                    }
                    g.keepalive_time = v as u32;
                    Ok(None)
                }
                (libc::IPPROTO_TCP, libc::TCP_NODELAY) => {
                    let v = opt_int(optval, optlen)?;
                    Ok(Some((libc::TCP_NODELAY as u8, v != 0)))
                }
                (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
                    let v = opt_int(optval, optlen)?;
                    super::rdma_set_option(
                        g.cm_id,
                        RDMA_OPTION_ID as i32,
                        RDMA_OPTION_ID_AFONLY as i32,
                        optval.cast_mut(),
                        optlen as usize,
                    );
                    Ok(Some((libc::IPV6_V6ONLY as u8, v != 0)))
                }
                (SOL_RDMA, _) if g.state >= RS_OPENING => Err(libc::EINVAL),
                (SOL_RDMA, RDMA_SQSIZE) => {
                    g.sq_size = (opt_int(optval, optlen)? as u32).min(RS_QP_MAX_SIZE);
                    Ok(None)
                }
                (SOL_RDMA, RDMA_RQSIZE) => {
                    g.rq_size = (opt_int(optval, optlen)? as u32).min(RS_QP_MAX_SIZE);
                    Ok(None)
                }
                (SOL_RDMA, RDMA_INLINE) => {
                    g.sq_inline = (opt_int(optval, optlen)? as u32).min(RS_QP_MAX_SIZE);
                    Ok(None)
                }
                (SOL_RDMA, RDMA_IOMAPSIZE) => {
                    let v = opt_int(optval, optlen)?.max(0) as u32;
                    g.target_iomap_size = scale_to_value(value_to_scale(v, 8) & 0xff, 8);
                    Ok(None)
                }
                (SOL_RDMA, RDMA_ROUTE) => {
                    if optval.is_null() {
                        return Err(libc::EINVAL);
                    }
                    g.route_opt = Some(
                        std::slice::from_raw_parts(optval.cast::<u8>(), optlen as usize).to_vec(),
                    );
                    Ok(None)
                }
                _ => Err(libc::ENOTSUP),
            }
        }
    })();
    match r {
        Ok(Some((bit, on))) => {
            let opts = match level {
                libc::SOL_SOCKET => &mut g.so_opts,
                libc::IPPROTO_TCP => &mut g.tcp_opts,
                _ => &mut g.ipv6_opts,
            };
            if on {
                *opts |= 1 << bit;
            } else {
                *opts &= !(1 << bit);
            }
            0
        }
        Ok(None) => 0,
        Err(e) => minus_one(e),
    }
}

#[export_name = "softib_rdmacm_rgetsockopt"]
pub unsafe extern "C" fn rgetsockopt(
    socket: i32,
    level: i32,
    optname: i32,
    optval: *mut libc::c_void,
    optlen: *mut libc::socklen_t,
) -> i32 {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF);
    };
    if optval.is_null() || optlen.is_null() {
        return minus_one(libc::EFAULT);
    }
    let Some(mut g) = s.lock_live() else {
        return minus_one(libc::EBADF);
    };
    let bit = |o: u64, n: i32| i32::from(o & (1 << n) != 0);
    let v: i32 = match (level, optname) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            bit(g.so_opts, optname)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => g.rbuf_size as i32,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => g.sbuf_size as i32,
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            // SAFETY: the caller's buffer of *optlen bytes.
            unsafe {
                if (*optlen as usize) < std::mem::size_of::<libc::linger>() {
                    return minus_one(libc::EINVAL);
                }
                optval.cast::<libc::linger>().write_unaligned(libc::linger {
                    l_onoff: 1 - bit(g.so_opts, libc::SO_LINGER),
                    l_linger: 0,
                });
                *optlen = std::mem::size_of::<libc::linger>() as libc::socklen_t;
            }
            return 0;
        }
        (libc::SOL_SOCKET, libc::SO_ERROR) => std::mem::take(&mut g.err),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => 1,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => g.keepalive_time as i32,
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => bit(g.tcp_opts, libc::TCP_NODELAY),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
            let id = g.id();
            if id.route.num_paths > 0 && !id.route.path_rec.is_null() {
                // SAFETY: the id's path record.
                1 << (7 + u32::from(unsafe { (*id.route.path_rec).mtu }))
            } else {
                2048
            }
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => bit(g.ipv6_opts, libc::IPV6_V6ONLY),
        (SOL_RDMA, RDMA_SQSIZE) => g.sq_size as i32,
        (SOL_RDMA, RDMA_RQSIZE) => g.rq_size as i32,
        (SOL_RDMA, RDMA_INLINE) => g.sq_inline as i32,
        (SOL_RDMA, RDMA_IOMAPSIZE) => g.target_iomap_size as i32,
        (SOL_RDMA, RDMA_ROUTE) => {
            let Some(r) = g.route_opt.as_ref() else {
                return minus_one(libc::ENOTSUP);
            };
            // SAFETY: the caller's buffer of *optlen bytes.
            unsafe {
                if (*optlen as usize) < r.len() {
                    return minus_one(libc::EINVAL);
                }
                std::ptr::copy_nonoverlapping(r.as_ptr(), optval.cast::<u8>(), r.len());
                *optlen = r.len() as libc::socklen_t;
            }
            return 0;
        }
        _ => return minus_one(libc::ENOTSUP),
    };
    // SAFETY: the caller's buffer of *optlen bytes.
    unsafe {
        if (*optlen as usize) < 4 {
            return minus_one(libc::EINVAL);
        }
        optval.cast::<i32>().write_unaligned(v);
        *optlen = 4;
    }
    0
}

#[export_name = "softib_rdmacm_rfcntl"]
pub unsafe extern "C" fn rfcntl(socket: i32, cmd: i32, arg: libc::c_long) -> i32 {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF);
    };
    let Some(mut g) = s.lock_live() else {
        return minus_one(libc::EBADF);
    };
    match cmd {
        libc::F_GETFL => g.fd_flags,
        libc::F_SETFL => {
            g.fd_flags = arg as i32;
            if let Some(l) = s.listener.get() {
                set_nonblock(l.ready, g.fd_flags & libc::O_NONBLOCK != 0);
            }
            0
        }
        _ => minus_one(libc::ENOTSUP),
    }
}

// ---- riomap / riowrite ------------------------------------------------------------------

/// `riomap`: registers `buf`; with PROT_WRITE the peer may `riowrite` into it at `offset`
/// (-1: the buffer's address), published in the peer's next free iomap slot with the next
/// send.
#[export_name = "softib_rdmacm_riomap"]
pub unsafe extern "C" fn riomap(
    socket: i32,
    buf: *mut libc::c_void,
    len: usize,
    prot: i32,
    _flags: i32,
    offset: libc::off_t,
) -> libc::off_t {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF) as libc::off_t;
    };
    let Some(mut g) = s.lock_live() else {
        return minus_one(libc::EBADF) as libc::off_t;
    };
    if g.cm_id.is_null() || g.id().pd.is_null() || prot & !(libc::PROT_WRITE | libc::PROT_NONE) != 0
    {
        return minus_one(libc::EINVAL) as libc::off_t;
    }
    let offset = if offset == -1 {
        buf as u64 as libc::off_t
    } else {
        offset
    };
    if prot & libc::PROT_WRITE != 0 {
        if g.remote_iomappings.is_empty() {
            let n = g.remote_iomap.length as usize;
            g.remote_iomappings = (0..n).map(|_| None).collect();
        }
        let Some(slot) = g.remote_iomappings.iter().position(Option::is_none) else {
            return minus_one(libc::ENOMEM) as libc::off_t;
        };
        let mr = match g.reg(
            buf.cast(),
            len,
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
        ) {
            Ok(m) => m,
            Err(e) => return minus_one(e) as libc::off_t,
        };
        g.remote_iomappings[slot] = Some(IomapMr {
            offset: offset as u64,
            mr,
            index: Some(slot),
        });
        g.iomap_queue.push_back(slot);
    } else {
        let mr = match g.reg(buf.cast(), len, IBV_ACCESS_LOCAL_WRITE) {
            Ok(m) => m,
            Err(e) => return minus_one(e) as libc::off_t,
        };
        g.local_iomaps.push(IomapMr {
            offset: offset as u64,
            mr,
            index: None,
        });
    }
    offset
}

#[export_name = "softib_rdmacm_riounmap"]
pub unsafe extern "C" fn riounmap(socket: i32, buf: *mut libc::c_void, len: usize) -> i32 {
    let Some(s) = lookup(socket) else {
        return minus_one(libc::EBADF);
    };
    let Some(mut g) = s.lock_live() else {
        return minus_one(libc::EBADF);
    };
    // SAFETY: MRs of this socket.
    let matches = |m: &IomapMr| unsafe { (*m.mr).addr == buf && (*m.mr).length == len };
    if let Some(i) = g
        .remote_iomappings
        .iter()
        .position(|m| m.as_ref().is_some_and(matches))
    {
        let m = g.remote_iomappings[i].take().unwrap();
        g.iomap_queue.retain(|&q| q != i);
        debug_assert_eq!(m.index, Some(i));
        // SAFETY: the mapping's MR.
        unsafe { crate::mr::ibv_dereg_mr(m.mr) };
        return 0;
    }
    if let Some(i) = g.local_iomaps.iter().position(matches) {
        let m = g.local_iomaps.remove(i);
        // SAFETY: the mapping's MR.
        unsafe { crate::mr::ibv_dereg_mr(m.mr) };
        return 0;
    }
    minus_one(libc::EINVAL)
}

/// `riowrite`: RDMA WRITEs of `buf` into the peer's mapping at `offset` (no notification:
/// the application tells its peer by a message, as with rdma-core).
#[export_name = "softib_rdmacm_riowrite"]
pub unsafe extern "C" fn riowrite(
    socket: i32,
    buf: *const libc::c_void,
    count: usize,
    offset: libc::off_t,
    flags: i32,
) -> usize {
    let Some(s) = lookup(socket) else {
        return ret_err(libc::EBADF) as usize;
    };
    if count > 0 && buf.is_null() {
        return ret_err(libc::EFAULT) as usize;
    }
    // SAFETY: the caller's buffer.
    let data = unsafe { slice(buf.cast(), count) };
    let Some(mut g) = s.lock_live() else {
        return ret_err(libc::EBADF) as usize;
    };
    if let Err(e) = connected(&mut g) {
        return ret_err(e) as usize;
    }
    if g.state & RS_CONNECTED == 0 {
        return ret_err(libc::ENOTCONN) as usize;
    }
    if !g.iomap_queue.is_empty() {
        let (g2, r) = send_iomaps(&s, g, flags);
        g = g2;
        if let Err(e) = r {
            return ret_err(e) as usize;
        }
    }
    let mut left = count;
    let mut off = offset as u64;
    let mut olen = RS_OLAP_START_SIZE;
    let mut ret = Ok(());
    let mut iom: Option<RsIomap> = None;
    while left > 0 {
        let cur = match iom {
            Some(m) if off < m.offset + u64::from(m.sge.length) => m,
            _ => {
                let found = (0..g.target_iomap_size as usize)
                    .map(|i| g.target_iomap(i))
                    .find(|m| off >= m.offset && off < m.offset + u64::from(m.sge.length));
                match found {
                    Some(m) => {
                        iom = Some(m);
                        m
                    }
                    None => break,
                }
            }
        };
        let (g2, r) = wait_can_send(&s, g, flags);
        g = g2;
        if let Err(e) = r {
            ret = Err(e);
            break;
        }
        let mut xfer = next_transfer(&mut olen, left);
        xfer = xfer
            .min(g.sbuf_bytes_avail)
            .min((cur.offset + u64::from(cur.sge.length) - off) as u32);
        let done = count - left;
        let chunk = &data[done..done + xfer as usize];
        g.sqe_avail -= 1;
        g.sbuf_bytes_avail -= xfer;
        let raddr = cur.sge.addr + off - cur.offset;
        let (mut sgl, n, fl) = g.stage(chunk);
        let msg = msg_set(RS_OP_WRITE, xfer);
        if let Err(e) = g.write_wr(
            msg,
            &mut sgl[..n],
            IBV_WR_RDMA_WRITE,
            fl,
            0,
            raddr,
            cur.sge.key,
        ) {
            ret = Err(e);
            break;
        }
        left -= xfer as usize;
        off += u64::from(xfer);
    }
    match ret {
        Err(e) if left == count => ret_err(e) as usize,
        _ => count - left,
    }
}

/// Forgets every rsocket in a forked child (their connections belong to the parent).
pub fn forget_after_fork() {
    let mut m = sockets();
    for (_, s) in m.drain() {
        std::mem::forget(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_round_trips_as_rdma_core() {
        for v in [0, 1, 64, 128] {
            assert_eq!(scale_to_value(value_to_scale(v, 8), 8), v);
        }
        // 512 entries travel as 0x82 and come back as 512.
        assert_eq!(value_to_scale(512, 8), 0x82);
        assert_eq!(scale_to_value(0x82, 8), 512);
    }

    #[test]
    fn immediate_layout() {
        assert_eq!(msg_set(RS_OP_SGL, 400), 0x8000_0190);
        assert_eq!(msg_op(0xE000_0002), RS_OP_CTRL);
        assert_eq!(msg_data(0xE000_0002), RS_CTRL_SHUTDOWN);
        assert_eq!(std::mem::size_of::<RsSge>(), 16);
        assert_eq!(std::mem::size_of::<RsIomap>(), 24);
    }
}
