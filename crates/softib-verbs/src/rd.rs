//! RD (reliable datagram) for C programs: softib's own extension, declared in
//! `include/softib/rd.h` and exported at the version node `SOFTIB_1.0` (`symbols.tsv`).
//! libibverbs has no RD verbs; these give a program the core's RD objects
//! (`softib_core::Hca::alloc_rdd`, `create_eec`, `modify_eec`, `query_eec`, `destroy_eec`,
//! `create_rd_qp`; docs/rd.md):
//!
//! - `softib_alloc_rdd` / `softib_dealloc_rdd`: a reliable datagram domain (RDD) of a context;
//!   dealloc fails with EBUSY while RD QPs or EE contexts belong to it.
//! - `softib_create_eec` / `softib_modify_eec` / `softib_query_eec` / `softib_eec_num` /
//!   `softib_destroy_eec`: EE contexts of a domain, modified and queried with `struct
//!   ibv_qp_attr` and the `IBV_QP_*` mask bits, `dest_qp_num` naming the remote EECN.
//! - `softib_create_rd_qp`: an RD QP of a domain, a normal `struct ibv_qp` whose `qp_type` is
//!   `SOFTIB_QPT_RD` (7); `ibv_modify_qp`, `ibv_query_qp`, `ibv_post_recv`, `ibv_destroy_qp`
//!   and its CQs work as for any QP (qp.rs).
//! - `softib_post_rd_send`: `ibv_post_send` for an RD QP, through one EE context, each WR's
//!   destination (remote QPN and Q_Key) from its `wr.ud` (SENDs) or from a `struct
//!   softib_rd_dest` array beside the list (any operation). The WRs are converted and posted
//!   by the same code as `ibv_post_send`'s (`qp::post_send_chain`). `ibv_post_send` on an RD
//!   QP is refused with EINVAL: `struct ibv_send_wr` cannot name an EE context.
//!
//! Errors follow libibverbs: object-returning functions return NULL with errno set, the others
//! return 0 or the errno value (errno set too). NULL, pointers this library never handed out
//! (or of another kind) and destroyed objects are refused with EINVAL (`registry.rs`), and a
//! domain of another context than the PD with EINVAL, as every control verb here does.

use std::sync::Arc;

use softib_core::verbs::types::QpType;
use softib_core::verbs::wr::RdDest;
use softib_core::verbs::RddHandle;
use softib_wire::{Eecn, Qpn};

use crate::context::Shared;
use crate::convert;
use crate::device::SoftContext;
use crate::qp;
use crate::registry::{self, Kind};
use crate::util::{null_errno, ret_errno, set_errno};
use crate::verbs_h::*;

/// `SOFTIB_QPT_RD`: the `qp_type` of an RD QP. Linux's `enum ib_qp_type` has no RD; 7 is its
/// unused slot between the raw types and `IB_QPT_RAW_PACKET`, the value the core gives RD
/// (`QpType::Rd.raw()`).
pub const SOFTIB_QPT_RD: ibv_qp_type = 7;

const _: () = assert!(SOFTIB_QPT_RD == softib_core::verbs::types::QpType::Rd.raw());

/// `struct softib_rdd` (opaque to C): a reliable datagram domain of one context.
#[repr(C)]
pub struct SoftRdd {
    /// The context the domain belongs to.
    pub context: *mut ibv_context,
    /// The context's engine.
    pub shared: Arc<Shared>,
    /// The HCA's domain.
    pub handle: RddHandle,
}

/// `struct softib_eec` (opaque to C): an EE context.
#[repr(C)]
pub struct SoftEec {
    /// The context the EE context belongs to.
    pub context: *mut ibv_context,
    /// The context's engine.
    pub shared: Arc<Shared>,
    /// Its number, in the HCA's EECN space.
    pub eecn: Eecn,
}

unsafe fn soft_rdd<'a>(rdd: *mut SoftRdd) -> Option<&'a SoftRdd> {
    if !registry::is_live(rdd, Kind::Rdd) {
        return None;
    }
    Some(&*rdd)
}

unsafe fn soft_eec<'a>(eec: *mut SoftEec) -> Option<&'a SoftEec> {
    if !registry::is_live(eec, Kind::Eec) {
        return None;
    }
    Some(&*eec)
}

symver!(softib_alloc_rdd);
/// `struct softib_rdd *softib_alloc_rdd(struct ibv_context *context)`.
#[export_name = "softib_softib_alloc_rdd"]
pub unsafe extern "C" fn softib_alloc_rdd(ctx: *mut ibv_context) -> *mut SoftRdd {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return null_errno(libc::EINVAL);
    };
    let handle = match sc.shared.lock().dev.hca_mut().alloc_rdd() {
        Ok(h) => h,
        Err(e) => return null_errno(convert::rd_errno(&e)),
    };
    let p = Box::into_raw(Box::new(SoftRdd {
        context: ctx,
        shared: sc.shared.clone(),
        handle,
    }));
    registry::add(p, Kind::Rdd);
    p
}

