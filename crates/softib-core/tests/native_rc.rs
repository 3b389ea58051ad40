//! RC over native InfiniBand ports: LRH [GRH] BTH ... ICRC VCRC instead of RoCEv2 frames.

mod ib;

use std::cell::RefCell;
use std::rc::Rc;

use ib::{Dir, IbPair, LID_A, LID_B};
use softib_core::verbs::types::{Mtu, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_wire::lrh::{Lnh, Lrh};
use softib_wire::native::{NativeBody, NativePacket};

/// Posts on A: a SEND of 3000 bytes, an RDMA WRITE of 5000 bytes and an RDMA READ of 4100
/// bytes, with a receive on B; runs, and checks data and completions.
fn exchange(p: &mut IbPair, qa: softib_wire::Qpn, qb: softib_wire::Qpn) {
    let (ma, mb) = (p.a.mr, p.b.mr);
    let send: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 1) as u8).collect();
    let write: Vec<u8> = (0..5000u32).map(|i| (i * 13 + 5) as u8).collect();
    let read: Vec<u8> = (0..4100u32).map(|i| (i * 3 + 9) as u8).collect();
    p.a.hca.mr_write(ma.handle, 0, &send).unwrap();
    p.a.hca.mr_write(ma.handle, 8192, &write).unwrap();
    p.b.hca.mr_write(mb.handle, 65536, &read).unwrap();
    p.b.hca
        .post_recv(
            qb,
            &[RecvWr::new(7, vec![Sge::new(mb.addr, 4096, mb.lkey)])],
        )
        .unwrap();
    let wrs = [
        SendWr::new(1, WrOpcode::Send)
            .with_sge(Sge::new(ma.addr, 3000, ma.lkey))
            .signaled(),
        SendWr::new(
            2,
            WrOpcode::RdmaWrite {
                remote: RemoteAddr::new(mb.addr + 16384, mb.rkey),
            },
        )
        .with_sge(Sge::new(ma.addr + 8192, 5000, ma.lkey))
        .signaled(),
        SendWr::new(
            3,
            WrOpcode::RdmaRead {
                remote: RemoteAddr::new(mb.addr + 65536, mb.rkey),
            },
        )
        .with_sge(Sge::new(ma.addr + 131072, 4100, ma.lkey))
        .signaled(),
    ];
    p.a.hca.post_send(qa, &wrs).unwrap();
    p.run(100_000_000_000);
    let wa = ib::drain(&mut p.a);
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    let wb = ib::drain(&mut p.b);
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].opcode, wb[0].byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, 3000)
    );
    let mem_b = p.b.hca.mr_bytes(mb.handle).unwrap();
    assert_eq!(&mem_b[..3000], &send[..]);
    assert_eq!(&mem_b[16384..16384 + 5000], &write[..]);
    let mem_a = p.a.hca.mr_bytes(ma.handle).unwrap();
    assert_eq!(&mem_a[131072..131072 + 4100], &read[..]);
}

#[test]
fn native_rc_lid_routed_exchange_has_no_grh() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let (qa, qb) = p.rc(false, Mtu::Mtu1024);
    exchange(&mut p, qa, qb);
    p.assert_log_verified();
    for (d, f) in &p.log {
        let pkt = NativePacket::parse_verified(f).unwrap();
        assert_eq!(pkt.lrh.lnh, Lnh::IbaLocal);
        let (slid, dlid) = match d {
            Dir::AtoB => (LID_A, LID_B),
            Dir::BtoA => (LID_B, LID_A),
        };
        assert_eq!((pkt.lrh.slid, pkt.lrh.dlid, pkt.lrh.vl), (slid, dlid, 0));
        assert_eq!(usize::from(pkt.lrh.pkt_len) * 4 + 2, f.len());
        assert!(matches!(pkt.body, NativeBody::Iba { grh: None, .. }));
    }
    assert_eq!(p.a.hca.counters().vcrc_err, 0);
    assert_eq!(p.b.hca.counters().bad_address, 0);
}

#[test]
fn native_rc_global_route_carries_a_grh() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let (qa, qb) = p.rc(true, Mtu::Mtu2048);
    exchange(&mut p, qa, qb);
    p.assert_log_verified();
    let gid_a = p.a.hca.query_port(1).unwrap().gids[0].gid;
    for (d, f) in &p.log {
        let pkt = NativePacket::parse_verified(f).unwrap();
        assert_eq!(pkt.lrh.lnh, Lnh::IbaGlobal);
        let NativeBody::Iba { grh: Some(g), .. } = pkt.body else {
            panic!("no GRH");
        };
        assert_eq!(g.sgid == gid_a.0, *d == Dir::AtoB);
    }
}

