//! What the Linux kernel does for librdmacm (`rdma_ucm` over `ib_cm`), done by each context's
//! engine: a [`CmPort`] on the context's QP1, the map from the agent's connections and
//! listeners to rdma_cm ids, and the translation of CM events into rdma_cm events on the
//! ids' channels. It runs inside the engine's I/O rounds ([`poll`]), whoever drives them: the
//! application's calls or the progress thread, which also wakes for the CM's timers.

use std::collections::HashMap;
use std::net::SocketAddr;

use softib_core::cm::{CmConfig, CmEvent, CmId, CmPort, ListenId, State};
use softib_core::time::Instant;
use softib_wire::cm::{self, rej_reason, sidr_status, IpCmHdr};
use softib_wire::Qpn;

use super::addr::{gid_of, ip_of};
use super::{alloc_id, CmaEvent, Remote, SoftCmId};
use crate::cma_h::*;
use crate::context::Engine;
use crate::device::SoftContext;
use crate::registry::{self, Kind};
use crate::util;
use crate::verbs_h::*;

/// A context's connection manager.
pub struct CmKern {
    /// The CM agent on QP1.
    pub port: CmPort,
    /// Connections (and SIDR exchanges) by the agent's id: the rdma_cm id (address).
    pub conns: HashMap<CmId, usize>,
    /// Listeners by the agent's id: the rdma_cm id (address).
    pub listeners: HashMap<ListenId, usize>,
    /// The context (`ibv_context` address).
    pub ctx: usize,
    /// The port's address.
    pub local: std::net::IpAddr,
    /// The port's active MTU (IB enum).
    pub mtu: u8,
    /// DISCONNECTED events held back while their QP's CQs hold successful completions the
    /// application has not polled yet ([`release_held`]).
    pub held: Vec<Held>,
}

/// A DISCONNECTED event held back ([`CmKern::held`]).
pub struct Held {
    /// The id (address).
    id: usize,
    /// Its QP.
    qpn: Qpn,
    /// The event.
    ev: Box<CmaEvent>,
    /// When it goes out whatever the CQs hold.
    until: Instant,
}

// SAFETY: the addresses name library objects, used with the engine lock held.
unsafe impl Send for CmKern {}

/// How long a request for a port nobody listens on waits for a listener before REJ 8.
const UNLISTENED_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// A random number (for PSNs, communication IDs and ports).
pub fn random_u32() -> u32 {
    let mut v = [0u8; 4];
    // SAFETY: fills the local buffer.
    let n = unsafe { libc::getrandom(v.as_mut_ptr().cast(), 4, 0) };
    if n == 4 {
        u32::from_ne_bytes(v)
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() ^ std::process::id())
            .unwrap_or(1)
    }
}

