//! UD over native InfiniBand ports: LRH [GRH] BTH DETH ... ICRC VCRC. The UD checks of
//! `compliance_ud.rs` on the native framing, the GRH area with and without a GRH, the
//! completion's SLID / SL / path bits, and multicast by MGID + MLID.

mod ib;
mod ud_common;

use softib_core::error::McastError;
use softib_core::time::Instant;
use softib_core::transport::Counters;
use softib_core::verbs::ah::AhAttr;
use softib_core::verbs::qp::QpInitAttr;
use softib_core::verbs::types::{AccessFlags, Gid, Mtu, QpType, WcFlags, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};
use softib_core::verbs::AhHandle;
use softib_core::{Hca, HcaConfig, GRH_AREA, MCAST_QPN};
use softib_wire::lrh::Lnh;
use softib_wire::native::{NativeBody, NativePacket};
use softib_wire::Qpn;
use ud_common::{bring_up, QKEY};

/// Byte of the receive buffers before anything is delivered.
const FILL: u8 = 0xA5;
/// The multicast group of the tests: an IPv6 multicast MGID and its MLID.
const MLID: u16 = 0xC001;

fn mgid() -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xff;
    g[1] = 0x12;
    g[2] = 0x40;
    g[3] = 0x1b;
    g[15] = 0x07;
    Gid(g)
}

/// N native IB nodes on one switch: LIDs 1..=N (node i has base LID i + 1 << lmc, see
/// [`Net::new`]), unicast DLIDs to the node whose LID range holds them, multicast DLIDs to
/// every other node (the HCAs filter), the permissive LID to nobody.
struct Net {
    nodes: Vec<ib::Node>,
    now: Instant,
    /// Every packet put on the wire, with its sending node.
    wire: Vec<(usize, Vec<u8>)>,
}

impl Net {
    /// `n` nodes with active MTU 1024; node i (0-based) has base LID `(i + 1) << lmc` and LMC
    /// `lmc`.
    fn new(n: usize, lmc: u8) -> Net {
        let nodes = (0..n)
            .map(|i| {
                let mut cfg = HcaConfig::infiniband(i as u32 + 1);
                cfg.ports[0].active_mtu = Mtu::Mtu1024;
                cfg.ports[0].lid = ((i + 1) as u16) << lmc;
                cfg.ports[0].lmc = lmc;
                let mut hca = Hca::new(cfg);
                let pd = hca.alloc_pd().unwrap();
                let cq = hca.create_cq(4096).unwrap();
                let mr = hca
                    .reg_mr(pd, vec![FILL; ib::MR_LEN], AccessFlags::LOCAL_WRITE, None)
                    .unwrap();
                ib::Node { hca, pd, cq, mr }
            })
            .collect();
        Net {
            nodes,
            now: Instant::ZERO,
            wire: Vec::new(),
        }
    }

    fn lid(&self, node: usize) -> u16 {
        self.nodes[node].hca.query_port(1).unwrap().lid
    }

    fn gid(&self, node: usize) -> Gid {
        self.nodes[node].hca.query_port(1).unwrap().gids[0].gid
    }

    fn ud_qp(&mut self, node: usize) -> Qpn {
        let n = &mut self.nodes[node];
        let init = QpInitAttr::new(QpType::Ud, n.cq, ib::cap());
        let qpn = n.hca.create_qp(n.pd, &init).unwrap();
        bring_up(&mut n.hca, qpn, QKEY, 0);
        qpn
    }

    fn ah(&mut self, node: usize, attr: &AhAttr) -> AhHandle {
        let n = &mut self.nodes[node];
        n.hca.create_ah(n.pd, attr).unwrap()
    }

