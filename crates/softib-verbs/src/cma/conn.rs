//! Connections, as rdma-core's librdmacm makes them on the verbs: the id's QP (and the CQs
//! it gets when the application gives none), its INIT / RTR / RTS transitions with the values
//! the REQ and REP carried, `rdma_connect` / `rdma_listen` / `rdma_accept` / `rdma_reject` /
//! `rdma_disconnect` / `rdma_establish` on the context's CM agent, and the processing of a
//! connection event when the application reads it ([`process_event`]).
//!
//! Choices (docs/cm.md): the RTR's minimum RNR timer is 12 (0.64 ms), perftest's value, where
//! the Linux kernel's CM leaves 0 (655 ms); the local ACK timeout is 14 (67 ms) unless
//! `RDMA_OPTION_ID_ACK_TIMEOUT` says otherwise, and the passive side takes the REQ's.

use softib_core::cm::{AcceptParams, CmService, ConnectParams, State};
use softib_wire::cm::{rej_reason, sidr_status, IpCmHdr};
use softib_wire::{Psn, Qpn};

use super::addr::gid_of;
use super::kern;
use super::{complete, soft_id, CmaEvent, Remote, SoftCmId};
use crate::cma_h::*;
use crate::device::{self, SoftContext};
use crate::util::{self, minus_one};
use crate::verbs_h::*;

/// Minimum RNR NAK timer of a connected QP's receive side (IB encoding 12: 0.64 ms).
const MIN_RNR_TIMER: u8 = 12;
/// Local ACK timeout of a connection unless the application sets one (IB encoding 14:
/// 67 ms).
const DEFAULT_ACK_TIMEOUT: u8 = 14;
/// Largest private data of a REQ, REP, REJ, DREQ, SIDR_REQ and SIDR_REP.
const REQ_PRIVATE: usize = 92;
const REP_PRIVATE: usize = 196;
const REJ_PRIVATE: usize = 148;
const SIDR_REQ_PRIVATE: usize = 216;
const SIDR_REP_PRIVATE: usize = 136;

fn modify(qp: *mut ibv_qp, attr: &mut ibv_qp_attr, mask: u32) -> Result<(), i32> {
    // SAFETY: a QP of this library (the id's), and a local attribute structure.
    match unsafe { crate::qp::ibv_modify_qp(qp, attr, mask as i32) } {
        0 => Ok(()),
        e => Err(e),
    }
}

fn is_ud(sid: &SoftCmId) -> bool {
    sid.id.qp_type == IBV_QPT_UD
}

/// The largest RDMA READ / atomic depths of the id's device: (responder, initiator).
fn device_rd_atomic(ctx: *mut ibv_context) -> (u8, u8) {
    match SoftContext::from_ctx(ctx) {
        Some(sc) => {
            let a = device::device_attr(sc);
            (
                a.max_qp_rd_atom.clamp(0, 255) as u8,
                a.max_qp_init_rd_atom.clamp(0, 255) as u8,
            )
        }
        None => (1, 1),
    }
}

