//! Devices and contexts: `ibv_get_device_list`, `ibv_open_device`, the queries, async events.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use softib_core::verbs::types::{GidType, LinkLayer, Mtu};
use softib_core::HcaConfig;
use softib_udp::{Device, DeviceConfig};

use crate::config::{self, DeviceSpec};
use crate::context::{self, Shared};
use crate::registry::{self, Kind};
use crate::util::{self, minus_one, null_errno, ret_errno};
use crate::verbs_h::*;

/// `struct ibv_device` and what softib knows of it. Devices live as long as the process.
#[repr(C)]
pub struct SoftDevice {
    /// What the application sees (must be first).
    pub dev: ibv_device,
    /// Configuration.
    pub spec: DeviceSpec,
    /// Index in the device list (`ibv_get_device_index`).
    pub index: i32,
    /// GUID before the device is opened (from the configured address).
    pub guid: u64,
}

// SAFETY: immutable after creation.
unsafe impl Send for SoftDevice {}
unsafe impl Sync for SoftDevice {}

// Boxed: the `ibv_device` addresses handed out must never move.
#[allow(clippy::vec_box)]
static DEVICES: OnceLock<Vec<Box<SoftDevice>>> = OnceLock::new();

#[allow(clippy::vec_box)]
pub(crate) fn devices() -> &'static [Box<SoftDevice>] {
    DEVICES.get_or_init(|| {
        config::devices()
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let mut d: ibv_device = util::zeroed();
                d.node_type = IBV_NODE_CA;
                d.transport_type = IBV_TRANSPORT_IB;
                util::copy_cstr(&mut d.name, &spec.name);
                util::copy_cstr(&mut d.dev_name, &format!("uverbs{i}"));
                util::copy_cstr(
                    &mut d.dev_path,
                    &format!("/sys/class/infiniband_verbs/uverbs{i}"),
                );
                util::copy_cstr(
                    &mut d.ibdev_path,
                    &format!("/sys/class/infiniband/{}", spec.name),
                );
                let ip = spec
                    .bind
                    .map(|b| b.ip())
                    .unwrap_or(config::loopback(1).ip());
                let guid = HcaConfig::node_guid_for(node_id_of(ip));
                Box::new(SoftDevice {
                    dev: d,
                    spec,
                    index: i as i32,
                    guid,
                })
            })
            .collect()
    })
}

fn node_id_of(ip: IpAddr) -> u32 {
    match softib_udp::frame::canonical_ip(ip) {
        IpAddr::V4(a) => u32::from(a),
        IpAddr::V6(a) => {
            let o = a.octets();
            u32::from_be_bytes([o[12], o[13], o[14], o[15]])
        }
    }
}

/// Finds our device behind an `ibv_device` pointer.
pub fn soft_device(d: *mut ibv_device) -> Option<&'static SoftDevice> {
    devices()
        .iter()
        .find(|s| std::ptr::eq(&s.dev, d))
        .map(|b| &**b)
}

/// A context: `struct verbs_context` (whose last field is the `ibv_context` the application
/// holds) followed by softib's state.
#[repr(C)]
pub struct SoftContext {
    /// Must be first.
    pub vctx: verbs_context,
    /// The process's engine of the device, shared with its other contexts on it.
    pub shared: Arc<Shared>,
    /// The async events of the objects made through this context.
    pub events: context::AsyncEvents,
    /// The device.
    pub device: &'static SoftDevice,
}

impl SoftContext {
    /// The context behind an `ibv_context` pointer, if it is a live one.
    pub fn from_ctx<'a>(ctx: *mut ibv_context) -> Option<&'a SoftContext> {
        if !registry::is_live(ctx, Kind::Context) {
            return None;
        }
        // SAFETY: live contexts are the `context` field of a SoftContext's verbs_context.
        unsafe { Some(&*Self::from_ctx_unchecked(ctx)) }
    }

    /// The same without the registry look-up (data path: the object was checked when made).
    ///
    /// # Safety
    /// `ctx` must be the `ibv_context` of a live SoftContext.
    #[inline]
    pub unsafe fn from_ctx_unchecked(ctx: *mut ibv_context) -> *mut SoftContext {
        ctx.cast::<u8>()
            .sub(std::mem::offset_of!(verbs_context, context))
            .cast::<SoftContext>()
    }

