//! Addresses without a kernel RDMA stack: which context an IP address belongs to, the ports
//! of the port spaces, and `rdma_bind_addr` / `rdma_resolve_addr` / `rdma_resolve_route`.
//!
//! A softib device's RoCEv2 GID is its bound IP address (IPv4-mapped for IPv4), so resolving
//! an address is only choosing the local context: the one bound to the source address, opened
//! there on first use. A device configured "auto" (the default) binds wherever the
//! application asks, so `rdma_bind_addr` to 127.0.0.1 gives the process a device on
//! 127.0.0.1 and a client in another process, resolving 127.0.0.1, gets a device on the next
//! free loopback address: two processes on one host connect with no configuration. A
//! non-loopback destination is reached from the address the host's routing table picks for
//! it.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Mutex;

use softib_core::cm::Gid;
use softib_wire::udp::ROCEV2_PORT;

use super::{complete, kern, soft_id, CmaEvent, SoftCmId};
use crate::cma_h::*;
use crate::device::{self, SoftContext};
use crate::util::minus_one;
use crate::verbs_h::*;

/// A port held in a port space: (address or unspecified for a wildcard bind, port space,
/// port).
pub type PortKey = (IpAddr, rdma_port_space, u16);

/// A context the process has open.
#[derive(Clone, Copy)]
struct Entry {
    /// The address its device is bound to.
    ip: IpAddr,
    /// The `ibv_context`.
    ctx: usize,
    /// The device (`SoftDevice::index`).
    dev: i32,
    /// The connection manager opened it (the application's own are not the CM's).
    cm: bool,
    /// The device's context of the connection manager: the one `rdma_get_devices` returns,
    /// at the address the device opens on by itself (its configured one; an "auto" device's
    /// first free loopback address).
    home: bool,
}

/// The open contexts of the process. The connection manager uses the ones it opened, at most
/// one per address, and keeps them for the life of the process, as librdmacm keeps one
/// context per device; the application's are listed for what is done at exit.
static POOL: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
/// Each context's protection domain for ids that are given none (rdma-core's per-device
/// PD, `id->pd`), by context address.
static PDS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
/// Ports in use.
static PORTS: Mutex<Option<HashSet<PortKey>>> = Mutex::new(None);

/// First port handed out to an id that did not choose one (the Linux ephemeral range).
const EPHEMERAL_FIRST: u16 = 32768;
const EPHEMERAL_LAST: u16 = 60999;

/// The GID of a RoCEv2 port bound to `ip`.
pub fn gid_of(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(a) => Gid(a.to_ipv6_mapped().octets()),
        IpAddr::V6(a) => Gid(a.octets()),
    }
}

/// The IP address of a GID (IPv4 for an IPv4-mapped one).
pub fn ip_of(gid: Gid) -> IpAddr {
    let a = Ipv6Addr::from(gid.0);
    match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    }
}

