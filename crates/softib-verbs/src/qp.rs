//! Queue pairs, shared receive queues, posting, multicast.

use std::sync::Arc;

use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpInitAttr};
use softib_core::verbs::srq::{SrqAttr, SrqAttrMask, SrqInitAttr};
use softib_core::verbs::types::Gid;
use softib_core::verbs::types::{QpState, QpType, SendFlags};
use softib_core::verbs::wr::{RecvWr, SendWr, Sge, UdDest, WrOpcode};
use softib_core::verbs::{RddHandle, SrqHandle};
use softib_wire::Qpn;

use crate::context::Shared;
use crate::convert;
use crate::cq::SoftCq;
use crate::device::SoftContext;
use crate::mr::{self, SoftPd};
use crate::registry::{self, Kind};
use crate::util::{self, null_errno, ret_errno};
use crate::verbs_h::*;
use crate::xrc::SoftXrcd;

/// A QP: `struct ibv_qp_ex` (whose prefix is `struct ibv_qp`) and softib's state.
#[repr(C)]
pub struct SoftQp {
    /// Must be first.
    pub ex: ibv_qp_ex,
    /// Async events of this QP that `ibv_get_async_event` handed out (the application acks
    /// each, counted in `ibv_qp::events_completed`): `ibv_destroy_qp` waits for the acks.
    pub events_reported: std::sync::atomic::AtomicU32,
    /// The context's engine.
    pub shared: Arc<Shared>,
    /// QP number.
    pub qpn: Qpn,
    /// Transport service.
    pub qp_type: QpType,
    /// Created through `ibv_create_qp_ex` with `send_ops_flags`: `ibv_qp_to_qp_ex` hands out
    /// `ex`.
    pub has_ex: bool,
    /// `send_ops_flags` of `ibv_create_qp_ex`.
    pub send_ops: u64,
    /// Largest inline payload (the QP's capability).
    pub max_inline: u32,
    /// Largest `num_sge` of a send / receive WR (the QP's capabilities): checked before the
    /// application's list is read, as rdma-core's rxe provider does.
    pub max_send_sge: u32,
    /// See `max_send_sge`.
    pub max_recv_sge: u32,
    /// WRs built by the `ibv_wr_*` interface between `ibv_wr_start` and `ibv_wr_complete`.
    pub wr_batch: crate::ex::WrBatch,
    /// Set when a `ibv_wr_*` call in the batch was invalid (`ibv_wr_complete` fails).
    pub wr_error: i32,
    /// The XRC domain handle an XRC target QP was created or opened through (it counts the
    /// QP among its users); NULL for every other QP.
    pub xrcd: *mut SoftXrcd,
}

/// An SRQ: `struct ibv_srq` and its HCA handle.
#[repr(C)]
pub struct SoftSrq {
    /// Must be first.
    pub srq: ibv_srq,
    /// The context's engine.
    pub shared: Arc<Shared>,
    /// The HCA's SRQ.
    pub handle: SrqHandle,
    /// Largest `num_sge` of a WR (the SRQ's capability), checked before the list is read.
    pub max_sge: u32,
    /// The XRC domain handle of an XRC SRQ (it counts the SRQ among its users); NULL for a
    /// basic SRQ.
    pub xrcd: *mut SoftXrcd,
}

/// Fills the QP and SRQ entries of `context->ops`.
pub fn fill_ops(ops: &mut ibv_context_ops) {
    ops.post_send = Some(post_send);
    ops.post_recv = Some(post_recv);
    ops.post_srq_recv = Some(post_srq_recv);
}

/// The handle of a live CQ of `ctx`. A CQ of another context is another engine's: its handle
/// means nothing (or another CQ) here, and the kernel refuses it (EINVAL) as well.
pub unsafe fn cq_handle(
    cq: *mut ibv_cq,
    ctx: *mut ibv_context,
) -> Option<softib_core::verbs::CqHandle> {
    if !registry::is_live(cq, Kind::Cq) || !std::ptr::eq((*cq).context, ctx) {
        return None;
    }
    Some((*cq.cast::<SoftCq>()).handle)
}

