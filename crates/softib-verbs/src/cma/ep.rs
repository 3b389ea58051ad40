//! The endpoint API (rdma-core's `librdmacm/addrinfo.c` and the `rdma_create_ep` family):
//! `rdma_getaddrinfo` over the system resolver, synchronous ids made in one call, and
//! `rdma_get_request` for a synchronous listener.

use super::{addr, conn, create_id, rdma_ack_cm_event, rdma_destroy_id, soft_id};
use crate::cma_h::*;
use crate::util::{self, minus_one};
use crate::verbs_h::*;

/// A copy of a sockaddr in memory `rdma_freeaddrinfo` frees.
unsafe fn copy_addr(src: *const libc::sockaddr, len: libc::socklen_t) -> *mut libc::sockaddr {
    // SAFETY: malloc of `len` bytes, then a copy of the caller's `len` bytes.
    unsafe {
        let p = libc::malloc(len as usize).cast::<libc::sockaddr>();
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(src.cast::<u8>(), p.cast::<u8>(), len as usize);
        }
        p
    }
}

unsafe fn strdup(s: *const libc::c_char) -> *mut libc::c_char {
    if s.is_null() {
        std::ptr::null_mut()
    } else {
        // SAFETY: a C string of the resolver's.
        unsafe { libc::strdup(s) }
    }
}

/// `rdma_getaddrinfo`: the address of `node` / `service` through getaddrinfo(3), as an
/// `rdma_addrinfo` (passive: the source address to bind; active: the destination, with the
/// hints' source if they give one). QP type and port space follow the hints, or the socket
/// type (stream: RC in RDMA_PS_TCP, datagram: UD in RDMA_PS_UDP). Returns 0, or getaddrinfo's
/// error code (or -1 and errno).
#[export_name = "softib_rdmacm_rdma_getaddrinfo"]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const libc::c_char,
    service: *const libc::c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> libc::c_int {
    if res.is_null() || (node.is_null() && service.is_null() && hints.is_null()) {
        return minus_one(libc::EINVAL);
    }
    // SAFETY: the caller's hints, if any.
    let h: rdma_addrinfo = if hints.is_null() {
        util::zeroed()
    } else {
        unsafe { std::ptr::read(hints) }
    };
    // SAFETY: calloc'd, freed by rdma_freeaddrinfo.
    let rai =
        unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
    if rai.is_null() {
        return minus_one(libc::ENOMEM);
    }
    // SAFETY: just allocated.
    let r = unsafe { &mut *rai };
    let passive = h.ai_flags & RAI_PASSIVE as i32 != 0;
    if !node.is_null() || !service.is_null() {
        let mut ai: libc::addrinfo = util::zeroed();
        if passive {
            ai.ai_flags |= libc::AI_PASSIVE;
        }
        if h.ai_flags & RAI_NUMERICHOST as i32 != 0 {
            ai.ai_flags |= libc::AI_NUMERICHOST;
        }
        ai.ai_family = h.ai_family;
        ai.ai_socktype = match h.ai_qp_type as u32 {
            IBV_QPT_UD => libc::SOCK_DGRAM,
            IBV_QPT_RC | IBV_QPT_UC => libc::SOCK_STREAM,
            _ => 0,
        };
        ai.ai_protocol = match h.ai_port_space as u32 {
            RDMA_PS_TCP => libc::IPPROTO_TCP,
            RDMA_PS_UDP | RDMA_PS_IPOIB => libc::IPPROTO_UDP,
            _ => 0,
        };
        let mut out: *mut libc::addrinfo = std::ptr::null_mut();
        // SAFETY: the caller's strings and local hints.
        let rc = unsafe { libc::getaddrinfo(node, service, &ai, &mut out) };
        if rc != 0 {
            // SAFETY: calloc'd above.
            unsafe { libc::free(rai.cast()) };
            return rc;
        }
        // SAFETY: the first result getaddrinfo returned.
        let a = unsafe { &*out };
        r.ai_qp_type = if h.ai_qp_type != 0 {
            h.ai_qp_type
        } else if a.ai_socktype == libc::SOCK_DGRAM {
            IBV_QPT_UD as i32
        } else {
            IBV_QPT_RC as i32
        };
        r.ai_port_space = if h.ai_port_space != 0 {
            h.ai_port_space
        } else if a.ai_protocol == libc::IPPROTO_UDP {
            RDMA_PS_UDP as i32
        } else {
            RDMA_PS_TCP as i32
        };
        r.ai_family = a.ai_family;
        // SAFETY: the result's address of its length, and canonical name.
        unsafe {
            if passive {
                r.ai_flags = RAI_PASSIVE as i32;
                r.ai_src_addr = copy_addr(a.ai_addr, a.ai_addrlen);
                r.ai_src_len = a.ai_addrlen;
                r.ai_src_canonname = strdup(a.ai_canonname);
            } else {
                r.ai_dst_addr = copy_addr(a.ai_addr, a.ai_addrlen);
                r.ai_dst_len = a.ai_addrlen;
                r.ai_dst_canonname = strdup(a.ai_canonname);
            }
            libc::freeaddrinfo(out);
        }
    } else {
        r.ai_flags = h.ai_flags;
        r.ai_family = h.ai_family;
        r.ai_qp_type = h.ai_qp_type;
        r.ai_port_space = h.ai_port_space;
        if h.ai_dst_len > 0 && !h.ai_dst_addr.is_null() {
            // SAFETY: the hints' address of its length.
            r.ai_dst_addr = unsafe { copy_addr(h.ai_dst_addr, h.ai_dst_len) };
            r.ai_dst_len = h.ai_dst_len;
        }
    }
    if r.ai_src_len == 0 && h.ai_src_len > 0 && !h.ai_src_addr.is_null() {
        // SAFETY: the hints' address of its length.
        r.ai_src_addr = unsafe { copy_addr(h.ai_src_addr, h.ai_src_len) };
        r.ai_src_len = h.ai_src_len;
    }
    // SAFETY: the caller's out-pointer.
    unsafe { *res = rai };
    0
}

