//! Raw datagram QPs (IBA 9.8.4): raw IPv6 (LRH:LNH 01) and raw EtherType (LRH:LNH 00) on
//! native InfiniBand ports.

mod ib;

use ib::{ah_to, drain, raw_qp, IbPair, Node, LID_A, LID_B};
use softib_core::error::{CreateQpError, ModifyQpError, PostSendError};
use softib_core::verbs::ah::AhAttr;
use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpInitAttr};
use softib_core::verbs::types::{Mtu, QpState, QpType, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};
use softib_core::{Hca, HcaConfig};
use softib_wire::grh::Grh;
use softib_wire::lrh::{Lnh, Lrh};
use softib_wire::native::{NativeBody, NativePacket};
use softib_wire::Qpn;

/// An IPv6 header (40 bytes) with Next Header `nh` and PayLen `pay_len`.
fn ipv6_header(nh: u8, pay_len: u16) -> [u8; 40] {
    let g = Grh {
        ip_ver: 6,
        tclass: 0x20,
        flow_label: 0x12345,
        pay_len,
        nxt_hdr: nh,
        hop_lmt: 64,
        sgid: [0xfe; 16],
        dgid: [0xfd; 16],
    };
    let mut b = [0u8; 40];
    g.emit(&mut b).unwrap();
    b
}

fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Posts a receive WQE of `len` bytes at `off` of the node's region.
fn post_recv(n: &mut Node, qpn: Qpn, wr_id: u64, off: u64, len: u32) {
    let mr = n.mr;
    n.hca
        .post_recv(
            qpn,
            &[RecvWr::new(
                wr_id,
                vec![Sge::new(mr.addr + off, len, mr.lkey)],
            )],
        )
        .unwrap();
}

/// A raw send WR carrying `msg` inline, addressed through `ah`.
fn raw_wr(n: &mut Node, wr_id: u64, msg: Vec<u8>, dlid: u16) -> SendWr {
    let ah = ah_to(n, dlid);
    SendWr::new(wr_id, WrOpcode::Send)
        .with_inline(msg)
        .with_ud(ah, Qpn::new(0), 0)
        .signaled()
}

/// Builds a raw packet by hand (the HCA refuses to send some of the ones the tests need).
fn raw_packet(lnh: Lnh, after_lrh: &[u8], slid: u16, dlid: u16) -> Vec<u8> {
    assert_eq!(after_lrh.len() % 4, 0);
    let covered = 8 + after_lrh.len();
    let lrh = Lrh {
        lnh,
        dlid,
        slid,
        pkt_len: (covered / 4) as u16,
        ..Lrh::default()
    };
    let mut f = vec![0u8; covered + 2];
    lrh.emit(&mut f).unwrap();
    f[8..covered].copy_from_slice(after_lrh);
    let v = softib_wire::vcrc::compute(&f[..covered]);
    softib_wire::vcrc::put(&mut f[covered..], v).unwrap();
    f
}

#[test]
fn c9_208_post_send_refuses_raw_ipv6_with_iba_next_header() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let qa = raw_qp(&mut p.a, QpType::RawIpv6);
    // Inline header.
    let mut msg = ipv6_header(0x1B, 8).to_vec();
    msg.extend_from_slice(&[1; 8]);
    let wr = raw_wr(&mut p.a, 1, msg, LID_B);
    assert_eq!(
        p.a.hca.post_send(qa, &[wr]),
        Err(PostSendError::RawIpv6IbaNextHeader {
            index: 0,
            next_header: 0x1B
        })
    );
    // Header in registered memory, as the second WR of a list: nothing is queued.
    let mr = p.a.mr;
    let mut mem = ipv6_header(0x1B, 24).to_vec();
    mem.extend_from_slice(&[2; 24]);
    p.a.hca.mr_write(mr.handle, 0, &mem).unwrap();
    let ah = ah_to(&mut p.a, LID_B);
    let mut ok = ipv6_header(17, 0).to_vec();
    ok.truncate(40);
    let wrs = [
        SendWr::new(2, WrOpcode::Send)
            .with_inline(ok)
            .with_ud(ah, Qpn::new(0), 0),
        SendWr::new(3, WrOpcode::Send)
            .with_sge(Sge::new(mr.addr, 64, mr.lkey))
            .with_ud(ah, Qpn::new(0), 0),
    ];
    assert_eq!(
        p.a.hca.post_send(qa, &wrs),
        Err(PostSendError::RawIpv6IbaNextHeader {
            index: 1,
            next_header: 0x1B
        })
    );
    p.run(0);
    assert!(p.log.is_empty(), "nothing was sent");
}

