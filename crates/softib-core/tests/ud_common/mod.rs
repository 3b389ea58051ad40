//! A small Ethernet for UD tests: N HCAs on one switch that delivers a frame to the node whose
//! MAC is the destination and copies multicast frames (I/G bit set) to every other node, as
//! the simulator's fabric does. Virtual time does not move (UD has no timers).

#![allow(dead_code)]

use softib_core::time::Instant;
use softib_core::verbs::ah::AhAttr;
use softib_core::verbs::cq::WorkCompletion;
use softib_core::verbs::device::GidEntry;
use softib_core::verbs::mr::MrInfo;
use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
use softib_core::verbs::types::{AccessFlags, Gid, GidType, Mtu, QpState, QpType};
use softib_core::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};
use softib_core::verbs::{AhHandle, CqHandle, PdHandle};
use softib_core::{gid_of_ipv4, mac_for_gid, Hca, HcaConfig};
use softib_wire::{Psn, Qpn};

/// Bytes of each node's memory region.
pub const MR_LEN: usize = 1 << 20;
/// Q_Key the QPs of [`Net::ud_qp`] hold unless told otherwise.
pub const QKEY: u32 = 0x1111_2222;

pub struct Node {
    pub hca: Hca,
    pub pd: PdHandle,
    pub cq: CqHandle,
    pub mr: MrInfo,
    /// The node's GID (index `sgid_index` of port 1).
    pub gid: Gid,
    pub sgid_index: u8,
}

/// Decides what happens to a frame: `0` drops it, `n` delivers it `n` times.
pub type Filter = Box<dyn FnMut(&[u8]) -> usize>;

pub struct Net {
    pub nodes: Vec<Node>,
    pub now: Instant,
    /// Every frame put on the wire (before the filter), with its sending node.
    pub wire: Vec<(usize, Vec<u8>)>,
    pub filter: Filter,
}

fn node(id: u32, v6: bool, mtu: Mtu) -> Node {
    let mut cfg = HcaConfig::new(id);
    cfg.ports[0].active_mtu = mtu;
    cfg.ports[0].max_mtu = Mtu::Mtu4096;
    let (gid, sgid_index) = if v6 {
        // Index 0 holds the link-local GID derived from the port GUID (modified EUI-64).
        (cfg.ports[0].gids[0].gid, 0)
    } else {
        let gid = gid_of_ipv4([10, 0, 0, id as u8]);
        cfg.ports[0].gids.push(GidEntry {
            gid,
            gid_type: GidType::RoceV2,
        });
        (gid, 1)
    };
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(4096).unwrap();
    let mr = hca
        .reg_mr(pd, vec![0u8; MR_LEN], AccessFlags::LOCAL_WRITE, None)
        .unwrap();
    Node {
        hca,
        pd,
        cq,
        mr,
        gid,
        sgid_index,
    }
}

impl Net {
    /// `n` nodes with IPv4 GIDs 10.0.0.1.. and active MTU 1024.
    pub fn new(n: usize) -> Net {
        Net::build(n, false, Mtu::Mtu1024)
    }

    /// `n` nodes addressed by IPv6 link-local GIDs.
    pub fn new_v6(n: usize) -> Net {
        Net::build(n, true, Mtu::Mtu1024)
    }

    pub fn build(n: usize, v6: bool, mtu: Mtu) -> Net {
        Net {
            nodes: (1..=n as u32).map(|i| node(i, v6, mtu)).collect(),
            now: Instant::ZERO,
            wire: Vec::new(),
            filter: Box::new(|_| 1),
        }
    }

    /// A UD QP on `node` in RTS with Q_Key `qkey` and first PSN `sq_psn`.
    pub fn ud_qp_psn(&mut self, node: usize, qkey: u32, sq_psn: u32) -> Qpn {
        let n = &mut self.nodes[node];
        let init = QpInitAttr::new(QpType::Ud, n.cq, cap());
        let qpn = n.hca.create_qp(n.pd, &init).unwrap();
        bring_up(&mut n.hca, qpn, qkey, sq_psn);
        qpn
    }

    /// A UD QP on `node` in RTS with Q_Key `qkey`.
    pub fn ud_qp(&mut self, node: usize, qkey: u32) -> Qpn {
        self.ud_qp_psn(node, qkey, 0)
    }