/// The attributes rdma_cm gives the id's QP for `state` (`rdma_init_qp_attr`).
fn qp_attr_for(sid: &SoftCmId, state: ibv_qp_state) -> Result<(ibv_qp_attr, u32), i32> {
    let st = sid.state();
    let mut a: ibv_qp_attr = util::zeroed();
    a.qp_state = state;
    let rc = sid.id.qp_type == IBV_QPT_RC;
    match state {
        IBV_QPS_INIT => {
            a.pkey_index = 0;
            a.port_num = 1;
            let mut mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
            if is_ud(sid) {
                a.qkey = RDMA_UDP_QKEY;
                mask |= IBV_QP_QKEY;
            } else {
                a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
                if st.responder_resources > 0 {
                    a.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
                }
                mask |= IBV_QP_ACCESS_FLAGS;
            }
            Ok((a, mask))
        }
        IBV_QPS_RTR if is_ud(sid) => Ok((a, IBV_QP_STATE)),
        IBV_QPS_RTR => {
            let r = st.remote.ok_or(libc::EINVAL)?;
            a.path_mtu = u32::from(r.path_mtu.clamp(1, 5));
            a.dest_qp_num = r.qpn;
            a.rq_psn = r.rq_psn;
            a.ah_attr = kern::ah_to(r.gid, r.hop_limit, r.traffic_class);
            a.ah_attr.grh.flow_label = r.flow_label;
            a.ah_attr.sl = r.sl;
            let mut mask =
                IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
            if rc {
                a.max_dest_rd_atomic = st.responder_resources;
                a.min_rnr_timer = MIN_RNR_TIMER;
                mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
            }
            Ok((a, mask))
        }
        IBV_QPS_RTS if is_ud(sid) => {
            a.sq_psn = 0;
            Ok((a, IBV_QP_STATE | IBV_QP_SQ_PSN))
        }
        IBV_QPS_RTS => {
            let r = st.remote.ok_or(libc::EINVAL)?;
            a.sq_psn = st.sq_psn;
            let mut mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
            if rc {
                a.timeout = st.ack_timeout.unwrap_or(r.ack_timeout);
                a.retry_cnt = r.retry_count.min(7);
                a.rnr_retry = if st.active { r.rnr_retry } else { st.rnr_retry }.min(7);
                a.max_rd_atomic = st.initiator_depth;
                mask |=
                    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
            }
            Ok((a, mask))
        }
        _ => Err(libc::EINVAL),
    }
}

/// `rdma_init_qp_attr`: the attributes (and mask) for moving the id's QP to
/// `qp_attr->qp_state` (INIT, RTR or RTS).
#[export_name = "softib_rdmacm_rdma_init_qp_attr"]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut libc::c_int,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    if qp_attr.is_null() || qp_attr_mask.is_null() {
        return minus_one(libc::EINVAL);
    }
    // SAFETY: the caller's structures.
    let state = unsafe { (*qp_attr).qp_state };
    match qp_attr_for(sid, state) {
        Ok((a, m)) => {
            // SAFETY: likewise.
            unsafe {
                *qp_attr = a;
                *qp_attr_mask = m as libc::c_int;
            }
            0
        }
        Err(e) => minus_one(e),
    }
}

/// Moves the id's QP (if any) to RTR and RTS with the connection's values (rdma-core's
/// `ucma_modify_qp_rtr` / `_rts`: INIT again first, for the access rights the CM grants).
fn qp_to_rts(sid: &SoftCmId) -> Result<(), i32> {
    let qp = sid.id.qp;
    if qp.is_null() {
        return Ok(());
    }
    for state in [IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS] {
        let (mut a, m) = qp_attr_for(sid, state)?;
        modify(qp, &mut a, m)?;
    }
    Ok(())
}

/// Moves the id's QP (if any) to ERR.
fn qp_to_err(sid: &SoftCmId) {
    if !sid.id.qp.is_null() {
        let mut a: ibv_qp_attr = util::zeroed();
        a.qp_state = IBV_QPS_ERR;
        let _ = modify(sid.id.qp, &mut a, IBV_QP_STATE);
    }
}

/// Applies a connection event as the application reads it; false drops it (its id is gone,
/// or a failed connection's later events).
pub fn process_event(ev: &mut CmaEvent) -> bool {
    if !kern::id_live(ev.id) {
        return false;
    }
    // SAFETY: a live id.
    let sid = unsafe { &mut *ev.id };
    match ev.event.event {
        RDMA_CM_EVENT_CONNECT_REQUEST => {
            let l = ev.event.listen_id.cast::<SoftCmId>();
            if kern::id_live(l) && unsafe { (*l).state().sync } {
                // SAFETY: the new id, live; a synchronous listener's requests get their own
                // channel, as rdma-core's.
                unsafe { super::rdma_migrate_id(ev.event.id, std::ptr::null_mut()) };
            }
        }
        RDMA_CM_EVENT_CONNECT_RESPONSE if !sid.id.qp.is_null() => {
            let aid = sid.state().agent;
            let ok = qp_to_rts(sid).is_ok()
                && aid.is_some_and(|aid| {
                    kern::with(sid.id.verbs, |k, _| {
                        k.port.agent().establish(aid, &[]).is_ok()
                    })
                    .unwrap_or(false)
                });
            if ok {
                ev.event.event = RDMA_CM_EVENT_ESTABLISHED;
            } else {
                qp_to_err(sid);
                sid.state().connect_error = true;
                if let Some(aid) = aid {
                    let _ = kern::with(sid.id.verbs, |k, now| {
                        let _ = k
                            .port
                            .agent()
                            .reject(now, aid, rej_reason::CONSUMER_DEFINED, &[]);
                    });
                }
                ev.event.event = RDMA_CM_EVENT_CONNECT_ERROR;
                ev.event.status = -libc::EINVAL;
            }
        }
        RDMA_CM_EVENT_REJECTED => qp_to_err(sid),
        _ => {}
    }
    true
}