#[test]
fn c9_208_header_changed_after_post_is_never_sent() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let qa = raw_qp(&mut p.a, QpType::RawIpv6);
    let qb = raw_qp(&mut p.b, QpType::RawIpv6);
    post_recv(&mut p.b, qb, 9, 0, 4096);
    let mr = p.a.mr;
    let mut mem = ipv6_header(17, 24).to_vec();
    mem.extend_from_slice(&[2; 24]);
    p.a.hca.mr_write(mr.handle, 0, &mem).unwrap();
    let ah = ah_to(&mut p.a, LID_B);
    let wr = SendWr::new(3, WrOpcode::Send)
        .with_sge(Sge::new(mr.addr, 64, mr.lkey))
        .with_ud(ah, Qpn::new(0), 0)
        .signaled();
    p.a.hca.post_send(qa, &[wr]).unwrap();
    // The application rewrites the header before the HCA executes the WR.
    p.a.hca.mr_write(mr.handle, 6, &[0x1B]).unwrap();
    p.run(0);
    assert!(p.log.is_empty(), "the datagram was not sent");
    let wa = drain(&mut p.a);
    assert_eq!((wa[0].wr_id, wa[0].status), (3, WcStatus::LocQpOpErr));
    assert_eq!(p.a.hca.query_qp(qa).unwrap().qp_state, QpState::Sqe);
    assert!(drain(&mut p.b).is_empty());
}

#[test]
fn c9_208_received_raw_ipv6_with_iba_next_header_is_dropped() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let qb = raw_qp(&mut p.b, QpType::RawIpv6);
    post_recv(&mut p.b, qb, 9, 0, 4096);
    let mut body = ipv6_header(0x1B, 16).to_vec();
    body.extend_from_slice(&[7; 16]);
    let f = raw_packet(Lnh::Ipv6, &body, LID_A, LID_B);
    let now = p.now;
    p.b.hca.handle_frame(now, &f);
    assert_eq!(p.b.hca.counters().raw_iba_next_header, 1);
    assert!(drain(&mut p.b).is_empty());
    // The same datagram with another Next Header is delivered.
    body[6] = 17;
    let f = raw_packet(Lnh::Ipv6, &body, LID_A, LID_B);
    p.b.hca.handle_frame(now, &f);
    let wb = drain(&mut p.b);
    assert_eq!((wb[0].status, wb[0].byte_len), (WcStatus::Success, 56));
}

#[test]
fn o9_145_raw_ethertype_payload_is_padded_to_whole_words() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let qa = raw_qp(&mut p.a, QpType::RawEthertype);
    let qb = raw_qp(&mut p.b, QpType::RawEthertype);
    post_recv(&mut p.b, qb, 9, 0, 4096);
    // RWH (EtherType 0x88B5, local experimental) + 61 bytes of payload.
    let mut msg = vec![0xAA, 0xBB, 0x88, 0xB5];
    let data = payload(61, 3);
    msg.extend_from_slice(&data);
    let wr = raw_wr(&mut p.a, 1, msg, LID_B);
    p.a.hca.post_send(qa, &[wr]).unwrap();
    p.run(0);
    assert_eq!(p.log.len(), 1);
    let f = &p.log[0].1;
    let pkt = NativePacket::parse_verified(f).unwrap();
    assert_eq!(pkt.lrh.lnh, Lnh::Raw);
    assert_eq!((pkt.lrh.slid, pkt.lrh.dlid), (LID_A, LID_B));
    // LRH 8 + RWH 4 + 61 bytes padded to 64: 76 bytes = 19 words, then the VCRC.
    assert_eq!(pkt.lrh.pkt_len, 19);
    assert_eq!(f.len(), 78);
    let NativeBody::RawEthertype { rwh, payload: wire } = pkt.body else {
        panic!("not raw EtherType");
    };
    // Reserved RWH bits go out as zero.
    assert_eq!((rwh.resv16, rwh.ether_type), (0, 0x88B5));
    assert_eq!(&wire[..61], &data[..]);
    assert_eq!(&wire[61..], &[0, 0, 0]);
    let wa = drain(&mut p.a);
    assert_eq!(
        (wa[0].status, wa[0].opcode, wa[0].byte_len),
        (WcStatus::Success, WcOpcode::Send, 65)
    );
    // The receiver cannot tell pad from data: RWH + 64 bytes.
    let wb = drain(&mut p.b);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].opcode, wb[0].byte_len),
        (9, WcStatus::Success, WcOpcode::Recv, 68)
    );
    assert_eq!((wb[0].slid, wb[0].sl, wb[0].src_qp.value()), (LID_A, 0, 0));
    let mem = p.b.hca.mr_bytes(p.b.mr.handle).unwrap();
    assert_eq!(&mem[..4], &[0, 0, 0x88, 0xB5]);
    assert_eq!(&mem[4..65], &data[..]);
}

