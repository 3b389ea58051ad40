//! The connection manager behind softib's `librdmacm.so.1` (`crates/softib-rdmacm`): the
//! `softib_rdmacm_<name>` functions its trampolines resolve in this library, where the devices,
//! their QP1 and their progress threads are (docs/cm.md).
//!
//! The split follows rdma-core: what Linux does in the kernel (`rdma_ucm` + `ib_cm`: ports,
//! listeners, the CM protocol on QP1, raising events) is [`kern`], run by each context's
//! engine in its I/O rounds (so the progress thread answers MADs and runs the CM's timers
//! while the application sleeps); what rdma-core's `librdmacm/cma.c` does in the library (ids,
//! event channels, moving the QP through INIT/RTR/RTS when a connection event is read,
//! synchronous ids, the endpoint API) is here, in [`conn`] and [`ep`], on the verbs of this
//! library. Address resolution without a kernel RDMA stack is [`addr`].

pub mod addr;
pub mod conn;
pub mod ep;
pub mod kern;
pub mod mcast;
pub mod rsocket;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use softib_core::cm::{CmId, Gid, ListenId};

use crate::cma_h::*;
use crate::kern_h::ibv_sa_path_rec;
use crate::registry::{self, Kind};
use crate::util::{self, minus_one, null_errno, set_errno};
use crate::verbs_h::*;

/// An event channel: rdma_cm's structure first (the application reads `fd`), then the queue.
/// `fd` is an eventfd semaphore holding one count per queued event, so `poll`/`epoll` wake on
/// it and `O_NONBLOCK` set by the application turns a wait into `EAGAIN`.
#[repr(C)]
pub struct SoftCmChannel {
    /// What the application sees.
    pub c: rdma_event_channel,
    /// Queued events, oldest first.
    pub events: Mutex<VecDeque<Box<CmaEvent>>>,
}

impl SoftCmChannel {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Box<CmaEvent>>> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues an event and counts it on the descriptor.
    pub fn push(&self, ev: Box<CmaEvent>) {
        self.queue().push_back(ev);
        util::signal(self.c.fd);
    }

    /// Takes the queued events of `id` (it is being destroyed or moved), with their counts.
    fn take_for(&self, id: *mut SoftCmId) -> VecDeque<Box<CmaEvent>> {
        let mut q = self.queue();
        let (mine, rest): (VecDeque<_>, VecDeque<_>) = q.drain(..).partition(|e| e.id == id);
        *q = rest;
        drop(q);
        for _ in 0..mine.len() {
            util::wait_one_nonblocking(self.c.fd);
        }
        mine
    }
}

/// An event as the application reads it (`struct rdma_cm_event` first), with the storage its
/// private data points into.
#[repr(C)]
pub struct CmaEvent {
    /// What the application sees.
    pub event: rdma_cm_event,
    /// The id the event is for.
    pub id: *mut SoftCmId,
    /// The private data of the message behind the event.
    pub private: [u8; 256],
    /// Counted in its id's `events_out` (taken off the queue while the id was live).
    counted: bool,
}

// SAFETY: the pointers name library objects; events move between threads through channels.
unsafe impl Send for CmaEvent {}

impl CmaEvent {
    /// Takes the event back from its id's `events_out`, if it was counted there.
    fn uncount(&mut self) {
        if std::mem::take(&mut self.counted) {
            // SAFETY: a counted event's id stays until the count drops (rdma_destroy_id
            // waits for it).
            unsafe { (*self.id).events_out.fetch_sub(1, Ordering::AcqRel) };
        }
    }

    /// A new event of `kind` for `id`.
    pub fn new(id: *mut SoftCmId, kind: rdma_cm_event_type, status: i32) -> Box<CmaEvent> {
        let mut e = Box::new(CmaEvent {
            event: util::zeroed(),
            id,
            private: [0; 256],
            counted: false,
        });
        e.event.id = id.cast();
        e.event.event = kind;
        e.event.status = status;
        e
    }

    /// Fills `param.conn`, its private data copied into the event.
    pub fn set_conn(&mut self, mut p: rdma_conn_param, private: &[u8]) {
        let n = private.len().min(255);
        self.private[..n].copy_from_slice(&private[..n]);
        p.private_data = if n > 0 {
            self.private.as_ptr().cast()
        } else {
            std::ptr::null()
        };
        p.private_data_len = n as u8;
        // SAFETY: writes the `conn` member of the event's parameter union.
        unsafe { *self.event.param.conn.as_mut() = p };
    }