    /// The `ibv_context` the application sees.
    pub fn ctx_ptr(&self) -> *mut ibv_context {
        std::ptr::addr_of!(self.vctx.context) as *mut ibv_context
    }
}

// ----- device list -----------------------------------------------------------------------

symver!(ibv_get_device_list);
#[export_name = "softib_ibv_get_device_list"]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut i32) -> *mut *mut ibv_device {
    let devs = devices();
    // calloc: ibv_free_device_list frees it with free().
    let list = libc::calloc(devs.len() + 1, std::mem::size_of::<*mut ibv_device>())
        .cast::<*mut ibv_device>();
    if list.is_null() {
        return null_errno(libc::ENOMEM);
    }
    for (i, d) in devs.iter().enumerate() {
        *list.add(i) = std::ptr::addr_of!(d.dev) as *mut ibv_device;
    }
    if !num_devices.is_null() {
        *num_devices = devs.len() as i32;
    }
    list
}

symver!(ibv_free_device_list);
#[export_name = "softib_ibv_free_device_list"]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    if !list.is_null() {
        libc::free(list.cast());
    }
}

symver!(ibv_get_device_name);
#[export_name = "softib_ibv_get_device_name"]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const libc::c_char {
    match soft_device(device) {
        Some(d) => d.dev.name.as_ptr(),
        None => null_errno(libc::EINVAL),
    }
}

symver!(ibv_get_device_guid);
#[export_name = "softib_ibv_get_device_guid"]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    match soft_device(device) {
        Some(d) => d.guid.to_be(),
        None => {
            util::set_errno(libc::EINVAL);
            0
        }
    }
}

symver!(ibv_get_device_index);
#[export_name = "softib_ibv_get_device_index"]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> i32 {
    match soft_device(device) {
        Some(d) => d.index,
        None => minus_one(libc::EINVAL),
    }
}

// ----- open / close ------------------------------------------------------------------------

/// The MTU rxe would give a RoCE port on the interface holding `ip` (loopback: 4096).
fn interface_mtu(ip: IpAddr) -> Mtu {
    let netdev = netdev_mtu(ip).unwrap_or(1500);
    let mut mtu = Mtu::for_roce_link(netdev).unwrap_or(Mtu::Mtu1024);
    if let Some(cap) = config::mtu_cap().and_then(Mtu::from_bytes) {
        if cap.bytes() < mtu.bytes() {
            mtu = cap;
        }
    }
    mtu
}

fn netdev_mtu(ip: IpAddr) -> Option<u32> {
    if ip.is_loopback() {
        return Some(65536);
    }
    let (name, _) = interface_of(ip)?;
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The name and index of the network interface that holds `ip` (`lo` for a loopback address
/// the interface list does not name, as 127.0.0.2 on Linux, whose `lo` holds 127.0.0.0/8).
pub(crate) fn interface_of(ip: IpAddr) -> Option<(String, u32)> {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return None;
    }
    let mut name = None;
    let mut p = ifap;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        // SAFETY: ifa_addr, if set, is a sockaddr of the size its family says.
        let addr = unsafe { crate::cma::addr::from_sockaddr(ifa.ifa_addr) };
        if addr.is_some_and(|a| a.ip() == ip) {
            // SAFETY: ifa_name is a C string.
            name = Some(
                unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
                    .to_string_lossy()
                    .into_owned(),
            );
            break;
        }
        p = ifa.ifa_next;
    }
    // SAFETY: the list from getifaddrs.
    unsafe { libc::freeifaddrs(ifap) };
    let name = name.or_else(|| ip.is_loopback().then(|| "lo".to_string()))?;
    let c = std::ffi::CString::new(name.clone()).ok()?;
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (index != 0).then_some((name, index))
}

static PCAP_SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The engines this process has open, by bound address: every context of a device shares
/// its engine, as the contexts of a hardware device share the HCA.
/// Each entry carries the process id that opened it: a child after fork(2) sees its
/// parent's entries and must not use them.
static ENGINES: Mutex<Vec<(u32, SocketAddr, Weak<Shared>)>> = Mutex::new(Vec::new());