/// Reads a `sockaddr` (AF_INET or AF_INET6) from C.
///
/// # Safety
/// `sa` must be NULL or point to a sockaddr of the size its family says.
pub unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let s = &*sa.cast::<libc::sockaddr_in>();
                Some(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))),
                    u16::from_be(s.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let s = &*sa.cast::<libc::sockaddr_in6>();
                // The scope (interface) of a link-local address is kept.
                Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                    Ipv6Addr::from(s.sin6_addr.s6_addr),
                    u16::from_be(s.sin6_port),
                    u32::from_be(s.sin6_flowinfo),
                    s.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// Writes `a` as a `sockaddr_in` / `sockaddr_in6` to `dst` (room for a `sockaddr_storage`).
///
/// # Safety
/// `dst` must have room for a `sockaddr_storage`.
pub unsafe fn to_sockaddr(dst: *mut u8, a: SocketAddr) -> libc::socklen_t {
    // SAFETY: per the contract; a zeroed storage first, then the family's structure.
    unsafe {
        std::ptr::write_bytes(dst, 0, std::mem::size_of::<libc::sockaddr_storage>());
        match a {
            SocketAddr::V4(v4) => {
                let s = dst.cast::<libc::sockaddr_in>();
                (*s).sin_family = libc::AF_INET as libc::sa_family_t;
                (*s).sin_port = v4.port().to_be();
                (*s).sin_addr.s_addr = u32::from(*v4.ip()).to_be();
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
            }
            SocketAddr::V6(v6) => {
                let s = dst.cast::<libc::sockaddr_in6>();
                (*s).sin6_family = libc::AF_INET6 as libc::sa_family_t;
                (*s).sin6_port = v6.port().to_be();
                (*s).sin6_addr.s6_addr = v6.ip().octets();
                (*s).sin6_flowinfo = v6.flowinfo().to_be();
                (*s).sin6_scope_id = v6.scope_id();
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
            }
        }
    }
}

/// The address a context's device is bound to.
pub fn context_ip(ctx: *mut ibv_context) -> Option<IpAddr> {
    let sc = SoftContext::from_ctx(ctx)?;
    let ip = sc.shared.lock().dev.local_addr().ip();
    Some(ip)
}

fn pool() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A context of device `dev` was opened at `ip` (by the application, until the connection
/// manager says it is its own: [`cm_open`]).
pub fn context_opened(ctx: *mut ibv_context, ip: IpAddr, dev: i32) {
    pool().push(Entry {
        ip,
        ctx: ctx as usize,
        dev,
        cm: false,
        home: false,
    });
}

/// In a child after fork(): the parent's contexts are not the child's (see
/// `device::forget_parent_objects`), nor their PDs and ports.
pub fn forget_after_fork() {
    pool().clear();
    PDS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    *ports() = None;
}

/// A context is being closed.
pub fn context_closed(ctx: *mut ibv_context) {
    pool().retain(|e| e.ctx != ctx as usize);
    PDS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&(c, _)| c != ctx as usize);
}

/// Every open context of the process, the application's included.
pub fn live_contexts() -> Vec<usize> {
    pool().iter().map(|e| e.ctx).collect()
}

/// The connection manager's context at `ip`, if it has one.
fn cm_context_at(ip: IpAddr) -> Option<*mut ibv_context> {
    pool()
        .iter()
        .find(|e| e.cm && e.ip == ip)
        .map(|e| e.ctx as *mut ibv_context)
}

/// Opens a context of `sd` for the connection manager (at `bind`, or where the device opens
/// by itself), or takes the one it has on the same address: one context per address.
fn cm_open(
    sd: &'static device::SoftDevice,
    bind: Option<SocketAddr>,
) -> Result<*mut ibv_context, i32> {
    if let Some(c) = bind.and_then(|b| cm_context_at(b.ip())) {
        return Ok(c);
    }
    // SAFETY: one of this library's devices.
    let ctx = unsafe { device::open_context(sd, bind)? };
    let ip = context_ip(ctx).ok_or(libc::ENODEV)?;
    if let Some(have) = cm_context_at(ip) {
        // The device opened on an address the connection manager already has a context at
        // (the engine is the same): that one stays the only one.
        // SAFETY: the context just opened, never handed out.
        unsafe { device::ibv_close_device(ctx) };
        return Ok(have);
    }
    if let Some(e) = pool().iter_mut().find(|e| e.ctx == ctx as usize) {
        e.cm = true;
    }
    Ok(ctx)
}

/// The connection manager's context of device `sd` (librdmacm's one context per device,
/// what `rdma_get_devices` lists): opened where the device opens by itself, on first use.
fn device_context(sd: &'static device::SoftDevice) -> Result<*mut ibv_context, i32> {
    if let Some(e) = pool().iter().find(|e| e.cm && e.home && e.dev == sd.index) {
        return Ok(e.ctx as *mut ibv_context);
    }
    let ctx = cm_open(sd, None)?;
    if let Some(e) = pool().iter_mut().find(|e| e.ctx == ctx as usize) {
        e.home = true;
    }
    Ok(ctx)
}

/// The context bound to `ip`: the connection manager's, or the device configured there, or
/// an "auto" device opened there. `EADDRNOTAVAIL` if no device can be at `ip` or `ip` is not
/// an address of this host, `EADDRINUSE` if another user's processes hold it.
pub fn context_for(ip: IpAddr) -> Result<*mut ibv_context, i32> {
    let _one = opening();
    context_for_locked(ip)
}

/// Serializes the look-up-or-open of the CM's contexts: threads resolving at once share
/// the device the first one opens instead of each opening its own.
fn opening() -> std::sync::MutexGuard<'static, ()> {
    static OPENING: Mutex<()> = Mutex::new(());
    OPENING.lock().unwrap_or_else(|e| e.into_inner())
}