fn destroy_cqs(sid: &mut SoftCmId) {
    // SAFETY: CQs and channels this module made for the id.
    unsafe {
        if !sid.id.recv_cq.is_null() {
            crate::cq::ibv_destroy_cq(sid.id.recv_cq);
            if !sid.id.send_cq.is_null() && sid.id.send_cq != sid.id.recv_cq {
                crate::cq::ibv_destroy_cq(sid.id.send_cq);
            }
        } else if !sid.id.send_cq.is_null() {
            crate::cq::ibv_destroy_cq(sid.id.send_cq);
        }
        if !sid.id.recv_cq_channel.is_null() {
            crate::cq::ibv_destroy_comp_channel(sid.id.recv_cq_channel);
        }
        if !sid.id.send_cq_channel.is_null() && sid.id.send_cq_channel != sid.id.recv_cq_channel {
            crate::cq::ibv_destroy_comp_channel(sid.id.send_cq_channel);
        }
    }
    sid.id.recv_cq = std::ptr::null_mut();
    sid.id.send_cq = std::ptr::null_mut();
    sid.id.recv_cq_channel = std::ptr::null_mut();
    sid.id.send_cq_channel = std::ptr::null_mut();
}

/// A CQ with its own completion channel, as rdma-core makes for an id.
fn make_cq(sid: &mut SoftCmId, size: u32) -> Result<(*mut ibv_cq, *mut ibv_comp_channel), i32> {
    // SAFETY: the id's context.
    unsafe {
        let ch = crate::cq::ibv_create_comp_channel(sid.id.verbs);
        if ch.is_null() {
            return Err(util::errno());
        }
        let me: *mut SoftCmId = sid;
        let cq = crate::cq::ibv_create_cq(sid.id.verbs, size.max(1) as i32, me.cast(), ch, 0);
        if cq.is_null() {
            let e = util::errno();
            crate::cq::ibv_destroy_comp_channel(ch);
            return Err(e);
        }
        Ok((cq, ch))
    }
}