/// The process's engine of the device `spec` describes: the one open already, or a new one
/// (its device opened as a member of the host-wide device of its address, its progress
/// thread started).
fn engine_for(spec: &DeviceSpec) -> std::io::Result<Arc<Shared>> {
    let mut engines = ENGINES.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id();
    engines.retain(|(pid, _, w)| *pid == me && w.strong_count() > 0);
    let candidates = candidates(spec);
    for addr in &candidates {
        if let Some(sh) = engines
            .iter()
            .find(|(_, a, _)| a == addr)
            .and_then(|(_, _, w)| w.upgrade())
        {
            return Ok(sh);
        }
    }
    let dev = open_engine(spec, candidates)?;
    let shared = context::new_shared(dev)?;
    let thread = context::spawn_progress(shared.clone())?;
    *shared.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
    engines.push((me, shared.local, Arc::downgrade(&shared)));
    Ok(shared)
}

/// Where a device binds, in order of preference.
fn candidates(spec: &DeviceSpec) -> Vec<SocketAddr> {
    match spec.bind {
        Some(b) => vec![b],
        // Every loopback address on the RoCEv2 port, then, when that port is taken on all of
        // them (a kernel rxe holds it on the wildcard address), on the fallback port, where
        // all "auto" devices then meet.
        None => [softib_wire::udp::ROCEV2_PORT, config::FALLBACK_PORT]
            .into_iter()
            .flat_map(|port| {
                (config::FIRST_LOOPBACK..=config::LAST_LOOPBACK)
                    .map(move |n| SocketAddr::new(config::loopback(n).ip(), port))
            })
            .collect(),
    }
}

fn open_engine(spec: &DeviceSpec, candidates: Vec<SocketAddr>) -> std::io::Result<Device> {
    let mut last = std::io::Error::from(std::io::ErrorKind::AddrInUse);
    for addr in candidates {
        let mut cfg = DeviceConfig::new(addr);
        cfg.active_mtu = interface_mtu(addr.ip());
        cfg.max_unacked_psns = config::window();
        cfg.transport = config::transport();
        cfg.clock = config::clock();
        if spec.bind.is_none() {
            cfg.peer_port = addr.port();
        }
        if let Some(base) = config::pcap_base() {
            let n = PCAP_SEQ.fetch_add(1, Ordering::Relaxed);
            cfg.pcap = Some(format!("{base}.{}.{n}.pcap", std::process::id()).into());
        }
        match Device::open(&cfg) {
            Ok(mut d) => {
                for (peer, via) in config::peer_via() {
                    d.add_route(peer, via);
                }
                return Ok(d);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && spec.bind.is_none() => {
                last = e;
            }
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// In a child after fork(): the parent's contexts and objects are not the child's (rdma-core:
/// a child may not use its parent's verbs resources, and their progress threads did not
/// follow it). They are forgotten, so a control verb on one fails with EINVAL instead of
/// touching the parent's engine; the child opens its own devices.
extern "C" fn forget_parent_objects() {
    registry::clear();
    // The parent's engines (their sockets, memberships and progress threads) are not the
    // child's either (`engine_for` skips entries of another process id): a device the child
    // opens is a new member of its host-wide device.
    crate::cma::addr::forget_after_fork();
    crate::cma::rsocket::forget_after_fork();
}

static ATFORK: std::sync::Once = std::sync::Once::new();

symver!(ibv_open_device);
#[export_name = "softib_ibv_open_device"]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    let Some(sd) = soft_device(device) else {
        return null_errno(libc::ENODEV);
    };
    match open_context(sd, None) {
        Ok(ctx) => ctx,
        Err(e) => null_errno(e),
    }
}

/// Opens a context of `sd`, bound where its configuration says or, if `bind` is given, at
/// that address (the connection manager gives a process's device the address an
/// application binds). Returns the `ibv_context` or an errno.
pub(crate) unsafe fn open_context(
    sd: &'static SoftDevice,
    bind: Option<SocketAddr>,
) -> Result<*mut ibv_context, i32> {
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only touches this library's registry.
        unsafe { libc::pthread_atfork(None, None, Some(forget_parent_objects)) };
        // SAFETY: registers a handler that only touches this library's live contexts.
        unsafe { libc::atexit(wind_up_at_exit) };
    });
    let spec = match bind {
        Some(b) => DeviceSpec {
            bind: Some(b),
            ..sd.spec.clone()
        },
        None => sd.spec.clone(),
    };
    let shared = engine_for(&spec).map_err(|e| e.raw_os_error().unwrap_or(libc::ENODEV))?;
    let events =
        context::AsyncEvents::new().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
    let ip = shared.local.ip();
    shared.contexts.fetch_add(1, Ordering::AcqRel);
    let device = std::ptr::addr_of!(sd.dev) as *mut ibv_device;
    let mut vctx: verbs_context = util::zeroed();
    vctx.sz = std::mem::size_of::<verbs_context>();
    crate::ex::fill_verbs_context(&mut vctx);
    let c = &mut vctx.context;
    c.device = device;
    crate::cq::fill_ops(&mut c.ops);
    crate::qp::fill_ops(&mut c.ops);
    c.cmd_fd = shared.wake_fd;
    c.async_fd = events.fd;
    c.num_comp_vectors = 1;
    // __VERBS_ABI_IS_EXTENDED: the extended ops of verbs_context are valid.
    c.abi_compat = usize::MAX as *mut libc::c_void;
    let sc = Box::into_raw(Box::new(SoftContext {
        vctx,
        shared,
        events,
        device: sd,
    }));
    let ctx = (*sc).ctx_ptr();
    registry::add(ctx, Kind::Context);
    crate::cma::addr::context_opened(ctx, ip, sd.index);
    Ok(ctx)
}