/// `rdma_freeaddrinfo`: frees a list `rdma_getaddrinfo` returned.
#[export_name = "softib_rdmacm_rdma_freeaddrinfo"]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: a node rdma_getaddrinfo allocated, its members with malloc.
        unsafe {
            let next = (*p).ai_next;
            for m in [
                (*p).ai_connect,
                (*p).ai_route,
                (*p).ai_src_canonname.cast(),
                (*p).ai_dst_canonname.cast(),
                (*p).ai_src_addr.cast(),
                (*p).ai_dst_addr.cast(),
            ] {
                libc::free(m);
            }
            libc::free(p.cast());
            p = next;
        }
    }
}

/// `rdma_create_ep`: a synchronous id for `res`: bound (passive, the QP attributes kept for
/// the requests `rdma_get_request` returns) or with its address and route resolved and its
/// QP made (active).
#[export_name = "softib_rdmacm_rdma_create_ep"]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> libc::c_int {
    if id.is_null() || res.is_null() {
        return minus_one(libc::EINVAL);
    }
    // SAFETY: the caller's addrinfo.
    let r = unsafe { &*res };
    let mut cm: *mut rdma_cm_id = std::ptr::null_mut();
    // SAFETY: a local out-pointer.
    if unsafe {
        create_id(
            std::ptr::null_mut(),
            &mut cm,
            std::ptr::null_mut(),
            r.ai_port_space as rdma_port_space,
            r.ai_qp_type as ibv_qp_type,
        )
    } != 0
    {
        return -1;
    }
    // SAFETY: as the caller's.
    let rc = unsafe { setup_ep(cm, r, pd, qp_init_attr) };
    if rc != 0 {
        let e = util::errno();
        // SAFETY: the id just made.
        unsafe { rdma_destroy_ep(cm) };
        return minus_one(e);
    }
    // SAFETY: the caller's out-pointer.
    unsafe { *id = cm };
    0
}

