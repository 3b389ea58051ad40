//! Compliance tests of the Unreliable Datagram service (IBA 9.8.3, and the UD half of the
//! UC+UD statements of 9.8.1), plus Q_Key, GRH placement, multicast and QP1.

mod ud_common;

use softib_core::error::{CreateQpError, McastError, PostSendError};
use softib_core::transport::Counters;
use softib_core::verbs::cq::NetworkHdr;
use softib_core::verbs::qp::{QpCap, QpInitAttr};
use softib_core::verbs::types::{
    Gid, Mtu, QpState, QpType, SendFlags, WcFlags, WcOpcode, WcStatus,
};
use softib_core::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};
use softib_core::verbs::AhHandle;
use softib_core::{gid_of_ipv4, GRH_AREA, GSI_QKEY, MCAST_QPN};
use softib_wire::bth::Bth;
use softib_wire::opcode::Opcode;
use softib_wire::reth::Reth;
use softib_wire::transport::TransportHeaders;
use softib_wire::{Psn, Qpn};
use ud_common::*;

/// Two IPv4 nodes with one UD QP each (Q_Key [`QKEY`]) and an AH from node 0 to node 1.
fn pair() -> (Net, Qpn, Qpn, AhHandle) {
    let mut net = Net::new(2);
    let a = net.ud_qp(0, QKEY);
    let b = net.ud_qp(1, QKEY);
    let ah = net.ah(0, 1);
    (net, a, b, ah)
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

fn counters(net: &Net, node: usize) -> Counters {
    *net.nodes[node].hca.counters()
}

/// Counters of a node with every silent-drop reason zero except those named.
fn only_drops(c: &Counters) -> Vec<(&'static str, u64)> {
    [
        ("malformed", c.malformed),
        ("icrc_err", c.icrc_err),
        ("no_such_qp", c.no_such_qp),
        ("wrong_service", c.wrong_service),
        ("bad_pkey", c.bad_pkey),
        ("bad_state", c.bad_state),
        ("qkey_violation", c.qkey_violation),
        ("ud_bad_opcode", c.ud_bad_opcode),
        ("ud_bad_length", c.ud_bad_length),
        ("ud_no_recv_wqe", c.ud_no_recv_wqe),
        ("mcast_no_member", c.mcast_no_member),
        ("mcast_bad_dest", c.mcast_bad_dest),
    ]
    .into_iter()
    .filter(|&(_, v)| v != 0)
    .collect()
}

/// Injects `frame` into node 1 and checks that it was dropped for `reason` alone: no
/// completion, nothing sent back, the receive queue of `b` unchanged.
fn assert_dropped(net: &mut Net, b: Qpn, frame: &[u8], reason: &'static str) {
    let before = counters(net, 1);
    let rq = net.nodes[1].hca.qp(b).unwrap().recv_queue().len();
    let now = net.now;
    net.nodes[1].hca.handle_frame(now, frame);
    let after = counters(net, 1);
    let mut diff = after;
    diff.malformed -= before.malformed;
    diff.icrc_err -= before.icrc_err;
    diff.no_such_qp -= before.no_such_qp;
    diff.wrong_service -= before.wrong_service;
    diff.bad_pkey -= before.bad_pkey;
    diff.bad_state -= before.bad_state;
    diff.qkey_violation -= before.qkey_violation;
    diff.ud_bad_opcode -= before.ud_bad_opcode;
    diff.ud_bad_length -= before.ud_bad_length;
    diff.ud_no_recv_wqe -= before.ud_no_recv_wqe;
    diff.mcast_no_member -= before.mcast_no_member;
    diff.mcast_bad_dest -= before.mcast_bad_dest;
    assert_eq!(only_drops(&diff), vec![(reason, 1)]);
    assert_eq!(after.rcvd_pkts, before.rcvd_pkts, "not delivered");
    assert!(net.poll(1).is_empty(), "a silent drop completes nothing");
    let mut out = Vec::new();
    assert!(
        !net.nodes[1].hca.poll_transmit(now, &mut out),
        "nothing is sent back"
    );
    assert_eq!(net.nodes[1].hca.qp(b).unwrap().recv_queue().len(), rq);
}

// ----- 9.8.1: validation of UC and UD requests (UD half) -----------------------------------

#[test]
fn c9_165_ud_bad_icrc_dropped() {
    let (mut net, a, b, _) = pair();
    net.post_recv(1, b, 1, 0, 256);
    let mut f = net.frame(
        0,
        net.nodes[1].gid,
        ud_headers(b, QKEY, a, 0),
        &[1, 2, 3, 4],
    );
    let n = f.len();
    f[n - 1] ^= 0xff;
    assert_dropped(&mut net, b, &f, "icrc_err");
}

#[test]
fn c9_165_ud_unknown_dest_qp_dropped() {
    let (mut net, a, b, _) = pair();
    net.post_recv(1, b, 1, 0, 256);
    let f = net.frame(
        0,
        net.nodes[1].gid,
        ud_headers(Qpn::new(0x77), QKEY, a, 0),
        &[1; 8],
    );
    assert_dropped(&mut net, b, &f, "no_such_qp");
}

#[test]
fn c9_165_ud_bad_pkey_dropped() {
    let (mut net, a, b, _) = pair();
    net.post_recv(1, b, 1, 0, 256);
    let mut h = ud_headers(b, QKEY, a, 0);
    h.bth.pkey = 0x1234;
    let f = net.frame(0, net.nodes[1].gid, h, &[1; 8]);
    assert_dropped(&mut net, b, &f, "bad_pkey");
    // A limited-member key of the same partition is still admitted by the full-member entry.
    let mut h = ud_headers(b, QKEY, a, 0);
    h.bth.pkey = 0x7fff;
    let f = net.frame(0, net.nodes[1].gid, h, &[1; 8]);
    let now = net.now;
    net.nodes[1].hca.handle_frame(now, &f);
    assert_eq!(net.poll(1).len(), 1);
}

#[test]
fn c9_165_ud_qp_in_init_drops() {
    let (mut net, a, _, _) = pair();
    let n = &mut net.nodes[1];
    let init = QpInitAttr::new(
        QpType::Ud,
        n.cq,
        QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
    );
    let c = n.hca.create_qp(n.pd, &init).unwrap();
    let attr = softib_core::verbs::qp::QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qkey: QKEY,
        ..Default::default()
    };
    use softib_core::verbs::qp::QpAttrMask as M;
    n.hca
        .modify_qp(c, &attr, M::STATE | M::PORT | M::PKEY_INDEX | M::QKEY)
        .unwrap();
    net.post_recv(1, c, 1, 0, 256);
    let f = net.frame(0, net.nodes[1].gid, ud_headers(c, QKEY, a, 0), &[1; 8]);
    assert_dropped(&mut net, c, &f, "bad_state");
}