/// At exit, contexts still open (the connection manager's, which librdmacm never closes, and
/// any the program left open) write their captures and counters as a closed context does.
extern "C" fn wind_up_at_exit() {
    let mut done: Vec<*const Shared> = Vec::new();
    for c in crate::cma::addr::live_contexts() {
        if let Some(sc) = SoftContext::from_ctx(c as *mut ibv_context) {
            // Once per engine (its contexts share it).
            if !done.contains(&Arc::as_ptr(&sc.shared)) {
                done.push(Arc::as_ptr(&sc.shared));
                wind_up(&sc.shared);
            }
        }
    }
    // A program that exits with its contexts open leaves no shared-memory inbox behind, and
    // leaves its host-wide devices (the last member removes the table).
    softib_udp::shm::remove_inboxes();
    softib_udp::host::leave_all();
}

/// What a context does when it closes, or at exit if the connection manager still holds it:
/// sends what is queued, writes its capture (`SOFTIB_PCAP`), prints its counters
/// (`SOFTIB_STATS`).
pub(crate) fn wind_up(s: &Shared) {
    let mut eng = s.lock();
    eng.flush(s);
    let _ = eng.dev.flush_pcap();
    if std::env::var_os("SOFTIB_STATS").is_some() {
        let at = eng.dev.local_addr();
        let mut lines = vec![
            format!("softib {at}: runtime {:?}", eng.dev.stats()),
            format!("softib {at}: hca {:?}", eng.dev.hca().counters()),
            format!("softib {at}: {:?}", eng.dev.clock()),
            format!("softib {at}: progress thread {:?}", s.progress),
        ];
        let pages = crate::fault::pages_mapped();
        if pages > 0 {
            lines.push(format!(
                "softib: {pages} page(s) mapped where the process had unmapped registered \
                 memory softib then wrote or read"
            ));
        }
        // Each line in one write(2): eprintln! writes a line in pieces, which the output of
        // other processes sharing the stream (MPI ranks) splits, and which launchers that
        // tag what they forward (mpirun --tag-output, mpiexec -l) tag piece by piece.
        for mut line in lines {
            line.push('\n');
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        }
    }
}

