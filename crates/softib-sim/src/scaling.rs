//! RD's scaling argument, as scenarios: `clients` QPs on node A each talk to each of `servers`
//! QPs on node B.
//!
//! * **RC** needs a connected QP per conversation on both nodes: `clients × servers` QPs each.
//! * **RD** keeps the `clients` (and `servers`) QPs and carries every conversation over `eecs`
//!   EE context pairs.
//!
//! [`rc_state`], [`rd_eecs`] and [`rd_qps`] build the objects of each, every one in RTS with
//! empty queues (as the `qp_memory` test of softib-core measures an idle RC QP), so a caller
//! with a counting allocator can weigh them. [`goodput_config`] is the traffic: every
//! conversation sends the same SENDs through the simulator, over its own RC QP pair or through
//! the RD EE contexts. Each conversation of the RD run has its own RD QP pair, which changes
//! nothing on the wire: an EE context carries one message at a time whichever QP it comes from.
//! Goodput is in simulated time, so a seed gives the same figure on any machine.

use softib_core::setup::{connect, connect_eec, ready_rd_qp, ConnectOptions, EndpointInfo};
use softib_core::verbs::qp::{QpCap, QpInitAttr};
use softib_core::verbs::types::{AccessFlags, QpType};
use softib_core::verbs::{CqHandle, PdHandle, RddHandle};
use softib_core::{gid_of_ipv4, Hca, HcaConfig};
use softib_wire::{Psn, Qpn};

use crate::{OpKind, Service, SimConfig};

/// Queue capacities of every QP built here (empty queues allocate nothing).
const CAP: QpCap = QpCap {
    max_send_wr: 64,
    max_recv_wr: 64,
    max_send_sge: 1,
    max_recv_sge: 1,
    max_inline_data: 0,
};

/// A node with one PD and one CQ, before any connection state.
pub fn node() -> (Hca, PdHandle, CqHandle) {
    let mut hca = Hca::new(HcaConfig::new(1));
    let pd = hca.alloc_pd().expect("a PD");
    let cq = hca.create_cq(16).expect("a CQ");
    (hca, pd, cq)
}

fn remote(qpn: u32, psn: u32) -> EndpointInfo {
    EndpointInfo {
        qpn: Qpn::new(qpn),
        psn: Psn::new(psn),
        gid: gid_of_ipv4([10, 0, 0, 2]),
        lid: 0,
    }
}

/// One RC QP in RTS per conversation: `conversations` of them.
pub fn rc_state(hca: &mut Hca, pd: PdHandle, cq: CqHandle, conversations: u32) {
    for i in 0..conversations {
        let qpn = hca
            .create_qp(pd, &QpInitAttr::new(QpType::Rc, cq, CAP))
            .expect("an RC QP");
        connect(
            hca,
            qpn,
            Psn::new(i),
            &remote(0x11 + i, i),
            &ConnectOptions::default(),
        )
        .expect("RESET to RTS");
    }
}

/// `eecs` EE contexts of `rdd` in RTS.
pub fn rd_eecs(hca: &mut Hca, rdd: RddHandle, eecs: u32) {
    for i in 0..eecs {
        let eecn = hca.create_eec(rdd).expect("an EE context");
        connect_eec(
            hca,
            eecn,
            Psn::new(i),
            &remote(1 + i, i),
            &ConnectOptions::default(),
        )
        .expect("EE context RESET to RTS");
    }
}

/// `qps` RD QPs of `rdd` in RTS.
pub fn rd_qps(hca: &mut Hca, pd: PdHandle, cq: CqHandle, rdd: RddHandle, qps: u32) {
    for _ in 0..qps {
        let qpn = hca
            .create_rd_qp(pd, rdd, &QpInitAttr::new(QpType::Rd, cq, CAP))
            .expect("an RD QP");
        ready_rd_qp(hca, qpn, 0x1234, AccessFlags::LOCAL_WRITE).expect("RESET to RTS");
    }
}

/// `conversations` conversations each sending `per_conversation` SENDs of `size` bytes (four
/// outstanding) at frame loss `loss` on every link direction: over RC QP pairs, or (`eecs`
/// `Some(k)`) over `k` RD EE context pairs. The transport timer is derived from the path and
/// what the connections put in flight on it ([`SimConfig::path_timeout`]).
pub fn goodput_config(
    conversations: u32,
    eecs: Option<u32>,
    size: u32,
    per_conversation: u64,
    loss: f64,
    seed: u64,
) -> SimConfig {
    let mut cfg = SimConfig {
        service: if eecs.is_some() {
            Service::Rd
        } else {
            Service::Rc
        },
        op: OpKind::Send,
        size,
        ops: u64::from(conversations) * per_conversation,
        qps: conversations,
        eecs: eecs.unwrap_or(1),
        depth: 4,
        loss,
        seed,
        ..SimConfig::default()
    };
    cfg.timeout = cfg.path_timeout();
    cfg
}
