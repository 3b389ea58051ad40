//! A two-HCA harness on native InfiniBand ports (LIDs 1 and 2): frames move directly between
//! the HCAs (zero latency) and virtual time jumps to the next timer when nothing moves. Used
//! by the native RC tests and the raw datagram tests.

#![allow(dead_code)]

use softib_core::setup::{connect, ConnectOptions, EndpointInfo};
use softib_core::time::Instant;
use softib_core::verbs::ah::AhAttr;
use softib_core::verbs::cq::WorkCompletion;
use softib_core::verbs::mr::MrInfo;
use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
use softib_core::verbs::types::{AccessFlags, Gid, Mtu, QpState, QpType};
use softib_core::verbs::{AhHandle, CqHandle, PdHandle};
use softib_core::{Hca, HcaConfig};
use softib_wire::native::NativePacket;
use softib_wire::{Psn, Qpn};

pub const LID_A: u16 = 1;
pub const LID_B: u16 = 2;
pub const MR_LEN: usize = 1 << 20;

/// One IB node: HCA, PD, CQ and one registered region.
pub struct Node {
    pub hca: Hca,
    pub pd: PdHandle,
    pub cq: CqHandle,
    pub mr: MrInfo,
}

#[path = "../shuttle/mod.rs"]
mod shuttle;
pub use shuttle::{Dir, Filter};

pub fn node(node_id: u32, mtu: Mtu) -> Node {
    let mut cfg = HcaConfig::infiniband(node_id);
    cfg.ports[0].active_mtu = mtu;
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(4096).unwrap();
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = hca.reg_mr(pd, vec![0u8; MR_LEN], access, None).unwrap();
    Node { hca, pd, cq, mr }
}

pub fn cap() -> QpCap {
    QpCap {
        max_send_wr: 256,
        max_recv_wr: 256,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 256,
    }
}

/// Two native IB nodes, A (LID 1) and B (LID 2).
pub struct IbPair {
    pub a: Node,
    pub b: Node,
    pub now: Instant,
    /// Every frame delivered, in order.
    pub log: Vec<(Dir, Vec<u8>)>,
    /// Returns false to drop a frame.
    pub filter: Filter,
}

impl IbPair {
    pub fn new(mtu: Mtu) -> IbPair {
        IbPair {
            a: node(LID_A.into(), mtu),
            b: node(LID_B.into(), mtu),
            now: Instant::ZERO,
            log: Vec::new(),
            filter: Box::new(|_, _| true),
        }
    }

    /// One RC QP on each side, connected; `global` gives both address vectors a GRH.
    pub fn rc(&mut self, global: bool, path_mtu: Mtu) -> (Qpn, Qpn) {
        let qa = self
            .a
            .hca
            .create_qp(self.a.pd, &QpInitAttr::new(QpType::Rc, self.a.cq, cap()))
            .unwrap();
        let qb = self
            .b
            .hca
            .create_qp(self.b.pd, &QpInitAttr::new(QpType::Rc, self.b.cq, cap()))
            .unwrap();
        let gid = |h: &Hca| {
            if global {
                h.query_port(1).unwrap().gids[0].gid
            } else {
                Gid::default()
            }
        };
        let ia = EndpointInfo {
            qpn: qa,
            psn: Psn::new(100),
            gid: gid(&self.a.hca),
            lid: LID_A,
        };
        let ib = EndpointInfo {
            qpn: qb,
            psn: Psn::new(2000),
            gid: gid(&self.b.hca),
            lid: LID_B,
        };
        let o = ConnectOptions {
            path_mtu,
            ..ConnectOptions::default()
        };
        connect(&mut self.a.hca, qa, ia.psn, &ib, &o).unwrap();
        connect(&mut self.b.hca, qb, ib.psn, &ia, &o).unwrap();
        (qa, qb)
    }

    /// Moves frames until both sides are idle and no timer is due before `limit_ns`.
    pub fn run(&mut self, limit_ns: u64) {
        shuttle::run(
            &mut self.a.hca,
            &mut self.b.hca,
            &mut self.now,
            &mut self.filter,
            &mut self.log,
            limit_ns,
        );
    }

    /// Every logged frame parses as a native IB packet with good ICRC and VCRC.
    pub fn assert_log_verified(&self) {
        assert!(!self.log.is_empty());
        for (d, f) in &self.log {
            if let Err(e) = NativePacket::parse_verified(f) {
                panic!("{d:?} frame {f:02x?} does not verify: {e}");
            }
        }
    }
}

/// Creates a raw QP of `qp_type` on `n` and moves it to RTS (port 1).
pub fn raw_qp(n: &mut Node, qp_type: QpType) -> Qpn {
    let qpn = n
        .hca
        .create_qp(n.pd, &QpInitAttr::new(qp_type, n.cq, cap()))
        .unwrap();
    to_rts_raw(&mut n.hca, qpn).unwrap();
    qpn
}

/// RESET -> INIT (port 1) -> RTR -> RTS for a raw QP.
pub fn to_rts_raw(hca: &mut Hca, qpn: Qpn) -> Result<(), softib_core::error::ModifyQpError> {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    hca.modify_qp(qpn, &init, QpAttrMask::STATE | QpAttrMask::PORT)?;
    for st in [QpState::Rtr, QpState::Rts] {
        let a = QpAttr {
            qp_state: st,
            ..QpAttr::default()
        };
        hca.modify_qp(qpn, &a, QpAttrMask::STATE)?;
    }
    Ok(())
}

/// An address handle on `n` towards `dlid`.
pub fn ah_to(n: &mut Node, dlid: u16) -> AhHandle {
    n.hca.create_ah(n.pd, &AhAttr::local(1, dlid)).unwrap()
}

/// Every completion queued on the node's CQ.
pub fn drain(n: &mut Node) -> Vec<WorkCompletion> {
    n.hca.poll_cq(n.cq, 1 << 16).unwrap()
}