/// `rdma_create_qp_ex`: a QP for the id on its context, with CQs (and completion channels)
/// made for it when none are given, brought to INIT (UD: to RTS, ready to send).
#[export_name = "softib_rdmacm_rdma_create_qp_ex"]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    if attr.is_null() || !sid.id.qp.is_null() || sid.id.verbs.is_null() {
        return minus_one(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &mut *attr };
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
        a.comp_mask |= IBV_QP_INIT_ATTR_PD;
        a.pd = sid.id.pd;
    } else if !crate::registry::is_live(a.pd, crate::registry::Kind::Pd)
        // SAFETY: a live PD.
        || unsafe { (*a.pd).context } != sid.id.verbs
    {
        return minus_one(libc::EINVAL);
    }
    if (!sid.id.recv_cq.is_null() && !a.recv_cq.is_null() && sid.id.recv_cq != a.recv_cq)
        || (!sid.id.send_cq.is_null() && !a.send_cq.is_null() && sid.id.send_cq != a.send_cq)
    {
        return minus_one(libc::EINVAL);
    }
    if a.recv_cq.is_null() && sid.id.recv_cq.is_null() {
        match make_cq(sid, a.cap.max_recv_wr) {
            Ok((cq, ch)) => {
                sid.id.recv_cq = cq;
                sid.id.recv_cq_channel = ch;
            }
            Err(e) => return minus_one(e),
        }
    }
    if a.send_cq.is_null() && sid.id.send_cq.is_null() {
        match make_cq(sid, a.cap.max_send_wr) {
            Ok((cq, ch)) => {
                sid.id.send_cq = cq;
                sid.id.send_cq_channel = ch;
            }
            Err(e) => {
                destroy_cqs(sid);
                return minus_one(e);
            }
        }
    }
    if a.send_cq.is_null() {
        a.send_cq = sid.id.send_cq;
    }
    if a.recv_cq.is_null() {
        a.recv_cq = sid.id.recv_cq;
    }
    if !sid.id.srq.is_null() && a.srq.is_null() {
        a.srq = sid.id.srq;
    }
    a.qp_type = sid.id.qp_type;
    // SAFETY: the id's context and the caller's attributes.
    let qp = match unsafe { crate::qp::create(sid.id.verbs, attr) } {
        Ok(q) => q.cast::<ibv_qp>(),
        Err(e) => {
            destroy_cqs(sid);
            return minus_one(e);
        }
    };
    let init = if is_ud(sid) {
        vec![IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS]
    } else {
        vec![IBV_QPS_INIT]
    };
    for state in init {
        let r = qp_attr_for(sid, state).and_then(|(mut at, m)| {
            if state == IBV_QPS_INIT && !is_ud(sid) {
                // No remote access until the connection grants it (rdma-core's INIT).
                at.qp_access_flags = 0;
            }
            modify(qp, &mut at, m)
        });
        if let Err(e) = r {
            // SAFETY: the QP just made.
            unsafe { crate::qp::ibv_destroy_qp(qp) };
            destroy_cqs(sid);
            return minus_one(e);
        }
    }
    // SAFETY: the QP just made.
    sid.id.pd = unsafe { (*qp).pd };
    sid.id.qp = qp;
    0
}

/// `rdma_create_qp`: `rdma_create_qp_ex` with the basic attributes (`pd` NULL: the id's).
#[export_name = "softib_rdmacm_rdma_create_qp"]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> libc::c_int {
    if qp_init_attr.is_null() {
        return minus_one(libc::EINVAL);
    }
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    // SAFETY: the caller's attributes.
    let a = unsafe { &mut *qp_init_attr };
    let mut ex = crate::qp::init_attr_ex(a, if pd.is_null() { sid.id.pd } else { pd });
    // SAFETY: as the caller's.
    let r = unsafe { rdma_create_qp_ex(id, &mut ex) };
    a.send_cq = ex.send_cq;
    a.recv_cq = ex.recv_cq;
    a.srq = ex.srq;
    a.cap = ex.cap;
    a.qp_type = ex.qp_type;
    r
}

/// `rdma_destroy_qp`: destroys the id's QP and the CQs made for it.
#[export_name = "softib_rdmacm_rdma_destroy_qp"]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    let Some(sid) = soft_id(id) else {
        util::set_errno(libc::EINVAL);
        return;
    };
    if !sid.id.qp.is_null() {
        super::mcast::leave_all(sid);
        // SAFETY: the id's QP.
        unsafe { crate::qp::ibv_destroy_qp(sid.id.qp) };
        sid.id.qp = std::ptr::null_mut();
    }
    destroy_cqs(sid);
}

/// `rdma_create_srq`: an SRQ for the id (`pd` NULL: the id's), with a receive CQ made for it.
#[export_name = "softib_rdmacm_rdma_create_srq"]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    if attr.is_null() || sid.id.verbs.is_null() || !sid.id.srq.is_null() {
        return minus_one(libc::EINVAL);
    }
    let pd = if pd.is_null() { sid.id.pd } else { pd };
    if sid.id.recv_cq.is_null() {
        // SAFETY: the caller's attributes.
        let n = unsafe { (*attr).attr.max_wr };
        match make_cq(sid, n) {
            Ok((cq, ch)) => {
                sid.id.recv_cq = cq;
                sid.id.recv_cq_channel = ch;
            }
            Err(e) => return minus_one(e),
        }
    }
    // SAFETY: a PD and the caller's attributes.
    let srq = unsafe { crate::qp::ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return -1;
    }
    sid.id.srq = srq;
    0
}