fn context_for_locked(ip: IpAddr) -> Result<*mut ibv_context, i32> {
    if let Some(c) = cm_context_at(ip) {
        return Ok(c);
    }
    let devs = device::devices();
    if let Some(sd) = devs
        .iter()
        .find(|d| d.spec.bind.is_some_and(|b| b.ip() == ip))
    {
        device_context(sd)
    } else if is_link_local(ip) {
        // A RoCEv2 device of softib needs an address its peers reach without an interface
        // scope: an "auto" device is not opened on an IPv6 link-local address.
        Err(libc::EADDRNOTAVAIL)
    } else if let Some(sd) = devs.iter().find(|d| d.spec.bind.is_none()) {
        cm_open(sd, Some(SocketAddr::new(ip, ROCEV2_PORT)))
    } else {
        Err(libc::EADDRNOTAVAIL)
    }
}

/// A context on a loopback address of `v6`'s family: the connection manager's (a device's
/// own first), or a device configured on loopback, or an "auto" device where it opens by
/// itself (the first free loopback address).
fn loopback_context(v6: bool) -> Result<*mut ibv_context, i32> {
    let _one = opening();
    let found = {
        let p = pool();
        let on_lo = |e: &&Entry| e.cm && e.ip.is_loopback() && e.ip.is_ipv6() == v6;
        p.iter()
            .filter(on_lo)
            .find(|e| e.home)
            .or_else(|| p.iter().find(on_lo))
            .map(|e| e.ctx)
    };
    if let Some(c) = found {
        return Ok(c as *mut ibv_context);
    }
    let devs = device::devices();
    let sd = devs
        .iter()
        .find(|d| {
            d.spec
                .bind
                .is_some_and(|b| b.ip().is_loopback() && b.is_ipv6() == v6)
        })
        .or_else(|| devs.iter().find(|d| d.spec.bind.is_none() && !v6));
    match sd {
        Some(sd) => device_context(sd),
        None if v6 => context_for_locked(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        None => Err(libc::EADDRNOTAVAIL),
    }
}

/// The context of a device configured on a loopback address of `v6`'s family, if there is
/// one.
fn loopback_device(v6: bool) -> Option<*mut ibv_context> {
    let _one = opening();
    device::devices()
        .iter()
        .find(|d| {
            d.spec
                .bind
                .is_some_and(|b| b.ip().is_loopback() && b.is_ipv6() == v6)
        })
        .and_then(|sd| device_context(sd).ok())
}

/// The connection manager's context of every device, one each, in the order of the device
/// list (`rdma_get_devices`).
pub fn all_contexts() -> Vec<usize> {
    let _one = opening();
    device::devices()
        .iter()
        .filter_map(|sd| device_context(sd).ok())
        .map(|c| c as usize)
        .collect()
}

/// An IPv6 link-local address (fe80::/10).
fn is_link_local(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
}

/// The host's interface addresses (IPv6 link-local ones left out: they need a scope).
pub fn local_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list freed below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return out;
    }
    let mut p = ifap;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        // SAFETY: ifa_addr, if set, is a sockaddr of the size its family says.
        if let Some(a) = unsafe { from_sockaddr(ifa.ifa_addr) } {
            if !is_link_local(a.ip()) && !out.contains(&a.ip()) {
                out.push(a.ip());
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: the list getifaddrs returned.
    unsafe { libc::freeifaddrs(ifap) };
    out
}

/// The contexts a wildcard listen covers: one on every interface address of the host (of
/// IPv4, or of both families for the IPv6 wildcard), the process's own or an "auto" device
/// opened there, as a kernel listener on the wildcard hears every RDMA device; addresses
/// another process holds are left to it. Also every context the process already has.
pub fn wildcard_contexts(v6: bool) -> Vec<usize> {
    for ip in local_addresses() {
        if v6 || ip.is_ipv4() {
            let _ = context_for(ip);
        }
    }
    let have: Vec<usize> = pool()
        .iter()
        .filter(|e| e.cm && (v6 || e.ip.is_ipv4()))
        .map(|e| e.ctx)
        .collect();
    if have.is_empty() {
        all_contexts()
    } else {
        have
    }
}

/// The source address the host would use towards `dst`.
fn routed_source(dst: IpAddr) -> Option<IpAddr> {
    let any: SocketAddr = match dst {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(SocketAddr::new(dst, ROCEV2_PORT)).ok()?;
    Some(s.local_addr().ok()?.ip())
}

fn ports() -> std::sync::MutexGuard<'static, Option<HashSet<PortKey>>> {
    PORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes `port` (0: a free one) in port space `ps` on `ip`; the port, or `EADDRINUSE`. A port
/// of a specific address is also claimed in the table of the host-wide device there, so that
/// another process of the host cannot bind it either, as with the kernel's rdma_cm.
pub fn hold_port(ip: IpAddr, ps: rdma_port_space, port: u16) -> Result<PortKey, i32> {
    let mut g = ports();
    let set = g.get_or_insert_with(HashSet::new);
    let taken = |set: &HashSet<PortKey>, p: u16| {
        set.iter().any(|&(a, s, q)| {
            s == ps && q == p && (a == ip || a.is_unspecified() || ip.is_unspecified())
        })
    };
    let port = if port != 0 {
        if taken(set, port) || !host_claim(ip, ps, port)? {
            return Err(libc::EADDRINUSE);
        }
        port
    } else {
        let span = u32::from(EPHEMERAL_LAST - EPHEMERAL_FIRST) + 1;
        let start = kern::random_u32() % span;
        let mut found = None;
        for p in (0..span).map(|i| EPHEMERAL_FIRST + ((start + i) % span) as u16) {
            if !taken(set, p) && host_claim(ip, ps, p)? {
                found = Some(p);
                break;
            }
        }
        found.ok_or(libc::EADDRINUSE)?
    };
    let key = (ip, ps, port);
    set.insert(key);
    Ok(key)
}

/// Gives a port back.
pub fn release_port(key: PortKey) {
    if let Some(set) = ports().as_mut() {
        set.remove(&key);
    }
    let (ip, ps, port) = key;
    with_member(ip, |m| {
        m.release(
            kern::service_id(ps, port),
            softib_udp::host::PortKind::Bound,
        )
    });
}

/// Claims `port` of port space `ps` on `ip` in the table of the host-wide device there: false
/// if another process holds it. True for the unspecified address and where no device of this
/// process is at `ip` (nothing to share it with).
fn host_claim(ip: IpAddr, ps: rdma_port_space, port: u16) -> Result<bool, i32> {
    let claimed = with_member(ip, |m| {
        m.claim(
            kern::service_id(ps, port),
            softib_udp::host::PortKind::Bound,
        )
    });
    match claimed {
        None => Ok(true),
        Some(r) => r.map_err(|e| e.raw_os_error().unwrap_or(libc::ENOSPC)),
    }
}

/// Runs `f` on the membership of the host-wide device this process has at `ip`, if any.
fn with_member<T>(ip: IpAddr, f: impl FnOnce(&softib_udp::host::Member) -> T) -> Option<T> {
    if ip.is_unspecified() {
        return None;
    }
    let ctx = pool().iter().find(|e| e.ip == ip).map(|e| e.ctx)?;
    let sc = SoftContext::from_ctx(ctx as *mut ibv_context)?;
    let eng = sc.shared.lock();
    eng.dev.member().map(f)
}

/// The context's PD for ids, if it has one yet (engine lock held: nothing is allocated).
pub fn known_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    let g = PDS.lock().unwrap_or_else(|e| e.into_inner());
    g.iter()
        .find(|&&(c, _)| c == ctx as usize)
        .map_or(std::ptr::null_mut(), |&(_, pd)| pd as *mut ibv_pd)
}

/// The context's PD for ids (allocated on first use, kept for the life of the process).
/// Takes the engine lock: never called with it held. NULL if `ctx` is not a live context
/// (`ibv_alloc_pd` checks it).
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn default_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    let mut g = PDS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, pd)) = g.iter().find(|&&(c, _)| c == ctx as usize) {
        return pd as *mut ibv_pd;
    }
    // SAFETY: ibv_alloc_pd refuses a pointer that is not a live context.
    let pd = unsafe { crate::mr::ibv_alloc_pd(ctx) };
    if !pd.is_null() {
        g.push((ctx as usize, pd as usize));
    }
    pd
}