#[test]
fn c9_168_ud_rejects_rdma_write() {
    let (mut net, _, b, _) = pair();
    net.post_recv(1, b, 1, 0, 256);
    let mut h = TransportHeaders::new(Bth {
        opcode: Opcode::RC_RDMA_WRITE_ONLY,
        dest_qp: b,
        pkey: 0xffff,
        ..Bth::default()
    });
    h.reth = Some(Reth {
        va: net.nodes[1].mr.addr,
        rkey: net.nodes[1].mr.rkey,
        dma_len: 8,
    });
    let f = net.frame(0, net.nodes[1].gid, h, &[9; 8]);
    assert_dropped(&mut net, b, &f, "wrong_service");
    assert_eq!(net.read(1, 0, 8), vec![0; 8], "memory untouched");
}

#[test]
fn c9_168_ud_rejects_uc_and_rc_sends() {
    let (mut net, a, b, _) = pair();
    net.post_recv(1, b, 1, 0, 256);
    for op in [Opcode::UC_SEND_ONLY, Opcode::RC_SEND_ONLY] {
        let mut h = ud_headers(b, QKEY, a, 0);
        h.bth.opcode = op;
        h.deth = None;
        let f = net.frame(0, net.nodes[1].gid, h, &[9; 8]);
        assert_dropped(&mut net, b, &f, "wrong_service");
    }
}

#[test]
fn c9_169_ud_no_receive_wqe_or_small_buffer_dropped() {
    let (mut net, a, b, _) = pair();
    let f = net.frame(0, net.nodes[1].gid, ud_headers(b, QKEY, a, 0), &[5; 64]);
    assert_dropped(&mut net, b, &f, "ud_no_recv_wqe");
    // 64 bytes need 40 + 64 bytes of buffer.
    net.post_recv(1, b, 1, 0, 103);
    assert_dropped(&mut net, b, &f, "ud_bad_length");
    net.post_recv(1, b, 2, 4096, 104);
    // The first WQE is still at the head and still too small: the packet is dropped again.
    assert_dropped(&mut net, b, &f, "ud_bad_length");
}