#[test]
fn native_rc_recovers_from_loss() {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let (qa, qb) = p.rc(false, Mtu::Mtu1024);
    // A fixed pseudo-random 20% of the frames is lost.
    let mut x = 0x2545_f491_u32;
    p.filter = Box::new(move |_, _| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x % 5 != 0
    });
    exchange(&mut p, qa, qb);
    assert!(p.a.hca.counters().retransmitted_pkts > 0);
}

/// The first frame A sends for a SEND of `len` bytes (dropped before B sees it), and the pair.
fn first_frame(global: bool) -> (IbPair, Vec<u8>) {
    let mut p = IbPair::new(Mtu::Mtu4096);
    let (qa, qb) = p.rc(global, Mtu::Mtu1024);
    let mb = p.b.mr;
    p.b.hca
        .post_recv(qb, &[RecvWr::new(7, vec![Sge::new(mb.addr, 64, mb.lkey)])])
        .unwrap();
    let got = Rc::new(RefCell::new(None));
    let g = got.clone();
    p.filter = Box::new(move |d, f| {
        if d == Dir::AtoB && g.borrow().is_none() {
            *g.borrow_mut() = Some(f.to_vec());
            return false;
        }
        true
    });
    p.a.hca
        .post_send(
            qa,
            &[SendWr::new(1, WrOpcode::Send)
                .with_inline(vec![0x5a; 40])
                .signaled()],
        )
        .unwrap();
    // Only the first transmission; no timer runs.
    p.run(0);
    let f = got.borrow().clone().expect("A sent a frame");
    (p, f)
}

/// Recomputes the VCRC of a native packet after an edit.
fn fix_vcrc(f: &mut [u8]) {
    let n = f.len() - 2;
    let v = softib_wire::vcrc::compute(&f[..n]);
    softib_wire::vcrc::put(&mut f[n..], v).unwrap();
}

/// Recomputes ICRC and VCRC of an IBA packet without GRH.
fn fix_crcs_local(f: &mut [u8]) {
    let n = f.len() - 2;
    let icrc = softib_wire::icrc::native(None, &f[8..n - 4]);
    softib_wire::icrc::put(&mut f[n - 4..n], icrc).unwrap();
    fix_vcrc(f);
}

#[test]
fn native_rc_delivers_the_untouched_frame() {
    let (mut p, f) = first_frame(false);
    let now = p.now;
    p.b.hca.handle_frame(now, &f);
    assert_eq!(p.b.hca.counters().rcvd_pkts, 1);
    let wb = ib::drain(&mut p.b);
    assert_eq!((wb[0].status, wb[0].byte_len), (WcStatus::Success, 40));
}

#[test]
fn native_rc_drops_bad_vcrc() {
    let (mut p, mut f) = first_frame(false);
    let n = f.len();
    f[n - 1] ^= 1;
    let now = p.now;
    p.b.hca.handle_frame(now, &f);
    assert_eq!(p.b.hca.counters().vcrc_err, 1);
    assert_eq!(p.b.hca.counters().rcvd_pkts, 0);
}

#[test]
fn native_rc_drops_bad_icrc_even_with_a_good_vcrc() {
    let (mut p, mut f) = first_frame(false);
    let n = f.len();
    f[n - 3] ^= 0x80;
    fix_vcrc(&mut f);
    let now = p.now;
    p.b.hca.handle_frame(now, &f);
    assert_eq!(p.b.hca.counters().icrc_err, 1);
    assert_eq!(p.b.hca.counters().rcvd_pkts, 0);
}

#[test]
fn native_rc_drops_a_pkt_len_that_disagrees() {
    let (mut p, mut f) = first_frame(false);
    let mut lrh = Lrh::parse(&f).unwrap();
    lrh.pkt_len -= 1;
    lrh.emit(&mut f).unwrap();
    fix_vcrc(&mut f);
    let now = p.now;
    p.b.hca.handle_frame(now, &f);
    assert_eq!(p.b.hca.counters().bad_pkt_len, 1);
    // A truncated packet (VCRC recomputed, PktLen unchanged) is the same error.
    let (mut p, f) = first_frame(false);
    let mut t = f[..f.len() - 4].to_vec();
    fix_vcrc(&mut t);
    let now = p.now;
    p.b.hca.handle_frame(now, &t);
    assert_eq!(p.b.hca.counters().bad_pkt_len, 1);
}