    fn post_recv(&mut self, node: usize, qpn: Qpn, wr_id: u64, offset: u64, len: u32) {
        let n = &mut self.nodes[node];
        let sge = Sge::new(n.mr.addr + offset, len, n.mr.lkey);
        n.hca
            .post_recv(qpn, &[RecvWr::new(wr_id, vec![sge])])
            .unwrap();
    }

    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        node: usize,
        qpn: Qpn,
        ah: AhHandle,
        dest: Qpn,
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
            .with_ud(ah, dest, QKEY);
        n.hca.post_send(qpn, &[wr]).unwrap();
    }

    fn read(&self, node: usize, offset: u64, len: usize) -> Vec<u8> {
        let n = &self.nodes[node];
        let mut buf = vec![0u8; len];
        n.hca
            .mr_read(n.mr.handle, offset as usize, &mut buf)
            .unwrap();
        buf
    }

    fn deliver(&mut self, from: usize, frame: &[u8]) {
        let dlid = u16::from_be_bytes([frame[2], frame[3]]);
        let now = self.now;
        for i in 0..self.nodes.len() {
            let port = self.nodes[i].hca.query_port(1).unwrap();
            let to_me = if (0xC000..0xFFFF).contains(&dlid) {
                i != from
            } else {
                dlid >> port.lmc == port.lid >> port.lmc
            };
            if to_me {
                self.nodes[i].hca.handle_frame(now, frame);
            }
        }
    }

    fn run(&mut self) {
        let mut buf = Vec::new();
        loop {
            let mut moved = false;
            for from in 0..self.nodes.len() {
                while self.nodes[from].hca.poll_transmit(self.now, &mut buf) {
                    moved = true;
                    self.wire.push((from, buf.clone()));
                    let f = buf.clone();
                    self.deliver(from, &f);
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn poll(&mut self, node: usize) -> Vec<softib_core::verbs::cq::WorkCompletion> {
        ib::drain(&mut self.nodes[node])
    }

    fn counters(&self, node: usize) -> Counters {
        *self.nodes[node].hca.counters()
    }

    /// Hands `frame` to node 1 and checks it was dropped for `reason` alone: the named counter
    /// grew by one and no other drop counter moved, nothing completed, nothing was sent back
    /// and the receive queue of `qpn` is unchanged.
    fn assert_dropped(&mut self, qpn: Qpn, frame: &[u8], reason: &str) {
        let before = self.counters(1).named();
        let rq = self.nodes[1].hca.qp(qpn).unwrap().recv_queue().len();
        let now = self.now;
        self.nodes[1].hca.handle_frame(now, frame);
        let after = self.counters(1).named();
        let moved: Vec<_> = before
            .iter()
            .zip(after.iter())
            .filter(|(b, a)| a.1 != b.1)
            .map(|(b, a)| (a.0, a.1 - b.1))
            .collect();
        assert_eq!(moved, vec![(reason, 1)], "counters that moved");
        assert!(self.poll(1).is_empty(), "a silent drop completes nothing");
        let mut out = Vec::new();
        assert!(!self.nodes[1].hca.poll_transmit(now, &mut out));
        assert_eq!(self.nodes[1].hca.qp(qpn).unwrap().recv_queue().len(), rq);
    }
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

/// Two nodes, a UD QP on each, a LID-routed AH from node 0 to node 1 with SL 5.
fn pair() -> (Net, Qpn, Qpn, AhHandle) {
    let mut net = Net::new(2, 0);
    let a = net.ud_qp(0);
    let b = net.ud_qp(1);
    let mut av = AhAttr::local(1, net.lid(1));
    av.sl = 5;
    let ah = net.ah(0, &av);
    (net, a, b, ah)
}

/// Sends one datagram of `len` bytes from A to B and returns the packet on the wire.
fn one_packet(net: &mut Net, a: Qpn, b: Qpn, ah: AhHandle, len: usize) -> Vec<u8> {
    net.send(0, a, ah, b, 1, 0, &data(len, 3), WrOpcode::Send);
    let mut out = Vec::new();
    assert!(net.nodes[0].hca.poll_transmit(net.now, &mut out));
    out
}

/// Re-seals a native packet after an edit of its bytes: ICRC (IBA packets) and VCRC from
/// LRH:PktLen.
fn reseal(frame: &mut Vec<u8>) {
    let covered = usize::from(u16::from_be_bytes([frame[4], frame[5]]) & 0x7FF) * 4;
    frame.truncate(covered + 2);
    let global = frame[1] & 0x3 == 0b11;
    let grh_end = if global { 8 + 40 } else { 8 };
    let icrc_at = covered - 4;
    let grh = global.then(|| frame[8..48].to_vec());
    let crc = softib_wire::icrc::native(grh.as_deref(), &frame[grh_end..icrc_at]);
    softib_wire::icrc::put(&mut frame[icrc_at..covered], crc).unwrap();
    let v = softib_wire::vcrc::compute(&frame[..covered]);
    softib_wire::vcrc::put(&mut frame[covered..], v).unwrap();
}

// ----- delivery and the GRH area -----------------------------------------------------------

#[test]
fn c9_201_ud_native_lid_routed_send_leaves_grh_area_untouched() {
    let (mut net, a, b, ah) = pair();
    net.post_recv(1, b, 7, 0, 256);
    let d = data(100, 1);
    net.send(
        0,
        a,
        ah,
        b,
        1,
        0x8000,
        &d,
        WrOpcode::SendWithImm(0x1234_5678),
    );
    net.run();
    assert_eq!(net.wire.len(), 1);
    let p = NativePacket::parse_verified(&net.wire[0].1).unwrap();
    assert_eq!(p.lrh.lnh, Lnh::IbaLocal, "an AH without GRH: LNH 0b10");
    assert_eq!((p.lrh.slid, p.lrh.dlid, p.lrh.sl), (1, 2, 5));
    assert!(matches!(p.body, NativeBody::Iba { grh: None, .. }));
    let wa = net.poll(0);
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::Success));
    let wb = net.poll(1);
    assert_eq!(wb.len(), 1);
    let wc = &wb[0];
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len, wc.imm_data),
        (
            WcStatus::Success,
            WcOpcode::Recv,
            (GRH_AREA + 100) as u32,
            Some(0x1234_5678)
        )
    );
    assert!(!wc.wc_flags.contains(WcFlags::GRH), "no GRH on the wire");
    assert_eq!((wc.src_qp, wc.slid, wc.sl, wc.dlid_path_bits), (a, 1, 5, 0));
    assert_eq!(wc.network_hdr, None, "native IB: no RoCE network header");
    assert_eq!(net.read(1, 0, GRH_AREA), vec![FILL; GRH_AREA], "untouched");
    assert_eq!(net.read(1, GRH_AREA as u64, 100), d);
}

