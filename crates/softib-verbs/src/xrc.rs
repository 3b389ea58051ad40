//! XRC: domains (`ibv_open_xrcd` / `ibv_close_xrcd`), shared target QPs (`ibv_open_qp`) and
//! SRQ numbers (`ibv_get_srq_num`), reached through `struct verbs_context` by verbs.h's inline
//! wrappers. XRC SRQs are made by `ibv_create_srq_ex` (ex.rs), XRC initiator and target QPs by
//! `ibv_create_qp_ex` (qp.rs); the transport is the core's (`softib_core::Hca::create_xrc_srq`,
//! `create_xrc_tgt_qp`, `open_xrc_tgt_qp`).
//!
//! `ibv_open_xrcd` with a file descriptor names a domain by the file's inode (st_dev, st_ino),
//! as the kernel does. The opens of one file in a process (through any of its contexts on the
//! device, which share the process's engine) share one domain of the engine's HCA, each
//! `ibv_xrcd` holding it once; it goes with the last `ibv_close_xrcd`. Across processes the
//! domain is the host-wide device's: the process's domain is registered in the host table
//! under the file's inode (`softib_udp::host::Member::open_xrcd`) and shared
//! (`softib_core::Hca::share_xrcd`), so its XRC SRQs are published there and its target QPs
//! deliver into the XRC SRQs of the other processes that opened the file (docs/xrc.md).
//!
//! Errors are the kernel's and rdma-core's: an fd that names no open file EBADF, a domain that
//! does not exist yet without O_CREAT EAGAIN, O_EXCL on an existing one EINVAL, a comp_mask
//! beyond rdma-core's EOPNOTSUPP and one without FD and OFLAGS EINVAL; `ibv_close_xrcd` of a
//! handle through which XRC SRQs or target QPs were made (or opened) and still live EBUSY.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use softib_core::verbs::XrcdHandle;
use softib_wire::Qpn;

use crate::context::Shared;
use crate::device::SoftContext;
use crate::qp::{self, SoftSrq};
use crate::registry::{self, Kind};
use crate::util::{null_errno, ret_errno};
use crate::verbs_h::*;

/// An XRC domain handle: `struct ibv_xrcd` and the domain it holds.
#[repr(C)]
pub struct SoftXrcd {
    /// Must be first.
    pub xrcd: ibv_xrcd,
    /// The context's engine.
    pub shared: Arc<Shared>,
    /// The HCA's domain.
    pub handle: XrcdHandle,
    /// The file (st_dev, st_ino) that names the domain; `None` for a private one (fd -1).
    pub file: Option<(u64, u64)>,
    /// XRC SRQs and target QP holders made through this handle and still alive: while any is,
    /// `ibv_close_xrcd` fails with EBUSY (the kernel counts per handle the same way).
    pub users: AtomicU32,
}

/// The domain handle behind `x` if it is a live one of `ctx`.
pub unsafe fn soft_xrcd(x: *mut ibv_xrcd, ctx: *mut ibv_context) -> Option<*mut SoftXrcd> {
    if !registry::is_live(x, Kind::Xrcd) || !std::ptr::eq((*x).context, ctx) {
        return None;
    }
    Some(x.cast())
}

/// The inode key of an open file descriptor; EBADF if it names none.
fn file_key(fd: i32) -> Result<(u64, u64), i32> {
    // SAFETY: fstat writes into a local stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(libc::EBADF);
    }
    Ok((st.st_dev, st.st_ino))
}

/// `verbs_context::open_xrcd`: what `ibv_open_xrcd()` calls.
pub unsafe extern "C" fn open_xrcd(
    ctx: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return null_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    let a = &*attr;
    if a.comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED {
        return null_errno(libc::EOPNOTSUPP);
    }
    let needed = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    if a.comp_mask & needed != needed {
        return null_errno(libc::EINVAL);
    }
    let file = if a.fd == -1 {
        None
    } else {
        match file_key(a.fd) {
            Ok(k) => Some(k),
            Err(e) => return null_errno(e),
        }
    };
    let mut eng = sc.shared.lock();
    let handle = match file {
        None => match eng.dev.hca_mut().alloc_xrcd() {
            Ok(h) => h,
            Err(_) => return null_errno(libc::ENOMEM),
        },
        Some(key) => match eng.xrcd_files.get_mut(&key) {
            Some((h, holders)) => {
                if a.oflags & libc::O_EXCL != 0 {
                    return null_errno(libc::EINVAL);
                }
                *holders += 1;
                *h
            }
            None => {
                // The domain of the file on the host-wide device, which every process that
                // opens the file shares: found, or made with O_CREAT (the kernel's EAGAIN
                // without; O_EXCL and another process holds it: EINVAL).
                let create = a.oflags & libc::O_CREAT != 0;
                let exclusive = a.oflags & libc::O_EXCL != 0;
                let id = match eng.dev.open_xrcd(key, create, exclusive) {
                    Ok(id) => id,
                    Err(e) => return null_errno(e.raw_os_error().unwrap_or(libc::ENOMEM)),
                };
                // A device that is no member of a host-wide device has its own domains.
                if id.is_none() && !create {
                    return null_errno(libc::EAGAIN);
                }
                let h = match eng.dev.hca_mut().alloc_xrcd() {
                    Ok(h) => h,
                    Err(_) => {
                        if let Some(id) = id {
                            eng.dev.close_xrcd(id);
                        }
                        return null_errno(libc::ENOMEM);
                    }
                };
                if let Some(id) = id {
                    let _ = eng.dev.hca_mut().share_xrcd(h, id);
                }
                eng.xrcd_files.insert(key, (h, 1));
                h
            }
        },
    };
    drop(eng);
    let p = Box::into_raw(Box::new(SoftXrcd {
        xrcd: ibv_xrcd { context: ctx },
        shared: sc.shared.clone(),
        handle,
        file,
        users: AtomicU32::new(0),
    }));
    registry::add(p.cast::<ibv_xrcd>(), Kind::Xrcd);
    p.cast()
}