symver!(ibv_close_device);
#[export_name = "softib_ibv_close_device"]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> i32 {
    // ibv_open_device(3): "ibv_close_device() returns 0 on success, -1 on failure."
    if !registry::remove(ctx, Kind::Context) {
        return minus_one(libc::EINVAL);
    }
    crate::cma::addr::context_closed(ctx);
    // What the context made goes with it, as the kernel destroys a closed uverbs file's
    // objects: the engine lives on for the process's other contexts.
    destroy_objects_of(ctx);
    let sc = SoftContext::from_ctx_unchecked(ctx);
    let s = (*sc).shared.clone();
    drop(Box::from_raw(sc));
    if s.contexts.fetch_sub(1, Ordering::AcqRel) == 1 {
        // The last context of the engine: it stops.
        wind_up(&s);
        s.stop.store(true, Ordering::Release);
        util::signal(s.wake_fd);
        let handle = s.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
    0
}

/// Destroys every object made through `ctx` (a context being closed), dependants first.
unsafe fn destroy_objects_of(ctx: *mut ibv_context) {
    let objects = registry::snapshot();
    // Every verbs object (and softib's RD objects) begins with its context pointer.
    let of_ctx = |kind: Kind| {
        objects
            .iter()
            .filter(move |(p, k)| *k == kind && *(*p as *const *mut ibv_context) == ctx)
            .map(|&(p, _)| p)
            .collect::<Vec<usize>>()
    };
    for p in of_ctx(Kind::Qp) {
        crate::qp::destroy_qp(p as *mut ibv_qp, false);
    }
    for p in of_ctx(Kind::Eec) {
        crate::rd::softib_destroy_eec(p as *mut crate::rd::SoftEec);
    }
    for p in of_ctx(Kind::Srq) {
        crate::qp::ibv_destroy_srq(p as *mut ibv_srq);
    }
    for p in of_ctx(Kind::Cq) {
        crate::cq::ibv_destroy_cq(p as *mut ibv_cq);
    }
    for p in of_ctx(Kind::Ah) {
        crate::mr::ibv_destroy_ah(p as *mut ibv_ah);
    }
    for p in of_ctx(Kind::Mr) {
        crate::mr::ibv_dereg_mr(p as *mut ibv_mr);
    }
    for p in of_ctx(Kind::Pd) {
        crate::mr::ibv_dealloc_pd(p as *mut ibv_pd);
    }
    for p in of_ctx(Kind::Xrcd) {
        crate::xrc::close_xrcd(p as *mut ibv_xrcd);
    }
    for p in of_ctx(Kind::Rdd) {
        crate::rd::softib_dealloc_rdd(p as *mut crate::rd::SoftRdd);
    }
    for p in of_ctx(Kind::Channel) {
        crate::cq::ibv_destroy_comp_channel(p as *mut ibv_comp_channel);
    }
}

// ----- queries -------------------------------------------------------------------------------