symver!(softib_dealloc_rdd);
/// `int softib_dealloc_rdd(struct softib_rdd *rdd)`: 0, EINVAL, or EBUSY while RD QPs or EE
/// contexts belong to the domain.
#[export_name = "softib_softib_dealloc_rdd"]
pub unsafe extern "C" fn softib_dealloc_rdd(rdd: *mut SoftRdd) -> i32 {
    let Some(r) = soft_rdd(rdd) else {
        return ret_errno(libc::EINVAL);
    };
    if let Err(e) = r.shared.lock().dev.hca_mut().dealloc_rdd(r.handle) {
        return ret_errno(convert::rd_errno(&e));
    }
    registry::remove(rdd, Kind::Rdd);
    drop(Box::from_raw(rdd));
    0
}

symver!(softib_create_eec);
/// `struct softib_eec *softib_create_eec(struct softib_rdd *rdd)`: an EE context of the
/// domain, in RESET.
#[export_name = "softib_softib_create_eec"]
pub unsafe extern "C" fn softib_create_eec(rdd: *mut SoftRdd) -> *mut SoftEec {
    let Some(r) = soft_rdd(rdd) else {
        return null_errno(libc::EINVAL);
    };
    let eecn = match r.shared.lock().dev.hca_mut().create_eec(r.handle) {
        Ok(n) => n,
        Err(e) => return null_errno(convert::rd_errno(&e)),
    };
    let p = Box::into_raw(Box::new(SoftEec {
        context: r.context,
        shared: r.shared.clone(),
        eecn,
    }));
    registry::add(p, Kind::Eec);
    p
}

symver!(softib_modify_eec);
/// `int softib_modify_eec(struct softib_eec *eec, struct ibv_qp_attr *attr, int attr_mask)`:
/// `ibv_modify_qp` for an EE context (RC's transition table without `IBV_QP_ACCESS_FLAGS`;
/// `dest_qp_num` is the remote EECN). 0 or EINVAL.
#[export_name = "softib_softib_modify_eec"]
pub unsafe extern "C" fn softib_modify_eec(
    eec: *mut SoftEec,
    attr: *mut ibv_qp_attr,
    mask: i32,
) -> i32 {
    let Some(e) = soft_eec(eec) else {
        return ret_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return ret_errno(libc::EINVAL);
    }
    let (a, m) = match convert::qp_attr_from_c(&*attr, mask as u32) {
        Ok(v) => v,
        Err(errno) => return ret_errno(errno),
    };
    let shared = e.shared.clone();
    let mut eng = shared.lock();
    if let Err(err) = eng.dev.hca_mut().modify_eec(e.eecn, &a, m) {
        return ret_errno(convert::modify_qp_errno(&err));
    }
    // Whatever the transition made the HCA owe (packets, completions, events) goes now, as
    // after `ibv_modify_qp`.
    eng.flush(&shared);
    0
}

symver!(softib_query_eec);
/// `int softib_query_eec(struct softib_eec *eec, struct ibv_qp_attr *attr)`: every attribute
/// of the EE context (`qp_state`, the path, PSNs, ...; `dest_qp_num` the remote EECN). 0 or
/// EINVAL.
#[export_name = "softib_softib_query_eec"]
pub unsafe extern "C" fn softib_query_eec(eec: *mut SoftEec, attr: *mut ibv_qp_attr) -> i32 {
    let Some(e) = soft_eec(eec) else {
        return ret_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return ret_errno(libc::EINVAL);
    }
    match e.shared.lock().dev.hca().query_eec(e.eecn) {
        Ok(a) => {
            *attr = convert::qp_attr_to_c(&a);
            0
        }
        Err(err) => ret_errno(convert::rd_errno(&err)),
    }
}

symver!(softib_eec_num);
/// `uint32_t softib_eec_num(struct softib_eec *eec)`: the EECN (24 bits, never 0), what the
/// remote end puts in its `dest_qp_num`. 0 with errno EINVAL for an object that is no live EE
/// context.
#[export_name = "softib_softib_eec_num"]
pub unsafe extern "C" fn softib_eec_num(eec: *mut SoftEec) -> u32 {
    match soft_eec(eec) {
        Some(e) => e.eecn.value(),
        None => {
            set_errno(libc::EINVAL);
            0
        }
    }
}

symver!(softib_destroy_eec);
/// `int softib_destroy_eec(struct softib_eec *eec)`: 0 or EINVAL.
#[export_name = "softib_softib_destroy_eec"]
pub unsafe extern "C" fn softib_destroy_eec(eec: *mut SoftEec) -> i32 {
    let Some(e) = soft_eec(eec) else {
        return ret_errno(libc::EINVAL);
    };
    {
        let shared = e.shared.clone();
        let mut eng = shared.lock();
        if let Err(err) = eng.dev.hca_mut().destroy_eec(e.eecn) {
            return ret_errno(convert::rd_errno(&err));
        }
        eng.flush(&shared);
    }
    registry::remove(eec, Kind::Eec);
    drop(Box::from_raw(eec));
    0
}