/// `verbs_context::close_xrcd`: what `ibv_close_xrcd()` calls. Returns 0 or the errno value.
pub unsafe extern "C" fn close_xrcd(x: *mut ibv_xrcd) -> i32 {
    if !registry::is_live(x, Kind::Xrcd) {
        return ret_errno(libc::EINVAL);
    }
    let sx = &*x.cast::<SoftXrcd>();
    {
        let mut eng = sx.shared.lock();
        if sx.users.load(Ordering::Acquire) > 0 {
            return ret_errno(libc::EBUSY);
        }
        // The domain goes with its last handle.
        let last = match sx.file {
            None => true,
            Some(key) => match eng.xrcd_files.get_mut(&key) {
                Some((_, holders)) if *holders > 1 => {
                    *holders -= 1;
                    false
                }
                _ => {
                    eng.xrcd_files.remove(&key);
                    true
                }
            },
        };
        let shared = eng.dev.hca().xrcd_share_id(sx.handle);
        if last && eng.dev.hca_mut().dealloc_xrcd(sx.handle).is_err() {
            // Every SRQ and target QP of the domain was made through one of its handles, all
            // of which are idle by now: the domain is empty. Refuse rather than leak it if not.
            if let Some(key) = sx.file {
                eng.xrcd_files.insert(key, (sx.handle, 1));
            }
            return ret_errno(libc::EBUSY);
        }
        if let Some(id) = shared.filter(|_| last) {
            // This process lets go of the host-wide domain (it goes with its last process).
            eng.dev.close_xrcd(id);
        }
    }
    registry::remove(x, Kind::Xrcd);
    drop(Box::from_raw(x.cast::<SoftXrcd>()));
    0
}

/// `verbs_context::open_qp`: what `ibv_open_qp()` calls. Takes one more hold of an XRC target
/// QP of the domain; the new `ibv_qp` modifies, queries and destroys the same QP, and gets
/// its async events. Its state reads `IBV_QPS_UNKNOWN` until it is queried or modified, as
/// rdma-core leaves it.
pub unsafe extern "C" fn open_qp(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    let Some(sc) = SoftContext::from_ctx(ctx) else {
        return null_errno(libc::EINVAL);
    };
    if attr.is_null() {
        return null_errno(libc::EINVAL);
    }
    let a = &*attr;
    if a.comp_mask >= IBV_QP_OPEN_ATTR_RESERVED {
        return null_errno(libc::EOPNOTSUPP);
    }
    let needed = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if a.comp_mask & needed != needed {
        return null_errno(libc::EINVAL);
    }
    let Some(x) = soft_xrcd(a.xrcd, ctx) else {
        return null_errno(libc::EINVAL);
    };
    // Only XRC target QPs are shareable, and only numbers of 24 bits exist.
    if a.qp_type != IBV_QPT_XRC_RECV || a.qp_num > Qpn::MAX.value() {
        return null_errno(libc::EINVAL);
    }
    let qpn = Qpn::new(a.qp_num);
    let mut eng = sc.shared.lock();
    if eng.dev.hca_mut().open_xrc_tgt_qp((*x).handle, qpn).is_err() {
        return null_errno(libc::EINVAL);
    }
    let p = qp::new_xrc_tgt_holder(&mut eng, sc, ctx, x, qpn, a.qp_context, IBV_QPS_UNKNOWN);
    p.cast()
}

/// `verbs_context::get_srq_num`: what `ibv_get_srq_num()` calls. Every SRQ has a number; an
/// XRC initiator names an XRC SRQ by it. Returns 0 or the errno value.
pub unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> i32 {
    if !registry::is_live(srq, Kind::Srq) || srq_num.is_null() {
        return ret_errno(libc::EINVAL);
    }
    let s = &*srq.cast::<SoftSrq>();
    let n = s.shared.lock().dev.hca().srq_num(s.handle);
    match n {
        Ok(n) => {
            *srq_num = n;
            0
        }
        Err(_) => ret_errno(libc::EINVAL),
    }
}