/// Fills `ibv_device_attr` from the HCA.
pub fn device_attr(sc: &SoftContext) -> ibv_device_attr {
    let eng = sc.shared.lock();
    let d = eng.dev.hca().query_device();
    let mut a: ibv_device_attr = util::zeroed();
    util::copy_cstr(&mut a.fw_ver, env!("CARGO_PKG_VERSION"));
    a.node_guid = d.node_guid.to_be();
    a.sys_image_guid = d.sys_image_guid.to_be();
    a.max_mr_size = d.max_mr_size;
    a.page_size_cap = d.page_size_cap;
    a.vendor_id = d.vendor_id;
    a.vendor_part_id = d.vendor_part_id;
    a.hw_ver = d.hw_ver;
    let i = |v: u32| v.min(i32::MAX as u32) as i32;
    a.max_qp = i(d.max_qp);
    a.max_qp_wr = i(d.max_qp_wr);
    a.device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR
        | IBV_DEVICE_BAD_QKEY_CNTR
        | IBV_DEVICE_AUTO_PATH_MIG
        | IBV_DEVICE_CHANGE_PHY_PORT
        | IBV_DEVICE_UD_AV_PORT_ENFORCE
        | IBV_DEVICE_PORT_ACTIVE_EVENT
        | IBV_DEVICE_SYS_IMAGE_GUID
        | IBV_DEVICE_RC_RNR_NAK_GEN
        | IBV_DEVICE_SRQ_RESIZE
        | IBV_DEVICE_N_NOTIFY_CQ
        | IBV_DEVICE_XRC;
    a.max_sge = i(d.max_sge);
    a.max_sge_rd = i(d.max_sge_rd);
    a.max_cq = i(d.max_cq);
    a.max_cqe = i(d.max_cqe);
    a.max_mr = i(d.max_mr);
    a.max_pd = i(d.max_pd);
    a.max_qp_rd_atom = i(d.max_qp_rd_atom);
    a.max_res_rd_atom = i(d.max_res_rd_atom);
    a.max_qp_init_rd_atom = i(d.max_qp_init_rd_atom);
    a.atomic_cap = match d.atomic_cap {
        softib_core::verbs::types::AtomicCap::None => IBV_ATOMIC_NONE,
        softib_core::verbs::types::AtomicCap::Hca => IBV_ATOMIC_HCA,
        softib_core::verbs::types::AtomicCap::Global => IBV_ATOMIC_GLOB,
    };
    a.max_mw = 0;
    a.max_mcast_grp = i(d.max_mcast_grp);
    a.max_mcast_qp_attach = i(d.max_mcast_qp_attach);
    a.max_total_mcast_qp_attach = i(d.max_total_mcast_qp_attach);
    a.max_ah = i(d.max_ah);
    a.max_srq = i(d.max_srq);
    a.max_srq_wr = i(d.max_srq_wr);
    a.max_srq_sge = i(d.max_srq_sge);
    a.max_pkeys = d.max_pkeys;
    a.local_ca_ack_delay = d.local_ca_ack_delay;
    a.phys_port_cnt = d.phys_port_cnt;
    a
}

symver!(ibv_query_device);
#[export_name = "softib_ibv_query_device"]
pub unsafe extern "C" fn ibv_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> i32 {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return ret_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return ret_errno(libc::EINVAL);
    }
    *attr = device_attr(sc);
    0
}

/// Fills `ibv_port_attr` (the full, current layout).
pub fn port_attr(sc: &SoftContext, port: u8) -> Result<ibv_port_attr, i32> {
    let eng = sc.shared.lock();
    let p = eng.dev.hca().query_port(port).map_err(|_| libc::EINVAL)?;
    let mut a: ibv_port_attr = util::zeroed();
    a.state = p.state.raw();
    a.max_mtu = u32::from(p.max_mtu.raw());
    a.active_mtu = u32::from(p.active_mtu.raw());
    a.gid_tbl_len = p.gid_tbl_len as i32;
    a.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
    a.max_msg_sz = p.max_msg_sz;
    a.pkey_tbl_len = p.pkey_tbl_len;
    a.lid = p.lid;
    a.sm_lid = p.sm_lid;
    a.lmc = p.lmc;
    a.max_vl_num = p.max_vl_num;
    a.active_width = 2; // 4X
    a.active_speed = 32; // EDR (25 Gb/s per lane), as rxe reports
    a.phys_state = 5; // LinkUp
    a.link_layer = match p.link_layer {
        LinkLayer::InfiniBand => IBV_LINK_LAYER_INFINIBAND as u8,
        LinkLayer::Ethernet => IBV_LINK_LAYER_ETHERNET as u8,
    };
    Ok(a)
}

symver!(ibv_query_port);
/// `ibv_query_port`, the exported (compat) symbol: the static inline wrapper of verbs.h calls
/// `verbs_context::query_port` instead, so this one only serves callers that bypass it. It
/// fills the old layout (`struct _compat_ibv_port_attr`: everything up to `link_layer`).
#[export_name = "softib_ibv_query_port"]
pub unsafe extern "C" fn ibv_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut _compat_ibv_port_attr,
) -> i32 {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return ret_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return ret_errno(libc::EINVAL);
    }
    match port_attr(sc, port) {
        Ok(a) => {
            // rdma-core's `struct _compat_ibv_port_attr` (opaque in the header) is the
            // original layout: the current one up to `flags`, without `port_cap_flags2`.
            std::ptr::copy_nonoverlapping(
                (&a as *const ibv_port_attr).cast::<u8>(),
                attr.cast::<u8>(),
                std::mem::offset_of!(ibv_port_attr, port_cap_flags2),
            );
            0
        }
        Err(e) => ret_errno(e),
    }
}