#[test]
fn c9_171_ud_validation_order() {
    let (mut net, a, b, _) = pair();
    // P_Key before Q_Key, Q_Key before opcode / length / resources.
    let mut h = ud_headers(b, 0xdead, a, 0);
    h.bth.pkey = 0x1234;
    let f = net.frame(0, net.nodes[1].gid, h, &[1; 2000]);
    assert_dropped(&mut net, b, &f, "bad_pkey");
    let f = net.frame(0, net.nodes[1].gid, ud_headers(b, 0xdead, a, 0), &[1; 2000]);
    assert_dropped(&mut net, b, &f, "qkey_violation");
    // Length above the PMTU before the receive WQE.
    let f = net.frame(0, net.nodes[1].gid, ud_headers(b, QKEY, a, 0), &[1; 1028]);
    assert_dropped(&mut net, b, &f, "ud_bad_length");
    let f = net.frame(0, net.nodes[1].gid, ud_headers(b, QKEY, a, 0), &[1; 16]);
    assert_dropped(&mut net, b, &f, "ud_no_recv_wqe");
}

// ----- 9.8.3: UD -------------------------------------------------------------------------

#[test]
fn c9_200_ud_message_larger_than_pmtu_refused_at_post() {
    let (mut net, a, b, ah) = pair();
    let n = &mut net.nodes[0];
    let sge = Sge::new(n.mr.addr, 1025, n.mr.lkey);
    let wr = SendWr::new(1, WrOpcode::Send)
        .with_sge(sge)
        .signaled()
        .with_ud(ah, b, QKEY);
    let err = n.hca.post_send(a, &[wr]).unwrap_err();
    assert_eq!(
        err,
        PostSendError::UdMessageTooLong {
            index: 0,
            len: 1025,
            mtu: Mtu::Mtu1024
        }
    );
    assert!(err.to_string().contains("1025") && err.to_string().contains("1024"));
    net.run();
    assert!(net.wire.is_empty(), "nothing on the wire");
    assert!(net.poll(0).is_empty());
    // Exactly one PMTU is one packet.
    net.post_recv(1, b, 7, 0, 1024 + 40);
    let d = data(1024, 3);
    net.send(0, a, ah, b, QKEY, 2, 0, &d);
    net.run();
    assert_eq!(net.wire.len(), 1);
    let wc = net.poll(1);
    assert_eq!(wc[0].byte_len, 1064);
    assert_eq!(net.read(1, 40, 1024), d);
}

#[test]
fn c9_201_ud_send_delivers_message() {
    let (mut net, a, b, ah) = pair();
    net.post_recv(1, b, 77, 0, 200);
    let d = data(100, 1);
    net.send(0, a, ah, b, QKEY, 5, 0, &d);
    net.run();
    let s = net.poll(0);
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].wr_id, s[0].status, s[0].opcode, s[0].byte_len),
        (5, WcStatus::Success, WcOpcode::Send, 100)
    );
    let r = net.poll(1);
    assert_eq!(r.len(), 1);
    let wc = r[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (77, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(wc.byte_len, 140);
    assert_eq!(wc.qp_num, b);
    assert_eq!(wc.src_qp, a);
    assert!(wc.wc_flags.contains(WcFlags::GRH));
    assert!(!wc.wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!((wc.pkey_index, wc.sl), (0, 0));
    assert_eq!(wc.network_hdr, Some(NetworkHdr::Ipv4), "an IPv4 frame");
    assert_eq!(net.read(1, GRH_AREA as u64, 100), d);
    // One SEND Only packet with a DETH; nothing comes back.
    assert_eq!(net.wire.len(), 1);
    let (h, payload) = decode(&net.wire[0].1);
    assert_eq!(h.bth.opcode, Opcode::UD_SEND_ONLY);
    assert_eq!(h.bth.dest_qp, b);
    let deth = h.deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qp), (QKEY, a));
    assert_eq!(payload, d);
    assert_eq!(counters(&net, 1).rcvd_pkts, 1);
}

#[test]
fn c9_202_ud_responder_local_error_completes_in_error() {
    let (mut net, a, b, ah) = pair();
    let n = &mut net.nodes[1];
    let bad = Sge::new(n.mr.addr, 256, n.mr.lkey ^ 0x100);
    n.hca.post_recv(b, &[RecvWr::new(9, vec![bad])]).unwrap();
    net.send(0, a, ah, b, QKEY, 1, 0, &[1; 16]);
    net.run();
    let r = net.poll(1);
    assert_eq!((r[0].wr_id, r[0].status), (9, WcStatus::LocProtErr));
    assert_eq!(net.nodes[1].hca.qp(b).unwrap().state(), QpState::Err);
}