/// Creates a QP from the extended attributes (the plain verb converts to them).
pub unsafe fn create(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> Result<*mut SoftQp, i32> {
    create_in(ctx, attr, None)
}

/// [`create`], and with `rdd` an RD QP of that reliable datagram domain (`qp_type`
/// `SOFTIB_QPT_RD`, `softib_create_rd_qp`; the caller checked the domain is `ctx`'s). Without
/// a domain `SOFTIB_QPT_RD` fails with EINVAL, as the core refuses an RD QP with no RDD.
pub unsafe fn create_in(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
    rdd: Option<RddHandle>,
) -> Result<*mut SoftQp, i32> {
    let sc = SoftContext::from_ctx(ctx).ok_or(libc::EINVAL)?;
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    let a = &mut *attr;
    let known = IBV_QP_INIT_ATTR_PD
        | IBV_QP_INIT_ATTR_XRCD
        | IBV_QP_INIT_ATTR_CREATE_FLAGS
        | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & !known != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
        // rdma-core refuses the bits it does not know (EINVAL); the ones it knows ask for
        // features of raw Ethernet or vendor HCAs, which rxe refuses as softib does
        // (EOPNOTSUPP). No flags at all is an ordinary QP.
        let defined = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
            | IBV_QP_CREATE_SCATTER_FCS
            | IBV_QP_CREATE_CVLAN_STRIPPING
            | IBV_QP_CREATE_SOURCE_QPN
            | IBV_QP_CREATE_PCI_WRITE_END_PADDING;
        return Err(if a.create_flags & !defined != 0 {
            libc::EINVAL
        } else {
            libc::EOPNOTSUPP
        });
    }
    if a.qp_type == IBV_QPT_XRC_RECV {
        return create_xrc_tgt(sc, ctx, a);
    }
    // Every other type belongs to a PD (rdma-core: EINVAL without one).
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        return Err(libc::EINVAL);
    }
    let (_, sp) = mr::pd_parts(a.pd).ok_or(libc::EINVAL)?;
    if !std::ptr::eq(sp.pd.context, ctx) {
        return Err(libc::EINVAL);
    }
    let qp_type = match a.qp_type {
        IBV_QPT_RC => QpType::Rc,
        IBV_QPT_UC => QpType::Uc,
        IBV_QPT_UD => QpType::Ud,
        IBV_QPT_XRC_SEND => QpType::XrcSend,
        crate::rd::SOFTIB_QPT_RD => QpType::Rd,
        _ => return Err(libc::EOPNOTSUPP),
    };
    let send_cq = cq_handle(a.send_cq, ctx).ok_or(libc::EINVAL)?;
    let xrc_send = qp_type == QpType::XrcSend;
    // An XRC initiator has no receive queue: its recv_cq and srq are not used (the kernel does
    // not look at them), and its receive capabilities are 0.
    let recv_cq = if xrc_send {
        send_cq
    } else {
        cq_handle(a.recv_cq, ctx).ok_or(libc::EINVAL)?
    };
    let srq = if a.srq.is_null() || xrc_send {
        None
    } else {
        if !registry::is_live(a.srq, Kind::Srq) || !std::ptr::eq((*a.srq).context, ctx) {
            return Err(libc::EINVAL);
        }
        let s = &*a.srq.cast::<SoftSrq>();
        // An XRC SRQ is reached through the XRCETH of its domain's target QPs only.
        if !s.xrcd.is_null() {
            return Err(libc::EINVAL);
        }
        Some(s.handle)
    };
    if xrc_send {
        a.cap.max_recv_wr = 0;
        a.cap.max_recv_sge = 0;
    }
    let has_ex = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
    if has_ex && a.send_ops_flags & !crate::ex::SUPPORTED_SEND_OPS != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let init = QpInitAttr {
        send_cq,
        recv_cq,
        srq,
        cap: convert::cap_from_c(&a.cap),
        qp_type,
        sq_sig_all: a.sq_sig_all != 0,
    };
    let mut eng = sc.shared.lock();
    let hca = eng.dev.hca_mut();
    let qpn = match rdd {
        None => hca
            .create_qp(sp.handle, &init)
            .map_err(|e| convert::create_qp_errno(&e))?,
        Some(rdd) => hca
            .create_rd_qp(sp.handle, rdd, &init)
            .map_err(|e| convert::rd_errno(&e))?,
    };
    if let Ok(i) = eng.dev.hca().query_qp_init_attr(qpn) {
        a.cap = convert::cap_to_c(&i.cap);
    }
    let mut ex: ibv_qp_ex = util::zeroed();
    ex.qp_base.context = ctx;
    ex.qp_base.qp_context = a.qp_context;
    ex.qp_base.pd = a.pd;
    ex.qp_base.send_cq = a.send_cq;
    ex.qp_base.recv_cq = a.recv_cq;
    ex.qp_base.srq = a.srq;
    ex.qp_base.qp_num = qpn.value();
    ex.qp_base.state = IBV_QPS_RESET;
    ex.qp_base.qp_type = a.qp_type;
    if has_ex {
        crate::ex::fill_qp_ex(&mut ex, a.send_ops_flags);
    }
    let p = Box::into_raw(Box::new(SoftQp {
        ex,
        events_reported: std::sync::atomic::AtomicU32::new(0),
        shared: sc.shared.clone(),
        qpn,
        qp_type,
        has_ex,
        send_ops: if has_ex { a.send_ops_flags } else { 0 },
        max_inline: a.cap.max_inline_data,
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        wr_batch: Default::default(),
        wr_error: 0,
        xrcd: std::ptr::null_mut(),
    }));
    (*p).ex.qp_base.handle = qpn.value();
    eng.qps.entry(qpn.value()).or_default().push(p);
    registry::add(p.cast::<ibv_qp>(), Kind::Qp);
    Ok(p)
}

