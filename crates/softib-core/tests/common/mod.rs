//! A two-HCA harness: frames move directly between the HCAs (zero latency) through a filter
//! that can drop, and virtual time jumps to the next timer when nothing moves.

#![allow(dead_code)]

use softib_core::setup::{connect, ConnectOptions, EndpointInfo};
use softib_core::time::Instant;
use softib_core::verbs::device::GidEntry;
use softib_core::verbs::mr::MrInfo;
use softib_core::verbs::qp::{QpCap, QpInitAttr};
use softib_core::verbs::types::{AccessFlags, GidType, Mtu, QpType};
use softib_core::verbs::{CqHandle, PdHandle};
use softib_core::{gid_of_ipv4, Hca, HcaConfig};
use softib_wire::roce::RocePacket;
use softib_wire::{Psn, Qpn};

/// Which way a frame travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    AtoB,
    BtoA,
}

/// One side of the pair.
pub struct Side {
    pub hca: Hca,
    pub pd: PdHandle,
    pub cq: CqHandle,
    pub qpn: Qpn,
    pub mr: MrInfo,
}

/// Decides whether a frame is delivered (false: dropped).
pub type Filter = Box<dyn FnMut(Dir, &[u8]) -> bool>;

pub struct Pair {
    pub a: Side,
    pub b: Side,
    pub now: Instant,
    /// Every frame delivered, in order, with its direction.
    pub log: Vec<(Dir, Vec<u8>)>,
    /// Returns false to drop a frame.
    pub filter: Filter,
}

pub const MR_LEN: usize = 1 << 20;

fn side(node: u32, ip: [u8; 4], mtu: Mtu) -> Side {
    let mut cfg = HcaConfig::new(node);
    cfg.ports[0].gids.push(GidEntry {
        gid: gid_of_ipv4(ip),
        gid_type: GidType::RoceV2,
    });
    cfg.ports[0].active_mtu = mtu;
    cfg.ports[0].max_mtu = Mtu::Mtu4096;
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(4096).unwrap();
    let cap = QpCap {
        max_send_wr: 1024,
        max_recv_wr: 1024,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    };
    let qpn = hca
        .create_qp(pd, &QpInitAttr::new(QpType::Rc, cq, cap))
        .unwrap();
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = hca.reg_mr(pd, vec![0u8; MR_LEN], access, None).unwrap();
    Side {
        hca,
        pd,
        cq,
        qpn,
        mr,
    }
}

impl Pair {
    /// Two connected RC QPs; A's requester starts at `psn_a`, B's at `psn_b`.
    pub fn new(psn_a: u32, psn_b: u32, opts: ConnectOptions) -> Pair {
        let mut a = side(1, [10, 0, 0, 1], opts.path_mtu.max(Mtu::Mtu1024));
        let mut b = side(2, [10, 0, 0, 2], opts.path_mtu.max(Mtu::Mtu1024));
        let o = ConnectOptions {
            sgid_index: 1,
            ..opts
        };
        let ia = EndpointInfo {
            qpn: a.qpn,
            psn: Psn::new(psn_a),
            gid: gid_of_ipv4([10, 0, 0, 1]),
            lid: 0,
        };
        let ib = EndpointInfo {
            qpn: b.qpn,
            psn: Psn::new(psn_b),
            gid: gid_of_ipv4([10, 0, 0, 2]),
            lid: 0,
        };
        connect(&mut a.hca, a.qpn, ia.psn, &ib, &o).unwrap();
        connect(&mut b.hca, b.qpn, ib.psn, &ia, &o).unwrap();
        Pair {
            a,
            b,
            now: Instant::ZERO,
            log: Vec::new(),
            filter: Box::new(|_, _| true),
        }
    }

    /// Moves frames until both sides are idle and no timer is pending before `limit_ns`.
    pub fn run(&mut self, limit_ns: u64) {
        let mut buf = Vec::new();
        loop {
            let mut moved = false;
            while self.a.hca.poll_transmit(self.now, &mut buf) {
                moved = true;
                if (self.filter)(Dir::AtoB, &buf) {
                    self.log.push((Dir::AtoB, buf.clone()));
                    self.b.hca.handle_frame(self.now, &buf);
                }
            }
            while self.b.hca.poll_transmit(self.now, &mut buf) {
                moved = true;
                if (self.filter)(Dir::BtoA, &buf) {
                    self.log.push((Dir::BtoA, buf.clone()));
                    self.a.hca.handle_frame(self.now, &buf);
                }
            }
            if moved {
                continue;
            }
            let next = [self.a.hca.poll_timeout(), self.b.hca.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t.as_nanos() <= limit_ns => {
                    self.now = self.now.max(t);
                    self.a.hca.handle_timeout(self.now);
                    self.b.hca.handle_timeout(self.now);
                }
                _ => return,
            }
        }
    }

    /// (direction, opcode, PSN) of every delivered frame.
    pub fn trace(&self) -> Vec<(Dir, u8, u32)> {
        self.log
            .iter()
            .map(|(d, f)| {
                let p = RocePacket::parse(f).unwrap();
                assert!(p.icrc_ok());
                let b = p.transport.headers.bth;
                (*d, b.opcode.0, b.psn.value())
            })
            .collect()
    }
}