#[test]
fn c9_201_ud_native_global_send_copies_the_grh() {
    let mut net = Net::new(2, 0);
    let a = net.ud_qp(0);
    let b = net.ud_qp(1);
    let mut av = AhAttr::global(1, net.gid(1), 0);
    av.dlid = net.lid(1);
    if let Some(g) = av.grh.as_mut() {
        g.flow_label = 0x1_2345;
        g.traffic_class = 0x28;
        g.hop_limit = 9;
    }
    let ah = net.ah(0, &av);
    net.post_recv(1, b, 7, 0, 256);
    let d = data(64, 2);
    net.send(0, a, ah, b, 1, 0x8000, &d, WrOpcode::Send);
    net.run();
    let frame = net.wire[0].1.clone();
    let p = NativePacket::parse_verified(&frame).unwrap();
    assert_eq!(p.lrh.lnh, Lnh::IbaGlobal, "an AH with GRH: LNH 0b11");
    let wc = net.poll(1);
    assert!(wc[0].wc_flags.contains(WcFlags::GRH));
    assert_eq!(wc[0].byte_len, 104);
    assert_eq!(
        net.read(1, 0, GRH_AREA),
        frame[8..48].to_vec(),
        "the GRH as received"
    );
    let area = net.read(1, 0, GRH_AREA);
    assert_eq!(&area[8..24], &net.gid(0).0, "source GID");
    assert_eq!(&area[24..40], &net.gid(1).0, "destination GID");
    assert_eq!(net.read(1, GRH_AREA as u64, 64), d);
}

#[test]
fn ud_native_completion_reports_dlid_path_bits() {
    // LMC 2: node 1 owns LIDs 8..=11; the AH aims at 11 (path bits 3) from source path bits 2.
    let mut net = Net::new(2, 2);
    let a = net.ud_qp(0);
    let b = net.ud_qp(1);
    let mut av = AhAttr::local(1, net.lid(1) + 3);
    av.src_path_bits = 2;
    let ah = net.ah(0, &av);
    net.post_recv(1, b, 1, 0, 128);
    net.send(0, a, ah, b, 1, 0x8000, &[9; 8], WrOpcode::Send);
    net.run();
    let wc = net.poll(1);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].slid, wc[0].dlid_path_bits), (4 + 2, 3));
}

// ----- the UD checks on the native framing --------------------------------------------------