impl CmKern {
    /// When the agent's next timer is due, or a held event's bound.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let held = self.held.iter().map(|h| h.until).min();
        match (self.port.poll_timeout(), held) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The longest a DISCONNECTED event waits for the completions before it to be polled.
const DISCONNECT_HOLD: std::time::Duration = std::time::Duration::from_millis(250);

/// Raises a DISCONNECTED event for `s`, or holds it back ([`CmKern::held`]) while the QP of
/// the id is still usable (RTS, SQD, SQE) and its CQs hold successful completions of it that
/// the application has not polled: those came before the peer's DREQ, and an application
/// that reads its event channel between two polls of its CQ (libfabric's ofi_rxm) then closes
/// the connection and loses them (the provider reports its last SENDs flushed). On hardware
/// the DREQ reaches the kernel's CM well after the completions of what the peer sent before
/// it; here the progress thread may take both while the application is between two calls.
fn raise_disconnected(k: &mut CmKern, hca: &softib_core::Hca, now: Instant, s: &mut SoftCmId) {
    let p: *mut SoftCmId = s;
    let ev = CmaEvent::new(p, RDMA_CM_EVENT_DISCONNECTED, 0);
    if let Some(qpn) = unpolled_qp(hca, s) {
        k.held.push(Held {
            id: p as usize,
            qpn,
            ev,
            until: now.saturating_add(DISCONNECT_HOLD),
        });
    } else {
        s.raise(ev);
    }
}

/// The QP of `s` while it is usable and its CQs hold successful completions not yet polled.
fn unpolled_qp(hca: &softib_core::Hca, s: &SoftCmId) -> Option<Qpn> {
    if s.id.qp.is_null() {
        return None;
    }
    // SAFETY: the id's QP, live while the id has it.
    let qpn = Qpn::new(unsafe { (*s.id.qp).qp_num });
    let usable = hca.qp(qpn).is_some_and(|q| {
        matches!(
            q.state(),
            softib_core::verbs::types::QpState::Rts
                | softib_core::verbs::types::QpState::Sqd
                | softib_core::verbs::types::QpState::Sqe
        )
    });
    (usable && hca.has_unpolled_successes(qpn)).then_some(qpn)
}

/// Raises the held events whose QP's completions were polled (or whose QP went, or left
/// RTS), or whose bound passed; drops those of ids destroyed meanwhile. Called after a poll
/// of a CQ and in every round of the engine's CM.
pub fn release_held(eng: &mut Engine) {
    let Some(k) = eng.cm.as_mut() else {
        return;
    };
    if k.held.is_empty() {
        return;
    }
    let hca = eng.dev.hca();
    let now = eng.dev.now();
    let mut i = 0;
    while i < k.held.len() {
        let h = &k.held[i];
        let Some(s) = id_at(h.id) else {
            k.held.swap_remove(i);
            continue;
        };
        let still = now < h.until && unpolled_qp(hca, s).is_some_and(|q| q == h.qpn);
        if still {
            i += 1;
            continue;
        }
        let h = k.held.remove(i);
        s.raise(h.ev);
    }
}

/// A small number from the environment, at most `max`.
fn env_u8(name: &str, max: u8) -> Option<u8> {
    std::env::var(name)
        .ok()?
        .trim()
        .parse::<u8>()
        .ok()
        .filter(|&v| v <= max)
}

/// Gives the context a connection manager if it has none yet: rdma_cm's response timeout
/// (exponent 20, 4.3 s) and 15 retries, or `SOFTIB_CM_RESPONSE_TIMEOUT` (0..=31) and
/// `SOFTIB_CM_RETRIES` (0..=15) for a network that fails faster.
pub fn ensure(ctx: *mut ibv_context) -> Result<(), i32> {
    let sc = SoftContext::from_ctx(ctx).ok_or(libc::ENODEV)?;
    // The ids' PD, made now: requests that come later get it with the engine locked.
    if super::addr::default_pd(ctx).is_null() {
        return Err(libc::ENOMEM);
    }
    let mut eng = sc.shared.lock();
    if eng.cm.is_some() {
        return Ok(());
    }
    let gid = eng.dev.gid();
    let local = eng.dev.local_addr().ip();
    let slot = eng.dev.member_slot();
    let guid = sc.device.guid;
    let hca = eng.dev.hca_mut();
    let mtu = hca.query_port(1).map(|p| p.active_mtu.raw()).unwrap_or(3);
    let pd = hca.alloc_pd().map_err(|_| libc::ENOMEM)?;
    let mut cfg = CmConfig::new(gid, guid, random_u32() | 1);
    // One agent per process on a host-wide device: its IDs name its slot, so that the MADs
    // for them reach this process.
    cfg.comm_id_prefix = slot;
    // A connect that races the peer's rdma_listen (perftest -R listens a second time right
    // after its control connection) waits for it rather than being refused.
    cfg.unlistened_grace = UNLISTENED_GRACE;
    if let Some(t) = env_u8("SOFTIB_CM_RESPONSE_TIMEOUT", 31) {
        cfg.cm_response_timeout = t;
    }
    if let Some(r) = env_u8("SOFTIB_CM_RETRIES", 15) {
        cfg.max_cm_retries = r;
    }
    let port = CmPort::new(hca, pd, 1, 0, cfg).map_err(|_| libc::ENOMEM)?;
    eng.cm = Some(Box::new(CmKern {
        port,
        conns: HashMap::new(),
        listeners: HashMap::new(),
        ctx: ctx as usize,
        local,
        mtu,
        held: Vec::new(),
    }));
    Ok(())
}

/// One round of the context's CM (called in every I/O round of an engine that has one):
/// MADs between QP1 and the agent, its timers, its events to the ids.
pub fn poll(eng: &mut Engine) {
    let Some(mut k) = eng.cm.take() else {
        return;
    };
    let now = eng.dev.now();
    k.port.poll(eng.dev.hca_mut(), now);
    let mut any = false;
    while let Some(ev) = k.port.agent().poll_event() {
        deliver(&mut k, eng.dev.hca(), now, ev);
        any = true;
    }
    if any {
        k.port.poll(eng.dev.hca_mut(), now);
    }
    let _ = eng.dev.flush(now);
    eng.cm = Some(k);
    release_held(eng);
}

/// Listens on `service` for the id at address `me` on `ctx`'s device: in the context's CM,
/// and in the port table of the host-wide device, so that requests for it reach this process
/// whichever process's socket they come to. `EADDRINUSE` if another process listens on it.
pub fn listen(ctx: *mut ibv_context, service: u64, me: usize) -> Result<ListenId, i32> {
    let sc = SoftContext::from_ctx(ctx).ok_or(libc::ENODEV)?;
    let shared = sc.shared.clone();
    let mut eng = shared.lock();
    if let Some(m) = eng.dev.member() {
        let claim = m.claim(service, softib_udp::host::PortKind::Listening);
        if !claim.map_err(|e| e.raw_os_error().unwrap_or(libc::ENOSPC))? {
            return Err(libc::EADDRINUSE);
        }
    }
    let k = eng.cm.as_mut().ok_or(libc::ENODEV)?;
    let l = match k.port.agent().listen(service) {
        Ok(l) => l,
        Err(_) => return Err(libc::EADDRINUSE),
    };
    k.listeners.insert(l, me);
    eng.io(&shared);
    Ok(l)
}

/// Stops a listen of [`listen`].
pub fn unlisten(ctx: *mut ibv_context, lid: ListenId, service: u64) {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return;
    };
    let shared = sc.shared.clone();
    let mut eng = shared.lock();
    if let Some(k) = eng.cm.as_mut() {
        k.listeners.remove(&lid);
        let _ = k.port.agent().unlisten(lid);
    }
    if let Some(m) = eng.dev.member() {
        m.release(service, softib_udp::host::PortKind::Listening);
    }
}