/// Records in the id (what the application reads) that it is on context `ctx` at `src`.
fn attach(sid: &mut SoftCmId, ctx: *mut ibv_context, src: SocketAddr) {
    sid.id.verbs = ctx;
    sid.id.port_num = 1;
    if sid.id.pd.is_null() {
        sid.id.pd = default_pd(ctx);
    }
    sid.set_src(src);
}

/// Binds `sid` to `a` (an unspecified address binds every context, for listening). Returns
/// an errno on failure.
pub fn bind(sid: &mut SoftCmId, a: SocketAddr) -> Result<(), i32> {
    if sid.state().src.is_some() {
        return Err(libc::EINVAL);
    }
    let ps = sid.id.ps;
    if a.ip().is_unspecified() {
        let key = hold_port(a.ip(), ps, a.port())?;
        let mut st = sid.state();
        st.port_held = Some(key);
        st.src = Some(SocketAddr::new(a.ip(), key.2));
        drop(st);
        sid.set_src(SocketAddr::new(a.ip(), key.2));
        return Ok(());
    }
    if let SocketAddr::V6(v6) = a {
        // The kernel's rdma_cm (`cma_check_linklocal`): a link-local address names an
        // interface only with its scope.
        if is_link_local(a.ip()) && v6.scope_id() == 0 {
            return Err(libc::EINVAL);
        }
    }
    let (ctx, a) = match context_for(a.ip()) {
        Ok(ctx) => (ctx, a),
        Err(libc::EADDRNOTAVAIL) if a.ip().is_loopback() => match loopback_device(a.is_ipv6()) {
            // A loopback address no device of the process can take names the host's own
            // device, as a loopback destination does for the kernel's rdma_cm: the
            // device on a loopback address, bound at its own address.
            Some(ctx) => {
                let ip = context_ip(ctx).ok_or(libc::ENODEV)?;
                (ctx, SocketAddr::new(ip, a.port()))
            }
            // None: bound as the kernel binds every loopback address (its `cma_any_addr`),
            // to no device, and listening on every one; libfabric's verbs provider then
            // takes the addresses of its RDMA interfaces.
            None => {
                let any: IpAddr = if a.is_ipv6() {
                    Ipv6Addr::UNSPECIFIED.into()
                } else {
                    Ipv4Addr::UNSPECIFIED.into()
                };
                let key = hold_port(any, ps, a.port())?;
                let src = SocketAddr::new(a.ip(), key.2);
                let mut st = sid.state();
                st.port_held = Some(key);
                st.src = Some(src);
                drop(st);
                sid.set_src(src);
                return Ok(());
            }
        },
        Err(e) => return Err(e),
    };
    kern::ensure(ctx)?;
    let key = hold_port(a.ip(), ps, a.port())?;
    let src = SocketAddr::new(a.ip(), key.2);
    {
        let mut st = sid.state();
        st.port_held = Some(key);
        st.src = Some(src);
    }
    attach(sid, ctx, src);
    Ok(())
}

