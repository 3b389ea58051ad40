//! Conversions between rdma-core's C structures and softib-core's types, and the errno each
//! core error maps to.

use softib_core::error::{
    CreateQpError, ModifyQpError, PostRecvError, PostSendError, RdError, RegMrError,
};
use softib_core::verbs::ah::{AhAttr, GlobalRoute};
use softib_core::verbs::cq::{NetworkHdr, WorkCompletion};
use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpCap};
use softib_core::verbs::types::{AccessFlags, Gid, Mtu, PathMigState, QpState};
use softib_wire::Psn;

use crate::util;
use crate::verbs_h::*;

/// errno of a failed `ibv_reg_mr`.
pub fn reg_mr_errno(e: &RegMrError) -> i32 {
    match e {
        RegMrError::NoSuchPd(_) | RegMrError::InvalidAccess(_) => libc::EINVAL,
        RegMrError::AddressOverflow { .. } => libc::EINVAL,
        _ => libc::ENOMEM,
    }
}

/// errno of a failed `ibv_create_qp`.
pub fn create_qp_errno(e: &CreateQpError) -> i32 {
    match e {
        CreateQpError::TooManyQps { .. } => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}

/// errno of a failed RD verb (`<softib/rd.h>`): EBUSY for a domain still in use, ENOMEM at a
/// device limit, a failed QP creation as `ibv_create_qp`'s, EINVAL otherwise (no such domain
/// or EE context).
pub fn rd_errno(e: &RdError) -> i32 {
    match e {
        RdError::Busy { .. } => libc::EBUSY,
        RdError::TooMany { .. } => libc::ENOMEM,
        RdError::CreateQp(c) => create_qp_errno(c),
        _ => libc::EINVAL,
    }
}

/// errno of a failed `ibv_modify_qp`.
pub fn modify_qp_errno(_e: &ModifyQpError) -> i32 {
    libc::EINVAL
}

/// errno of a refused send WR: ENOMEM when the queue is full, EINVAL otherwise (rdma-core's
/// providers).
pub fn post_send_errno(e: &PostSendError) -> i32 {
    match e {
        PostSendError::QueueFull { .. } => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}

/// errno of a refused receive WR.
pub fn post_recv_errno(e: &PostRecvError) -> i32 {
    match e {
        PostRecvError::QueueFull { .. } => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}

/// The bits of `ibv_global_route.flow_label` an address vector keeps: IBA's flow label is 20
/// bits wide. The kernel's verbs accept any value there and use the low 20 bits (mlx5 masks
/// with `IB_GRH_FLOWLABEL_MASK`; rxe and mlx5 derive the RoCEv2 UDP source port with
/// `rdma_flow_label_to_udp_sport`, which reads only them), and middleware counts on it: UCX
/// sets `~0` on RoCE paths (docs/deviations.md).
pub const FLOW_LABEL_MASK: u32 = 0x000F_FFFF;

/// An address vector from `struct ibv_ah_attr` (the flow label's low 20 bits,
/// [`FLOW_LABEL_MASK`]).
pub fn ah_attr_from_c(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
        grh: (a.is_global != 0).then_some(GlobalRoute {
            // SAFETY: every bit pattern of the union is a valid byte array.
            dgid: Gid(unsafe { a.grh.dgid.raw }),
            flow_label: a.grh.flow_label & FLOW_LABEL_MASK,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        }),
    }
}

/// `struct ibv_ah_attr` of an address vector.
pub fn ah_attr_to_c(a: &AhAttr) -> ibv_ah_attr {
    let mut c: ibv_ah_attr = util::zeroed();
    c.dlid = a.dlid;
    c.sl = a.sl;
    c.src_path_bits = a.src_path_bits;
    c.static_rate = a.static_rate;
    c.port_num = a.port_num;
    if let Some(g) = &a.grh {
        c.is_global = 1;
        c.grh.dgid = ibv_gid { raw: g.dgid.0 };
        c.grh.flow_label = g.flow_label;
        c.grh.sgid_index = g.sgid_index;
        c.grh.hop_limit = g.hop_limit;
        c.grh.traffic_class = g.traffic_class;
    }
    c
}

/// QP capabilities from `struct ibv_qp_cap`.
pub fn cap_from_c(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `struct ibv_qp_cap`.
pub fn cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `ibv_modify_qp`'s attributes in core form; EINVAL for values no enum holds.
pub fn qp_attr_from_c(a: &ibv_qp_attr, mask: u32) -> Result<(QpAttr, QpAttrMask), i32> {
    let m = QpAttrMask::from_bits(mask).ok_or(libc::EINVAL)?;
    let mut q = QpAttr::default();
    if m.contains(QpAttrMask::STATE) {
        q.qp_state = QpState::from_raw(a.qp_state).ok_or(libc::EINVAL)?;
    }
    if m.contains(QpAttrMask::CUR_STATE) {
        q.cur_qp_state = QpState::from_raw(a.cur_qp_state).ok_or(libc::EINVAL)?;
    }
    if m.contains(QpAttrMask::PATH_MTU) {
        q.path_mtu = u8::try_from(a.path_mtu)
            .ok()
            .and_then(Mtu::from_raw)
            .ok_or(libc::EINVAL)?;
    }
    if m.contains(QpAttrMask::PATH_MIG_STATE) {
        q.path_mig_state = PathMigState::from_raw(a.path_mig_state).ok_or(libc::EINVAL)?;
    }
    q.qkey = a.qkey;
    q.rq_psn = Psn::new(a.rq_psn);
    q.sq_psn = Psn::new(a.sq_psn);
    q.dest_qp_num = a.dest_qp_num;
    if m.contains(QpAttrMask::ACCESS_FLAGS) {
        q.qp_access_flags = AccessFlags::from_bits(a.qp_access_flags).ok_or(libc::EINVAL)?;
    }
    q.cap = cap_from_c(&a.cap);
    q.ah_attr = ah_attr_from_c(&a.ah_attr);
    q.alt_ah_attr = ah_attr_from_c(&a.alt_ah_attr);
    q.pkey_index = a.pkey_index;
    q.alt_pkey_index = a.alt_pkey_index;
    q.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    q.max_rd_atomic = a.max_rd_atomic;
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q.min_rnr_timer = a.min_rnr_timer;
    q.port_num = a.port_num;
    q.timeout = a.timeout;
    q.retry_cnt = a.retry_cnt;
    q.rnr_retry = a.rnr_retry;
    q.alt_port_num = a.alt_port_num;
    q.alt_timeout = a.alt_timeout;
    q.rate_limit = a.rate_limit;
    Ok((q, m))
}

/// `struct ibv_qp_attr` of a QP's attributes.
pub fn qp_attr_to_c(q: &QpAttr) -> ibv_qp_attr {
    let mut a: ibv_qp_attr = util::zeroed();
    a.qp_state = q.qp_state.raw();
    a.cur_qp_state = q.cur_qp_state.raw();
    a.path_mtu = u32::from(q.path_mtu.raw());
    a.path_mig_state = q.path_mig_state.raw();
    a.qkey = q.qkey;
    a.rq_psn = q.rq_psn.value();
    a.sq_psn = q.sq_psn.value();
    a.dest_qp_num = q.dest_qp_num;
    a.qp_access_flags = q.qp_access_flags.bits();
    a.cap = cap_to_c(&q.cap);
    a.ah_attr = ah_attr_to_c(&q.ah_attr);
    a.alt_ah_attr = ah_attr_to_c(&q.alt_ah_attr);
    a.pkey_index = q.pkey_index;
    a.alt_pkey_index = q.alt_pkey_index;
    a.en_sqd_async_notify = u8::from(q.en_sqd_async_notify);
    a.sq_draining = u8::from(q.sq_draining);
    a.max_rd_atomic = q.max_rd_atomic;
    a.max_dest_rd_atomic = q.max_dest_rd_atomic;
    a.min_rnr_timer = q.min_rnr_timer;
    a.port_num = q.port_num;
    a.timeout = q.timeout;
    a.retry_cnt = q.retry_cnt;
    a.rnr_retry = q.rnr_retry;
    a.alt_port_num = q.alt_port_num;
    a.alt_timeout = q.alt_timeout;
    a.rate_limit = q.rate_limit;
    a
}

/// `wc.sl` of a UD receive over RoCEv2 from IPv4, as mlx5 reports it: the CQE's L3 header
/// type (mlx5's `MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV4`), which rdma-core's mlx5 provider passes on
/// in `sl`. `struct ibv_wc` has no field for the IPv4 / IPv6 flag of IBA Annex A17.4.5.1, and
/// UCX reads it there (`wc.sl & 7`) to find the destination address in the GRH area.
pub const SL_ROCE_IPV4: u8 = 2;
/// The same for IPv6 (`MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV6`).
pub const SL_ROCE_IPV6: u8 = 1;

/// `wc.sl` of a completion: the L3 header type for a UD receive over RoCEv2 ([`SL_ROCE_IPV4`],
/// [`SL_ROCE_IPV6`]), the service level otherwise.
#[inline]
pub fn wc_sl(w: &WorkCompletion) -> u8 {
    match w.network_hdr {
        Some(NetworkHdr::Ipv4) => SL_ROCE_IPV4,
        Some(NetworkHdr::Ipv6) => SL_ROCE_IPV6,
        None => w.sl,
    }
}

/// `struct ibv_wc` of a completion.
#[inline]
pub fn wc_to_c(w: &WorkCompletion) -> ibv_wc {
    let mut c: ibv_wc = util::zeroed();
    c.wr_id = w.wr_id;
    c.status = w.status.raw();
    c.opcode = w.opcode.raw();
    c.vendor_err = w.vendor_err;
    c.byte_len = w.byte_len;
    if let Some(imm) = w.imm_data {
        // __be32: the bytes in network order.
        c.__bindgen_anon_1.imm_data = imm.to_be();
    } else if let Some(rkey) = w.invalidated_rkey {
        c.__bindgen_anon_1.invalidated_rkey = rkey;
    }
    c.qp_num = w.qp_num.value();
    c.src_qp = w.src_qp.value();
    c.wc_flags = w.wc_flags.bits();
    c.pkey_index = w.pkey_index;
    c.slid = w.slid;
    c.sl = wc_sl(w);
    c.dlid_path_bits = w.dlid_path_bits;
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use softib_core::verbs::types::{WcFlags, WcOpcode, WcStatus};
    use softib_wire::Qpn;

    #[test]
    fn flow_label_keeps_its_low_20_bits() {
        let mut c: ibv_ah_attr = util::zeroed();
        c.is_global = 1;
        c.port_num = 1;
        c.grh.flow_label = 0xffff_ffff;
        assert_eq!(ah_attr_from_c(&c).grh.unwrap().flow_label, 0xF_FFFF);
        c.grh.flow_label = 0x12_3456;
        assert_eq!(ah_attr_from_c(&c).grh.unwrap().flow_label, 0x2_3456);
        c.grh.flow_label = 0xA_BCDE;
        assert_eq!(ah_attr_from_c(&c).grh.unwrap().flow_label, 0xA_BCDE);
        // And back, as query_qp reports it.
        assert_eq!(ah_attr_to_c(&ah_attr_from_c(&c)).grh.flow_label, 0xA_BCDE);
    }

    #[test]
    fn ud_receives_over_roce_report_the_l3_type_in_sl() {
        let mut w = WorkCompletion::new(1, WcStatus::Success, WcOpcode::Recv, Qpn::new(0x11));
        w.wc_flags |= WcFlags::GRH;
        w.sl = 3;
        assert_eq!(wc_to_c(&w).sl, 3, "no network header: the service level");
        w.network_hdr = Some(NetworkHdr::Ipv4);
        assert_eq!(wc_to_c(&w).sl, 2);
        w.network_hdr = Some(NetworkHdr::Ipv6);
        assert_eq!(wc_to_c(&w).sl, 1);
        // UCX's test: the low three bits say IPv4 (2) or not.
        assert_eq!(SL_ROCE_IPV4 & 7, 2);
        assert_ne!(SL_ROCE_IPV6 & 7, 2);
    }
}