/// Runs `f` on the context's CM with the engine locked, then lets what it queued leave.
pub fn with<T>(ctx: *mut ibv_context, f: impl FnOnce(&mut CmKern, Instant) -> T) -> Result<T, i32> {
    let sc = SoftContext::from_ctx(ctx).ok_or(libc::ENODEV)?;
    let shared = sc.shared.clone();
    let mut eng = shared.lock();
    let now = eng.dev.now();
    let r = f(eng.cm.as_mut().ok_or(libc::ENODEV)?, now);
    eng.io(&shared);
    Ok(r)
}

/// The id behind an address in the maps, if still live.
fn id_at<'a>(p: usize) -> Option<&'a mut SoftCmId> {
    super::soft_id(p as *mut rdma_cm_id)
}

fn conn_param(
    responder_resources: u8,
    initiator_depth: u8,
    flow_control: bool,
    retry_count: u8,
    rnr_retry_count: u8,
    srq: bool,
    qp_num: u32,
) -> rdma_conn_param {
    rdma_conn_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        responder_resources,
        initiator_depth,
        flow_control: flow_control.into(),
        retry_count,
        rnr_retry_count,
        srq: srq.into(),
        qp_num,
    }
}

/// The address vector towards `gid` from this port.
pub fn ah_to(gid: softib_core::cm::Gid, hop_limit: u8, tc: u8) -> ibv_ah_attr {
    let mut a: ibv_ah_attr = util::zeroed();
    a.is_global = 1;
    a.port_num = 1;
    a.grh.dgid = ibv_gid { raw: gid.0 };
    a.grh.hop_limit = hop_limit;
    a.grh.traffic_class = tc;
    a
}