#[test]
fn o9_145_raw_ipv6_pad_is_stripped_by_payload_length() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let qa = raw_qp(&mut p.a, QpType::RawIpv6);
    let qb = raw_qp(&mut p.b, QpType::RawIpv6);
    post_recv(&mut p.b, qb, 9, 0, 4096);
    // The posted PayLen (999) is replaced by the real length (61).
    let mut msg = ipv6_header(17, 999).to_vec();
    let data = payload(61, 5);
    msg.extend_from_slice(&data);
    let wr = raw_wr(&mut p.a, 1, msg.clone(), LID_B);
    p.a.hca.post_send(qa, &[wr]).unwrap();
    p.run(0);
    let pkt = NativePacket::parse_verified(&p.log[0].1).unwrap();
    assert_eq!(pkt.lrh.lnh, Lnh::Ipv6);
    assert_eq!(usize::from(pkt.lrh.pkt_len) * 4, 8 + 40 + 64);
    let NativeBody::RawIpv6 {
        ipv6,
        payload: wire,
    } = pkt.body
    else {
        panic!("not raw IPv6");
    };
    assert_eq!(
        (ipv6.pay_len, ipv6.nxt_hdr, ipv6.flow_label),
        (61, 17, 0x12345)
    );
    assert_eq!(wire.len(), 64);
    let wb = drain(&mut p.b);
    assert_eq!((wb[0].status, wb[0].byte_len), (WcStatus::Success, 101));
    let mem = p.b.hca.mr_bytes(p.b.mr.handle).unwrap();
    msg[4..6].copy_from_slice(&61u16.to_be_bytes());
    assert_eq!(&mem[..101], &msg[..]);
    // Nothing past the datagram was written (the pad stays on the wire).
    assert_eq!(&mem[101..104], &[0, 0, 0]);
}

#[test]
fn o9_148_raw_payload_may_exceed_the_mtu() {
    let mut p = IbPair::new(Mtu::Mtu1024);
    // LRH + datagram + pad may be MTU + 124 bytes: the datagram (header included) MTU + 116.
    let mut port = HcaConfig::infiniband(1).ports[0].clone();
    port.active_mtu = Mtu::Mtu1024;
    let max = softib_core::raw_max_message(&port);
    assert_eq!(max, 1024 + 116);
    let qa = raw_qp(&mut p.a, QpType::RawEthertype);
    let qb = raw_qp(&mut p.b, QpType::RawEthertype);
    post_recv(&mut p.b, qb, 9, 0, 8192);
    let mr = p.a.mr;
    let mut msg = vec![0, 0, 0x88, 0xB6];
    msg.extend_from_slice(&payload(max as usize - 4, 1));
    p.a.hca.mr_write(mr.handle, 0, &msg).unwrap();
    let ah = ah_to(&mut p.a, LID_B);
    let wr = |len: u32| {
        SendWr::new(u64::from(len), WrOpcode::Send)
            .with_sge(Sge::new(mr.addr, len, mr.lkey))
            .with_ud(ah, Qpn::new(0), 0)
            .signaled()
    };
    assert_eq!(
        p.a.hca.post_send(qa, &[wr(max + 1)]),
        Err(PostSendError::RawDatagramTooLong {
            index: 0,
            len: u64::from(max) + 1,
            max
        })
    );
    // A datagram larger than the MTU (1024 bytes of payload after the RWH and more) goes.
    p.a.hca.post_send(qa, &[wr(max)]).unwrap();
    p.run(0);
    let f = &p.log[0].1;
    let pkt = NativePacket::parse_verified(f).unwrap();
    assert_eq!(usize::from(pkt.lrh.pkt_len) * 4, 1024 + 124);
    let wb = drain(&mut p.b);
    assert_eq!((wb[0].status, wb[0].byte_len), (WcStatus::Success, max));
    let mem = p.b.hca.mr_bytes(p.b.mr.handle).unwrap();
    assert_eq!(&mem[4..max as usize], &msg[4..]);
}