/// `rdma_bind_addr`: binds the id to a local address and port (port 0: a free one). The
/// address must be one of this host's (`EADDRNOTAVAIL`) that no other process's softib
/// device holds (`EADDRINUSE`); the unspecified address listens on every device.
#[export_name = "softib_rdmacm_rdma_bind_addr"]
pub unsafe extern "C" fn rdma_bind_addr(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    // SAFETY: the caller's sockaddr.
    let Some(a) = (unsafe { from_sockaddr(addr) }) else {
        return minus_one(libc::EAFNOSUPPORT);
    };
    match bind(sid, a) {
        Ok(()) => 0,
        Err(e) => minus_one(e),
    }
}

/// Chooses the id's context and source address towards `dst`.
fn resolve(sid: &mut SoftCmId, dst: SocketAddr) -> Result<(), i32> {
    // Bound to an address of a device (rather than to none: the wildcard, or a loopback
    // address that named no device).
    let bound = sid.state().src.filter(|_| !sid.id.verbs.is_null());
    let (ctx, src_ip) = match bound {
        Some(s) => (sid.id.verbs, s.ip()),
        _ => {
            let ctx = if dst.ip().is_loopback() || dst.ip().is_unspecified() {
                loopback_context(dst.is_ipv6())?
            } else {
                let src = routed_source(dst.ip()).ok_or(libc::ENETUNREACH)?;
                context_for(src)?
            };
            (ctx, context_ip(ctx).ok_or(libc::ENODEV)?)
        }
    };
    kern::ensure(ctx)?;
    let port = match bound {
        Some(s) => s.port(),
        _ => {
            let old = sid.state().port_held.take();
            let want = old.map(|k| k.2).unwrap_or(0);
            if let Some(k) = old {
                release_port(k);
            }
            let key = hold_port(src_ip, sid.id.ps, want)?;
            sid.state().port_held = Some(key);
            key.2
        }
    };
    let dst = if dst.ip().is_unspecified() {
        SocketAddr::new(src_ip, dst.port())
    } else {
        dst
    };
    let src = SocketAddr::new(src_ip, port);
    {
        let mut st = sid.state();
        st.src = Some(src);
        st.dst = Some(dst);
    }
    attach(sid, ctx, src);
    sid.set_dst(dst, gid_of(dst.ip()));
    Ok(())
}