#[test]
fn native_rc_drops_packets_for_another_lid_or_from_another_source() {
    for (dlid, slid, wrong_dlid, bad_address) in [
        (LID_B + 1, LID_A, 1, 0),
        (0, LID_A, 1, 0),
        (0xC001, LID_A, 1, 0),
        (LID_B, LID_A + 5, 0, 1),
        // The permissive DLID reaches every port; the source check still applies.
        (0xFFFF, LID_A, 0, 0),
    ] {
        let (mut p, mut f) = first_frame(false);
        let mut lrh = Lrh::parse(&f).unwrap();
        lrh.dlid = dlid;
        lrh.slid = slid;
        lrh.emit(&mut f).unwrap();
        // The ICRC does not cover the LRH; only the VCRC changes.
        fix_vcrc(&mut f);
        let now = p.now;
        p.b.hca.handle_frame(now, &f);
        let c = p.b.hca.counters();
        assert_eq!(
            (c.wrong_dlid, c.bad_address),
            (wrong_dlid, bad_address),
            "DLID {dlid:#x} SLID {slid:#x}"
        );
        assert_eq!(c.rcvd_pkts, 1 - wrong_dlid - bad_address);
    }
}

#[test]
fn native_rc_global_qp_refuses_a_packet_without_grh() {
    let (mut p, f) = first_frame(true);
    // Strip the GRH: LRH + BTH... with LNH = IBA local and fresh CRCs.
    let mut lrh = Lrh::parse(&f).unwrap();
    let mut g = f[..8].to_vec();
    g.extend_from_slice(&f[48..]);
    lrh.lnh = Lnh::IbaLocal;
    lrh.pkt_len -= 10;
    lrh.emit(&mut g).unwrap();
    fix_crcs_local(&mut g);
    NativePacket::parse_verified(&g).unwrap();
    let now = p.now;
    p.b.hca.handle_frame(now, &g);
    assert_eq!(p.b.hca.counters().bad_address, 1);
    assert_eq!(p.b.hca.counters().rcvd_pkts, 0);
}

#[test]
fn native_port_drops_roce_frames_as_malformed() {
    let (mut p, _) = first_frame(false);
    // An Ethernet + IPv4 header start: LVer = 0x?  decodes as garbage and fails to parse.
    let mut f = vec![0x02u8, 0, 10, 0, 0, 2, 0x02, 0, 10, 0, 0, 1, 0x08, 0x00];
    f.resize(80, 0x45);
    let now = p.now;
    p.b.hca.handle_frame(now, &f);
    let c = p.b.hca.counters();
    assert_eq!(c.rcvd_pkts, 0);
    assert_eq!(c.malformed + c.bad_pkt_len, 1);
}

#[test]
fn native_rc_reserved_opcode_is_answered_with_a_nak() {
    // BTH opcode 0x18 is reserved in the RC class (C9-84): the responder NAKs it.
    let (mut p, mut f) = first_frame(false);
    f[8] = 0x18;
    fix_crcs_local(&mut f);
    let now = p.now;
    p.b.hca.handle_frame(now, &f);
    assert_eq!(p.b.hca.counters().rcvd_pkts, 1);
    let mut out = Vec::new();
    assert!(p.b.hca.poll_transmit(now, &mut out));
    let pkt = NativePacket::parse_verified(&out).unwrap();
    let NativeBody::Iba { transport, .. } = pkt.body else {
        panic!("not an IBA packet");
    };
    // NAK - invalid request.
    assert_eq!(transport.headers.aeth.map(|a| a.syndrome), Some(0x61));
    assert_eq!((pkt.lrh.slid, pkt.lrh.dlid), (LID_B, LID_A));
    // The same packet with a bad VCRC is only dropped.
    let (mut p, mut f) = first_frame(false);
    f[8] = 0x18;
    fix_crcs_local(&mut f);
    let n = f.len();
    f[n - 1] ^= 2;
    let now = p.now;
    p.b.hca.handle_frame(now, &f);
    assert_eq!(p.b.hca.counters().malformed, 1);
    assert!(!p.b.hca.poll_transmit(now, &mut out));
}