/// `verbs_context::query_port`: what `ibv_query_port()` in an application calls.
pub unsafe extern "C" fn vctx_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    attr_size: usize,
) -> i32 {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return ret_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return ret_errno(libc::EINVAL);
    }
    match port_attr(sc, port) {
        Ok(a) => {
            let n = attr_size.min(std::mem::size_of::<ibv_port_attr>());
            std::ptr::copy_nonoverlapping(
                (&a as *const ibv_port_attr).cast::<u8>(),
                attr.cast::<u8>(),
                n,
            );
            0
        }
        Err(e) => ret_errno(e),
    }
}

/// The GID table entry `index` of `port`.
fn gid_entry(sc: &SoftContext, port: u32, index: u32) -> Result<(ibv_gid, GidType), i32> {
    let port = u8::try_from(port).map_err(|_| libc::EINVAL)?;
    let eng = sc.shared.lock();
    let p = eng.dev.hca().query_port(port).map_err(|_| libc::EINVAL)?;
    let e = p.gids.get(index as usize).ok_or(libc::EINVAL)?;
    Ok((ibv_gid { raw: e.gid.0 }, e.gid_type))
}

symver!(ibv_query_gid);
#[export_name = "softib_ibv_query_gid"]
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: i32,
    gid: *mut ibv_gid,
) -> i32 {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return minus_one(libc::EINVAL);
    };
    if gid.is_null() || index < 0 {
        return minus_one(libc::EINVAL);
    }
    match gid_entry(sc, u32::from(port), index as u32) {
        Ok((g, _)) => {
            *gid = g;
            0
        }
        Err(e) => minus_one(e),
    }
}

symver!(ibv_query_gid_type);
#[export_name = "softib_ibv_query_gid_type"]
pub unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: u32,
    gid_type: *mut u32,
) -> i32 {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return minus_one(libc::EINVAL);
    };
    if gid_type.is_null() {
        return minus_one(libc::EINVAL);
    }
    // rdma-core's private `enum ibv_gid_type_sysfs` (driver.h): 0 = IB / RoCE v1,
    // 1 = RoCE v2 (not the public `enum ibv_gid_type`).
    match gid_entry(sc, u32::from(port), index) {
        Ok((_, t)) => {
            *gid_type = u32::from(t == GidType::RoceV2);
            0
        }
        Err(e) => minus_one(e),
    }
}

fn gid_type_raw(t: GidType) -> u32 {
    match t {
        GidType::Ib => IBV_GID_TYPE_IB,
        GidType::RoceV2 => IBV_GID_TYPE_ROCE_V2,
        #[allow(unreachable_patterns)]
        _ => IBV_GID_TYPE_ROCE_V1,
    }
}

fn fill_gid_entry(sc: &SoftContext, port: u32, index: u32) -> Result<ibv_gid_entry, i32> {
    let (gid, t) = gid_entry(sc, port, index).map_err(|_| libc::ENODATA)?;
    let mut e: ibv_gid_entry = util::zeroed();
    e.gid = gid;
    e.gid_index = index;
    e.port_num = port;
    e.gid_type = gid_type_raw(t);
    // The interface that holds the device's address (`lo` on loopback), as the kernel names a
    // RoCE GID's net device: programs find the interface of a GID by it.
    e.ndev_ifindex = interface_of(sc.shared.local.ip()).map_or(0, |(_, i)| i);
    Ok(e)
}

symver!(_ibv_query_gid_ex);
#[export_name = "softib__ibv_query_gid_ex"]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> i32 {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return ret_errno(libc::EINVAL);
    };
    if entry.is_null() || flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
        return ret_errno(libc::EINVAL);
    }
    match fill_gid_entry(sc, port, index) {
        Ok(e) => {
            *entry = e;
            0
        }
        Err(e) => ret_errno(e),
    }
}