#[test]
fn o9_147_several_raw_qps_each_consume_a_copy() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let qa = raw_qp(&mut p.a, QpType::RawEthertype);
    let qb1 = raw_qp(&mut p.b, QpType::RawEthertype);
    let qb2 = raw_qp(&mut p.b, QpType::RawEthertype);
    let qb_v6 = raw_qp(&mut p.b, QpType::RawIpv6);
    post_recv(&mut p.b, qb1, 1, 0, 256);
    post_recv(&mut p.b, qb2, 2, 1024, 256);
    post_recv(&mut p.b, qb_v6, 3, 2048, 256);
    let mut msg = vec![0, 0, 0x08, 0x00];
    msg.extend_from_slice(&payload(40, 9));
    let wr = raw_wr(&mut p.a, 1, msg.clone(), LID_B);
    p.a.hca.post_send(qa, &[wr]).unwrap();
    p.run(0);
    let mut wb = drain(&mut p.b);
    wb.sort_by_key(|w| w.wr_id);
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.qp_num, w.status, w.byte_len))
            .collect::<Vec<_>>(),
        [
            (1, qb1, WcStatus::Success, 44),
            (2, qb2, WcStatus::Success, 44)
        ]
    );
    let mem = p.b.hca.mr_bytes(p.b.mr.handle).unwrap();
    assert_eq!(&mem[..44], &msg[..]);
    assert_eq!(&mem[1024..1068], &msg[..]);
    assert_eq!(p.b.hca.counters().raw_delivered, 2);
    // A second datagram finds no WQE on either QP: both copies are dropped and counted.
    let wr = raw_wr(&mut p.a, 2, msg, LID_B);
    p.a.hca.post_send(qa, &[wr]).unwrap();
    p.run(0);
    assert!(drain(&mut p.b).is_empty());
    assert_eq!(p.b.hca.counters().raw_no_wqe, 2);
}

#[test]
fn raw_packet_without_a_raw_qp_is_counted() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let qa = raw_qp(&mut p.a, QpType::RawEthertype);
    let wr = raw_wr(&mut p.a, 1, vec![0, 0, 0x08, 0x00, 1, 2, 3, 4], LID_B);
    p.a.hca.post_send(qa, &[wr]).unwrap();
    p.run(0);
    assert_eq!(p.log.len(), 1);
    assert_eq!(p.b.hca.counters().raw_no_qp, 1);
}

#[test]
fn raw_receive_longer_than_the_wqe_is_a_length_error() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let qa = raw_qp(&mut p.a, QpType::RawEthertype);
    let qb = raw_qp(&mut p.b, QpType::RawEthertype);
    post_recv(&mut p.b, qb, 9, 0, 16);
    let wr = raw_wr(&mut p.a, 1, payload(40, 1), LID_B);
    p.a.hca.post_send(qa, &[wr]).unwrap();
    p.run(0);
    let wb = drain(&mut p.b);
    assert_eq!((wb[0].wr_id, wb[0].status), (9, WcStatus::LocLenErr));
    assert!(p.b.hca.mr_bytes(p.b.mr.handle).unwrap()[..64]
        .iter()
        .all(|&b| b == 0));
    // The QP keeps receiving.
    post_recv(&mut p.b, qb, 10, 0, 64);
    let wr = raw_wr(&mut p.a, 2, payload(40, 1), LID_B);
    p.a.hca.post_send(qa, &[wr]).unwrap();
    p.run(0);
    let wb = drain(&mut p.b);
    assert_eq!((wb[0].wr_id, wb[0].status), (10, WcStatus::Success));
}