    /// Fills `param.ud`, its private data copied into the event.
    pub fn set_ud(&mut self, ah_attr: ibv_ah_attr, qp_num: u32, qkey: u32, private: &[u8]) {
        let n = private.len().min(255);
        self.private[..n].copy_from_slice(&private[..n]);
        let p = rdma_ud_param {
            private_data: if n > 0 {
                self.private.as_ptr().cast()
            } else {
                std::ptr::null()
            },
            private_data_len: n as u8,
            ah_attr,
            qp_num,
            qkey,
        };
        // SAFETY: writes the `ud` member of the event's parameter union.
        unsafe { *self.event.param.ud.as_mut() = p };
    }

    /// `param.conn` as filled.
    pub fn conn(&self) -> rdma_conn_param {
        // SAFETY: reads the `conn` member; every bit pattern is valid.
        unsafe { *self.event.param.conn.as_ref() }
    }
}

/// What the peer said about a connection: the values the QP transitions need.
#[derive(Debug, Clone, Copy, Default)]
pub struct Remote {
    /// The peer port's GID.
    pub gid: Gid,
    /// The peer's QP.
    pub qpn: u32,
    /// Our receive queue's first expected PSN: the REQ's Starting PSN (active side) or the
    /// REP's (passive side).
    pub rq_psn: u32,
    /// Path MTU (IB enum, 1..=5).
    pub path_mtu: u8,
    /// Transport retries of our sends.
    pub retry_count: u8,
    /// RNR retries of our sends.
    pub rnr_retry: u8,
    /// Local ACK timeout (exponent).
    pub ack_timeout: u8,
    /// Path hop limit, traffic class, flow label, SL.
    pub hop_limit: u8,
    /// See `hop_limit`.
    pub traffic_class: u8,
    /// See `hop_limit`.
    pub flow_label: u32,
    /// See `hop_limit`.
    pub sl: u8,
}