unsafe fn setup_ep(
    cm: *mut rdma_cm_id,
    r: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> libc::c_int {
    let Some(sid) = soft_id(cm) else {
        return minus_one(libc::EINVAL);
    };
    if r.ai_flags & RAI_PASSIVE as i32 != 0 {
        // SAFETY: the addrinfo's source address.
        let Some(a) = (unsafe { addr::from_sockaddr(r.ai_src_addr) }) else {
            return minus_one(libc::EINVAL);
        };
        if let Err(e) = addr::bind(sid, a) {
            return minus_one(e);
        }
        if !pd.is_null() {
            sid.id.pd = pd;
        }
        if !qp_init_attr.is_null() {
            // SAFETY: the caller's attributes.
            let mut a = Box::new(unsafe { *qp_init_attr });
            a.qp_type = r.ai_qp_type as ibv_qp_type;
            sid.state().qp_init_attr = Some(a);
        }
        return 0;
    }
    // SAFETY: the addrinfo's addresses.
    if unsafe { addr::rdma_resolve_addr(cm, r.ai_src_addr, r.ai_dst_addr, 2000) } != 0 {
        return -1;
    }
    // SAFETY: the id.
    if unsafe { addr::rdma_resolve_route(cm, 2000) } != 0 {
        return -1;
    }
    if !qp_init_attr.is_null() {
        // SAFETY: the caller's attributes.
        unsafe { (*qp_init_attr).qp_type = r.ai_qp_type as ibv_qp_type };
        // SAFETY: likewise.
        if unsafe { conn::rdma_create_qp(cm, pd, qp_init_attr) } != 0 {
            return -1;
        }
    }
    if r.ai_connect_len > 0 && !r.ai_connect.is_null() {
        // SAFETY: the addrinfo's connect data of its length.
        let d = unsafe { std::slice::from_raw_parts(r.ai_connect.cast::<u8>(), r.ai_connect_len) };
        sid.state().connect_data = d.to_vec();
    }
    0
}

/// `rdma_destroy_ep`: the id's QP, SRQ, then the id.
#[export_name = "softib_rdmacm_rdma_destroy_ep"]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    let Some(sid) = soft_id(id) else {
        util::set_errno(libc::EINVAL);
        return;
    };
    // SAFETY: the id's own objects, then the id.
    unsafe {
        if !sid.id.qp.is_null() {
            conn::rdma_destroy_qp(id);
        }
        if !sid.id.srq.is_null() {
            conn::rdma_destroy_srq(id);
        }
        rdma_destroy_id(id);
    }
}

/// `rdma_get_request`: the next connection request of a synchronous listener, as a new
/// (synchronous) id, with a QP made from `rdma_create_ep`'s attributes if it had them.
#[export_name = "softib_rdmacm_rdma_get_request"]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> libc::c_int {
    let Some(l) = soft_id(listen) else {
        return minus_one(libc::EINVAL);
    };
    if id.is_null() || !l.state().sync {
        return minus_one(libc::EINVAL);
    }
    if !l.id.event.is_null() {
        // SAFETY: the event a previous call left.
        unsafe { rdma_ack_cm_event(l.id.event) };
        l.id.event = std::ptr::null_mut();
    }
    let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
    // SAFETY: the listener's private channel.
    if unsafe { super::rdma_get_cm_event(l.id.channel, &mut ev) } != 0 {
        return -1;
    }
    // SAFETY: just returned.
    let e = unsafe { &*ev };
    let err = if e.event == RDMA_CM_EVENT_REJECTED {
        libc::ECONNREFUSED
    } else if e.status != 0 {
        e.status.abs()
    } else if e.event != RDMA_CM_EVENT_CONNECT_REQUEST {
        libc::EINVAL
    } else {
        let attr = l.state().qp_init_attr.as_deref().copied();
        attr.map_or(0, |mut a| {
            // SAFETY: the new id and a local copy of the attributes.
            match unsafe { conn::rdma_create_qp(e.id, l.id.pd, &mut a) } {
                0 => 0,
                _ => util::errno(),
            }
        })
    };
    if err != 0 {
        l.id.event = ev;
        return minus_one(err);
    }
    // SAFETY: the new id, live.
    unsafe {
        (*e.id).event = ev;
        *id = e.id;
    }
    0
}