#[test]
fn c9_205_ud_native_pkt_len_mismatch_dropped_next_delivered() {
    let (mut net, a, b, ah) = pair();
    net.post_recv(1, b, 1, 0, 256);
    let good = one_packet(&mut net, a, b, ah, 32);
    // LRH:PktLen one word short of the packet (VCRC resealed over what it claims): dropped.
    let mut short = good.clone();
    let words = u16::from_be_bytes([short[4], short[5]]) - 1;
    short[4..6].copy_from_slice(&words.to_be_bytes());
    let v = softib_wire::vcrc::compute(&short[..good.len() - 2]);
    let n = short.len();
    softib_wire::vcrc::put(&mut short[n - 2..], v).unwrap();
    net.assert_dropped(b, &short, "bad_pkt_len");
    // The receive WQE is still there for the intact packet.
    let now = net.now;
    net.nodes[1].hca.handle_frame(now, &good);
    let wc = net.poll(1);
    assert_eq!((wc[0].wr_id, wc[0].byte_len), (1, 72));
}

#[test]
fn c9_205_ud_native_payload_above_pmtu_or_buffer_dropped() {
    let (mut net, a, b, ah) = pair();
    // 40 + 100 bytes do not fit a 120-byte buffer.
    net.post_recv(1, b, 1, 0, 120);
    let f = one_packet(&mut net, a, b, ah, 100);
    net.assert_dropped(b, &f, "ud_bad_length");
    // A payload above the path MTU (1024): built by hand, the requester refuses it (C9-200).
    let mut big = f.clone();
    let body_at = 8 + 12 + 8;
    let extra = vec![0x5Au8; 1024];
    big.splice(body_at..body_at, extra);
    let words = (big.len() - 2) / 4;
    big[4..6].copy_from_slice(&(words as u16).to_be_bytes());
    reseal(&mut big);
    assert!(NativePacket::parse_verified(&big).is_ok());
    net.assert_dropped(b, &big, "ud_bad_length");
}

#[test]
fn c9_206_ud_native_reserved_opcode_dropped() {
    let (mut net, a, b, ah) = pair();
    net.post_recv(1, b, 1, 0, 256);
    let f = one_packet(&mut net, a, b, ah, 16);
    for op in [0x66u8, 0x7F] {
        let mut bad = f.clone();
        bad[8] = op;
        reseal(&mut bad);
        net.assert_dropped(b, &bad, "ud_bad_opcode");
    }
}

#[test]
fn c9_207_ud_native_send_without_receive_wqe_dropped() {
    let (mut net, a, b, ah) = pair();
    let f = one_packet(&mut net, a, b, ah, 16);
    net.assert_dropped(b, &f, "ud_no_recv_wqe");
}

#[test]
fn c9_165_ud_native_bad_pkey_qkey_and_crcs_dropped() {
    let (mut net, a, b, ah) = pair();
    net.post_recv(1, b, 1, 0, 256);
    let f = one_packet(&mut net, a, b, ah, 16);
    // BTH:P_Key at transport byte 2, DETH:Q_Key at transport byte 12.
    let mut pkey = f.clone();
    pkey[8 + 2..8 + 4].copy_from_slice(&0x7001u16.to_be_bytes());
    reseal(&mut pkey);
    net.assert_dropped(b, &pkey, "bad_pkey");
    let mut qkey = f.clone();
    qkey[8 + 12..8 + 16].copy_from_slice(&0x0BAD_0BADu32.to_be_bytes());
    reseal(&mut qkey);
    net.assert_dropped(b, &qkey, "qkey_violation");
    let mut icrc = f.clone();
    let n = icrc.len();
    icrc[n - 6] ^= 1;
    let v = softib_wire::vcrc::compute(&icrc[..n - 2]);
    softib_wire::vcrc::put(&mut icrc[n - 2..], v).unwrap();
    net.assert_dropped(b, &icrc, "icrc_err");
    let mut vcrc = f.clone();
    vcrc[n - 1] ^= 1;
    net.assert_dropped(b, &vcrc, "vcrc_err");
    // A DLID that is not the port's.
    let mut dlid = f.clone();
    dlid[2..4].copy_from_slice(&7u16.to_be_bytes());
    reseal(&mut dlid);
    net.assert_dropped(b, &dlid, "wrong_dlid");
    // The original still goes through.
    let now = net.now;
    net.nodes[1].hca.handle_frame(now, &f);
    assert_eq!(net.poll(1).len(), 1);
}