/// Offset of the application's private data in a REQ / SIDR_REQ of port space `ps`: after
/// the IP CM header, except in RDMA_PS_IB.
pub fn private_offset(ps: rdma_port_space) -> usize {
    if ps == RDMA_PS_IB {
        0
    } else {
        IpCmHdr::LEN
    }
}

/// A new id for a request that came to `listener`.
fn child_of(
    k: &CmKern,
    listener: &SoftCmId,
    aid: CmId,
    peer: softib_core::cm::Gid,
    private: &[u8],
) -> Option<*mut SoftCmId> {
    let ps = listener.id.ps;
    let lport = listener.state().src.map(|s| s.port()).unwrap_or(0);
    let (src, dst) = if ps == RDMA_PS_IB {
        (
            SocketAddr::new(k.local, lport),
            SocketAddr::new(ip_of(peer), 0),
        )
    } else {
        let h = IpCmHdr::parse(private).ok()?;
        let ip = |b: [u8; 16]| {
            if h.ip_version == 4 {
                std::net::IpAddr::from([b[12], b[13], b[14], b[15]])
            } else {
                std::net::IpAddr::from(b)
            }
        };
        (
            SocketAddr::new(ip(h.dst_ip), lport),
            SocketAddr::new(ip(h.src_ip), h.src_port),
        )
    };
    let c = alloc_id(
        listener.id.channel,
        listener.id.context,
        ps,
        listener.id.qp_type,
    );
    // SAFETY: just allocated, not yet seen by anyone.
    let child = unsafe { &mut *c };
    child.id.verbs = k.ctx as *mut ibv_context;
    child.id.port_num = 1;
    child.id.pd = super::addr::known_pd(child.id.verbs);
    child.set_src(src);
    child.set_dst(dst, peer);
    child.set_path(gid_of(k.local), peer, k.mtu, 0);
    let mut st = child.state();
    st.src = Some(src);
    st.dst = Some(dst);
    st.agent = Some(aid);
    drop(st);
    Some(c)
}

/// `SOFTIB_CM_DEBUG` set: the connection manager's events are traced on stderr.
pub fn debug_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SOFTIB_CM_DEBUG").is_some())
}