    /// QP1 on `node`, in RTS (its own Q_Key set to `qkey`, which QP1 ignores).
    pub fn gsi_qp(&mut self, node: usize, qkey: u32) -> Qpn {
        let n = &mut self.nodes[node];
        let init = QpInitAttr::new(QpType::Ud, n.cq, cap());
        let qpn = n.hca.create_gsi_qp(n.pd, &init).unwrap();
        bring_up(&mut n.hca, qpn, qkey, 0);
        qpn
    }

    /// An AH on `from` that reaches GID `gid`.
    pub fn ah_gid(&mut self, from: usize, gid: Gid) -> AhHandle {
        let n = &mut self.nodes[from];
        let attr = AhAttr::global(1, gid, n.sgid_index);
        n.hca.create_ah(n.pd, &attr).unwrap()
    }

    /// An AH on `from` that reaches node `to`.
    pub fn ah(&mut self, from: usize, to: usize) -> AhHandle {
        let gid = self.nodes[to].gid;
        self.ah_gid(from, gid)
    }

    /// Posts a receive of `len` bytes at `offset` of the node's region.
    pub fn post_recv(&mut self, node: usize, qpn: Qpn, wr_id: u64, offset: u64, len: u32) {
        let n = &mut self.nodes[node];
        let sge = Sge::new(n.mr.addr + offset, len, n.mr.lkey);
        n.hca
            .post_recv(qpn, &[RecvWr::new(wr_id, vec![sge])])
            .unwrap();
    }