/// `rdma_create_srq_ex`: only the basic SRQ (type basic, PD given) is made.
#[export_name = "softib_rdmacm_rdma_create_srq_ex"]
pub unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> libc::c_int {
    if attr.is_null() {
        return minus_one(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &*attr };
    if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type != IBV_SRQT_BASIC {
        return minus_one(libc::EOPNOTSUPP);
    }
    let mut basic = ibv_srq_init_attr {
        srq_context: a.srq_context,
        attr: a.attr,
    };
    let pd = if a.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 {
        a.pd
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: as the caller's.
    unsafe { rdma_create_srq(id, pd, &mut basic) }
}

/// `rdma_destroy_srq`: destroys the id's SRQ.
#[export_name = "softib_rdmacm_rdma_destroy_srq"]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    let Some(sid) = soft_id(id) else {
        util::set_errno(libc::EINVAL);
        return;
    };
    if !sid.id.srq.is_null() {
        // SAFETY: the id's SRQ.
        unsafe { crate::qp::ibv_destroy_srq(sid.id.srq) };
        sid.id.srq = std::ptr::null_mut();
    }
    if sid.id.qp.is_null() {
        destroy_cqs(sid);
    }
}

/// The private data of a connect: the IP CM header (except in RDMA_PS_IB), what
/// `rdma_create_ep` was given, then the application's.
fn connect_private(
    sid: &SoftCmId,
    param: Option<&rdma_conn_param>,
    max: usize,
) -> Result<Vec<u8>, i32> {
    let st = sid.state();
    let (src, dst) = (st.src.ok_or(libc::EINVAL)?, st.dst.ok_or(libc::EINVAL)?);
    let mut out = Vec::with_capacity(max);
    if sid.id.ps != RDMA_PS_IB {
        let h = IpCmHdr::for_ips(src.ip(), dst.ip(), src.port()).ok_or(libc::EINVAL)?;
        out.resize(IpCmHdr::LEN, 0);
        h.emit(&mut out).map_err(|_| libc::EINVAL)?;
    }
    out.extend_from_slice(&st.connect_data);
    if let Some(p) = param {
        // SAFETY: the caller's buffer of the length it gives.
        out.extend_from_slice(unsafe { c_bytes(p.private_data, p.private_data_len) });
    }
    if out.len() > max {
        return Err(libc::EINVAL);
    }
    Ok(out)
}

/// The application's private data: `len` bytes at `p` (none when NULL or 0).
///
/// # Safety
/// `p`, if not NULL, must point to `len` readable bytes.
unsafe fn c_bytes<'a>(p: *const libc::c_void, len: u8) -> &'a [u8] {
    if p.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len.into()) }
}

fn param_private(param: Option<&rdma_conn_param>, max: usize) -> Result<Vec<u8>, i32> {
    let Some(p) = param else {
        return Ok(Vec::new());
    };
    // SAFETY: the caller's buffer of the length it gives.
    let d = unsafe { c_bytes(p.private_data, p.private_data_len) };
    if d.len() > max {
        return Err(libc::EINVAL);
    }
    Ok(d.to_vec())
}

/// `rdma_connect`: sends the REQ (UD ids: the SIDR_REQ) for the id's resolved route. The
/// reply comes as RDMA_CM_EVENT_ESTABLISHED (the QP then in RTS) or CONNECT_RESPONSE (an id
/// without a QP), or as REJECTED / UNREACHABLE.
#[export_name = "softib_rdmacm_rdma_connect"]
pub unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    // SAFETY: the caller's parameters, if any.
    let param = unsafe { conn_param.as_ref() };
    match connect(sid, param) {
        Ok(()) => complete(sid),
        Err(e) => minus_one(e),
    }
}