#[test]
fn raw_packets_with_bad_vcrc_or_foreign_dlid_are_dropped() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let qb = raw_qp(&mut p.b, QpType::RawEthertype);
    post_recv(&mut p.b, qb, 9, 0, 64);
    let body = [0, 0, 0x08, 0x00, 1, 2, 3, 4];
    let mut bad = raw_packet(Lnh::Raw, &body, LID_A, LID_B);
    let n = bad.len();
    bad[n - 2] ^= 0x10;
    let now = p.now;
    p.b.hca.handle_frame(now, &bad);
    p.b.hca
        .handle_frame(now, &raw_packet(Lnh::Raw, &body, LID_A, LID_B + 3));
    let c = p.b.hca.counters();
    assert_eq!((c.vcrc_err, c.wrong_dlid), (1, 1));
    assert!(drain(&mut p.b).is_empty());
    p.b.hca
        .handle_frame(now, &raw_packet(Lnh::Raw, &body, LID_A, LID_B));
    assert_eq!(drain(&mut p.b)[0].status, WcStatus::Success);
}

#[test]
fn raw_send_checks_destination_and_length() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let qa = raw_qp(&mut p.a, QpType::RawIpv6);
    let no_ah = SendWr::new(1, WrOpcode::Send).with_inline(vec![0; 48]);
    assert_eq!(
        p.a.hca.post_send(qa, &[no_ah]),
        Err(PostSendError::MissingUdDest { index: 0 })
    );
    let short = raw_wr(&mut p.a, 2, vec![0x60; 39], LID_B);
    assert_eq!(
        p.a.hca.post_send(qa, &[short]),
        Err(PostSendError::RawDatagramTooShort {
            index: 0,
            len: 39,
            header: 40
        })
    );
    let ah = ah_to(&mut p.a, LID_B);
    let write = SendWr::new(
        3,
        WrOpcode::RdmaWrite {
            remote: Default::default(),
        },
    )
    .with_inline(vec![0; 48])
    .with_ud(ah, Qpn::new(0), 0);
    assert!(matches!(
        p.a.hca.post_send(qa, &[write]),
        Err(PostSendError::OpcodeNotSupported { .. })
    ));
}

#[test]
fn raw_qp_cannot_use_a_roce_port() {
    let mut hca = Hca::new(HcaConfig::new(1));
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(16).unwrap();
    for t in [QpType::RawIpv6, QpType::RawEthertype] {
        assert_eq!(
            hca.create_qp(pd, &QpInitAttr::new(t, cq, ib::cap())),
            Err(CreateQpError::RawQpNeedsInfiniBand { qp_type: t })
        );
    }
    // An HCA with a RoCE port 1 and an InfiniBand port 2: the raw QP must bind to port 2.
    let mut cfg = HcaConfig::new(1);
    cfg.ports
        .push(softib_core::verbs::device::PortConfig::infiniband(7, 3));
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(16).unwrap();
    for t in [QpType::RawIpv6, QpType::RawEthertype] {
        let qpn = hca
            .create_qp(pd, &QpInitAttr::new(t, cq, ib::cap()))
            .unwrap();
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            ..QpAttr::default()
        };
        assert_eq!(
            hca.modify_qp(qpn, &init, QpAttrMask::STATE | QpAttrMask::PORT),
            Err(ModifyQpError::RawQpNeedsInfiniBand {
                qp_type: t,
                port: 1
            })
        );
        let init2 = QpAttr {
            port_num: 2,
            ..init
        };
        hca.modify_qp(qpn, &init2, QpAttrMask::STATE | QpAttrMask::PORT)
            .unwrap();
    }
}

#[test]
fn raw_send_uses_the_address_handle_lid_sl_and_path_bits() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let qa = raw_qp(&mut p.a, QpType::RawEthertype);
    let qb = raw_qp(&mut p.b, QpType::RawEthertype);
    post_recv(&mut p.b, qb, 9, 0, 64);
    let mut av = AhAttr::local(1, LID_B);
    av.sl = 5;
    // Port A has LMC 0: the path bits are masked off.
    av.src_path_bits = 3;
    let ah = p.a.hca.create_ah(p.a.pd, &av).unwrap();
    let wr = SendWr::new(1, WrOpcode::Send)
        .with_inline(vec![0, 0, 0x08, 0x06, 9, 9, 9, 9])
        .with_ud(ah, Qpn::new(0), 0);
    p.a.hca.post_send(qa, &[wr]).unwrap();
    p.run(0);
    let pkt = NativePacket::parse_verified(&p.log[0].1).unwrap();
    assert_eq!((pkt.lrh.sl, pkt.lrh.slid, pkt.lrh.dlid), (5, LID_A, LID_B));
    let wb = drain(&mut p.b);
    assert_eq!((wb[0].sl, wb[0].slid), (5, LID_A));
}