#[test]
fn ud_native_permissive_dlid_delivered() {
    let (mut net, a, b, ah) = pair();
    net.post_recv(1, b, 1, 0, 256);
    let mut f = one_packet(&mut net, a, b, ah, 16);
    f[2..4].copy_from_slice(&0xFFFFu16.to_be_bytes());
    reseal(&mut f);
    let now = net.now;
    net.nodes[1].hca.handle_frame(now, &f);
    let wc = net.poll(1);
    assert_eq!((wc.len(), wc[0].dlid_path_bits), (1, 0));
}

// ----- multicast: MGID in the GRH, MLID in LRH:DLID ----------------------------------------

/// A multicast AH on `node`: global towards the MGID, DLID = the MLID.
fn mcast_ah(net: &mut Net, node: usize, mlid: u16) -> AhHandle {
    let mut av = AhAttr::global(1, mgid(), 0);
    av.dlid = mlid;
    net.ah(node, &av)
}

#[test]
fn ud_native_multicast_to_members_on_two_hcas() {
    let mut net = Net::new(3, 0);
    let sender = net.ud_qp(0);
    let m0 = net.ud_qp(0);
    let m1 = net.ud_qp(1);
    let m2 = net.ud_qp(1);
    let outsider = net.ud_qp(2);
    for (node, q) in [(0, m0), (1, m1), (1, m2)] {
        net.nodes[node].hca.attach_mcast(q, mgid(), MLID).unwrap();
        let at = 4096 * u64::from(q.value());
        net.post_recv(node, q, u64::from(q.value()), at, 256);
        net.post_recv(node, q, 1000 + u64::from(q.value()), at + 1024, 256);
    }
    net.post_recv(2, outsider, 1, 0, 256);
    let ah = mcast_ah(&mut net, 0, MLID);
    let d = data(200, 5);
    let mcast = Qpn::new(MCAST_QPN);
    net.send(0, sender, ah, mcast, 9, 0x8_0000, &d, WrOpcode::Send);
    net.run();
    assert_eq!(net.wire.len(), 1);
    let frame = net.wire[0].1.clone();
    let p = NativePacket::parse_verified(&frame).unwrap();
    assert_eq!((p.lrh.lnh, p.lrh.dlid), (Lnh::IbaGlobal, MLID));
    let recv0: Vec<_> = net
        .poll(0)
        .into_iter()
        .filter(|w| w.opcode == WcOpcode::Recv)
        .collect();
    assert_eq!(
        recv0.len(),
        1,
        "the local member; the sender is not attached"
    );
    assert_eq!((recv0[0].qp_num, recv0[0].src_qp), (m0, sender));
    let mut got: Vec<Qpn> = net.poll(1).iter().map(|w| w.qp_num).collect();
    got.sort();
    assert_eq!(got, vec![m1, m2]);
    for q in [m1, m2] {
        let at = 4096 * u64::from(q.value());
        assert_eq!(net.read(1, at, GRH_AREA), frame[8..48].to_vec());
        assert_eq!(net.read(1, at + GRH_AREA as u64, 200), d);
    }
    // Node 2 has no member: the MLID is not its address.
    assert!(net.poll(2).is_empty());
    assert_eq!(net.counters(2).wrong_dlid, 1);
    // m1 detaches: node 1 still takes the MLID for m2 alone. Once m2 detaches too, the MLID
    // is no longer the port's.
    net.nodes[1].hca.detach_mcast(m1, mgid(), MLID).unwrap();
    net.send(0, sender, ah, mcast, 10, 0x8_0000, &d, WrOpcode::Send);
    net.run();
    let got: Vec<Qpn> = net.poll(1).iter().map(|w| w.qp_num).collect();
    assert_eq!(got, vec![m2]);
    net.nodes[1].hca.detach_mcast(m2, mgid(), MLID).unwrap();
    let before = net.counters(1).wrong_dlid;
    net.send(0, sender, ah, mcast, 11, 0x8_0000, &d, WrOpcode::Send);
    net.run();
    assert!(net.poll(1).is_empty());
    assert_eq!(net.counters(1).wrong_dlid, before + 1);
}