    /// Writes `data` at `offset` of the node's region and posts a signaled UD SEND of it.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        node: usize,
        qpn: Qpn,
        ah: AhHandle,
        dest: Qpn,
        qkey: u32,
        wr_id: u64,
        offset: u64,
        data: &[u8],
    ) {
        self.send_op(
            node,
            qpn,
            ah,
            dest,
            qkey,
            wr_id,
            offset,
            data,
            WrOpcode::Send,
        );
    }

    /// [`Net::send`] with an explicit opcode (SEND or SEND with immediate).
    #[allow(clippy::too_many_arguments)]
    pub fn send_op(
        &mut self,
        node: usize,
        qpn: Qpn,
        ah: AhHandle,
        dest: Qpn,
        qkey: u32,
        wr_id: u64,
        offset: u64,
        data: &[u8],
        op: WrOpcode,
    ) {
        let n = &mut self.nodes[node];
        n.hca.mr_write(n.mr.handle, offset as usize, data).unwrap();
        let sge = Sge::new(n.mr.addr + offset, data.len() as u32, n.mr.lkey);
        let wr = SendWr::new(wr_id, op)
            .with_sge(sge)
            .signaled()
            .with_ud(ah, dest, qkey);
        n.hca.post_send(qpn, &[wr]).unwrap();
    }

    /// Bytes `[offset, offset + len)` of a node's region.
    pub fn read(&self, node: usize, offset: u64, len: usize) -> Vec<u8> {
        let n = &self.nodes[node];
        let mut buf = vec![0u8; len];
        n.hca
            .mr_read(n.mr.handle, offset as usize, &mut buf)
            .unwrap();
        buf
    }

    /// Hands `frame` to every node its destination MAC names (multicast: all but `from`).
    pub fn deliver(&mut self, from: usize, frame: &[u8]) {
        let dst: [u8; 6] = frame[..6].try_into().unwrap();
        let now = self.now;
        for (i, n) in self.nodes.iter_mut().enumerate() {
            let to_me = if dst[0] & 1 != 0 {
                i != from
            } else {
                mac_for_gid(&n.gid) == dst
            };
            if to_me {
                n.hca.handle_frame(now, frame);
            }
        }
    }

    /// Moves frames until no node has anything to send.
    pub fn run(&mut self) {
        let mut buf = Vec::new();
        loop {
            let mut moved = false;
            for from in 0..self.nodes.len() {
                while self.nodes[from].hca.poll_transmit(self.now, &mut buf) {
                    moved = true;
                    self.wire.push((from, buf.clone()));
                    let copies = (self.filter)(&buf);
                    for _ in 0..copies {
                        self.deliver(from, &buf.clone());
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// Every completion queued on the node's CQ.
    pub fn poll(&mut self, node: usize) -> Vec<WorkCompletion> {
        let n = &mut self.nodes[node];
        n.hca.poll_cq(n.cq, usize::MAX).unwrap()
    }
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 256,
        max_recv_wr: 256,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    }
}

/// RESET -> INIT (port 1, P_Key index 0, `qkey`) -> RTR -> RTS (`sq_psn`).
pub fn bring_up(hca: &mut Hca, qpn: Qpn, qkey: u32, sq_psn: u32) {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qkey,
        ..QpAttr::default()
    };
    hca.modify_qp(
        qpn,
        &init,
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::QKEY,
    )
    .unwrap();
    hca.modify_qp(qpn, &QpAttr::to_state(QpState::Rtr), QpAttrMask::STATE)
        .unwrap();
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: Psn::new(sq_psn),
        ..QpAttr::default()
    };
    hca.modify_qp(qpn, &rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
        .unwrap();
}

/// Offset of the BTH in IPv4 frames (Ethernet 14 + IPv4 20 + UDP 8).
pub const BTH_AT: usize = 14 + 20 + 8;

impl Net {
    /// A UD frame from node `from` (IPv4 nodes only) to GID `to`, carrying `headers` (P_Key
    /// 0xFFFF unless set) and `payload` with its natural pad, ICRC correct.
    pub fn frame(
        &self,
        from: usize,
        to: Gid,
        mut headers: softib_wire::transport::TransportHeaders,
        payload: &[u8],
    ) -> Vec<u8> {
        use softib_wire::ethernet::Ethernet;
        use softib_wire::ipv4::Ipv4;
        use softib_wire::roce::{self, IpHeader};
        if headers.bth.pkey == 0 {
            headers.bth.pkey = 0xffff;
        }
        let src = softib_core::ipv4_of(&self.nodes[from].gid).expect("an IPv4 node");
        let dst = softib_core::ipv4_of(&to).expect("an IPv4 destination");
        let eth = Ethernet {
            dst: mac_for_gid(&to),
            src: mac_for_gid(&self.nodes[from].gid),
            ..Ethernet::default()
        };
        let ip = IpHeader::V4(Ipv4 {
            flags: 0b010,
            ttl: 64,
            src,
            dst,
            ..Ipv4::default()
        });
        let t = softib_wire::transport::TransportPacket::new(headers, payload);
        let mut out = vec![0u8; softib_core::MAX_FRAME];
        let n = roce::build(&eth, &ip, 0xC000, &t, &mut out).expect("buildable packet");
        out.truncate(n);
        out
    }
}

/// Headers of a UD SEND Only to `dest` with Q_Key `qkey` from source QP `src`, PSN `psn`.
pub fn ud_headers(
    dest: Qpn,
    qkey: u32,
    src: Qpn,
    psn: u32,
) -> softib_wire::transport::TransportHeaders {
    use softib_wire::bth::Bth;
    use softib_wire::deth::Deth;
    use softib_wire::opcode::Opcode;
    let mut h = softib_wire::transport::TransportHeaders::new(Bth {
        opcode: Opcode::UD_SEND_ONLY,
        dest_qp: dest,
        psn: Psn::new(psn),
        pkey: 0xffff,
        ..Bth::default()
    });
    h.deth = Some(Deth {
        qkey,
        resv8: 0,
        src_qp: src,
    });
    h
}

/// Edits the transport bytes (BTH through pad) of an IPv4 frame and recomputes its ICRC.
pub fn patch_transport(frame: &mut [u8], edit: impl FnOnce(&mut [u8])) {
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let end = 14 + total;
    edit(&mut frame[BTH_AT..end - 4]);
    let crc =
        softib_wire::icrc::roce_v4(&frame[14..34], &frame[34..BTH_AT], &frame[BTH_AT..end - 4]);
    softib_wire::icrc::put(&mut frame[end - 4..end], crc).unwrap();
}

/// The decoded transport headers and payload of a frame an HCA built (ICRC checked).
pub fn decode(frame: &[u8]) -> (softib_wire::transport::TransportHeaders, Vec<u8>) {
    let p = softib_wire::roce::RocePacket::parse(frame).expect("parseable frame");
    assert!(p.icrc_ok());
    (p.transport.headers, p.transport.payload.to_vec())
}