/// Creates an XRC target QP (`IBV_QPT_XRC_RECV`) in the XRC domain of `a.xrcd`: no PD, no CQ,
/// no queue; the PD, CQ, SRQ and capabilities the application passes are not used (as the
/// kernel ignores them), and the `ibv_qp` names none of them.
unsafe fn create_xrc_tgt(
    sc: &SoftContext,
    ctx: *mut ibv_context,
    a: &mut ibv_qp_init_attr_ex,
) -> Result<*mut SoftQp, i32> {
    if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 {
        return Err(libc::EINVAL);
    }
    // An XRC target has no send queue: no ibv_wr_* interface (rdma-core's providers refuse
    // it with EOPNOTSUPP).
    if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let x = crate::xrc::soft_xrcd(a.xrcd, ctx).ok_or(libc::EINVAL)?;
    let mut eng = sc.shared.lock();
    let qpn = eng
        .dev
        .hca_mut()
        .create_xrc_tgt_qp((*x).handle)
        .map_err(|e| convert::create_qp_errno(&e))?;
    a.cap = util::zeroed();
    Ok(new_xrc_tgt_holder(
        &mut eng,
        sc,
        ctx,
        x,
        qpn,
        a.qp_context,
        IBV_QPS_RESET,
    ))
}

/// The `ibv_qp` of one holder of XRC target QP `qpn` (its creator or an `ibv_open_qp`), which
/// counts among the users of the domain handle `xrcd`.
pub unsafe fn new_xrc_tgt_holder(
    eng: &mut crate::context::Engine,
    sc: &SoftContext,
    ctx: *mut ibv_context,
    xrcd: *mut SoftXrcd,
    qpn: Qpn,
    qp_context: *mut libc::c_void,
    state: ibv_qp_state,
) -> *mut SoftQp {
    let mut ex: ibv_qp_ex = util::zeroed();
    ex.qp_base.context = ctx;
    ex.qp_base.qp_context = qp_context;
    ex.qp_base.qp_num = qpn.value();
    ex.qp_base.state = state;
    ex.qp_base.qp_type = IBV_QPT_XRC_RECV;
    let p = Box::into_raw(Box::new(SoftQp {
        ex,
        events_reported: std::sync::atomic::AtomicU32::new(0),
        shared: sc.shared.clone(),
        qpn,
        qp_type: QpType::XrcRecv,
        has_ex: false,
        send_ops: 0,
        max_inline: 0,
        max_send_sge: 0,
        max_recv_sge: 0,
        wr_batch: Default::default(),
        wr_error: 0,
        xrcd,
    }));
    (*p).ex.qp_base.handle = qpn.value();
    (*xrcd)
        .users
        .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    eng.qps.entry(qpn.value()).or_default().push(p);
    registry::add(p.cast::<ibv_qp>(), Kind::Qp);
    p
}

/// The extended attributes of a basic `ibv_qp_init_attr`, with its PD.
pub fn init_attr_ex(a: &ibv_qp_init_attr, pd: *mut ibv_pd) -> ibv_qp_init_attr_ex {
    let mut ex: ibv_qp_init_attr_ex = util::zeroed();
    ex.qp_context = a.qp_context;
    ex.send_cq = a.send_cq;
    ex.recv_cq = a.recv_cq;
    ex.srq = a.srq;
    ex.cap = a.cap;
    ex.qp_type = a.qp_type;
    ex.sq_sig_all = a.sq_sig_all;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    ex
}

symver!(ibv_create_qp);
#[export_name = "softib_ibv_create_qp"]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    if !registry::is_live(pd, Kind::Pd) || attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    let a = &mut *attr;
    let mut ex = init_attr_ex(a, pd);
    match create((*pd.cast::<SoftPd>()).pd.context, &mut ex) {
        Ok(p) => {
            a.cap = ex.cap;
            p.cast()
        }
        Err(e) => null_errno(e),
    }
}