fn connect(sid: &mut SoftCmId, param: Option<&rdma_conn_param>) -> Result<(), i32> {
    let ctx = sid.id.verbs;
    if ctx.is_null() || sid.state().agent.is_some() {
        return Err(libc::EINVAL);
    }
    let (dst, tos, ack) = {
        let st = sid.state();
        (st.dst.ok_or(libc::EINVAL)?, st.tos, st.ack_timeout)
    };
    let peer = gid_of(dst.ip());
    let service_id = kern::service_id(sid.id.ps, dst.port());
    let me = sid as *mut SoftCmId as usize;
    if is_ud(sid) {
        let private = connect_private(sid, param, SIDR_REQ_PRIVATE)?;
        let aid = kern::with(ctx, |k, now| {
            let aid = k
                .port
                .agent()
                .sidr_request(now, peer, service_id, 0xffff, &private)
                .map_err(|_| libc::EINVAL)?;
            k.conns.insert(aid, me);
            Ok::<_, i32>(aid)
        })??;
        let mut st = sid.state();
        st.agent = Some(aid);
        st.active = true;
        st.remote = Some(Remote {
            gid: peer,
            hop_limit: 64,
            ..Remote::default()
        });
        return Ok(());
    }
    if sid.id.ps == RDMA_PS_TCP && sid.id.qp.is_null() && param.is_none() {
        return Err(libc::EINVAL);
    }
    let (max_resp, max_init) = device_rd_atomic(ctx);
    let pick = |v: Option<u8>, max: u8| match v {
        Some(v) if v != 255 => {
            if v > max {
                Err(libc::EINVAL)
            } else {
                Ok(v)
            }
        }
        _ => Ok(max),
    };
    let initiator_depth = pick(param.map(|p| p.initiator_depth), max_init)?;
    let responder_resources = pick(param.map(|p| p.responder_resources), max_resp)?;
    let (retry_count, rnr_retry) = param
        .map(|p| (p.retry_count.min(7), p.rnr_retry_count.min(7)))
        .unwrap_or((7, 7));
    let (qpn, srq) = if sid.id.qp.is_null() {
        param.map(|p| (p.qp_num, p.srq != 0)).unwrap_or((0, false))
    } else {
        // SAFETY: the id's QP.
        unsafe { ((*sid.id.qp).qp_num, !(*sid.id.qp).srq.is_null()) }
    };
    let private = connect_private(sid, param, REQ_PRIVATE)?;
    let psn = kern::random_u32() & 0xff_ffff;
    let path_mtu = if sid.path.mtu != 0 { sid.path.mtu } else { 3 };
    let ack_timeout = ack.unwrap_or(DEFAULT_ACK_TIMEOUT);
    let p = ConnectParams {
        service: if sid.id.qp_type == IBV_QPT_UC {
            CmService::Uc
        } else {
            CmService::Rc
        },
        responder_resources,
        initiator_depth,
        retry_count,
        rnr_retry_count: rnr_retry,
        path_mtu,
        srq,
        local_ack_timeout: ack_timeout,
        traffic_class: tos,
        private_data: private,
        ..ConnectParams::rc(service_id, peer, Qpn::new(qpn), Psn::new(psn))
    };
    {
        let mut st = sid.state();
        st.active = true;
        st.responder_resources = responder_resources;
        st.initiator_depth = initiator_depth;
        st.rnr_retry = rnr_retry;
        st.disconnected = false;
        st.connect_error = false;
        st.remote = Some(Remote {
            gid: peer,
            rq_psn: psn,
            path_mtu,
            retry_count,
            ack_timeout,
            hop_limit: 64,
            traffic_class: tos,
            ..Remote::default()
        });
    }
    let aid = kern::with(ctx, |k, now| {
        let aid = k.port.agent().connect(now, &p).map_err(|_| libc::EINVAL)?;
        k.conns.insert(aid, me);
        Ok::<_, i32>(aid)
    })??;
    sid.state().agent = Some(aid);
    Ok(())
}