#[test]
fn c9_202_ud_requester_local_error_moves_qp_to_sqe() {
    let (mut net, a, b, ah) = pair();
    let n = &mut net.nodes[0];
    let bad = Sge::new(n.mr.addr, 16, n.mr.lkey ^ 0x100);
    let wr = SendWr::new(1, WrOpcode::Send)
        .with_sge(bad)
        .with_ud(ah, b, QKEY);
    let good = Sge::new(n.mr.addr, 16, n.mr.lkey);
    let wr2 = SendWr::new(2, WrOpcode::Send)
        .with_sge(good)
        .with_ud(ah, b, QKEY);
    n.hca.post_send(a, &[wr, wr2]).unwrap();
    net.run();
    assert!(net.wire.is_empty());
    let s = net.poll(0);
    assert_eq!(
        s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(net.nodes[0].hca.qp(a).unwrap().state(), QpState::Sqe);
}

#[test]
fn c9_203_ud_send_completes_when_handed_to_the_wire() {
    let (mut net, a, b, ah) = pair();
    net.send(0, a, ah, b, QKEY, 1, 0, &[1; 32]);
    assert!(net.poll(0).is_empty(), "not on the wire yet");
    let mut out = Vec::new();
    assert!(net.nodes[0].hca.poll_transmit(net.now, &mut out));
    let s = net.poll(0);
    assert_eq!((s.len(), s[0].status), (1, WcStatus::Success));
    // The receiver never answers, so nothing else is needed for the completion.
    assert!(!net.nodes[0].hca.poll_transmit(net.now, &mut out));
}

#[test]
fn c9_204_ud_psns_consecutive_from_sq_psn() {
    let mut net = Net::new(2);
    let a = net.ud_qp_psn(0, QKEY, 0xFF_FFFE);
    let b = net.ud_qp(1, QKEY);
    let ah = net.ah(0, 1);
    for i in 0..3 {
        net.send(0, a, ah, b, QKEY, i, 64 * i, &[i as u8; 8]);
    }
    net.run();
    let psns: Vec<u32> = net
        .wire
        .iter()
        .map(|(_, f)| decode(f).0.bth.psn.value())
        .collect();
    assert_eq!(psns, vec![0xFF_FFFE, 0xFF_FFFF, 0]);
    let q = net.nodes[0].hca.query_qp(a).unwrap();
    assert_eq!(q.sq_psn, Psn::new(1));
}

#[test]
fn o9_144_ud_random_psns_all_delivered() {
    let (mut net, a, b, _) = pair();
    let psns = [0x00_0005, 0x7F_FFFF, 0x00_0001, 0xFF_FFFF, 0x12_3456];
    for (i, psn) in psns.iter().enumerate() {
        net.post_recv(1, b, i as u64, 256 * i as u64, 256);
        let f = net.frame(
            0,
            net.nodes[1].gid,
            ud_headers(b, QKEY, a, *psn),
            &[i as u8; 12],
        );
        let now = net.now;
        net.nodes[1].hca.handle_frame(now, &f);
    }
    let wc = net.poll(1);
    assert_eq!(wc.len(), 5);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success));
}

#[test]
fn c9_205_ud_payload_larger_than_buffer_dropped_next_delivered() {
    let (mut net, a, b, ah) = pair();
    net.post_recv(1, b, 1, 0, 40 + 50);
    net.send(0, a, ah, b, QKEY, 1, 0, &data(60, 1));
    net.run();
    assert!(net.poll(1).is_empty());
    assert_eq!(counters(&net, 1).ud_bad_length, 1);
    assert_eq!(net.nodes[1].hca.qp(b).unwrap().recv_queue().len(), 1);
    let d = data(50, 2);
    net.send(0, a, ah, b, QKEY, 2, 0, &d);
    net.run();
    let wc = net.poll(1);
    assert_eq!((wc[0].wr_id, wc[0].byte_len), (1, 90));
    assert_eq!(net.read(1, 40, 50), d);
}

#[test]
fn c9_205_ud_payload_above_pmtu_dropped() {
    let (mut net, a, b, _) = pair();
    net.post_recv(1, b, 1, 0, 4096);
    let f = net.frame(0, net.nodes[1].gid, ud_headers(b, QKEY, a, 0), &[3; 1028]);
    assert_dropped(&mut net, b, &f, "ud_bad_length");
    // Zero bytes is a valid UD payload.
    let f = net.frame(0, net.nodes[1].gid, ud_headers(b, QKEY, a, 0), &[]);
    let now = net.now;
    net.nodes[1].hca.handle_frame(now, &f);
    assert_eq!(net.poll(1)[0].byte_len, 40);
}