/// The QP behind a pointer, if live.
pub unsafe fn soft_qp<'a>(qp: *mut ibv_qp) -> Option<&'a mut SoftQp> {
    if !registry::is_live(qp, Kind::Qp) {
        return None;
    }
    Some(&mut *qp.cast::<SoftQp>())
}

symver!(ibv_modify_qp);
#[export_name = "softib_ibv_modify_qp"]
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: i32) -> i32 {
    let Some(q) = soft_qp(qp) else {
        return ret_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return ret_errno(libc::EINVAL);
    }
    let (a, m) = match convert::qp_attr_from_c(&*attr, mask as u32) {
        Ok(v) => v,
        Err(e) => return ret_errno(e),
    };
    // As the kernel's uverbs does, the attributes of the half an XRC QP does not have are
    // ignored rather than refused (perftest sets RC's full masks on both): an initiator has no
    // responder, a target no requester.
    let m = match q.qp_type {
        QpType::XrcSend => m - (QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER),
        QpType::XrcRecv => {
            m - (QpAttrMask::MAX_QP_RD_ATOMIC | QpAttrMask::RETRY_CNT | QpAttrMask::RNR_RETRY)
        }
        _ => m,
    };
    let shared = q.shared.clone();
    let mut eng = shared.lock();
    if let Err(e) = eng.dev.hca_mut().modify_qp(q.qpn, &a, m) {
        return ret_errno(convert::modify_qp_errno(&e));
    }
    if let Ok(now) = eng.dev.hca().query_qp(q.qpn) {
        q.ex.qp_base.state = now.qp_state.raw();
    }
    // A QP moved to RESET leaves no completion behind in its CQs (mlx4 and mlx5 clean them:
    // a QP recycled through RESET does not find its old flushed WRs there).
    if m.contains(QpAttrMask::STATE) && a.qp_state == QpState::Reset {
        let _ = eng.dev.hca_mut().purge_qp_completions(q.qpn);
    }
    // A move to ERR flushes: completions and events may be waiting.
    eng.flush(&shared);
    if m.contains(QpAttrMask::STATE) && a.qp_state == QpState::Err {
        eng.dispatch_events(&shared);
    }
    0
}

symver!(ibv_query_qp);
#[export_name = "softib_ibv_query_qp"]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: i32,
    init_attr: *mut ibv_qp_init_attr,
) -> i32 {
    let Some(q) = soft_qp(qp) else {
        return ret_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return ret_errno(libc::EINVAL);
    }
    let eng = q.shared.lock();
    let Ok(a) = eng.dev.hca().query_qp(q.qpn) else {
        return ret_errno(libc::EINVAL);
    };
    *attr = convert::qp_attr_to_c(&a);
    q.ex.qp_base.state = a.qp_state.raw();
    if !init_attr.is_null() {
        if let Ok(i) = eng.dev.hca().query_qp_init_attr(q.qpn) {
            let ia = &mut *init_attr;
            ia.qp_context = q.ex.qp_base.qp_context;
            ia.send_cq = q.ex.qp_base.send_cq;
            ia.recv_cq = q.ex.qp_base.recv_cq;
            ia.srq = q.ex.qp_base.srq;
            ia.cap = convert::cap_to_c(&i.cap);
            ia.qp_type = q.ex.qp_base.qp_type;
            ia.sq_sig_all = i32::from(i.sq_sig_all);
        }
    }
    0
}

symver!(ibv_query_qp_data_in_order);
#[export_name = "softib_ibv_query_qp_data_in_order"]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(
    qp: *mut ibv_qp,
    _op: ibv_wr_opcode,
    _flags: u32,
) -> i32 {
    // rdma-core 44: 1 if the data is written in order. softib places every message's bytes
    // in order before it completes.
    if soft_qp(qp).is_none() {
        return 0;
    }
    1
}

symver!(ibv_destroy_qp);
#[export_name = "softib_ibv_destroy_qp"]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> i32 {
    destroy_qp(qp, true)
}