/// `rdma_listen`: answers REQs and SIDR_REQs for the id's port (binding a free port on every
/// device first if the id is unbound): on its device, or on every device for a wildcard
/// address.
#[export_name = "softib_rdmacm_rdma_listen"]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, _backlog: libc::c_int) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    if sid.state().src.is_none() {
        let any = std::net::SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0));
        if let Err(e) = super::addr::bind(sid, any) {
            return minus_one(e);
        }
    }
    let Some(src) = sid.state().src else {
        return minus_one(libc::EINVAL);
    };
    if !sid.state().listens.is_empty() {
        return 0;
    }
    let ctxs: Vec<usize> = if sid.id.verbs.is_null() {
        // Bound to no device (the wildcard, or a loopback address that named none): every
        // device. An IPv6 wildcard listens on IPv4 too (no RDMA_OPTION_ID_AFONLY).
        super::addr::wildcard_contexts(src.is_ipv6())
    } else {
        vec![sid.id.verbs as usize]
    };
    if ctxs.is_empty() {
        return minus_one(libc::ENODEV);
    }
    let service = kern::service_id(sid.id.ps, src.port());
    if kern::debug_on() {
        eprintln!(
            "softib cm: listen {src} service {service:#x} on {} contexts",
            ctxs.len()
        );
    }
    let me = sid as *mut SoftCmId as usize;
    let mut listens = Vec::new();
    let mut err = 0;
    for c in ctxs {
        if let Err(e) = kern::ensure(c as *mut ibv_context) {
            err = e;
            continue;
        }
        match kern::listen(c as *mut ibv_context, service, me) {
            Ok(l) => listens.push((c, l)),
            Err(e) => err = e,
        }
    }
    if listens.is_empty() {
        return minus_one(err);
    }
    sid.state().listens = listens;
    0
}

/// `rdma_accept`: answers the connection request of the id: its QP (if any) to RTR and RTS,
/// then the REP (UD ids: the SIDR_REP with the QP and the rdma_cm Q_Key). ESTABLISHED comes
/// with the RTU.
#[export_name = "softib_rdmacm_rdma_accept"]
pub unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    // SAFETY: the caller's parameters, if any.
    let param = unsafe { conn_param.as_ref() };
    match accept(sid, param) {
        Ok(true) => complete(sid),
        Ok(false) => 0,
        Err(e) => minus_one(e),
    }
}

/// Ok(true) when an ESTABLISHED event is to come.
fn accept(sid: &mut SoftCmId, param: Option<&rdma_conn_param>) -> Result<bool, i32> {
    let ctx = sid.id.verbs;
    let aid = sid.state().agent.ok_or(libc::EINVAL)?;
    let (qpn, srq) = if sid.id.qp.is_null() {
        param.map(|p| (p.qp_num, p.srq != 0)).ok_or(libc::EINVAL)?
    } else {
        // SAFETY: the id's QP.
        unsafe { ((*sid.id.qp).qp_num, !(*sid.id.qp).srq.is_null()) }
    };
    if is_ud(sid) {
        let private = param_private(param, SIDR_REP_PRIVATE)?;
        kern::with(ctx, |k, _| {
            k.conns.remove(&aid);
            k.port
                .agent()
                .sidr_reply(
                    aid,
                    sidr_status::SUCCESS,
                    Qpn::new(qpn),
                    RDMA_UDP_QKEY,
                    &private,
                )
                .map_err(|_| libc::EINVAL)
        })??;
        sid.state().agent = None;
        if sid.state().sync && !sid.id.event.is_null() {
            // SAFETY: the request the synchronous id was handed.
            unsafe { super::rdma_ack_cm_event(sid.id.event) };
            sid.id.event = std::ptr::null_mut();
        }
        return Ok(false);
    }
    let private = param_private(param, REP_PRIVATE)?;
    let (max_resp, max_init) = device_rd_atomic(ctx);
    {
        let mut st = sid.state();
        st.responder_resources = match param.map(|p| p.responder_resources) {
            Some(v) if v != 255 => v,
            _ => st.responder_resources.min(max_resp),
        };
        st.initiator_depth = match param.map(|p| p.initiator_depth) {
            Some(v) if v != 255 => v,
            _ => st.initiator_depth.min(max_init),
        };
        st.rnr_retry = param.map(|p| p.rnr_retry_count.min(7)).unwrap_or(7);
        if let Some(r) = st.remote.as_mut() {
            r.rq_psn = kern::random_u32() & 0xff_ffff;
        }
        st.active = false;
    }
    qp_to_rts(sid)?;
    let a = {
        let st = sid.state();
        AcceptParams {
            qpn: Qpn::new(qpn),
            starting_psn: Psn::new(st.remote.map_or(0, |r| r.rq_psn)),
            responder_resources: st.responder_resources,
            initiator_depth: st.initiator_depth,
            target_ack_delay: 0,
            rnr_retry_count: st.rnr_retry,
            srq,
            private_data: private,
        }
    };
    let r = kern::with(ctx, |k, now| {
        k.port
            .agent()
            .accept(now, aid, &a)
            .map_err(|_| libc::EINVAL)
    })
    .and_then(|r| r);
    if let Err(e) = r {
        qp_to_err(sid);
        return Err(e);
    }
    Ok(true)
}