/// An id's state besides what the application sees in `rdma_cm_id`.
#[derive(Default)]
pub struct IdState {
    /// Created without a channel: every call waits for its own event (`rdma_create_ep`).
    pub sync: bool,
    /// The local address (bound, or chosen by address resolution), with the rdma_cm port.
    pub src: Option<SocketAddr>,
    /// The destination address.
    pub dst: Option<SocketAddr>,
    /// The port this id holds in its port space (released on destroy).
    pub port_held: Option<addr::PortKey>,
    /// The connection or SIDR exchange on the context's CM agent.
    pub agent: Option<CmId>,
    /// Listeners: (context, listener) for each context listened on.
    pub listens: Vec<(usize, ListenId)>,
    /// The id connected (rather than accepted).
    pub active: bool,
    /// RDMA READ / atomic resources: what this side accepts, and issues.
    pub responder_resources: u8,
    /// See `responder_resources`.
    pub initiator_depth: u8,
    /// Our send queue's first PSN: the REP's Starting PSN (active side) or the REQ's (passive
    /// side). The Starting PSN a side announces is the one it will receive first, as the Linux
    /// CM reads it (`cm_req_handler`: the passive side sends from the REQ's), so that softib
    /// and the kernel's rdma_cm agree on the wire.
    pub sq_psn: u32,
    /// The peer's values, once a REQ or REP came.
    pub remote: Option<Remote>,
    /// RNR retry count this side announced in its REP (passive) or asked for (active).
    pub rnr_retry: u8,
    /// A connection response could not be applied: its later events are dropped.
    pub connect_error: bool,
    /// DISCONNECTED was reported (once per connection).
    pub disconnected: bool,
    /// `rdma_create_ep`'s QP attributes for requests that `rdma_get_request` returns.
    pub qp_init_attr: Option<Box<ibv_qp_init_attr>>,
    /// `RDMA_OPTION_ID_TOS`.
    pub tos: u8,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`.
    pub ack_timeout: Option<u8>,
    /// Private data `rdma_create_ep` was given for the connect (`ai_connect`).
    pub connect_data: Vec<u8>,
    /// Multicast groups joined.
    pub joins: Vec<mcast::Join>,
}

/// An id: rdma_cm's structure first, then the path record `route.path_rec` points to, then
/// softib's state.
#[repr(C)]
pub struct SoftCmId {
    /// What the application sees.
    pub id: rdma_cm_id,
    /// The one path of a resolved route.
    pub path: ibv_sa_path_rec,
    /// The rest.
    pub st: Mutex<IdState>,
    /// Events for this id that `rdma_get_cm_event` handed out and `rdma_ack_cm_event` has not
    /// taken back: `rdma_destroy_id` waits for them, as rdma-core's does, so that a thread
    /// still handling one (reading `event->id`) never reads a freed id.
    pub events_out: AtomicU32,
}

impl SoftCmId {
    /// The state.
    pub fn state(&self) -> MutexGuard<'_, IdState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The channel of the id.
    pub fn channel(&self) -> Option<&SoftCmChannel> {
        let ch = self.id.channel.cast::<SoftCmChannel>();
        // SAFETY: ids point at live channels (destroying a channel with ids is refused).
        (!ch.is_null()).then(|| unsafe { &*ch })
    }

    /// The route's source address (what `rdma_get_local_addr` reads), with its GID as the IB
    /// source address (none for the wildcard) and the default P_Key.
    pub fn set_src(&mut self, src: SocketAddr) {
        // SAFETY: the source half of the route's address union has room for a
        // sockaddr_storage; the IB half is plain data.
        unsafe {
            addr::to_sockaddr(
                std::ptr::addr_of_mut!(self.id.route.addr.__bindgen_anon_1).cast(),
                src,
            );
            let ib = self.id.route.addr.addr.ibaddr.as_mut();
            if !src.ip().is_unspecified() {
                ib.sgid = ibv_gid {
                    raw: addr::gid_of(src.ip()).0,
                };
            }
            ib.pkey = 0xffffu16.to_be();
        }
    }

    /// The route's destination address (`rdma_get_peer_addr`) and the peer port's GID.
    pub fn set_dst(&mut self, dst: SocketAddr, dgid: Gid) {
        // SAFETY: as in `set_src`, for the destination half.
        unsafe {
            addr::to_sockaddr(
                std::ptr::addr_of_mut!(self.id.route.addr.__bindgen_anon_2).cast(),
                dst,
            );
            self.id.route.addr.addr.ibaddr.as_mut().dgid = ibv_gid { raw: dgid.0 };
        }
    }

    /// The route's one path: between the two GIDs, the port's MTU, hop limit 64, type of
    /// service `tos`.
    pub fn set_path(&mut self, sgid: Gid, dgid: Gid, mtu: u8, tos: u8) {
        let p = &mut self.path;
        *p = util::zeroed();
        p.dgid = ibv_gid { raw: dgid.0 };
        p.sgid = ibv_gid { raw: sgid.0 };
        p.hop_limit = 64;
        p.traffic_class = tos;
        p.reversible = 1;
        p.numb_path = 1;
        p.pkey = 0xffffu16.to_be();
        p.mtu_selector = 2;
        p.mtu = mtu;
        p.rate_selector = 2;
        p.rate = 3;
        p.packet_life_time_selector = 2;
        p.packet_life_time = 16;
        self.id.route.path_rec = std::ptr::addr_of_mut!(self.path);
        self.id.route.num_paths = 1;
    }

    /// Queues an event for the id on its channel.
    pub fn raise(&self, ev: Box<CmaEvent>) {
        if let Some(ch) = self.channel() {
            ch.push(ev);
        }
    }
}

/// The id behind a pointer, if it is a live one.
pub fn soft_id<'a>(id: *mut rdma_cm_id) -> Option<&'a mut SoftCmId> {
    if !registry::is_live(id, Kind::CmId) {
        return None;
    }
    // SAFETY: live ids are SoftCmIds this module allocated.
    Some(unsafe { &mut *id.cast::<SoftCmId>() })
}

/// Allocates an id on `channel` (a live one).
pub fn alloc_id(
    channel: *mut rdma_event_channel,
    context: *mut libc::c_void,
    ps: rdma_port_space,
    qp_type: ibv_qp_type,
) -> *mut SoftCmId {
    let mut id: rdma_cm_id = util::zeroed();
    id.channel = channel;
    id.context = context;
    id.ps = ps;
    id.qp_type = qp_type;
    let p = Box::into_raw(Box::new(SoftCmId {
        id,
        path: util::zeroed(),
        st: Mutex::new(IdState::default()),
        events_out: AtomicU32::new(0),
    }));
    registry::add(p.cast::<rdma_cm_id>(), Kind::CmId);
    p
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

fn new_channel() -> Result<*mut SoftCmChannel, i32> {
    let fd = util::semaphore_eventfd().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
    let ch = Box::into_raw(Box::new(SoftCmChannel {
        c: rdma_event_channel { fd },
        events: Mutex::new(VecDeque::new()),
    }));
    registry::add(ch, Kind::CmChannel);
    Ok(ch)
}

/// `rdma_create_event_channel`: a new channel; NULL and errno on failure.
#[export_name = "softib_rdmacm_rdma_create_event_channel"]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    match new_channel() {
        Ok(ch) => ch.cast(),
        Err(e) => null_errno(e),
    }
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
    util::close(ch.c.fd);
}

/// `rdma_get_devices`: a NULL-terminated array of the contexts the connection manager uses
/// (every device's, opened on first use and kept for the life of the process, as librdmacm
/// keeps its device array), freed by `rdma_free_devices`; `num_devices`, if not NULL,
/// receives their number.
#[export_name = "softib_rdmacm_rdma_get_devices"]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut libc::c_int) -> *mut *mut ibv_context {
    let ctxs = addr::all_contexts();
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

/// The id types rdma_cm knows for a port space.
fn valid_ps(ps: rdma_port_space, qp_type: ibv_qp_type) -> bool {
    matches!(
        (ps, qp_type),
        (RDMA_PS_TCP, IBV_QPT_RC | IBV_QPT_UC)
            | (RDMA_PS_UDP | RDMA_PS_IPOIB, IBV_QPT_UD)
            | (RDMA_PS_IB, IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_UD)
    )
}

/// `rdma_create_id`: a new id on `channel`, or with `channel` NULL a synchronous id (every
/// call waits for its own event). The QP type follows the port space (UD for RDMA_PS_UDP and
/// RDMA_PS_IPOIB, RC otherwise), as rdma-core's `rdma_create_id` does.
#[export_name = "softib_rdmacm_rdma_create_id"]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut libc::c_void,
    ps: rdma_port_space,
) -> libc::c_int {
    let qp_type = match ps {
        RDMA_PS_UDP | RDMA_PS_IPOIB => IBV_QPT_UD,
        _ => IBV_QPT_RC,
    };
    // SAFETY: as the caller's.
    unsafe { create_id(channel, id, context, ps, qp_type) }
}

/// `rdma_create_id` with an explicit QP type (`rdma_create_ep`).
pub unsafe fn create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut libc::c_void,
    ps: rdma_port_space,
    qp_type: ibv_qp_type,
) -> libc::c_int {
    if id.is_null() || !valid_ps(ps, qp_type) {
        return minus_one(libc::EINVAL);
    }
    let (channel, sync) = if channel.is_null() {
        match new_channel() {
            Ok(ch) => (ch.cast::<rdma_event_channel>(), true),
            Err(e) => return minus_one(e),
        }
    } else if registry::is_live(channel.cast::<SoftCmChannel>(), Kind::CmChannel) {
        (channel, false)
    } else {
        return minus_one(libc::EINVAL);
    };
    let p = alloc_id(channel, context, ps, qp_type);
    // SAFETY: just allocated.
    unsafe { (*p).state().sync = sync };
    // SAFETY: the caller's out-pointer, checked non-NULL.
    unsafe { *id = p.cast() };
    0
}

/// `rdma_destroy_id`: releases the id: its connection is closed as the IB CM closes a
/// connection whose id goes away (DREQ when established, DREP when the peer asked, REJ while
/// the handshake runs), its listens and port are released, its unread events dropped.
#[export_name = "softib_rdmacm_rdma_destroy_id"]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    if !registry::remove(id, Kind::CmId) {
        return minus_one(libc::EINVAL);
    }
    let p: *mut SoftCmId = sid;
    kern::release(sid);
    if let Some(ch) = sid.channel() {
        for ev in ch.take_for(p) {
            // A connection request nobody will read: its new id goes too.
            if ev.event.event == RDMA_CM_EVENT_CONNECT_REQUEST && ev.event.id != id {
                // SAFETY: the request's id, still live (never handed out).
                unsafe { rdma_destroy_id(ev.event.id) };
            }
        }
    }
    let (sync, ev) = {
        let st = sid.state();
        (st.sync, sid.id.event)
    };
    if !ev.is_null() {
        // SAFETY: the event a synchronous call left on the id.
        unsafe { rdma_ack_cm_event(ev) };
    }
    // Events of this id still in the application's hands (another thread handling one):
    // the id stays until they are acknowledged (rdma-core blocks the same way).
    while sid.events_out.load(Ordering::Acquire) > 0 {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    if sync {
        // SAFETY: the id's private channel.
        unsafe { rdma_destroy_event_channel(sid.id.channel) };
    }
    // SAFETY: allocated by alloc_id with Box; no longer registered.
    drop(unsafe { Box::from_raw(p) });
    0
}

/// `rdma_get_cm_event`: the next event of the channel (blocking unless the descriptor is
/// non-blocking, then `EAGAIN`). Connection events are applied here as rdma-core does: a
/// reply moves the id's QP to RTR and RTS and answers with an RTU before the application
/// sees ESTABLISHED.
#[export_name = "softib_rdmacm_rdma_get_cm_event"]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> libc::c_int {
    let ch = channel.cast::<SoftCmChannel>();
    if event.is_null() || !registry::is_live(ch, Kind::CmChannel) {
        return minus_one(libc::EINVAL);
    }
    // SAFETY: a live channel.
    let ch = unsafe { &*ch };
    loop {
        if util::wait_one(ch.c.fd) != 0 {
            return -1;
        }
        // Counted out under the queue's lock: an `rdma_destroy_id` that takes the id's queued
        // events (under it too) then waits for this one.
        let Some(mut ev) = ({
            let mut q = ch.queue();
            let mut ev = q.pop_front();
            if let Some(e) = ev.as_mut().filter(|e| kern::id_live(e.id)) {
                // SAFETY: a live id (its destroy unregisters it before it takes the queued
                // events, under this lock, and then waits for this count).
                unsafe { (*e.id).events_out.fetch_add(1, Ordering::AcqRel) };
                e.counted = true;
            }
            ev
        }) else {
            continue;
        };
        if !conn::process_event(&mut ev) {
            ev.uncount();
            continue;
        }
        let p = Box::into_raw(ev);
        registry::add(p.cast::<rdma_cm_event>(), Kind::CmEvent);
        // SAFETY: the caller's out-pointer, checked non-NULL.
        unsafe { *event = p.cast() };
        return 0;
    }
}

/// `rdma_ack_cm_event`: frees an event `rdma_get_cm_event` returned.
#[export_name = "softib_rdmacm_rdma_ack_cm_event"]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> libc::c_int {
    if !registry::remove(event, Kind::CmEvent) {
        return minus_one(libc::EINVAL);
    }
    // SAFETY: a CmaEvent rdma_get_cm_event handed out, no longer registered.
    unsafe { Box::from_raw(event.cast::<CmaEvent>()) }.uncount();
    0
}

/// Waits for a synchronous id's next event (rdma-core's `ucma_complete`): 0, or -1 with the
/// event's error (ECONNREFUSED for a rejection). Asynchronous ids return 0 at once.
pub fn complete(sid: &mut SoftCmId) -> libc::c_int {
    if !sid.state().sync {
        return 0;
    }
    if !sid.id.event.is_null() {
        // SAFETY: the event the previous call left.
        unsafe { rdma_ack_cm_event(sid.id.event) };
        sid.id.event = std::ptr::null_mut();
    }
    let mut ev = std::ptr::null_mut();
    // SAFETY: the id's own channel.
    if unsafe { rdma_get_cm_event(sid.id.channel, &mut ev) } != 0 {
        return -1;
    }
    sid.id.event = ev;
    // SAFETY: just returned.
    let e = unsafe { &*ev };
    if e.status != 0 {
        if e.event == RDMA_CM_EVENT_REJECTED {
            return minus_one(libc::ECONNREFUSED);
        }
        return minus_one(e.status.abs());
    }
    match e.event {
        RDMA_CM_EVENT_UNREACHABLE | RDMA_CM_EVENT_CONNECT_ERROR => minus_one(libc::ETIMEDOUT),
        RDMA_CM_EVENT_REJECTED => minus_one(libc::ECONNREFUSED),
        RDMA_CM_EVENT_ADDR_ERROR | RDMA_CM_EVENT_ROUTE_ERROR => minus_one(libc::EHOSTUNREACH),
        _ => 0,
    }
}

/// `rdma_migrate_id`: moves the id (and its unread events) to another channel; NULL makes it
/// synchronous on a private channel.
#[export_name = "softib_rdmacm_rdma_migrate_id"]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    let (new, sync) = if channel.is_null() {
        match new_channel() {
            Ok(ch) => (ch, true),
            Err(e) => return minus_one(e),
        }
    } else if registry::is_live(channel.cast::<SoftCmChannel>(), Kind::CmChannel) {
        (channel.cast::<SoftCmChannel>(), false)
    } else {
        return minus_one(libc::EINVAL);
    };
    let p: *mut SoftCmId = sid;
    let old_sync = sid.state().sync;
    let moved = sid.channel().map(|c| c.take_for(p)).unwrap_or_default();
    let old = sid.id.channel;
    sid.id.channel = new.cast();
    sid.state().sync = sync;
    // SAFETY: a live channel.
    let nch = unsafe { &*new };
    for ev in moved {
        nch.push(ev);
    }
    if old_sync && old != new.cast() {
        // SAFETY: the id's former private channel, now unused.
        unsafe { rdma_destroy_event_channel(old) };
    }
    0
}

/// `rdma_set_option`: the type of service, address reuse, address-family only and the ACK
/// timeout are taken (the last two are what softib does anyway); an IB path record is
/// refused (softib resolves its own route).
#[export_name = "softib_rdmacm_rdma_set_option"]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: libc::c_int,
    optname: libc::c_int,
    optval: *mut libc::c_void,
    optlen: usize,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    if optval.is_null() {
        return minus_one(libc::EINVAL);
    }
    let (level, optname) = (level as u32, optname as u32);
    match (level, optname) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) if optlen >= 1 => {
            // SAFETY: at least one byte, the caller's.
            sid.state().tos = unsafe { *optval.cast::<u8>() };
            0
        }
        (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY) if optlen >= 4 => 0,
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) if optlen >= 1 => {
            // SAFETY: at least one byte, the caller's.
            let t = unsafe { *optval.cast::<u8>() };
            sid.state().ack_timeout = Some(t.min(31));
            0
        }
        (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => minus_one(libc::ENOSYS),
        _ => minus_one(libc::EINVAL),
    }
}

/// `rdma_notify`: a QP event the application saw (IBV_EVENT_COMM_EST: data came before the
/// RTU); the connection is then taken as established.
#[export_name = "softib_rdmacm_rdma_notify"]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: ibv_event_type) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    if event != IBV_EVENT_COMM_EST {
        return 0;
    }
    kern::notify_established(sid);
    0
}

fn id_port(sid: &SoftCmId, local: bool) -> u16 {
    let st = sid.state();
    let a = if local { st.src } else { st.dst };
    a.map(|a| a.port()).unwrap_or(0).to_be()
}

/// `rdma_get_src_port`: the id's local port (network order), 0 when unbound.
#[export_name = "softib_rdmacm_rdma_get_src_port"]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    soft_id(id).map(|s| id_port(s, true)).unwrap_or(0)
}

/// `rdma_get_dst_port`: the id's peer port (network order), 0 when unknown.
#[export_name = "softib_rdmacm_rdma_get_dst_port"]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    soft_id(id).map(|s| id_port(s, false)).unwrap_or(0)
}

/// `rdma_set_local_ece`: softib's QPs have no vendor options to agree on.
#[export_name = "softib_rdmacm_rdma_set_local_ece"]
pub unsafe extern "C" fn rdma_set_local_ece(
    id: *mut rdma_cm_id,
    _ece: *mut libc::c_void,
) -> libc::c_int {
    if soft_id(id).is_none() {
        return minus_one(libc::EINVAL);
    }
    minus_one(libc::EOPNOTSUPP)
}

/// `rdma_get_remote_ece`: as `rdma_set_local_ece`.
#[export_name = "softib_rdmacm_rdma_get_remote_ece"]
pub unsafe extern "C" fn rdma_get_remote_ece(
    id: *mut rdma_cm_id,
    _ece: *mut libc::c_void,
) -> libc::c_int {
    if soft_id(id).is_none() {
        return minus_one(libc::EINVAL);
    }
    minus_one(libc::EOPNOTSUPP)
}