/// `ibv_destroy_qp`; with `wait_acks` false (a context being closed destroys what was made
/// through it) it does not wait for the acks of the QP's events handed out.
pub(crate) unsafe fn destroy_qp(qp: *mut ibv_qp, wait_acks: bool) -> i32 {
    let Some(q) = soft_qp(qp) else {
        return ret_errno(libc::EINVAL);
    };
    {
        let shared = q.shared.clone();
        let mut eng = shared.lock();
        // What the QP still has to send (the ACK of its last receive) leaves first; nothing
        // is received here. The application may already have freed the buffers of the
        // receives it posted, which hardware tolerates (the pages stay pinned until their
        // region is deregistered, later still behind a registration cache): UCX frees a UD
        // interface's receive buffers before it destroys its QP, and a datagram placed into
        // them here would fault.
        let now = eng.dev.now();
        let _ = eng.dev.flush(now);
        eng.dispatch_events(&shared);
        // A shared XRC target QP lives on while another holder has it: this destroy only
        // lets go of it.
        let last = eng.dev.hca().qp(q.qpn).is_none_or(|c| c.opens() <= 1);
        if last {
            // rdma-core: a destroyed QP's outstanding WRs are not processed and no completions
            // are generated for them (rxe drains without notifying). The core's destroy
            // flushes them into the CQs, where the application, which may already have freed
            // what their wr_ids point at, would poll them: RESET first empties the queues
            // silently.
            let reset = QpAttr {
                qp_state: QpState::Reset,
                ..QpAttr::default()
            };
            let _ = eng
                .dev
                .hca_mut()
                .modify_qp(q.qpn, &reset, QpAttrMask::STATE);
            // Nor do the completions it had before stay (as after ibv_modify_qp to RESET).
            let _ = eng.dev.hca_mut().purge_qp_completions(q.qpn);
        }
        if eng.dev.hca_mut().destroy_qp(q.qpn).is_err() {
            return ret_errno(libc::EINVAL);
        }
        // Its multicast groups, if it was the last of this process in them.
        let _ = eng.dev.sync_multicast();
        let me = qp.cast::<SoftQp>();
        if let Some(v) = eng.qps.get_mut(&q.qpn.value()) {
            v.retain(|&h| h != me);
            if v.is_empty() {
                eng.qps.remove(&q.qpn.value());
            }
        }
        if !q.xrcd.is_null() {
            (*q.xrcd)
                .users
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
    // As rdma-core's: no async event of a destroyed QP is delivered, and ibv_destroy_qp
    // returns once every event of it that was delivered is acknowledged
    // (ibv_get_async_event(3)), so that the application's event thread never reads a QP that
    // is gone. UCX's reads `element.qp->qp_num` of every event: the QP it destroys at
    // teardown left its IBV_EVENT_QP_LAST_WQE_REACHED in the queue.
    if let Some(sc) = crate::device::SoftContext::from_ctx((*qp).context) {
        let reported = sc.events.forget_qp(qp);
        let acked =
            std::sync::atomic::AtomicU32::from_ptr(std::ptr::addr_of_mut!((*qp).events_completed));
        while wait_acks && acked.load(std::sync::atomic::Ordering::Acquire) != reported {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
    registry::remove(qp, Kind::Qp);
    drop(Box::from_raw(qp.cast::<SoftQp>()));
    0
}

// ----- posting ---------------------------------------------------------------------------

/// Fills `wr` from one `ibv_send_wr`, reusing its buffers (no allocation for the usual WR).
/// `Err(errno)` for a WR no QP could take.
pub unsafe fn fill_send_wr(
    wr: &mut SendWr,
    w: &ibv_send_wr,
    max_inline: u32,
    max_sge: u32,
) -> Result<(), i32> {
    let imm = u32::from_be(w.__bindgen_anon_1.imm_data);
    let opcode = match w.opcode {
        IBV_WR_SEND => WrOpcode::Send,
        IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm(imm),
        IBV_WR_SEND_WITH_INV => WrOpcode::SendWithInv(w.__bindgen_anon_1.invalidate_rkey),
        IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite {
            remote: softib_core::verbs::wr::RemoteAddr::new(w.wr.rdma.remote_addr, w.wr.rdma.rkey),
        },
        IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm {
            remote: softib_core::verbs::wr::RemoteAddr::new(w.wr.rdma.remote_addr, w.wr.rdma.rkey),
            imm,
        },
        IBV_WR_RDMA_READ => WrOpcode::RdmaRead {
            remote: softib_core::verbs::wr::RemoteAddr::new(w.wr.rdma.remote_addr, w.wr.rdma.rkey),
        },
        IBV_WR_ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCmpSwp {
            remote_addr: w.wr.atomic.remote_addr,
            rkey: w.wr.atomic.rkey,
            compare: w.wr.atomic.compare_add,
            swap: w.wr.atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFetchAdd {
            remote_addr: w.wr.atomic.remote_addr,
            rkey: w.wr.atomic.rkey,
            add: w.wr.atomic.compare_add,
        },
        _ => return Err(libc::EINVAL),
    };
    // num_sge is checked before the list is read: a list shorter than num_sge says is
    // never read past.
    if w.num_sge < 0 || w.num_sge as u32 > max_sge || (w.num_sge > 0 && w.sg_list.is_null()) {
        return Err(libc::EINVAL);
    }
    let sges = if w.num_sge == 0 {
        &[][..]
    } else {
        std::slice::from_raw_parts(w.sg_list, w.num_sge as usize)
    };
    let flags = SendFlags::from_bits_truncate(w.send_flags);
    wr.wr_id = w.wr_id;
    wr.opcode = opcode;
    wr.flags = flags;
    // The destination is the caller's to add (`post_send_chain`): none is left over from the
    // WR this buffer held before.
    wr.ud = None;
    wr.rd = None;
    wr.xrc_remote_srqn = 0;
    wr.sg_list.clear();
    if flags.contains(SendFlags::INLINE) && !opcode.writes_local_memory() {
        // Inline: the bytes are copied now, the lkeys are ignored (as rdma-core documents).
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        if total > u64::from(max_inline) {
            return Err(libc::EINVAL);
        }
        let mut data = wr.inline_data.take().unwrap_or_default();
        data.clear();
        for s in sges {
            if s.length > 0 {
                if s.addr == 0 {
                    return Err(libc::EINVAL);
                }
                data.extend_from_slice(std::slice::from_raw_parts(
                    s.addr as usize as *const u8,
                    s.length as usize,
                ));
            }
        }
        wr.inline_data = Some(data);
    } else {
        wr.flags.remove(SendFlags::INLINE);
        wr.inline_data = None;
        wr.sg_list
            .extend(sges.iter().map(|s| Sge::new(s.addr, s.length, s.lkey)));
    }
    Ok(())
}

/// `ops.post_send`.
pub unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> i32 {
    if qp.is_null() {
        return libc::EINVAL;
    }
    let q = &*qp.cast::<SoftQp>();
    let qp_type = q.qp_type;
    if qp_type == QpType::Rd {
        // An RD WR names an EE context and a remote QP and Q_Key, which `struct ibv_send_wr`
        // has no room for: RD QPs send with `softib_post_rd_send` (rd.rs). Nothing is posted.
        if !bad_wr.is_null() {
            *bad_wr = wr;
        }
        return libc::EINVAL;
    }
    post_send_chain(q, wr, bad_wr, |one, w, _| {
        if qp_type == QpType::XrcSend {
            one.xrc_remote_srqn = w.qp_type.xrc.remote_srqn;
        }
        if qp_type == QpType::Ud {
            let ah = mr::ah_handle(w.wr.ud.ah).ok_or(libc::EINVAL)?;
            one.ud = Some(UdDest {
                ah,
                remote_qpn: Qpn::new(w.wr.ud.remote_qpn),
                remote_qkey: w.wr.ud.remote_qkey,
            });
        }
        Ok(())
    })
}

/// Posts a chain of send WRs on `q` one at a time: each is converted by [`fill_send_wr`] into
/// the engine's reused WR, given its destination by `dest(wr, ibv_wr, index in the chain)` (a
/// UD address, an XRC SRQ, an RD destination; `Err(errno)` refuses the WR) and posted. Stops
/// at the first refused WR, which `bad_wr` then names (those before it stay posted, as
/// `ibv_post_send` does). Returns 0 or the errno (errno itself is not set).
pub unsafe fn post_send_chain(
    q: &SoftQp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
    mut dest: impl FnMut(&mut SendWr, &ibv_send_wr, usize) -> Result<(), i32>,
) -> i32 {
    let shared: &Shared = &q.shared;
    shared
        .app_polls
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut eng = shared.lock();
    let (max_inline, max_sge) = (q.max_inline, q.max_send_sge);
    let mut cur = wr;
    let mut rc = 0;
    let mut index = 0;
    // The engine's reused WR, borrowed in place beside the device (moving it out and back
    // copied it twice per call).
    let e = &mut *eng;
    let (one, dev) = (&mut e.scratch_send, &mut e.dev);
    while !cur.is_null() {
        let w = &*cur;
        if let Err(e) = fill_send_wr(one, w, max_inline, max_sge) {
            rc = e;
            break;
        }
        if let Err(e) = dest(one, w, index) {
            rc = e;
            break;
        }
        if let Err(e) = dev.hca_mut().post_send(q.qpn, std::slice::from_ref(one)) {
            rc = convert::post_send_errno(&e);
            break;
        }
        cur = w.next;
        index += 1;
    }
    if rc != 0 && !bad_wr.is_null() {
        *bad_wr = cur;
    }
    eng.posted(shared);
    rc
}

/// Fills `r` from one `ibv_recv_wr`, reusing its scatter list.
unsafe fn fill_recv_wr(r: &mut RecvWr, w: &ibv_recv_wr, max_sge: u32) -> Result<(), i32> {
    // num_sge is checked before the list is read: a list shorter than num_sge says is
    // never read past.
    if w.num_sge < 0 || w.num_sge as u32 > max_sge || (w.num_sge > 0 && w.sg_list.is_null()) {
        return Err(libc::EINVAL);
    }
    let sges = if w.num_sge == 0 {
        &[][..]
    } else {
        std::slice::from_raw_parts(w.sg_list, w.num_sge as usize)
    };
    r.wr_id = w.wr_id;
    r.sg_list.clear();
    r.sg_list
        .extend(sges.iter().map(|s| Sge::new(s.addr, s.length, s.lkey)));
    Ok(())
}

/// `ops.post_recv`.
pub unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> i32 {
    if qp.is_null() {
        return libc::EINVAL;
    }
    let q = &*qp.cast::<SoftQp>();
    post_recv_chain(&q.shared, wr, bad_wr, q.max_recv_sge, |hca, one| {
        hca.post_recv(q.qpn, std::slice::from_ref(one))
            .map_err(|e| convert::post_recv_errno(&e))
    })
}

/// `ops.post_srq_recv`.
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> i32 {
    if srq.is_null() {
        return libc::EINVAL;
    }
    let s = &*srq.cast::<SoftSrq>();
    post_recv_chain(&s.shared, wr, bad_wr, s.max_sge, |hca, one| {
        hca.post_srq_recv(s.handle, std::slice::from_ref(one))
            .map_err(|e| match e {
                softib_core::error::PostSrqRecvError::QueueFull { .. } => libc::ENOMEM,
                _ => libc::EINVAL,
            })
    })
}

/// Posts a chain of receive WRs one at a time through `post` (a QP's receive queue or an
/// SRQ), converting each into the engine's reused buffer; stops at the first refused WR, which
/// `bad_wr` then names. Returns 0 or the errno.
unsafe fn post_recv_chain(
    shared: &Shared,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    max_sge: u32,
    mut post: impl FnMut(&mut softib_core::Hca, &RecvWr) -> Result<(), i32>,
) -> i32 {
    shared
        .app_polls
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut eng = shared.lock();
    let mut cur = wr;
    let mut rc = 0;
    let mut one = std::mem::take(&mut eng.scratch_recv);
    while !cur.is_null() {
        let w = &*cur;
        if let Err(e) = fill_recv_wr(&mut one, w, max_sge) {
            rc = e;
            break;
        }
        if let Err(e) = post(eng.dev.hca_mut(), &one) {
            rc = e;
            break;
        }
        cur = w.next;
    }
    eng.scratch_recv = one;
    if rc != 0 && !bad_wr.is_null() {
        *bad_wr = cur;
    }
    rc
}

// ----- shared receive queues --------------------------------------------------------------

/// Creates an SRQ of `pd`; with `xrc`, an XRC SRQ of that domain handle whose completions
/// go to that CQ (the caller checked both belong to the PD's context).
pub unsafe fn create_srq(
    pd: *mut ibv_pd,
    srq_context: *mut libc::c_void,
    attr: &mut ibv_srq_attr,
    xrc: Option<(*mut SoftXrcd, softib_core::verbs::CqHandle)>,
) -> Result<*mut SoftSrq, i32> {
    let (sc, sp) = mr::pd_parts(pd).ok_or(libc::EINVAL)?;
    let init = SrqInitAttr {
        max_wr: attr.max_wr,
        max_sge: attr.max_sge,
        srq_limit: attr.srq_limit,
    };
    let mut eng = sc.shared.lock();
    let h = match xrc {
        None => eng.dev.hca_mut().create_srq(sp.handle, &init),
        Some((x, cq)) => eng
            .dev
            .hca_mut()
            .create_xrc_srq(sp.handle, (*x).handle, cq, &init),
    }
    .map_err(|_| libc::EINVAL)?;
    if let Ok(a) = eng.dev.hca().query_srq(h) {
        attr.max_wr = a.max_wr;
        attr.max_sge = a.max_sge;
    }
    let mut s: ibv_srq = util::zeroed();
    s.context = sp.pd.context;
    s.srq_context = srq_context;
    s.pd = pd;
    let p = Box::into_raw(Box::new(SoftSrq {
        srq: s,
        shared: sc.shared.clone(),
        handle: h,
        max_sge: attr.max_sge,
        xrcd: xrc.map_or(std::ptr::null_mut(), |(x, _)| x),
    }));
    if let Some((x, _)) = xrc {
        (*x).users.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    (*p).srq.handle = p as usize as u32;
    eng.srqs.insert(h, p);
    registry::add(p.cast::<ibv_srq>(), Kind::Srq);
    Ok(p)
}

symver!(ibv_create_srq);
#[export_name = "softib_ibv_create_srq"]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    if attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    let a = &mut *attr;
    match create_srq(pd, a.srq_context, &mut a.attr, None) {
        Ok(p) => p.cast(),
        Err(e) => null_errno(e),
    }
}

unsafe fn soft_srq<'a>(srq: *mut ibv_srq) -> Option<&'a SoftSrq> {
    if !registry::is_live(srq, Kind::Srq) {
        return None;
    }
    Some(&*srq.cast::<SoftSrq>())
}

symver!(ibv_modify_srq);
#[export_name = "softib_ibv_modify_srq"]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: i32,
) -> i32 {
    let Some(s) = soft_srq(srq) else {
        return ret_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return ret_errno(libc::EINVAL);
    }
    let Some(m) = SrqAttrMask::from_bits(mask as u32) else {
        return ret_errno(libc::EINVAL);
    };
    let a = &*attr;
    let sa = SrqAttr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    };
    match s.shared.lock().dev.hca_mut().modify_srq(s.handle, &sa, m) {
        Ok(_) => 0,
        Err(_) => ret_errno(libc::EINVAL),
    }
}

symver!(ibv_query_srq);
#[export_name = "softib_ibv_query_srq"]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> i32 {
    let Some(s) = soft_srq(srq) else {
        return ret_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return ret_errno(libc::EINVAL);
    }
    match s.shared.lock().dev.hca().query_srq(s.handle) {
        Ok(a) => {
            *attr = ibv_srq_attr {
                max_wr: a.max_wr,
                max_sge: a.max_sge,
                srq_limit: a.srq_limit,
            };
            0
        }
        Err(_) => ret_errno(libc::EINVAL),
    }
}

symver!(ibv_destroy_srq);
#[export_name = "softib_ibv_destroy_srq"]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> i32 {
    let Some(s) = soft_srq(srq) else {
        return ret_errno(libc::EINVAL);
    };
    {
        let mut eng = s.shared.lock();
        if eng.dev.hca_mut().destroy_srq(s.handle).is_err() {
            return ret_errno(libc::EBUSY);
        }
        eng.srqs.remove(&s.handle);
        if !s.xrcd.is_null() {
            (*s.xrcd)
                .users
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
    registry::remove(srq, Kind::Srq);
    drop(Box::from_raw(srq.cast::<SoftSrq>()));
    0
}

// ----- multicast ---------------------------------------------------------------------------

symver!(ibv_attach_mcast);
#[export_name = "softib_ibv_attach_mcast"]
pub unsafe extern "C" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> i32 {
    let Some(q) = soft_qp(qp) else {
        return ret_errno(libc::EINVAL);
    };
    if gid.is_null() {
        return ret_errno(libc::EINVAL);
    }
    let g = Gid((*gid).raw);
    let mut eng = q.shared.lock();
    if eng.dev.hca_mut().attach_mcast(q.qpn, g, lid).is_err() {
        return ret_errno(libc::EINVAL);
    }
    // The group's datagrams reach this process once it joined the group on the network.
    match eng.dev.sync_multicast() {
        Ok(()) => 0,
        Err(e) => {
            let _ = eng.dev.hca_mut().detach_mcast(q.qpn, g, lid);
            let _ = eng.dev.sync_multicast();
            ret_errno(e.raw_os_error().unwrap_or(libc::EINVAL))
        }
    }
}

symver!(ibv_detach_mcast);
#[export_name = "softib_ibv_detach_mcast"]
pub unsafe extern "C" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> i32 {
    let Some(q) = soft_qp(qp) else {
        return ret_errno(libc::EINVAL);
    };
    if gid.is_null() {
        return ret_errno(libc::EINVAL);
    }
    let g = Gid((*gid).raw);
    let mut eng = q.shared.lock();
    match eng.dev.hca_mut().detach_mcast(q.qpn, g, lid) {
        Ok(()) => {
            let _ = eng.dev.sync_multicast();
            0
        }
        Err(_) => ret_errno(libc::EINVAL),
    }
}