symver!(softib_create_rd_qp);
/// `struct ibv_qp *softib_create_rd_qp(struct ibv_pd *pd, struct softib_rdd *rdd, struct
/// ibv_qp_init_attr *attr)`: `ibv_create_qp` for an RD QP of `rdd` (`attr->qp_type` must be
/// `SOFTIB_QPT_RD`). The PD, domain, CQs and SRQ must be live objects of one context (EINVAL);
/// the capabilities read back as `ibv_create_qp` gives them.
#[export_name = "softib_softib_create_rd_qp"]
pub unsafe extern "C" fn softib_create_rd_qp(
    pd: *mut ibv_pd,
    rdd: *mut SoftRdd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    if !registry::is_live(pd, Kind::Pd) || attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    let Some(r) = soft_rdd(rdd) else {
        return null_errno(libc::EINVAL);
    };
    let ctx = (*pd).context;
    // A domain is an object of its context's HCA: its handle means nothing in another.
    if !std::ptr::eq(r.context, ctx) {
        return null_errno(libc::EINVAL);
    }
    let a = &mut *attr;
    if a.qp_type != SOFTIB_QPT_RD {
        return null_errno(libc::EINVAL);
    }
    let mut ex = qp::init_attr_ex(a, pd);
    match qp::create_in(ctx, &mut ex, Some(r.handle)) {
        Ok(p) => {
            a.cap = ex.cap;
            p.cast()
        }
        Err(e) => null_errno(e),
    }
}

/// `struct softib_rd_dest`: the destination of one RD send WR behind the EE context's remote
/// end.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SoftRdDest {
    /// The destination RD QP (24 bits).
    pub remote_qpn: u32,
    /// The Q_Key the message carries; with bit 31 set the sending QP's own.
    pub remote_qkey: u32,
}

const _: () = assert!(std::mem::size_of::<SoftRdDest>() == 8);

symver!(softib_post_rd_send);
/// `int softib_post_rd_send(struct ibv_qp *qp, struct softib_eec *eec, struct ibv_send_wr
/// *wr, const struct softib_rd_dest *dest, struct ibv_send_wr **bad_wr)`: posts the list `wr`
/// on RD QP `qp`, every WR through EE context `eec` (of the QP's context). With `dest` NULL
/// every WR is a SEND or SEND with immediate whose destination is `wr.ud.remote_qpn` /
/// `wr.ud.remote_qkey` (`wr.ud.ah` is not read); otherwise `dest[i]` is the destination of the
/// list's `i`-th WR, of any RD operation (`wr.ud` is not read). 0, or the errno value (errno
/// set too) with `*bad_wr` naming the first WR not posted: EINVAL for a QP that is no live RD
/// QP, an EE context that is no live one of the QP's context, and every WR `ibv_post_send`
/// refuses, SEND with invalidate (RD has none), a WR other than SEND with no `dest`, a remote
/// QPN of 25 bits; ENOMEM when the send queue is full.
#[export_name = "softib_softib_post_rd_send"]
pub unsafe extern "C" fn softib_post_rd_send(
    qp: *mut ibv_qp,
    eec: *mut SoftEec,
    wr: *mut ibv_send_wr,
    dest: *const SoftRdDest,
    bad_wr: *mut *mut ibv_send_wr,
) -> i32 {
    let refuse = |errno: i32| {
        if !bad_wr.is_null() {
            *bad_wr = wr;
        }
        ret_errno(errno)
    };
    let Some(q) = qp::soft_qp(qp) else {
        return refuse(libc::EINVAL);
    };
    if q.qp_type != QpType::Rd {
        return refuse(libc::EINVAL);
    }
    let Some(e) = soft_eec(eec) else {
        return refuse(libc::EINVAL);
    };
    // An EECN is a number of its context's HCA: in another it names another EE context.
    if !std::ptr::eq(e.context, q.ex.qp_base.context) {
        return refuse(libc::EINVAL);
    }
    let eecn = e.eecn;
    let rc = qp::post_send_chain(q, wr, bad_wr, |one, w, i| {
        let (remote_qpn, remote_qkey) = if dest.is_null() {
            if !matches!(w.opcode, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM) {
                return Err(libc::EINVAL);
            }
            (w.wr.ud.remote_qpn, w.wr.ud.remote_qkey)
        } else {
            let d = *dest.add(i);
            (d.remote_qpn, d.remote_qkey)
        };
        // RD has no SEND with invalidate (IBA Table 38: no RD opcode carries an IETH).
        if w.opcode == IBV_WR_SEND_WITH_INV || remote_qpn >= 1 << 24 {
            return Err(libc::EINVAL);
        }
        one.rd = Some(RdDest {
            eecn,
            remote_qpn: Qpn::new(remote_qpn),
            remote_qkey,
        });
        Ok(())
    });
    if rc != 0 {
        set_errno(rc);
    }
    rc
}
