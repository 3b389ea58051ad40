//! UC pairs: the two-HCA harness of `common` with a UC QP on each side.

use softib_core::setup::{connect, ConnectOptions, EndpointInfo};
use softib_core::verbs::qp::{QpCap, QpInitAttr};
use softib_core::verbs::types::QpType;
use softib_core::{gid_of_ipv4, Hca};
use softib_wire::{Psn, Qpn};

use super::{Pair, IP_A, IP_B};

/// Creates a UC QP on `hca` on the side's PD and CQ.
fn uc_qp(hca: &mut Hca, pd: softib_core::verbs::PdHandle, cq: softib_core::verbs::CqHandle) -> Qpn {
    let cap = QpCap {
        max_send_wr: 1024,
        max_recv_wr: 1024,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    };
    hca.create_qp(pd, &QpInitAttr::new(QpType::Uc, cq, cap))
        .unwrap()
}

/// Two connected UC QPs (they replace the RC QPs of [`Pair::new`] as `a.qpn` / `b.qpn`): A's
/// requester starts at `psn_a` and B's responder expects it; likewise `psn_b` the other way.
pub fn uc_pair(psn_a: u32, psn_b: u32, opts: ConnectOptions) -> Pair {
    let mut p = Pair::new(psn_a, psn_b, opts);
    let qa = uc_qp(&mut p.a.hca, p.a.pd, p.a.cq);
    let qb = uc_qp(&mut p.b.hca, p.b.pd, p.b.cq);
    let o = ConnectOptions {
        sgid_index: 1,
        ..opts
    };
    let ia = EndpointInfo {
        qpn: qa,
        psn: Psn::new(psn_a),
        gid: gid_of_ipv4(IP_A),
        lid: 0,
    };
    let ib = EndpointInfo {
        qpn: qb,
        psn: Psn::new(psn_b),
        gid: gid_of_ipv4(IP_B),
        lid: 0,
    };
    connect(&mut p.a.hca, qa, ia.psn, &ib, &o).unwrap();
    connect(&mut p.b.hca, qb, ib.psn, &ia, &o).unwrap();
    p.a.qpn = qa;
    p.b.qpn = qb;
    p
}
