//! Multicast groups of rdma_cm ids: `rdma_join_multicast`, `rdma_join_multicast_ex` and
//! `rdma_leave_multicast`, as Linux's rdma_cm does them on a RoCEv2 device.
//!
//! A group is an IP multicast address; its MGID is that address as a GID (IPv4-mapped for
//! IPv4, `cma_iboe_set_mgid` for RoCEv2). Joining attaches the id's UD QP to the MGID (as
//! librdmacm does when the join completes), which joins the IP group on the interface of the
//! id's device (`softib_udp::Device::sync_multicast`): the kernel then hands the group's
//! datagrams to every process of the host that joined, and to the other hosts of the link.
//! RDMA_CM_EVENT_MULTICAST_JOIN follows at once (no subnet administrator to ask), with the
//! address vector of the group, QPN 0xFFFFFF and the port space's Q_Key; the context given to
//! the join is its `param.ud.private_data`. A send-only join does not attach the QP.

use std::net::{IpAddr, SocketAddr};

use softib_core::cm::Gid;

use super::{complete, soft_id, CmaEvent, SoftCmId};
use crate::cma_h::*;
use crate::util::minus_one;
use crate::verbs_h::*;

/// `join_flags` of `rdma_join_multicast_ex`: a member that receives (0) or only sends.
const RDMA_MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
/// `comp_mask` bits of `struct rdma_cm_join_mc_attr_ex`.
const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1;
const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 2;
/// The multicast QPN.
const MCAST_QPN: u32 = 0x00FF_FFFF;

/// One group an id joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Join {
    /// The group's address.
    pub addr: IpAddr,
    /// Its MGID.
    pub mgid: Gid,
    /// The id's QP was attached to it (not a send-only join, and the id had a QP).
    pub attached: bool,
}

/// The MGID of the multicast address `ip` on a RoCEv2 port, or `None` if `ip` is no
/// multicast address.
pub fn mgid_of(ip: IpAddr) -> Option<Gid> {
    ip.is_multicast().then(|| super::addr::gid_of(ip))
}

fn join(sid: &mut SoftCmId, to: SocketAddr, flags: u32, context: usize) -> Result<(), i32> {
    let mgid = mgid_of(to.ip()).ok_or(libc::EINVAL)?;
    if sid.id.ps != RDMA_PS_UDP && sid.id.ps != RDMA_PS_IPOIB {
        return Err(libc::EINVAL);
    }
    if sid.id.verbs.is_null() {
        return Err(libc::ENODEV);
    }
    if sid.state().joins.iter().any(|j| j.addr == to.ip()) {
        return Err(libc::EADDRINUSE);
    }
    let attach = flags == RDMA_MC_JOIN_FLAG_FULLMEMBER && !sid.id.qp.is_null();
    if attach {
        let gid = ibv_gid { raw: mgid.0 };
        // SAFETY: the id's own QP and a GID on the stack.
        if unsafe { crate::qp::ibv_attach_mcast(sid.id.qp, &gid, 0) } != 0 {
            return Err(crate::util::errno().max(libc::EINVAL));
        }
    }
    sid.state().joins.push(Join {
        addr: to.ip(),
        mgid,
        attached: attach,
    });
    let tos = sid.state().tos;
    let me: *mut SoftCmId = sid;
    let mut ev = CmaEvent::new(me, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
    let mut ah = super::kern::ah_to(mgid, 1, tos);
    ah.dlid = 0xC000;
    let qkey = if sid.id.ps == RDMA_PS_UDP {
        RDMA_UDP_QKEY
    } else {
        0
    };
    ev.set_ud(ah, MCAST_QPN, qkey, &[]);
    // The join's context, as librdmacm reports it.
    // SAFETY: writes the `ud` member the event already holds.
    unsafe { ev.event.param.ud.as_mut().private_data = context as *const libc::c_void };
    sid.raise(ev);
    Ok(())
}

/// Detaches the id's QP from every group it joined (the id or its QP goes).
pub fn leave_all(sid: &mut SoftCmId) {
    let joins = std::mem::take(&mut sid.state().joins);
    for j in joins {
        detach(sid, &j);
    }
}

fn detach(sid: &SoftCmId, j: &Join) {
    if j.attached && !sid.id.qp.is_null() {
        let gid = ibv_gid { raw: j.mgid.0 };
        // SAFETY: the id's own QP and a GID on the stack.
        unsafe { crate::qp::ibv_detach_mcast(sid.id.qp, &gid, 0) };
    }
}

/// `rdma_join_multicast`: joins the group at `addr` as a full member; the event
/// RDMA_CM_EVENT_MULTICAST_JOIN carries `context`.
#[export_name = "softib_rdmacm_rdma_join_multicast"]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut libc::c_void,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    // SAFETY: the caller's sockaddr.
    let Some(to) = (unsafe { super::addr::from_sockaddr(addr) }) else {
        return minus_one(libc::EINVAL);
    };
    match join(sid, to, RDMA_MC_JOIN_FLAG_FULLMEMBER, context as usize) {
        Ok(()) => complete(sid),
        Err(e) => minus_one(e),
    }
}

/// `rdma_join_multicast_ex`: as `rdma_join_multicast`, with the join flags of `attr` (a
/// send-only member does not attach its QP).
#[export_name = "softib_rdmacm_rdma_join_multicast_ex"]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut libc::c_void,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    // SAFETY: the caller's attributes, if any.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return minus_one(libc::EINVAL);
    };
    let need = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
    if a.comp_mask & need != need || a.comp_mask & !need != 0 {
        return minus_one(libc::EINVAL);
    }
    if a.join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER
        && a.join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
    {
        return minus_one(libc::EINVAL);
    }
    // SAFETY: the caller's sockaddr.
    let Some(to) = (unsafe { super::addr::from_sockaddr(a.addr) }) else {
        return minus_one(libc::EINVAL);
    };
    match join(sid, to, a.join_flags, context as usize) {
        Ok(()) => complete(sid),
        Err(e) => minus_one(e),
    }
}

/// `rdma_leave_multicast`: leaves the group at `addr` (`EADDRNOTAVAIL` if the id did not
/// join it).
#[export_name = "softib_rdmacm_rdma_leave_multicast"]
pub unsafe extern "C" fn rdma_leave_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> libc::c_int {
    let Some(sid) = soft_id(id) else {
        return minus_one(libc::EINVAL);
    };
    // SAFETY: the caller's sockaddr.
    let Some(to) = (unsafe { super::addr::from_sockaddr(addr) }) else {
        return minus_one(libc::EINVAL);
    };
    let j = {
        let mut st = sid.state();
        let Some(at) = st.joins.iter().position(|j| j.addr == to.ip()) else {
            return minus_one(libc::EADDRNOTAVAIL);
        };
        st.joins.remove(at)
    };
    detach(sid, &j);
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mgids_of_multicast_addresses() {
        let v4: IpAddr = "239.1.2.3".parse().unwrap();
        assert_eq!(
            mgid_of(v4).unwrap().0,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3]
        );
        let v6: IpAddr = "ff0e::12".parse().unwrap();
        assert_eq!(mgid_of(v6).unwrap().0[0], 0xff);
        assert_eq!(mgid_of("10.1.2.3".parse().unwrap()), None);
    }
}