#[test]
fn c9_206_ud_reserved_opcodes_dropped() {
    let (mut net, a, b, _) = pair();
    net.post_recv(1, b, 1, 0, 256);
    for op in [0x66u8, 0x70, 0x7f] {
        let mut f = net.frame(0, net.nodes[1].gid, ud_headers(b, QKEY, a, 0), &[1; 8]);
        patch_transport(&mut f, |t| t[0] = op);
        assert_dropped(&mut net, b, &f, "ud_bad_opcode");
    }
}

#[test]
fn c9_207_ud_send_without_receive_wqe_silently_dropped_no_rnr() {
    let (mut net, a, b, ah) = pair();
    net.send(0, a, ah, b, QKEY, 1, 0, &[1; 16]);
    net.run();
    assert_eq!(counters(&net, 1).ud_no_recv_wqe, 1);
    assert_eq!(counters(&net, 1).rnr_nak_sent, 0);
    assert_eq!(
        net.wire.len(),
        1,
        "only the request: no RNR NAK, no response"
    );
    assert!(net.poll(1).is_empty());
    // The sender completed successfully all the same (no ACK/NAK protocol).
    assert_eq!(net.poll(0)[0].status, WcStatus::Success);
}

// ----- Q_Key ----------------------------------------------------------------------------

#[test]
fn ud_qkey_mismatch_dropped_and_counted() {
    let (mut net, a, b, ah) = pair();
    net.post_recv(1, b, 1, 0, 256);
    net.send(0, a, ah, b, QKEY ^ 1, 1, 0, &[1; 16]);
    net.run();
    assert_eq!(counters(&net, 1).qkey_violation, 1);
    assert!(net.poll(1).is_empty());
    assert_eq!(net.nodes[1].hca.qp(b).unwrap().recv_queue().len(), 1);
}

#[test]
fn ud_controlled_qkey_sends_the_qps_own_qkey() {
    let (mut net, a, b, ah) = pair();
    net.post_recv(1, b, 1, 0, 256);
    net.send(0, a, ah, b, 0x8000_0000 | 0x55, 1, 0, &[1; 16]);
    net.run();
    assert_eq!(decode(&net.wire[0].1).0.deth.unwrap().qkey, QKEY);
    assert_eq!(net.poll(1).len(), 1);
}

// ----- GRH area ---------------------------------------------------------------------------

#[test]
fn ud_grh_area_ipv4_header_in_bytes_20_to_40() {
    let (mut net, a, b, ah) = pair();
    let mr = net.nodes[1].mr.handle;
    net.nodes[1].hca.mr_write(mr, 0, &[0xAA; 40]).unwrap();
    net.post_recv(1, b, 1, 0, 256);
    net.send(0, a, ah, b, QKEY, 1, 0, &[7; 10]);
    net.run();
    let frame = &net.wire[0].1;
    let area = net.read(1, 0, 40);
    assert_eq!(&area[..20], &[0u8; 20], "bytes 0..20 are zeroed");
    assert_eq!(&area[20..40], &frame[14..34], "the IPv4 header as received");
    // The sender's address is reachable from the GRH area.
    assert_eq!(&area[32..36], &[10, 0, 0, 1]);
}

#[test]
fn ud_grh_area_ipv6_header_as_received() {
    let mut net = Net::new_v6(2);
    let a = net.ud_qp(0, QKEY);
    let b = net.ud_qp(1, QKEY);
    let ah = net.ah(0, 1);
    net.post_recv(1, b, 1, 0, 256);
    net.send(0, a, ah, b, QKEY, 1, 0, &[7; 10]);
    net.run();
    let frame = &net.wire[0].1;
    assert_eq!(&frame[12..14], &[0x86, 0xdd], "an IPv6 frame");
    let area = net.read(1, 0, 40);
    assert_eq!(&area[..], &frame[14..54]);
    assert_eq!(&area[8..24], &net.nodes[0].gid.0, "source GID");
    let wc = net.poll(1);
    assert!(wc[0].wc_flags.contains(WcFlags::GRH));
    assert_eq!(wc[0].network_hdr, Some(NetworkHdr::Ipv6));
    assert_eq!(net.read(1, 40, 10), vec![7; 10]);
}