#[test]
fn ud_native_multicast_needs_mgid_and_mlid() {
    let mut net = Net::new(2, 0);
    let a = net.ud_qp(0);
    let b = net.ud_qp(1);
    net.nodes[1].hca.attach_mcast(b, mgid(), MLID).unwrap();
    net.post_recv(1, b, 1, 0, 256);
    let mcast = Qpn::new(MCAST_QPN);
    // The MLID without a GRH: no MGID names the group.
    let lid_only = net.ah(0, &AhAttr::local(1, MLID));
    net.send(0, a, lid_only, mcast, 1, 0, &[1; 8], WrOpcode::Send);
    let mut f = Vec::new();
    assert!(net.nodes[0].hca.poll_transmit(net.now, &mut f));
    net.assert_dropped(b, &f, "mcast_bad_dest");
    // A unicast DQPN to the MLID.
    let ah = mcast_ah(&mut net, 0, MLID);
    net.send(0, a, ah, b, 2, 0, &[1; 8], WrOpcode::Send);
    assert!(net.nodes[0].hca.poll_transmit(net.now, &mut f));
    net.assert_dropped(b, &f, "mcast_bad_dest");
    // DQPN 0xFFFFFF to the port's unicast LID.
    let mut av = AhAttr::global(1, mgid(), 0);
    av.dlid = net.lid(1);
    let unicast = net.ah(0, &av);
    net.send(0, a, unicast, mcast, 3, 0, &[1; 8], WrOpcode::Send);
    assert!(net.nodes[0].hca.poll_transmit(net.now, &mut f));
    net.assert_dropped(b, &f, "mcast_bad_dest");
    // The MGID under the MLID of another local group: no member of (MGID, that MLID).
    let mut other = mgid();
    other.0[15] = 0x08;
    net.nodes[1].hca.attach_mcast(b, other, 0xC002).unwrap();
    let ah = mcast_ah(&mut net, 0, 0xC002);
    net.send(0, a, ah, mcast, 4, 0, &[1; 8], WrOpcode::Send);
    assert!(net.nodes[0].hca.poll_transmit(net.now, &mut f));
    net.assert_dropped(b, &f, "mcast_no_member");
    // Both right: delivered.
    let ah = mcast_ah(&mut net, 0, MLID);
    net.send(0, a, ah, mcast, 5, 0, &[1; 8], WrOpcode::Send);
    assert!(net.nodes[0].hca.poll_transmit(net.now, &mut f));
    let now = net.now;
    net.nodes[1].hca.handle_frame(now, &f);
    assert_eq!(net.poll(1).len(), 1);
}

#[test]
fn ud_native_sender_attached_gets_its_own_copy() {
    let mut net = Net::new(2, 0);
    let a = net.ud_qp(0);
    net.nodes[0].hca.attach_mcast(a, mgid(), MLID).unwrap();
    net.post_recv(0, a, 77, 0, 256);
    let ah = mcast_ah(&mut net, 0, MLID);
    net.send(
        0,
        a,
        ah,
        Qpn::new(MCAST_QPN),
        1,
        0x8000,
        &[4; 12],
        WrOpcode::Send,
    );
    net.run();
    let wc = net.poll(0);
    let recv: Vec<_> = wc.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
    assert_eq!(recv.len(), 1);
    assert_eq!((recv[0].wr_id, recv[0].src_qp, recv[0].slid), (77, a, 1));
}

#[test]
fn ud_native_attach_records_one_mlid_per_mgid() {
    let mut net = Net::new(1, 0);
    let a = net.ud_qp(0);
    let b = net.ud_qp(0);
    let hca = &mut net.nodes[0].hca;
    assert_eq!(
        hca.attach_mcast(a, mgid(), 0x0005),
        Err(McastError::NotMulticastLid(0x0005))
    );
    assert_eq!(
        hca.attach_mcast(a, mgid(), 0xFFFF),
        Err(McastError::NotMulticastLid(0xFFFF))
    );
    hca.attach_mcast(a, mgid(), MLID).unwrap();
    assert_eq!(
        hca.attach_mcast(b, mgid(), 0xC00F),
        Err(McastError::MlidMismatch {
            gid: mgid(),
            mlid: MLID,
            lid: 0xC00F
        })
    );
    assert_eq!(
        hca.detach_mcast(a, mgid(), 0xC00F),
        Err(McastError::MlidMismatch {
            gid: mgid(),
            mlid: MLID,
            lid: 0xC00F
        })
    );
    assert_eq!(hca.mcast_members(mgid()), vec![a]);
    hca.detach_mcast(a, mgid(), MLID).unwrap();
    // The group is gone: another MLID may be used for it now.
    hca.attach_mcast(b, mgid(), 0xC00F).unwrap();
    assert_eq!(hca.mcast_members(mgid()), vec![b]);
}