/// Turns one agent event into the rdma_cm event of its id.
fn deliver(k: &mut CmKern, hca: &softib_core::Hca, now: Instant, ev: CmEvent) {
    if debug_on() {
        eprintln!("softib cm {}: {ev:?}", k.local);
    }
    match ev {
        CmEvent::ConnectRequest {
            id: aid,
            listener,
            peer,
            req,
        } => {
            let Some(l) = k.listeners.get(&listener).and_then(|&p| id_at(p)) else {
                let _ = k
                    .port
                    .agent()
                    .reject(now, aid, rej_reason::INVALID_SERVICE_ID, &[]);
                return;
            };
            let Some(c) = child_of(k, l, aid, peer, &req.private_data) else {
                let _ = k
                    .port
                    .agent()
                    .reject(now, aid, rej_reason::CONSUMER_DEFINED, &[]);
                return;
            };
            // SAFETY: just made.
            let child = unsafe { &mut *c };
            {
                let mut st = child.state();
                st.responder_resources = req.initiator_depth;
                st.initiator_depth = req.responder_resources;
                st.sq_psn = req.starting_psn.value();
                st.remote = Some(Remote {
                    gid: peer,
                    qpn: req.local_qpn.value(),
                    path_mtu: req.path_mtu.min(k.mtu),
                    retry_count: req.retry_count,
                    rnr_retry: req.rnr_retry_count,
                    ack_timeout: req.primary_local_ack_timeout,
                    hop_limit: req.primary_hop_limit,
                    traffic_class: req.primary_traffic_class,
                    flow_label: req.primary_flow_label,
                    sl: req.primary_sl,
                    rq_psn: 0,
                });
            }
            k.conns.insert(aid, c as usize);
            let mut e = CmaEvent::new(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
            e.event.listen_id = std::ptr::addr_of_mut!(l.id);
            let off = private_offset(l.id.ps);
            e.set_conn(
                conn_param(
                    req.initiator_depth,
                    req.responder_resources,
                    req.end_to_end_flow_control,
                    req.retry_count,
                    req.rnr_retry_count,
                    req.srq,
                    req.local_qpn.value(),
                ),
                &req.private_data[off..],
            );
            l.raise(e);
        }
        CmEvent::SidrRequest {
            id: aid,
            listener,
            peer,
            req,
        } => {
            let Some(l) = k.listeners.get(&listener).and_then(|&p| id_at(p)) else {
                let _ =
                    k.port
                        .agent()
                        .sidr_reply(aid, sidr_status::UNSUPPORTED, Qpn::new(0), 0, &[]);
                return;
            };
            let Some(c) = child_of(k, l, aid, peer, &req.private_data) else {
                let _ = k
                    .port
                    .agent()
                    .sidr_reply(aid, sidr_status::REJECT, Qpn::new(0), 0, &[]);
                return;
            };
            // SAFETY: just made.
            let child = unsafe { &mut *c };
            child.state().remote = Some(Remote {
                gid: peer,
                hop_limit: 64,
                ..Remote::default()
            });
            k.conns.insert(aid, c as usize);
            let mut e = CmaEvent::new(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
            e.event.listen_id = std::ptr::addr_of_mut!(l.id);
            let off = private_offset(l.id.ps);
            e.set_ud(ah_to(peer, 64, 0), 0, 0, &req.private_data[off..]);
            l.raise(e);
        }
        CmEvent::ConnectReply { id: aid, rep } => {
            let Some(s) = k.conns.get(&aid).and_then(|&p| id_at(p)) else {
                let _ = k.port.agent().reject(now, aid, rej_reason::TIMEOUT, &[]);
                return;
            };
            {
                let mut st = s.state();
                if let Some(r) = st.remote.as_mut() {
                    r.qpn = rep.local_qpn.value();
                    r.rnr_retry = rep.rnr_retry_count;
                }
                st.sq_psn = rep.starting_psn.value();
                st.initiator_depth = st.initiator_depth.min(rep.responder_resources);
                st.responder_resources = st.responder_resources.min(rep.initiator_depth);
            }
            let p: *mut SoftCmId = s;
            let mut e = CmaEvent::new(p, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
            e.set_conn(
                conn_param(
                    rep.initiator_depth,
                    rep.responder_resources,
                    rep.end_to_end_flow_control,
                    0,
                    rep.rnr_retry_count,
                    rep.srq,
                    rep.local_qpn.value(),
                ),
                &rep.private_data,
            );
            s.raise(e);
        }
        CmEvent::Established { id: aid } => {
            let Some(s) = k.conns.get(&aid).and_then(|&p| id_at(p)) else {
                return;
            };
            // The active side raised its ESTABLISHED when it read the reply.
            if s.state().active {
                return;
            }
            let p: *mut SoftCmId = s;
            s.raise(CmaEvent::new(p, RDMA_CM_EVENT_ESTABLISHED, 0));
        }
        CmEvent::Rejected { id: aid, rej } => {
            let Some(s) = k.conns.get(&aid).and_then(|&p| id_at(p)) else {
                return;
            };
            let mut st = s.state();
            if st.connect_error {
                return;
            }
            st.disconnected = true;
            drop(st);
            let p: *mut SoftCmId = s;
            let mut e = CmaEvent::new(p, RDMA_CM_EVENT_REJECTED, i32::from(rej.reason));
            e.set_conn(conn_param(0, 0, false, 0, 0, false, 0), &rej.private_data);
            s.raise(e);
        }
        CmEvent::Unreachable { id: aid } => {
            let Some(s) = k.conns.get(&aid).and_then(|&p| id_at(p)) else {
                return;
            };
            s.state().disconnected = true;
            let p: *mut SoftCmId = s;
            s.raise(CmaEvent::new(
                p,
                RDMA_CM_EVENT_UNREACHABLE,
                -libc::ETIMEDOUT,
            ));
            if s.id.qp_type == IBV_QPT_UD {
                k.conns.remove(&aid);
                s.state().agent = None;
            }
        }
        CmEvent::DisconnectRequest { id: aid, .. } | CmEvent::Disconnected { id: aid } => {
            let Some(s) = k.conns.get(&aid).and_then(|&p| id_at(p)) else {
                return;
            };
            let mut st = s.state();
            if st.disconnected || st.connect_error {
                return;
            }
            st.disconnected = true;
            drop(st);
            raise_disconnected(k, hca, now, s);
        }
        CmEvent::TimewaitExit { id: aid } => {
            let Some(p) = k.conns.remove(&aid) else {
                return;
            };
            let Some(s) = id_at(p) else {
                return;
            };
            s.state().agent = None;
            let p: *mut SoftCmId = s;
            s.raise(CmaEvent::new(p, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0));
        }
        CmEvent::SidrReply { id: aid, rep } => {
            let Some(p) = k.conns.remove(&aid) else {
                return;
            };
            let Some(s) = id_at(p) else {
                return;
            };
            let peer = {
                let mut st = s.state();
                st.agent = None;
                st.remote.map(|r| r.gid).unwrap_or_default()
            };
            let p: *mut SoftCmId = s;
            if rep.status == sidr_status::SUCCESS {
                let mut e = CmaEvent::new(p, RDMA_CM_EVENT_ESTABLISHED, 0);
                e.set_ud(
                    ah_to(peer, 64, 0),
                    rep.qpn.value(),
                    rep.qkey,
                    &rep.private_data,
                );
                s.raise(e);
            } else {
                let mut e = CmaEvent::new(p, RDMA_CM_EVENT_UNREACHABLE, i32::from(rep.status));
                e.set_ud(util::zeroed(), 0, 0, &rep.private_data);
                s.raise(e);
            }
        }
    }
}

/// The Service ID of an id's port.
pub fn service_id(ps: rdma_port_space, port: u16) -> u64 {
    cm::ip_service_id(ps as u16, port)
}

/// Closes what an id being destroyed holds: its listens, its connection (as the IB CM does
/// for a destroyed id: DREQ when established, DREP when the peer asked, REJ while the
/// handshake is ours to answer), its port.
pub fn release(sid: &mut SoftCmId) {
    super::mcast::leave_all(sid);
    if !sid.id.verbs.is_null() {
        let me = sid as *mut SoftCmId as usize;
        let _ = with(sid.id.verbs, |k, _| k.held.retain(|h| h.id != me));
    }
    let (listens, agent, port) = {
        let mut st = sid.state();
        (
            std::mem::take(&mut st.listens),
            st.agent.take(),
            st.port_held.take(),
        )
    };
    let service = sid.state().src.map(|s| service_id(sid.id.ps, s.port()));
    for (ctx, lid) in listens {
        unlisten(ctx as *mut ibv_context, lid, service.unwrap_or(0));
    }
    if let Some(aid) = agent {
        let _ = with(sid.id.verbs, |k, now| {
            k.conns.remove(&aid);
            let a = k.port.agent();
            match a.state(aid) {
                Some(State::Established | State::RepSent | State::MraRepRcvd | State::DreqRcvd) => {
                    let _ = a.disconnect(now, aid, &[]);
                }
                Some(State::ReqRcvd | State::MraReqSent | State::RepRcvd) => {
                    let _ = a.reject(now, aid, rej_reason::CONSUMER_DEFINED, &[]);
                }
                Some(State::SidrReqRcvd) => {
                    let _ = a.sidr_reply(aid, sidr_status::REJECT, Qpn::new(0), 0, &[]);
                }
                Some(State::TimeWait | State::DreqSent) | None => {}
                Some(_) => a.destroy(aid),
            }
        });
    }
    if let Some(key) = port {
        super::addr::release_port(key);
    }
}

/// `rdma_notify(IBV_EVENT_COMM_EST)`: data came before the RTU.
pub fn notify_established(sid: &mut SoftCmId) {
    let Some(aid) = sid.state().agent else {
        return;
    };
    let _ = with(sid.id.verbs, |k, _| {
        let _ = k.port.agent().notify_established(aid);
    });
}

/// Whether an id pointer is still live (for events that outlive it).
pub fn id_live(p: *mut SoftCmId) -> bool {
    registry::is_live(p.cast::<rdma_cm_id>(), Kind::CmId)
}