#[test]
fn ud_address_vector_fields_on_the_wire() {
    let mut net = Net::new_v6(2);
    let a = net.ud_qp(0, QKEY);
    let b = net.ud_qp(1, QKEY);
    let mut attr = softib_core::verbs::ah::AhAttr::global(1, net.nodes[1].gid, 0);
    let g = attr.grh.as_mut().unwrap();
    g.hop_limit = 9;
    g.traffic_class = 0x48;
    g.flow_label = 0xABCDE;
    let n0 = &mut net.nodes[0];
    let ah = n0.hca.create_ah(n0.pd, &attr).unwrap();
    net.post_recv(1, b, 1, 0, 256);
    net.send(0, a, ah, b, QKEY, 1, 0, &[1; 4]);
    net.run();
    let p = softib_wire::roce::RocePacket::parse(&net.wire[0].1).unwrap();
    let softib_wire::roce::IpHeader::V6(v6) = p.ip else {
        panic!("IPv6 expected")
    };
    assert_eq!((v6.hop_lmt, v6.tclass, v6.flow_label), (9, 0x48, 0xABCDE));
    assert_eq!(v6.dgid, net.nodes[1].gid.0);
    assert_eq!(net.poll(1).len(), 1);
}

#[test]
fn ud_send_with_immediate_and_solicited() {
    let (mut net, a, b, ah) = pair();
    net.post_recv(1, b, 1, 0, 256);
    let cq = net.nodes[1].cq;
    net.nodes[1].hca.req_notify_cq(cq, true).unwrap();
    let n = &mut net.nodes[0];
    let sge = Sge::new(n.mr.addr, 8, n.mr.lkey);
    let wr = SendWr::new(1, WrOpcode::SendWithImm(0xCAFE_F00D))
        .with_sge(sge)
        .with_flags(SendFlags::SOLICITED)
        .with_ud(ah, b, QKEY);
    n.hca.post_send(a, &[wr]).unwrap();
    net.run();
    let (h, _) = decode(&net.wire[0].1);
    assert_eq!(h.bth.opcode, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
    assert!(h.bth.solicited);
    let wc = net.poll(1);
    assert_eq!(wc[0].imm_data, Some(0xCAFE_F00D));
    assert!(wc[0].wc_flags.contains(WcFlags::WITH_IMM | WcFlags::GRH));
    assert_eq!(net.nodes[1].hca.poll_completion_event(), Some(cq));
    assert!(net.poll(0).is_empty(), "unsignaled send: no completion");
}

// ----- multicast --------------------------------------------------------------------------

const GROUP_V4: [u8; 4] = [239, 1, 2, 3];

#[test]
fn ud_multicast_three_qps_on_two_hcas() {
    let mut net = Net::new(2);
    let group = gid_of_ipv4(GROUP_V4);
    let sender = net.ud_qp(0, QKEY);
    let m0 = net.ud_qp(0, QKEY);
    let m1 = net.ud_qp(1, QKEY);
    let m2 = net.ud_qp(1, QKEY);
    for (node, q) in [(0, m0), (1, m1), (1, m2)] {
        net.nodes[node].hca.attach_mcast(q, group, 0).unwrap();
        net.post_recv(
            node,
            q,
            u64::from(q.value()),
            8192 * u64::from(q.value()),
            256,
        );
        net.post_recv(
            node,
            q,
            1000 + u64::from(q.value()),
            8192 * u64::from(q.value()) + 4096,
            256,
        );
    }
    net.post_recv(0, sender, 1, 0, 256);
    let ah = net.ah_gid(0, group);
    let d = data(77, 9);
    net.send(0, sender, ah, Qpn::new(MCAST_QPN), QKEY, 42, 0x8_0000, &d);
    net.run();
    assert_eq!(net.wire.len(), 1);
    let frame = net.wire[0].1.clone();
    assert_eq!(&frame[..6], &[0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]);
    assert_eq!(decode(&frame).0.bth.dest_qp.value(), MCAST_QPN);
    let on0 = net.poll(0);
    let recv0: Vec<_> = on0.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
    assert_eq!(
        recv0.len(),
        1,
        "one local member; the sender is not attached"
    );
    assert_eq!((recv0[0].qp_num, recv0[0].src_qp), (m0, sender));
    assert_eq!(on0.iter().filter(|w| w.opcode == WcOpcode::Send).count(), 1);
    let on1 = net.poll(1);
    let mut got: Vec<Qpn> = on1.iter().map(|w| w.qp_num).collect();
    got.sort();
    assert_eq!(got, vec![m1, m2]);
    for q in [m1, m2] {
        assert_eq!(net.read(1, 8192 * u64::from(q.value()) + 40, 77), d);
    }
    assert_eq!(net.read(0, 8192 * u64::from(m0.value()) + 40, 77), d);

    // The sender attaches: it gets its own copy. m1 detaches: it gets nothing.
    net.nodes[0].hca.attach_mcast(sender, group, 0).unwrap();
    net.nodes[1].hca.detach_mcast(m1, group, 0).unwrap();
    net.send(0, sender, ah, Qpn::new(MCAST_QPN), QKEY, 43, 0x8_0000, &d);
    net.run();
    let recv0: Vec<Qpn> = net
        .poll(0)
        .iter()
        .filter(|w| w.opcode == WcOpcode::Recv)
        .map(|w| w.qp_num)
        .collect();
    assert_eq!(recv0.len(), 2);
    assert!(recv0.contains(&sender) && recv0.contains(&m0));
    let recv1: Vec<Qpn> = net.poll(1).iter().map(|w| w.qp_num).collect();
    assert_eq!(recv1, vec![m2]);
}

#[test]
fn ud_multicast_ipv6_group_mac() {
    let mut net = Net::new_v6(2);
    let mut g = [0u8; 16];
    g[0] = 0xff;
    g[1] = 0x12;
    g[12..].copy_from_slice(&[0xde, 0xad, 0x12, 0x34]);
    let group = Gid(g);
    let a = net.ud_qp(0, QKEY);
    let m = net.ud_qp(1, QKEY);
    net.nodes[1].hca.attach_mcast(m, group, 0).unwrap();
    net.post_recv(1, m, 1, 0, 256);
    let ah = net.ah_gid(0, group);
    net.send(0, a, ah, Qpn::new(MCAST_QPN), QKEY, 1, 0, &[5; 20]);
    net.run();
    assert_eq!(&net.wire[0].1[..6], &[0x33, 0x33, 0xde, 0xad, 0x12, 0x34]);
    assert_eq!(net.poll(1).len(), 1);
    assert_eq!(
        &net.read(1, 24, 16)[..],
        &g,
        "the group GID is the GRH destination"
    );
}

#[test]
fn ud_attach_mcast_errors() {
    let mut net = Net::new(1);
    let group = gid_of_ipv4(GROUP_V4);
    let q = net.ud_qp(0, QKEY);
    let n = &mut net.nodes[0];
    let rc = n
        .hca
        .create_qp(n.pd, &QpInitAttr::new(QpType::Rc, n.cq, QpCap::default()))
        .unwrap();
    assert_eq!(
        n.hca.attach_mcast(rc, group, 0),
        Err(McastError::NotUd {
            qpn: rc,
            qp_type: QpType::Rc
        })
    );
    let unicast = gid_of_ipv4([10, 0, 0, 9]);
    assert_eq!(
        n.hca.attach_mcast(q, unicast, 0),
        Err(McastError::NotMulticastGid(unicast))
    );
    assert_eq!(
        n.hca.attach_mcast(Qpn::new(0x999), group, 0),
        Err(McastError::NoSuchQp(Qpn::new(0x999)))
    );
    assert_eq!(
        n.hca.detach_mcast(q, group, 0),
        Err(McastError::NotAttached { qpn: q, gid: group })
    );
    n.hca.attach_mcast(q, group, 0).unwrap();
    n.hca.attach_mcast(q, group, 0).unwrap();
    assert_eq!(n.hca.mcast_members(group), vec![q]);
    n.hca.destroy_qp(q).unwrap();
    assert!(n.hca.mcast_members(group).is_empty(), "destroy detaches");
}

#[test]
fn ud_multicast_without_members_or_with_bad_destination_dropped() {
    let (mut net, a, b, _) = pair();
    net.post_recv(1, b, 1, 0, 256);
    let group = gid_of_ipv4(GROUP_V4);
    let f = net.frame(
        0,
        group,
        ud_headers(Qpn::new(MCAST_QPN), QKEY, a, 0),
        &[1; 8],
    );
    assert_dropped(&mut net, b, &f, "mcast_no_member");
    // DQPN 0xFFFFFF to a unicast GID, and a multicast GID with a unicast DQPN.
    let f = net.frame(
        0,
        net.nodes[1].gid,
        ud_headers(Qpn::new(MCAST_QPN), QKEY, a, 0),
        &[1; 8],
    );
    assert_dropped(&mut net, b, &f, "mcast_bad_dest");
    net.nodes[1].hca.attach_mcast(b, group, 0).unwrap();
    let f = net.frame(0, group, ud_headers(b, QKEY, a, 0), &[1; 8]);
    assert_dropped(&mut net, b, &f, "mcast_bad_dest");
}

// ----- QP1 --------------------------------------------------------------------------------

#[test]
fn ud_gsi_qp1_uses_the_gsi_qkey() {
    let mut net = Net::new(2);
    let g0 = net.gsi_qp(0, 0);
    let g1 = net.gsi_qp(1, 0x1234);
    assert_eq!((g0.value(), g1.value()), (1, 1));
    let ah = net.ah(0, 1);
    net.post_recv(1, g1, 1, 0, 256 + 40);
    net.post_recv(1, g1, 2, 4096, 256 + 40);
    // A MAD: 256 bytes; whatever Q_Key the WR names, QP1 sends the GSI Q_Key.
    let mad = data(256, 4);
    net.send(0, g0, ah, g1, 0x42, 1, 0, &mad);
    net.run();
    let (h, _) = decode(&net.wire[0].1);
    let deth = h.deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qp), (GSI_QKEY, g0));
    let wc = net.poll(1);
    assert_eq!(
        (wc[0].status, wc[0].src_qp, wc[0].byte_len),
        (WcStatus::Success, g0, 296)
    );
    assert_eq!(net.read(1, 40, 256), mad);
    // QP1 expects the GSI Q_Key, not its own attribute.
    let f = net.frame(0, net.nodes[1].gid, ud_headers(g1, 0x1234, g0, 0), &[1; 8]);
    assert_dropped(&mut net, g1, &f, "qkey_violation");
    // Only one QP1, and it is UD.
    let n = &mut net.nodes[1];
    let init = QpInitAttr::new(QpType::Ud, n.cq, QpCap::default());
    assert_eq!(
        n.hca.create_gsi_qp(n.pd, &init),
        Err(CreateQpError::GsiExists)
    );
    let rc = QpInitAttr::new(QpType::Rc, n.cq, QpCap::default());
    assert_eq!(
        n.hca.create_gsi_qp(n.pd, &rc),
        Err(CreateQpError::GsiNotUd {
            qp_type: QpType::Rc
        })
    );
}