/// `rdma_resolve_addr`: binds the id to `src_addr` if given, else to the address the host
/// uses towards `dst_addr` (a loopback device for a loopback destination), and reports
/// RDMA_CM_EVENT_ADDR_RESOLVED. A destination is its own RoCEv2 GID: nothing is asked of the
/// network, so the event comes at once.
#[export_name = "softib_rdmacm_rdma_resolve_addr"]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut libc::sockaddr,
    dst_addr: *mut libc::sockaddr,
    _timeout_ms: libc::c_int,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    // SAFETY: the caller's sockaddrs.
    let (src, dst) = unsafe { (from_sockaddr(src_addr), from_sockaddr(dst_addr)) };
    let Some(dst) = dst else {
        return minus_one(libc::EINVAL);
    };
    if let Some(src) = src {
        if sid.state().src.is_none() {
            if let Err(e) = bind(sid, src) {
                return minus_one(e);
            }
        }
    }
    if let Err(e) = resolve(sid, dst) {
        return minus_one(e);
    }
    let p: *mut SoftCmId = sid;
    sid.raise(CmaEvent::new(p, RDMA_CM_EVENT_ADDR_RESOLVED, 0));
    complete(sid)
}

/// `rdma_resolve_route`: the one path to the destination (its MTU the port's, hop limit 64,
/// the id's type of service), reported with RDMA_CM_EVENT_ROUTE_RESOLVED.
#[export_name = "softib_rdmacm_rdma_resolve_route"]
pub unsafe extern "C" fn rdma_resolve_route(
    id: *mut rdma_cm_id,
    _timeout_ms: libc::c_int,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    let (src, dst, tos) = {
        let st = sid.state();
        (st.src, st.dst, st.tos)
    };
    let (Some(src), Some(dst)) = (src, dst) else {
        return minus_one(libc::EINVAL);
    };
    let Some(sc) = SoftContext::from_ctx(sid.id.verbs) else {
        return minus_one(libc::ENODEV);
    };
    let mtu = sc
        .shared
        .lock()
        .dev
        .hca()
        .query_port(1)
        .map(|p| p.active_mtu.raw())
        .unwrap_or(3);
    sid.set_path(gid_of(src.ip()), gid_of(dst.ip()), mtu, tos);
    let me: *mut SoftCmId = sid;
    sid.raise(CmaEvent::new(me, RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
    complete(sid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_are_addresses() {
        let v4: IpAddr = "10.99.0.2".parse().unwrap();
        let g = gid_of(v4);
        assert_eq!(&g.0[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(ip_of(g), v4);
        let v6: IpAddr = "fd00::7".parse().unwrap();
        assert_eq!(ip_of(gid_of(v6)), v6);
    }

    #[test]
    fn sockaddrs_round_trip() {
        for a in ["127.0.0.9:7174", "[fd00::1]:18515", "[fe80::1%3]:4791"] {
            let a: SocketAddr = a.parse().unwrap();
            let mut buf = [0u8; std::mem::size_of::<libc::sockaddr_storage>()];
            // SAFETY: a buffer of sockaddr_storage's size.
            unsafe {
                to_sockaddr(buf.as_mut_ptr(), a);
                assert_eq!(from_sockaddr(buf.as_ptr().cast()), Some(a));
            }
        }
        // SAFETY: NULL is refused.
        assert_eq!(unsafe { from_sockaddr(std::ptr::null()) }, None);
    }

    #[test]
    fn ports_are_held_per_address_and_space() {
        let ip: IpAddr = "127.0.0.77".parse().unwrap();
        let other: IpAddr = "127.0.0.78".parse().unwrap();
        let any: IpAddr = Ipv4Addr::UNSPECIFIED.into();
        let k = hold_port(ip, RDMA_PS_TCP, 40001).unwrap();
        assert_eq!(hold_port(ip, RDMA_PS_TCP, 40001), Err(libc::EADDRINUSE));
        assert_eq!(hold_port(any, RDMA_PS_TCP, 40001), Err(libc::EADDRINUSE));
        let u = hold_port(ip, RDMA_PS_UDP, 40001).unwrap();
        let o = hold_port(other, RDMA_PS_TCP, 40001).unwrap();
        let e = hold_port(ip, RDMA_PS_TCP, 0).unwrap();
        assert!((EPHEMERAL_FIRST..=EPHEMERAL_LAST).contains(&e.2));
        for key in [k, u, o, e] {
            release_port(key);
        }
        let again = hold_port(ip, RDMA_PS_TCP, 40001).unwrap();
        release_port(again);
    }
}