symver!(_ibv_query_gid_table);
#[export_name = "softib__ibv_query_gid_table"]
pub unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return -(libc::EINVAL as isize);
    };
    if (entries.is_null() && max_entries > 0)
        || flags != 0
        || entry_size < std::mem::size_of::<ibv_gid_entry>()
    {
        return -(libc::EINVAL as isize);
    }
    let ports = {
        let eng = sc.shared.lock();
        eng.dev.hca().query_device().phys_port_cnt
    };
    let mut n = 0usize;
    for port in 1..=u32::from(ports) {
        let mut idx = 0;
        while let Ok(e) = fill_gid_entry(sc, port, idx) {
            if n >= max_entries {
                return -(libc::EINVAL as isize);
            }
            // entry_size may be larger than ours (a newer header): stride by it.
            let dst = entries
                .cast::<u8>()
                .add(n * entry_size)
                .cast::<ibv_gid_entry>();
            dst.write_unaligned(e);
            n += 1;
            idx += 1;
        }
    }
    n as isize
}

symver!(ibv_query_pkey);
#[export_name = "softib_ibv_query_pkey"]
pub unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: i32,
    pkey: *mut u16,
) -> i32 {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return minus_one(libc::EINVAL);
    };
    if pkey.is_null() || index < 0 {
        return minus_one(libc::EINVAL);
    }
    let eng = sc.shared.lock();
    match eng.dev.hca().query_port(port) {
        Ok(p) => match p.pkeys.get(index as usize) {
            Some(k) => {
                *pkey = k.to_be();
                0
            }
            None => minus_one(libc::EINVAL),
        },
        Err(_) => minus_one(libc::EINVAL),
    }
}

symver!(ibv_get_pkey_index);
#[export_name = "softib_ibv_get_pkey_index"]
pub unsafe extern "C" fn ibv_get_pkey_index(ctx: *mut ibv_context, port: u8, pkey: u16) -> i32 {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return minus_one(libc::EINVAL);
    };
    let eng = sc.shared.lock();
    match eng.dev.hca().query_port(port) {
        Ok(p) => match p.pkeys.iter().position(|k| k.to_be() == pkey) {
            Some(i) => i as i32,
            None => minus_one(libc::ENOENT),
        },
        Err(_) => minus_one(libc::EINVAL),
    }
}

// ----- async events ------------------------------------------------------------------------

symver!(ibv_get_async_event);
#[export_name = "softib_ibv_get_async_event"]
pub unsafe extern "C" fn ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> i32 {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return minus_one(libc::EINVAL);
    };
    if event.is_null() {
        return minus_one(libc::EINVAL);
    }
    loop {
        if util::wait_one(sc.events.fd) != 0 {
            return -1;
        }
        match sc.events.pop() {
            Some(Some(e)) => {
                *event = e;
                return 0;
            }
            // An event of a QP destroyed since: the next one (or EAGAIN on a non-blocking
            // descriptor with nothing more).
            Some(None) => continue,
            None => return minus_one(libc::EAGAIN),
        }
    }
}

symver!(ibv_ack_async_event);
#[export_name = "softib_ibv_ack_async_event"]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    if event.is_null() {
        return;
    }
    let e = &*event;
    match e.event_type {
        IBV_EVENT_CQ_ERR => {
            let cq = e.element.cq;
            if registry::is_live(cq, Kind::Cq) {
                (*cq).async_events_completed += 1;
            }
        }
        IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => {
            let srq = e.element.srq;
            if registry::is_live(srq, Kind::Srq) {
                (*srq).events_completed += 1;
            }
        }
        IBV_EVENT_DEVICE_FATAL
        | IBV_EVENT_PORT_ACTIVE
        | IBV_EVENT_PORT_ERR
        | IBV_EVENT_LID_CHANGE
        | IBV_EVENT_PKEY_CHANGE
        | IBV_EVENT_SM_CHANGE
        | IBV_EVENT_CLIENT_REREGISTER
        | IBV_EVENT_GID_CHANGE => {}
        _ => {
            let qp = e.element.qp;
            if registry::is_live(qp, Kind::Qp) {
                // Atomically: ibv_destroy_qp, on another thread, waits for it.
                std::sync::atomic::AtomicU32::from_ptr(std::ptr::addr_of_mut!(
                    (*qp).events_completed
                ))
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            }
        }
    }
}