#[test]
fn ud_gsi_qp1_accepts_every_pkey_of_the_table() {
    // Build the node by hand: two P_Keys on port 1, QP1 and an ordinary UD QP on index 0.
    let mut net = Net::new(2);
    net.nodes[1].hca = {
        let mut cfg = softib_core::HcaConfig::new(2);
        cfg.ports[0].active_mtu = Mtu::Mtu1024;
        cfg.ports[0]
            .gids
            .push(softib_core::verbs::device::GidEntry {
                gid: gid_of_ipv4([10, 0, 0, 2]),
                gid_type: softib_core::verbs::types::GidType::RoceV2,
            });
        cfg.ports[0].pkeys.push(0x8123);
        softib_core::Hca::new(cfg)
    };
    let n = &mut net.nodes[1];
    n.pd = n.hca.alloc_pd().unwrap();
    n.cq = n.hca.create_cq(64).unwrap();
    n.mr = n
        .hca
        .reg_mr(
            n.pd,
            vec![0; 65536],
            softib_core::verbs::types::AccessFlags::LOCAL_WRITE,
            None,
        )
        .unwrap();
    let g1 = net.gsi_qp(1, 0);
    let u = net.ud_qp(1, QKEY);
    let a = net.ud_qp(0, QKEY);
    net.post_recv(1, g1, 1, 0, 256);
    net.post_recv(1, u, 2, 1024, 256);
    let mut h = ud_headers(g1, GSI_QKEY, a, 0);
    h.bth.pkey = 0x8123;
    let f = net.frame(0, net.nodes[1].gid, h, &[1; 8]);
    let now = net.now;
    net.nodes[1].hca.handle_frame(now, &f);
    let wc = net.poll(1);
    assert_eq!((wc[0].qp_num, wc[0].pkey_index), (g1, 1));
    // An ordinary UD QP admits only its own P_Key index.
    let mut h = ud_headers(u, QKEY, a, 0);
    h.bth.pkey = 0x8123;
    let f = net.frame(0, net.nodes[1].gid, h, &[1; 8]);
    assert_dropped(&mut net, u, &f, "bad_pkey");
}