/// `rdma_reject`: refuses the id's connection request (REJ, reason Consumer Defined, with
/// the private data; UD ids: a SIDR_REP with status "rejected").
#[export_name = "softib_rdmacm_rdma_reject"]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const libc::c_void,
    private_data_len: u8,
) -> libc::c_int {
    // SAFETY: as the caller's.
    unsafe {
        reject(
            id,
            private_data,
            private_data_len,
            rej_reason::CONSUMER_DEFINED,
        )
    }
}

/// `rdma_reject_ece`: as `rdma_reject`, reason "vendor option not supported".
#[export_name = "softib_rdmacm_rdma_reject_ece"]
pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    private_data: *const libc::c_void,
    private_data_len: u8,
) -> libc::c_int {
    // SAFETY: as the caller's.
    unsafe {
        reject(
            id,
            private_data,
            private_data_len,
            rej_reason::VENDOR_OPTION_NOT_SUPPORTED,
        )
    }
}

unsafe fn reject(
    id: *mut rdma_cm_id,
    private_data: *const libc::c_void,
    len: u8,
    reason: u16,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    let Some(aid) = sid.state().agent else {
        return minus_one(libc::EINVAL);
    };
    // SAFETY: the caller's buffer of the length it gives.
    let private = unsafe { c_bytes(private_data, len) }.to_vec();
    let ud = is_ud(sid);
    let max = if ud { SIDR_REP_PRIVATE } else { REJ_PRIVATE };
    if private.len() > max {
        return minus_one(libc::EINVAL);
    }
    let r = kern::with(sid.id.verbs, |k, now| {
        let a = k.port.agent();
        if ud {
            k.conns.remove(&aid);
            a.sidr_reply(aid, sidr_status::REJECT, Qpn::new(0), 0, &private)
        } else {
            a.reject(now, aid, reason, &private)
        }
        .map_err(|_| libc::EINVAL)
    })
    .and_then(|r| r);
    if ud {
        sid.state().agent = None;
    } else {
        sid.state().disconnected = true;
    }
    match r {
        Ok(()) => 0,
        Err(e) => minus_one(e),
    }
}

/// `rdma_disconnect`: the QP to ERR (its work requests flush), then a DREQ to the peer, or the
/// DREP if the peer asked first.
#[export_name = "softib_rdmacm_rdma_disconnect"]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    if sid.id.verbs.is_null() {
        return minus_one(libc::EINVAL);
    }
    qp_to_err(sid);
    let Some(aid) = sid.state().agent else {
        return minus_one(libc::EINVAL);
    };
    let r = kern::with(sid.id.verbs, |k, now| {
        let a = k.port.agent();
        match a.state(aid) {
            Some(State::DreqSent | State::TimeWait) => Ok(false),
            _ => a
                .disconnect(now, aid, &[])
                .map(|_| true)
                .map_err(|_| libc::EINVAL),
        }
    })
    .and_then(|r| r);
    match r {
        Ok(true) => complete(sid),
        Ok(false) => 0,
        Err(e) => minus_one(e),
    }
}

/// `rdma_establish`: an id without a QP that read CONNECT_RESPONSE completes the connection
/// (the RTU).
#[export_name = "softib_rdmacm_rdma_establish"]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    if !sid.id.qp.is_null() {
        return minus_one(libc::EINVAL);
    }
    let Some(aid) = sid.state().agent else {
        return minus_one(libc::EINVAL);
    };
    match kern::with(sid.id.verbs, |k, _| k.port.agent().establish(aid, &[])) {
        Ok(Ok(())) => 0,
        _ => minus_one(libc::EINVAL),
    }
}
