//! Tests of the HCA verbs. Shared fixtures live here; each file covers one area.

mod modify;
mod objects;
mod post;
mod proptests;

use crate::verbs::ah::{AhAttr, GlobalRoute};
use crate::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
use crate::verbs::types::{AccessFlags, Gid, Mtu, PathMigState, QpState, QpType};
use crate::verbs::{CqHandle, PdHandle};
use crate::{Hca, HcaConfig};
use softib_wire::{Psn, Qpn};

/// An HCA with one PD and one CQ of 63 entries.
pub(super) struct Fixture {
    pub(super) hca: Hca,
    pub(super) pd: PdHandle,
    pub(super) cq: CqHandle,
}

pub(super) const CAP: QpCap = QpCap {
    max_send_wr: 8,
    max_recv_wr: 8,
    max_send_sge: 4,
    max_recv_sge: 4,
    max_inline_data: 64,
};

impl Fixture {
    pub(super) fn new() -> Fixture {
        Fixture::with_config(HcaConfig::new(1))
    }

    /// [`Fixture::new`], or for the raw datagram types (which need an InfiniBand port) an
    /// HCA whose port 1 is native InfiniBand.
    pub(super) fn for_type(qp_type: QpType) -> Fixture {
        if qp_type.is_raw() {
            Fixture::with_config(HcaConfig::infiniband(1))
        } else {
            Fixture::new()
        }
    }

    pub(super) fn with_config(config: HcaConfig) -> Fixture {
        let mut hca = Hca::new(config);
        let pd = hca.alloc_pd().unwrap();
        let cq = hca.create_cq(63).unwrap();
        Fixture { hca, pd, cq }
    }

    pub(super) fn qp(&mut self, qp_type: QpType) -> Qpn {
        self.hca
            .create_qp(self.pd, &QpInitAttr::new(qp_type, self.cq, CAP))
            .unwrap()
    }

    /// Moves `qpn` along RESET → INIT → RTR → RTS → SQD (or to SQE / ERR) with minimal masks.
    pub(super) fn bring_to(&mut self, qpn: Qpn, target: QpState) {
        let t = self.hca.qp(qpn).unwrap().qp_type();
        let path: &[QpState] = match target {
            QpState::Reset => &[],
            QpState::Init => &[QpState::Init],
            QpState::Rtr => &[QpState::Init, QpState::Rtr],
            QpState::Rts | QpState::Sqe => &[QpState::Init, QpState::Rtr, QpState::Rts],
            QpState::Sqd => &[QpState::Init, QpState::Rtr, QpState::Rts, QpState::Sqd],
            QpState::Err => &[QpState::Init, QpState::Err],
        };
        for &next in path {
            let cur = self.hca.qp(qpn).unwrap().state();
            self.hca
                .modify_qp(qpn, &valid_attr(next, cur), min_mask(cur, next, t))
                .unwrap_or_else(|e| panic!("{t} {cur} -> {next}: {e}"));
        }
        if target == QpState::Sqe {
            self.hca.set_sq_error(qpn).unwrap();
        }
        assert_eq!(self.hca.qp(qpn).unwrap().state(), target);
    }

    /// Polls everything from the fixture CQ.
    pub(super) fn drain(&mut self) -> Vec<crate::verbs::cq::WorkCompletion> {
        self.hca.poll_cq(self.cq, usize::MAX).unwrap()
    }
}

/// Required attributes of a transition plus `STATE`.
pub(super) fn min_mask(from: QpState, to: QpState, t: QpType) -> QpAttrMask {
    crate::verbs::qp::transition_rule(from, to, t)
        .unwrap_or_else(|| panic!("{t} {from} -> {to} is not in the table"))
        .required
        | QpAttrMask::STATE
}

/// Attributes with a valid value in every field, moving to `to` from `cur`.
pub(super) fn valid_attr(to: QpState, cur: QpState) -> QpAttr {
    let av = AhAttr {
        grh: Some(GlobalRoute {
            dgid: Gid::from_ipv4([10, 0, 0, 2]),
            flow_label: 0,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
        }),
        ..AhAttr::default()
    };
    QpAttr {
        qp_state: to,
        cur_qp_state: cur,
        path_mtu: Mtu::Mtu1024,
        path_mig_state: PathMigState::Armed,
        qkey: 0x1111_1111,
        rq_psn: Psn::new(0x100),
        sq_psn: Psn::new(0x200),
        dest_qp_num: 0x12,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ah_attr: av,
        alt_ah_attr: av,
        pkey_index: 0,
        alt_pkey_index: 0,
        en_sqd_async_notify: true,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        port_num: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        alt_port_num: 1,
        alt_timeout: 14,
        rate_limit: 1000,
        ..QpAttr::default()
    }
}

/// The QP types created from a PD and CQs (XRC targets belong to an XRC domain; `xrc.rs`
/// tests both XRC types).
pub(super) const TYPES: [QpType; 5] = [
    QpType::Rc,
    QpType::Uc,
    QpType::Ud,
    QpType::RawIpv6,
    QpType::RawEthertype,
];

/// States a QP of type `t` can be brought to for testing.
pub(super) fn reachable(t: QpType, s: QpState) -> bool {
    s != QpState::Sqe || t != QpType::Rc
}
