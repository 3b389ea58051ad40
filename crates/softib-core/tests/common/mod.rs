//! A two-HCA harness: frames move directly between the HCAs (zero latency) through a filter
//! that can drop, and virtual time jumps to the next timer when nothing moves.
//!
//! The pair is an RC connection (A's QP ↔ B's QP), an XRC one ([`Svc::Xrc`]): A's QP an XRC
//! initiator, B's an XRC target whose requests land in B's XRC SRQ (CQ `b.cq`, PD `b.pd`), or
//! an RD one ([`Svc::Rd`]): each side has a reliable datagram domain, an RD QP (`qpn`, Q_Key
//! [`RD_QKEY`]) and an EE context (`eecn`) connected to the other side's, which carries the
//! path, the PSNs and the timers.
//! The harness hides the difference from tests written for RC: A's send WRs name B's SRQ (XRC)
//! or go through A's EE context to B's RD QP (RD), receives "posted on B" go to the SRQ or the
//! RD QP, frames built with RC opcodes are sent with the XRC or RD opcode of the same
//! operation (XRC requests with an XRCETH naming B's SRQ; every RD packet with an RDETH naming
//! the receiver's EE context, RD requests with a DETH carrying the Q_Key and the sender's QP),
//! the PSNs of [`Pair::sq_psn_a`] / [`Pair::rq_psn_b`] are the EE contexts' on RD, and
//! [`Seen::opcode`] reports the RC opcode of an XRC or RD packet ([`Seen::raw_opcode`] the real
//! one).

#![allow(dead_code)]

use softib_core::setup::{connect, connect_eec, ConnectOptions, EndpointInfo};
use softib_core::time::Instant;
use softib_core::verbs::cq::WorkCompletion;
use softib_core::verbs::device::GidEntry;
use softib_core::verbs::mr::MrInfo;
use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
use softib_core::verbs::srq::SrqInitAttr;
use softib_core::verbs::types::WcStatus;
use softib_core::verbs::types::{AccessFlags, GidType, Mtu, QpState, QpType};
use softib_core::verbs::wr::{RecvWr, SendWr, Sge};
use softib_core::verbs::{CqHandle, PdHandle, RddHandle, SrqHandle, XrcdHandle};
use softib_core::{gid_of_ipv4, mac_for_gid, udp_source_port, Hca, HcaConfig, MAX_FRAME};
use softib_wire::aeth::AethSyndrome;
use softib_wire::bth::Bth;
use softib_wire::ethernet::Ethernet;
use softib_wire::ipv4::Ipv4;
use softib_wire::opcode::Opcode;
use softib_wire::roce::{self, IpHeader, RocePacket};
use softib_wire::transport::{TransportHeaders, TransportPacket};
use softib_wire::{Eecn, Psn, Qpn};

pub mod uc;

#[path = "../shuttle/mod.rs"]
mod shuttle;
pub use shuttle::{Dir, Filter};

/// The service of a [`Pair`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Svc {
    Rc,
    Xrc,
    Rd,
}

/// The Q_Key of both sides' RD QPs, which the harness's RD requests carry.
pub const RD_QKEY: u32 = 0x0011_2233;

impl Svc {
    /// The opcode of RC operation `rc` in this service: itself on RC, the XRC opcode of the
    /// same operation (0xA0 | operation) on XRC, the RD one (0x40 | operation) on RD.
    pub fn opcode(self, rc: Opcode) -> Opcode {
        match self {
            Svc::Rc => rc,
            Svc::Xrc => Opcode(rc.0 | Opcode::XRC_SEND_FIRST.0),
            Svc::Rd => Opcode(rc.0 | Opcode::RD_SEND_FIRST.0),
        }
    }

    /// Bits 7:5 of this service's opcodes.
    pub fn class(self) -> u8 {
        self.opcode(Opcode(0)).0 >> 5
    }
}

/// One side of the pair.
pub struct Side {
    pub hca: Hca,
    pub pd: PdHandle,
    pub cq: CqHandle,
    pub qpn: Qpn,
    pub mr: MrInfo,
    /// XRC: B's XRC SRQ, which receives everything B's target QP takes, and its domain.
    pub srq: Option<SrqHandle>,
    pub xrcd: Option<XrcdHandle>,
    /// RD: the side's reliable datagram domain and EE context (`qpn` is its RD QP).
    pub rdd: Option<RddHandle>,
    pub eecn: Option<Eecn>,
}

pub struct Pair {
    pub a: Side,
    pub b: Side,
    pub now: Instant,
    /// Every frame delivered, in order, with its direction.
    pub log: Vec<(Dir, Vec<u8>)>,
    /// Returns false to drop a frame.
    pub filter: Filter,
    /// First request PSN of A's and of B's send queue.
    pub psn_a: u32,
    pub psn_b: u32,
    /// The service of the connection.
    pub svc: Svc,
}

pub const MR_LEN: usize = 1 << 20;

/// The GID (index 2 of every side's port) of the alternate path of the side whose primary
/// address is `ip` (10.0.0.n -> 10.0.1.n).
pub fn alt_gid(ip: [u8; 4]) -> softib_core::verbs::types::Gid {
    gid_of_ipv4([ip[0], ip[1], ip[2] + 1, ip[3]])
}

thread_local! {
    /// The pairs this thread makes send from a UDP socket's port ([`with_udp_socket_ports`]).
    static SOCKET_PORTS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with every pair it makes configured as a driver over a UDP socket configures its
/// HCA ([`HcaConfig::udp_socket_port`]: UDP source port [`socket_port`] of the node, IPv4
/// Identification 0).
#[allow(dead_code)]
pub fn with_udp_socket_ports<R>(f: impl FnOnce() -> R) -> R {
    SOCKET_PORTS.with(|c| c.set(true));
    let r = f();
    SOCKET_PORTS.with(|c| c.set(false));
    r
}

/// The UDP source port of node `node`'s packets under [`with_udp_socket_ports`].
#[allow(dead_code)]
pub fn socket_port(node: u32) -> u16 {
    0xc000 + node as u16
}

/// A side whose QP is of `qp_type`: RC, an XRC initiator, (`XrcRecv`) an XRC target with an
/// XRC SRQ in a new XRC domain, or (`Rd`) an RD QP and an EE context of a new RD domain.
fn side(node: u32, ip: [u8; 4], mtu: Mtu, qp_type: QpType) -> Side {
    let mut cfg = HcaConfig::new(node);
    if SOCKET_PORTS.with(|c| c.get()) {
        cfg.udp_socket_port = Some(socket_port(node));
    }
    cfg.ports[0].gids.push(GidEntry {
        gid: gid_of_ipv4(ip),
        gid_type: GidType::RoceV2,
    });
    // GID 2: the address of an alternate path (`alt_gid`), for path migration tests.
    cfg.ports[0].gids.push(GidEntry {
        gid: alt_gid(ip),
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
    let (mut rdd, mut eecn, mut xrc_domain) = (None, None, None);
    let (qpn, srq) = if qp_type == QpType::Rd {
        let d = hca.alloc_rdd().unwrap();
        let qpn = hca
            .create_rd_qp(pd, d, &QpInitAttr::new(qp_type, cq, cap))
            .unwrap();
        eecn = Some(hca.create_eec(d).unwrap());
        rdd = Some(d);
        (qpn, None)
    } else if qp_type == QpType::XrcRecv {
        let xrcd = hca.alloc_xrcd().unwrap();
        let attr = SrqInitAttr {
            max_wr: 1024,
            max_sge: 4,
            srq_limit: 0,
        };
        let srq = hca.create_xrc_srq(pd, xrcd, cq, &attr).unwrap();
        xrc_domain = Some(xrcd);
        (hca.create_xrc_tgt_qp(xrcd).unwrap(), Some(srq))
    } else {
        let qpn = hca
            .create_qp(pd, &QpInitAttr::new(qp_type, cq, cap))
            .unwrap();
        (qpn, None)
    };
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
        srq,
        xrcd: xrc_domain,
        rdd,
        eecn,
    }
}

impl Pair {
    /// Two connected RC QPs; A's requester starts at `psn_a`, B's at `psn_b`.
    pub fn new(psn_a: u32, psn_b: u32, opts: ConnectOptions) -> Pair {
        Pair::new_with_init(psn_a, psn_b, opts, |_, _| {})
    }

    /// [`Pair::new`] for `svc`: with [`Svc::Xrc`], A's QP is an XRC initiator and B's an XRC
    /// target delivering into B's XRC SRQ; with [`Svc::Rd`], A's and B's QPs are RD QPs and
    /// the connection is between their EE contexts (see the module documentation).
    pub fn new_svc(svc: Svc, psn_a: u32, psn_b: u32, opts: ConnectOptions) -> Pair {
        Pair::new_svc_with_init(svc, psn_a, psn_b, opts, |_, _| {})
    }

    /// [`Pair::new`], running `init(a, b)` while both QPs are in INIT (receives posted there
    /// are the initial end-to-end credits, C9-155).
    pub fn new_with_init(
        psn_a: u32,
        psn_b: u32,
        opts: ConnectOptions,
        init: impl FnOnce(&mut Side, &mut Side),
    ) -> Pair {
        Pair::new_svc_with_init(Svc::Rc, psn_a, psn_b, opts, init)
    }

    /// [`Pair::new_with_init`] for `svc` (see [`Pair::new_svc`]).
    pub fn new_svc_with_init(
        svc: Svc,
        psn_a: u32,
        psn_b: u32,
        opts: ConnectOptions,
        init: impl FnOnce(&mut Side, &mut Side),
    ) -> Pair {
        let (type_a, type_b) = match svc {
            Svc::Rc => (QpType::Rc, QpType::Rc),
            Svc::Xrc => (QpType::XrcSend, QpType::XrcRecv),
            Svc::Rd => (QpType::Rd, QpType::Rd),
        };
        let mtu = opts.path_mtu.max(Mtu::Mtu1024);
        let mut a = side(1, [10, 0, 0, 1], mtu, type_a);
        let mut b = side(2, [10, 0, 0, 2], mtu, type_b);
        let o = ConnectOptions {
            sgid_index: 1,
            ..opts
        };
        for s in [&mut a, &mut b] {
            let attr = QpAttr {
                qp_state: QpState::Init,
                port_num: o.port_num,
                qp_access_flags: o.access,
                qkey: RD_QKEY,
                ..QpAttr::default()
            };
            let mask = QpAttrMask::STATE
                | QpAttrMask::PORT
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::ACCESS_FLAGS;
            let mask = if svc == Svc::Rd {
                mask | QpAttrMask::QKEY
            } else {
                mask
            };
            s.hca.modify_qp(s.qpn, &attr, mask).unwrap();
        }
        init(&mut a, &mut b);
        if svc == Svc::Rd {
            // The RD QPs: INIT -> RTR -> RTS with the state alone (their path and PSNs are the
            // EE contexts'); the EE contexts connect as RC QPs do, naming each other's EECN.
            for s in [&mut a, &mut b] {
                for state in [QpState::Rtr, QpState::Rts] {
                    s.hca
                        .modify_qp(s.qpn, &QpAttr::to_state(state), QpAttrMask::STATE)
                        .unwrap();
                }
            }
            let (ea, eb) = (a.eecn.unwrap(), b.eecn.unwrap());
            let ia = EndpointInfo {
                qpn: Qpn::new(ea.value()),
                psn: Psn::new(psn_a),
                gid: gid_of_ipv4(IP_A),
                lid: 0,
            };
            let ib = EndpointInfo {
                qpn: Qpn::new(eb.value()),
                psn: Psn::new(psn_b),
                gid: gid_of_ipv4(IP_B),
                lid: 0,
            };
            connect_eec(&mut a.hca, ea, ia.psn, &ib, &o).unwrap();
            connect_eec(&mut b.hca, eb, ib.psn, &ia, &o).unwrap();
            return Pair {
                a,
                b,
                now: Instant::ZERO,
                log: Vec::new(),
                filter: Box::new(|_, _| true),
                psn_a,
                psn_b,
                svc,
            };
        }
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
            psn_a,
            psn_b,
            svc,
        }
    }

    /// B's XRC SRQ number (XRC pairs).
    pub fn b_srqn(&self) -> Option<u32> {
        self.b.srq.map(|s| self.b.hca.srq_num(s).unwrap())
    }

    /// Moves frames until both sides are idle and no timer is pending before `limit_ns`.
    /// Every frame delivered is checked against the pair's service ([`Pair::check_service`]).
    pub fn run(&mut self, limit_ns: u64) {
        let from = self.log.len();
        shuttle::run(
            &mut self.a.hca,
            &mut self.b.hca,
            &mut self.now,
            &mut self.filter,
            &mut self.log,
            limit_ns,
        );
        for (d, f) in &self.log[from..] {
            self.check_service(*d, &decode(f));
        }
    }

    /// The opcode of RC operation `rc` as this pair's service sends it ([`Svc::opcode`]).
    pub fn wire_op(&self, rc: Opcode) -> Opcode {
        self.svc.opcode(rc)
    }

    /// What every packet an HCA of the pair sends must show of the service. On an RC pair
    /// (whose QPs may also be UC, `uc.rs`): no XRC opcode, no XRCETH. On XRC: an opcode of
    /// the XRC class (0xA0); A (the initiator) sends requests, each with an XRCETH, and B
    /// (the target) sends responses without one, every positive acknowledgement with the
    /// "invalid" credit code 0b11111 (an XRC target's receive queue is an SRQ, which
    /// generates no end-to-end credits).
    ///
    /// On RD: an opcode of the RD class (0x40) and an RDETH naming an EE context of the
    /// receiver in every packet; requests (which either side may send) carry a DETH with the
    /// sending RD QP, responses none, and every positive acknowledgement has credit bits 0
    /// (RD defines no end-to-end credits, o9-72).
    #[track_caller]
    pub fn check_service(&self, dir: Dir, s: &Seen) {
        let op = s.raw_opcode();
        let xrc_class = op.0 & 0xe0 == Opcode::XRC_SEND_FIRST.0;
        if self.svc == Svc::Rc {
            assert!(!xrc_class, "{dir:?} {op} on an RC pair");
            assert!(s.headers.xrceth.is_none(), "an XRCETH on RC: {s:?}");
            return;
        }
        if self.svc == Svc::Rd {
            assert_eq!(
                op.0 & 0xe0,
                Opcode::RD_SEND_FIRST.0,
                "{dir:?} {op} on an RD pair"
            );
            assert!(s.headers.xrceth.is_none(), "an XRCETH on RD: {s:?}");
            let (from, to) = match dir {
                Dir::AtoB => (&self.a, &self.b),
                Dir::BtoA => (&self.b, &self.a),
            };
            let eecn = s.headers.rdeth.expect("an RD packet has an RDETH").eecn;
            assert!(
                to.hca.query_eec(eecn).is_ok(),
                "an RD packet names an EE context of the receiver: {s:?}"
            );
            let response = op.info().is_some_and(|i| i.operation.is_response());
            if response {
                assert!(
                    s.headers.deth.is_none(),
                    "an RD response has no DETH: {s:?}"
                );
                if let Some(syn) = s.syndrome().filter(|b| b & 0x60 == 0) {
                    assert_eq!(syn & 0x1f, 0, "RD generates no credits (o9-72): {s:?}");
                }
            } else {
                let deth = s.headers.deth.expect("an RD request has a DETH");
                let src = from.hca.qp(deth.src_qp).map(|q| q.qp_type());
                assert_eq!(
                    src,
                    Some(QpType::Rd),
                    "the DETH names the sending RD QP: {s:?}"
                );
            }
            return;
        }
        assert!(xrc_class, "{dir:?} {op} on an XRC pair");
        let response = op.info().is_some_and(|i| i.operation.is_response());
        match dir {
            Dir::AtoB => {
                assert!(!response, "an XRC initiator sends requests only: {s:?}");
                assert!(
                    s.headers.xrceth.is_some(),
                    "an XRC request has an XRCETH: {s:?}"
                );
            }
            Dir::BtoA => {
                assert!(response, "an XRC target sends responses only: {s:?}");
                assert!(s.headers.xrceth.is_none(), "an XRC response has no XRCETH");
                if let Some(syn) = s.syndrome().filter(|b| b & 0xe0 == 0) {
                    assert_eq!(syn, 0x1f, "an XRC target generates no credits: {s:?}");
                }
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

/// IPv4 address of side A / side B.
pub const IP_A: [u8; 4] = [10, 0, 0, 1];
pub const IP_B: [u8; 4] = [10, 0, 0, 2];
/// Offset of the BTH in the frames the harness builds (Ethernet 14 + IPv4 20 + UDP 8).
pub const BTH_AT: usize = 14 + 20 + 8;

impl Dir {
    /// Addresses of the sender and the receiver of a frame travelling this way.
    fn ips(self) -> ([u8; 4], [u8; 4]) {
        match self {
            Dir::AtoB => (IP_A, IP_B),
            Dir::BtoA => (IP_B, IP_A),
        }
    }
}

/// One packet as it appeared on the wire, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub headers: TransportHeaders,
    pub payload: Vec<u8>,
}

impl Seen {
    /// The opcode, an XRC or RD one reported as the RC opcode of the same operation (see the
    /// module documentation).
    pub fn opcode(&self) -> Opcode {
        let op = self.headers.bth.opcode;
        if matches!(
            op.0 & 0xe0,
            c if c == Opcode::XRC_SEND_FIRST.0 || c == Opcode::RD_SEND_FIRST.0
        ) {
            Opcode(op.0 & 0x1f)
        } else {
            op
        }
    }
    /// The opcode as sent.
    pub fn raw_opcode(&self) -> Opcode {
        self.headers.bth.opcode
    }
    pub fn psn(&self) -> u32 {
        self.headers.bth.psn.value()
    }
    pub fn ack_req(&self) -> bool {
        self.headers.bth.ack_req
    }
    /// The AETH syndrome byte, if the packet carries an AETH.
    pub fn syndrome(&self) -> Option<u8> {
        self.headers.aeth.map(|a| a.syndrome)
    }
    /// The decoded AETH syndrome, if any.
    pub fn aeth_syndrome(&self) -> Option<AethSyndrome> {
        self.syndrome().map(AethSyndrome::from_byte)
    }
    /// The AETH MSN, if the packet carries an AETH.
    pub fn msn(&self) -> Option<u32> {
        self.headers.aeth.map(|a| a.msn.value())
    }
    /// (opcode, PSN) — the usual thing to compare.
    pub fn op_psn(&self) -> (Opcode, u32) {
        (self.opcode(), self.psn())
    }
}

/// Decodes a frame the HCA built (its ICRC must be right).
pub fn decode(frame: &[u8]) -> Seen {
    let p = RocePacket::parse(frame).expect("the HCA builds parseable frames");
    assert!(p.icrc_ok(), "the HCA builds frames with a correct ICRC");
    Seen {
        headers: p.transport.headers,
        payload: p.transport.payload.to_vec(),
    }
}

/// Headers with only a BTH of `opcode` at `psn` (DestQP and P_Key are filled in on injection).
pub fn hdr(opcode: Opcode, psn: u32) -> TransportHeaders {
    TransportHeaders::new(Bth {
        opcode,
        psn: Psn::new(psn),
        ..Bth::default()
    })
}

/// Rewrites the BTH opcode of a frame built by [`Pair::frame`] (any value, reserved ones
/// included) and recomputes its ICRC.
pub fn patch_opcode(frame: &mut [u8], opcode: u8) {
    patch_transport(frame, |t| t[0] = opcode);
}

/// Edits the transport bytes (BTH through pad) of a frame built by [`Pair::frame`] and
/// recomputes its ICRC, so the frame stays valid below the transport layer.
pub fn patch_transport(frame: &mut [u8], edit: impl FnOnce(&mut [u8])) {
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let end = 14 + total;
    edit(&mut frame[BTH_AT..end - 4]);
    let crc =
        softib_wire::icrc::roce_v4(&frame[14..34], &frame[34..BTH_AT], &frame[BTH_AT..end - 4]);
    softib_wire::icrc::put(&mut frame[end - 4..end], crc).unwrap();
}

impl Pair {
    /// The side that receives frames travelling `dir`.
    pub fn receiver(&mut self, dir: Dir) -> &mut Side {
        match dir {
            Dir::AtoB => &mut self.b,
            Dir::BtoA => &mut self.a,
        }
    }

    /// The side that sends frames travelling `dir`.
    pub fn sender(&mut self, dir: Dir) -> &mut Side {
        match dir {
            Dir::AtoB => &mut self.a,
            Dir::BtoA => &mut self.b,
        }
    }

    /// A frame as the sender of `dir` would build it, addressed to the receiver's QP (BTH
    /// DestQP and P_Key are set here); `pad` overrides the pad count the payload length implies.
    pub fn frame_with_pad(
        &mut self,
        dir: Dir,
        mut headers: TransportHeaders,
        payload: &[u8],
        pad: Option<u8>,
    ) -> Vec<u8> {
        headers.bth.dest_qp = self.receiver(dir).qpn;
        headers.bth.pkey = 0xffff;
        if self.svc == Svc::Rd && headers.bth.opcode.0 < 0x20 {
            // The RD opcode of the operation, through the receiver's EE context; a request
            // carries the RD QPs' Q_Key and the sending QP, a positive acknowledgement no
            // credits (o9-72).
            headers.bth.opcode = Opcode(headers.bth.opcode.0 | Opcode::RD_SEND_FIRST.0);
            if headers.rdeth.is_none() {
                headers.rdeth = Some(softib_wire::rdeth::Rdeth {
                    resv8: 0,
                    eecn: self.receiver(dir).eecn.unwrap(),
                });
            }
            let response = headers
                .bth
                .opcode
                .info()
                .is_some_and(|i| i.operation.is_response());
            if !response && headers.deth.is_none() {
                headers.deth = Some(softib_wire::deth::Deth {
                    qkey: RD_QKEY,
                    resv8: 0,
                    src_qp: self.sender(dir).qpn,
                });
            }
            if let Some(a) = headers.aeth.as_mut().filter(|a| a.syndrome & 0xe0 == 0) {
                a.syndrome = 0;
            }
        }
        if self.svc == Svc::Xrc && headers.bth.opcode.0 < 0x20 {
            // The XRC opcode of the operation; requests to B name B's SRQ.
            headers.bth.opcode = Opcode(headers.bth.opcode.0 | Opcode::XRC_SEND_FIRST.0);
            if dir == Dir::AtoB && headers.xrceth.is_none() {
                headers.xrceth = Some(softib_wire::xrceth::Xrceth {
                    resv8: 0,
                    xrcsrq: softib_wire::XrcSrqn::new(self.b_srqn().unwrap()),
                });
            }
        }
        let (src, dst) = dir.ips();
        let eth = Ethernet {
            dst: mac_for_gid(&gid_of_ipv4(dst)),
            src: mac_for_gid(&gid_of_ipv4(src)),
            ..Ethernet::default()
        };
        let ip = IpHeader::V4(Ipv4 {
            flags: 0b010,
            ttl: 64,
            src,
            dst,
            ..Ipv4::default()
        });
        let zeros = [0u8; 3];
        let mut t = TransportPacket::new(headers, payload);
        if let Some(p) = pad {
            t.headers.bth.pad_cnt = p;
            t.pad = &zeros[..usize::from(p)];
        }
        let sport = udp_source_port(self.sender(dir).qpn.value());
        let mut out = vec![0u8; MAX_FRAME];
        let n = roce::build(&eth, &ip, sport, &t, &mut out).expect("buildable packet");
        out.truncate(n);
        out
    }

    /// [`Pair::frame_with_pad`] with the natural pad count.
    pub fn frame(&mut self, dir: Dir, headers: TransportHeaders, payload: &[u8]) -> Vec<u8> {
        self.frame_with_pad(dir, headers, payload, None)
    }

    /// Hands a frame travelling `dir` to its receiver (not logged, not filtered).
    pub fn inject_frame(&mut self, dir: Dir, frame: &[u8]) {
        let now = self.now;
        self.receiver(dir).hca.handle_frame(now, frame);
    }

    /// Creates on B a shared receive queue holding `recvs` 64-byte receive WQEs (1 KiB apart in
    /// B's region, wr_id 100 + i) and a second RC QP attached to it, connected to A's QP and
    /// expecting PSN `epsn` from it. Inject into that QP with [`Pair::inject_to_b_qp`].
    pub fn b_srq_qp(&mut self, recvs: u64, epsn: u32) -> (SrqHandle, Qpn) {
        let b = &mut self.b;
        let attr = SrqInitAttr {
            max_wr: 64,
            max_sge: 1,
            srq_limit: 0,
        };
        let srq = b.hca.create_srq(b.pd, &attr).unwrap();
        let wrs: Vec<RecvWr> = (0..recvs)
            .map(|i| {
                let sge = Sge {
                    addr: b.mr.addr + 1024 * i,
                    length: 64,
                    lkey: b.mr.lkey,
                };
                RecvWr::new(100 + i, vec![sge])
            })
            .collect();
        b.hca.post_srq_recv(srq, &wrs).unwrap();
        let cap = QpCap {
            max_send_wr: 16,
            max_send_sge: 1,
            ..QpCap::default()
        };
        let mut init = QpInitAttr::new(QpType::Rc, b.cq, cap);
        init.srq = Some(srq);
        let qpn = b.hca.create_qp(b.pd, &init).unwrap();
        let remote = EndpointInfo {
            qpn: self.a.qpn,
            psn: Psn::new(epsn),
            gid: gid_of_ipv4(IP_A),
            lid: 0,
        };
        let o = ConnectOptions {
            sgid_index: 1,
            ..ConnectOptions::default()
        };
        connect(&mut b.hca, qpn, Psn::new(1), &remote, &o).unwrap();
        (srq, qpn)
    }

    /// Builds a packet as A would and hands it to B's QP `qpn` (not B's main QP).
    pub fn inject_to_b_qp(&mut self, qpn: Qpn, headers: TransportHeaders, payload: &[u8]) {
        let mut f = self.frame(Dir::AtoB, headers, payload);
        patch_transport(&mut f, |t| {
            t[5..8].copy_from_slice(&qpn.value().to_be_bytes()[1..])
        });
        self.inject_frame(Dir::AtoB, &f);
    }

    /// Builds a packet as the sender of `dir` would and hands it to the receiver.
    pub fn inject(&mut self, dir: Dir, headers: TransportHeaders, payload: &[u8]) {
        let f = self.frame(dir, headers, payload);
        self.inject_frame(dir, &f);
    }

    /// Everything the sender of `dir` transmits now, decoded and NOT delivered (each packet
    /// checked against the pair's service, [`Pair::check_service`]).
    pub fn drain(&mut self, dir: Dir) -> Vec<Seen> {
        std::iter::from_fn(|| self.drain_one(dir)).collect()
    }

    /// The next packet the sender of `dir` transmits now, if any (not delivered; checked as
    /// [`Pair::drain`] checks).
    pub fn drain_one(&mut self, dir: Dir) -> Option<Seen> {
        let now = self.now;
        let mut buf = Vec::new();
        let s = self
            .sender(dir)
            .hca
            .poll_transmit(now, &mut buf)
            .then(|| decode(&buf))?;
        self.check_service(dir, &s);
        Some(s)
    }

    /// Injects an unsolicited acknowledgement travelling `dir` in the form of the initial one
    /// (IBA 9.7.7.2.2): an Acknowledge with `syndrome` and `msn` at the receiver's first
    /// request PSN − 1.
    pub fn unsolicited_ack(&mut self, dir: Dir, syndrome: u8, msn: u32) {
        let first = match dir {
            Dir::BtoA => self.psn_a,
            Dir::AtoB => self.psn_b,
        };
        let psn = Psn::new(first).sub(1);
        let mut h = hdr(Opcode::RC_ACKNOWLEDGE, psn.value());
        h.aeth = Some(softib_wire::aeth::Aeth {
            syndrome,
            msn: softib_wire::Msn::new(msn),
        });
        self.inject(dir, h, &[]);
    }

    /// Tells A's requester that its peer sends no end-to-end credits (the credit code
    /// 0b11111, as Linux rxe does in every ACK), so it sends without regard to credits
    /// (C9-153) from the first message on. On RD, which has no end-to-end credits (o9-72),
    /// there is nothing to tell.
    pub fn a_without_credits(mut self) -> Pair {
        if self.svc != Svc::Rd {
            self.unsolicited_ack(Dir::BtoA, 0x1f, 0);
        }
        self
    }

    /// Moves virtual time to `t_ns` and runs the timers of both sides that are due.
    pub fn advance_to(&mut self, t_ns: u64) {
        self.now = Instant::from_nanos(t_ns.max(self.now.as_nanos()));
        let now = self.now;
        self.a.hca.handle_timeout(now);
        self.b.hca.handle_timeout(now);
    }

    /// Posts a receive of `len` bytes at byte `offset` of B's region.
    pub fn recv_b(&mut self, wr_id: u64, offset: u64, len: u32) {
        self.b.post_recv(wr_id, offset, len);
    }

    /// An SGE of `len` bytes at byte `offset` of A's region.
    pub fn sge_a(&self, offset: u64, len: u32) -> Sge {
        Sge {
            addr: self.a.mr.addr + offset,
            length: len,
            lkey: self.a.mr.lkey,
        }
    }

    /// Posts send WRs on A (on an XRC pair, for B's SRQ).
    pub fn post_a(&mut self, wrs: &[SendWr]) {
        let wrs = self.for_b(wrs);
        self.a.hca.post_send(self.a.qpn, &wrs).unwrap();
    }

    /// `wrs` as A posts them: on an XRC pair, each names B's SRQ; on an RD pair, each without
    /// an RD destination goes through A's EE context to B's RD QP with its Q_Key.
    pub fn for_b(&self, wrs: &[SendWr]) -> Vec<SendWr> {
        let srqn = self.b_srqn();
        wrs.iter()
            .map(|w| match (srqn, self.a.eecn) {
                (Some(n), _) => w.clone().with_xrc_srqn(n),
                (None, Some(e)) if w.rd.is_none() => w.clone().with_rd(e, self.b.qpn, RD_QKEY),
                _ => w.clone(),
            })
            .collect()
    }

    /// `wrs` as B posts them towards A (on RD through B's EE context to A's RD QP).
    pub fn for_a(&self, wrs: &[SendWr]) -> Vec<SendWr> {
        wrs.iter()
            .map(|w| match self.b.eecn {
                Some(e) if w.rd.is_none() => w.clone().with_rd(e, self.a.qpn, RD_QKEY),
                _ => w.clone(),
            })
            .collect()
    }

    /// Posts send WRs on B, towards A.
    pub fn post_b(&mut self, wrs: &[SendWr]) {
        let wrs = self.for_a(wrs);
        self.b.hca.post_send(self.b.qpn, &wrs).unwrap();
    }

    /// A's requester next PSN and B's expected PSN (on RD, of the EE contexts).
    pub fn sq_psn_a(&self) -> u32 {
        self.a.conn_attr().sq_psn.value()
    }
    pub fn rq_psn_b(&self) -> u32 {
        self.b.conn_attr().rq_psn.value()
    }
}

impl Side {
    /// The attributes of the side's connection: its QP's, or on RD its EE context's.
    pub fn conn_attr(&self) -> QpAttr {
        match self.eecn {
            Some(e) => self.hca.query_eec(e).unwrap(),
            None => self.hca.query_qp(self.qpn).unwrap(),
        }
    }

    /// The state of the side's connection (on RD, its EE context's).
    pub fn conn_state(&self) -> QpState {
        self.conn_attr().qp_state
    }

    /// Modifies the side's connection: its QP, or on RD its EE context.
    pub fn modify_conn(
        &mut self,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), softib_core::error::ModifyQpError> {
        match self.eecn {
            Some(e) => self.hca.modify_eec(e, attr, mask),
            None => self.hca.modify_qp(self.qpn, attr, mask),
        }
    }

    /// Creates an RD QP of `rdd` on the side (PD `pd`, CQ `cq` for both queues) with Q_Key
    /// `qkey` and every remote access, and brings it to RTS.
    pub fn rd_qp(&mut self, pd: PdHandle, rdd: RddHandle, cq: CqHandle, qkey: u32) -> Qpn {
        let cap = QpCap {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        };
        let qpn = self
            .hca
            .create_rd_qp(pd, rdd, &QpInitAttr::new(QpType::Rd, cq, cap))
            .unwrap();
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey,
            qp_access_flags: ConnectOptions::default().access,
            ..QpAttr::default()
        };
        let mask = QpAttrMask::STATE
            | QpAttrMask::PORT
            | QpAttrMask::PKEY_INDEX
            | QpAttrMask::QKEY
            | QpAttrMask::ACCESS_FLAGS;
        self.hca.modify_qp(qpn, &init, mask).unwrap();
        for state in [QpState::Rtr, QpState::Rts] {
            self.hca
                .modify_qp(qpn, &QpAttr::to_state(state), QpAttrMask::STATE)
                .unwrap();
        }
        qpn
    }

    /// Posts a receive of `len` bytes at byte `offset` of the side's region.
    pub fn post_recv(&mut self, wr_id: u64, offset: u64, len: u32) {
        let sge = Sge {
            addr: self.mr.addr + offset,
            length: len,
            lkey: self.mr.lkey,
        };
        self.post_recv_wrs(&[RecvWr::new(wr_id, vec![sge])]);
    }

    /// Posts receive WRs on the side's QP, or on its XRC SRQ.
    pub fn post_recv_wrs(&mut self, wrs: &[RecvWr]) {
        match self.srq {
            Some(srq) => self.hca.post_srq_recv(srq, wrs).unwrap(),
            None => self.hca.post_recv(self.qpn, wrs).unwrap(),
        }
    }

    /// Every completion queued on the side's CQ (taken).
    pub fn wcs(&mut self) -> Vec<WorkCompletion> {
        self.hca.poll_cq(self.cq, 4096).unwrap()
    }

    /// (wr_id, status) of every completion queued on the side's CQ (taken).
    pub fn done(&mut self) -> Vec<(u64, WcStatus)> {
        self.wcs().iter().map(|w| (w.wr_id, w.status)).collect()
    }

    /// Bytes `[offset, offset + len)` of the side's region.
    pub fn mem(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.hca.mr_read(self.mr.handle, offset, &mut v).unwrap();
        v
    }
}
