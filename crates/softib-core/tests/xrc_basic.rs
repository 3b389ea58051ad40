//! XRC end to end between two HCAs on a direct, lossless wire: A's XRC initiator sends to
//! B's XRC target, which places every request in the XRC SRQ its XRCETH names. Also the XRC
//! objects (domains, XRC SRQs, shared target QPs) and the XRC-specific bad inputs.

mod common;

use common::{hdr, Dir, Pair, Svc};
use softib_core::error::{CreateQpError, DestroySrqError, PostRecvError, XrcdError};
use softib_core::setup::ConnectOptions;
use softib_core::verbs::event::AsyncEvent;
use softib_core::verbs::qp::{QpCap, QpInitAttr};
use softib_core::verbs::srq::SrqInitAttr;
use softib_core::verbs::types::{Mtu, QpState, QpType, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_wire::opcode::Opcode;
use softib_wire::roce::RocePacket;
use softib_wire::xrceth::Xrceth;
use softib_wire::XrcSrqn;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn xrc_pair() -> Pair {
    let opts = ConnectOptions {
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..ConnectOptions::default()
    };
    Pair::new_svc(Svc::Xrc, 0x100, 0x900, opts)
}

/// (opcode as sent, XRCETH:XRCSRQ) of every frame delivered A → B.
fn requests(p: &Pair) -> Vec<(u8, Option<u32>)> {
    p.log
        .iter()
        .filter(|(d, _)| *d == Dir::AtoB)
        .map(|(_, f)| {
            let t = RocePacket::parse(f).unwrap().transport;
            (
                t.headers.bth.opcode.0,
                t.headers.xrceth.map(|x| x.xrcsrq.value()),
            )
        })
        .collect()
}

#[test]
fn send_of_three_packets_lands_in_the_srq_and_completes_on_its_cq() {
    let mut p = xrc_pair();
    let srqn = p.b_srqn().unwrap();
    p.b.post_recv(7, 0x1000, 4096);
    let data = pattern(2500, 3);
    p.a.hca.mr_write(p.a.mr.handle, 0, &data).unwrap();
    let sge = p.sge_a(0, 2500);
    p.post_a(&[SendWr::new(1, WrOpcode::SendWithImm(0x1234_5678))
        .with_sge(sge)
        .signaled()]);
    p.run(1_000_000_000);

    assert_eq!(
        requests(&p),
        vec![
            (Opcode::XRC_SEND_FIRST.0, Some(srqn)),
            (Opcode::XRC_SEND_MIDDLE.0, Some(srqn)),
            (Opcode::XRC_SEND_LAST_WITH_IMMEDIATE.0, Some(srqn)),
        ]
    );
    // B answers with the XRC Acknowledge opcode; an SRQ generates no credits.
    let acks: Vec<_> = p
        .log
        .iter()
        .filter(|(d, _)| *d == Dir::BtoA)
        .map(|(_, f)| RocePacket::parse(f).unwrap().transport.headers)
        .collect();
    assert!(!acks.is_empty());
    for h in &acks {
        assert_eq!(h.bth.opcode, Opcode::XRC_ACKNOWLEDGE);
        assert_eq!(h.aeth.unwrap().syndrome, 0x1f);
        assert!(h.xrceth.is_none());
    }
    assert_eq!(p.b.mem(0x1000, 2500), data);
    let wb = p.b.wcs();
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].opcode, wb[0].byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, 2500)
    );
    // The completion names the target QP, which the receive went through.
    assert_eq!(wb[0].qp_num, p.b.qpn);
    assert_eq!(wb[0].imm_data, Some(0x1234_5678));
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
}

#[test]
fn write_read_and_atomics_use_the_srq_protection_domain() {
    let mut p = xrc_pair();
    let data = pattern(3000, 9);
    p.a.hca.mr_write(p.a.mr.handle, 0, &data).unwrap();
    let (b_addr, b_rkey) = (p.b.mr.addr, p.b.mr.rkey);
    p.b.hca
        .mr_write(p.b.mr.handle, 0x8000, &7u64.to_le_bytes())
        .unwrap();
    p.post_a(&[
        SendWr::new(
            1,
            WrOpcode::RdmaWrite {
                remote: RemoteAddr::new(b_addr + 0x100, b_rkey),
            },
        )
        .with_sge(p.sge_a(0, 3000))
        .signaled(),
        SendWr::new(
            2,
            WrOpcode::RdmaRead {
                remote: RemoteAddr::new(b_addr + 0x100, b_rkey),
            },
        )
        .with_sge(p.sge_a(0x10000, 3000))
        .signaled(),
        SendWr::new(
            3,
            WrOpcode::AtomicFetchAdd {
                remote_addr: b_addr + 0x8000,
                rkey: b_rkey,
                add: 5,
            },
        )
        .with_sge(p.sge_a(0x20000, 8))
        .signaled(),
        SendWr::new(
            4,
            WrOpcode::AtomicCmpSwp {
                remote_addr: b_addr + 0x8000,
                rkey: b_rkey,
                compare: 12,
                swap: 99,
            },
        )
        .with_sge(p.sge_a(0x20008, 8))
        .signaled(),
    ]);
    p.run(1_000_000_000);
    assert_eq!(
        p.a.done(),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success)
        ]
    );
    assert_eq!(p.b.mem(0x100, 3000), data);
    assert_eq!(p.a.mem(0x10000, 3000), data);
    assert_eq!(p.a.mem(0x20000, 8), 7u64.to_le_bytes());
    assert_eq!(p.a.mem(0x20008, 8), 12u64.to_le_bytes());
    assert_eq!(p.b.mem(0x8000, 8), 99u64.to_le_bytes());
    // Every request carried the XRCETH; READ responses and atomic ACKs came back as XRC.
    let srqn = p.b_srqn().unwrap();
    assert!(requests(&p)
        .iter()
        .all(|&(op, x)| op >= 0xa0 && x == Some(srqn)));
    let resp: Vec<u8> = p
        .log
        .iter()
        .filter(|(d, _)| *d == Dir::BtoA)
        .map(|(_, f)| RocePacket::parse(f).unwrap().transport.headers.bth.opcode.0)
        .collect();
    assert!(resp.contains(&Opcode::XRC_RDMA_READ_RESPONSE_FIRST.0));
    assert!(resp.contains(&Opcode::XRC_RDMA_READ_RESPONSE_LAST.0));
    assert!(resp.contains(&Opcode::XRC_ATOMIC_ACKNOWLEDGE.0));
    // No receive WQE was used and nothing completed at B.
    assert!(p.b.wcs().is_empty());
}

#[test]
fn empty_srq_draws_rnr_naks_until_a_receive_is_posted() {
    let mut p = xrc_pair();
    p.post_a(&[SendWr::new(1, WrOpcode::Send)
        .with_sge(p.sge_a(0, 64))
        .signaled()]);
    p.run(0);
    let rnr = p
        .log
        .iter()
        .filter(|(d, _)| *d == Dir::BtoA)
        .map(|(_, f)| RocePacket::parse(f).unwrap().transport.headers)
        .find(|h| h.aeth.is_some_and(|a| a.syndrome & 0xe0 == 0x20));
    assert!(rnr.is_some(), "an RNR NAK from the empty SRQ");
    assert_eq!(rnr.unwrap().bth.opcode, Opcode::XRC_ACKNOWLEDGE);
    p.b.post_recv(5, 0, 64);
    p.run(10_000_000_000);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.done(), vec![(5, WcStatus::Success)]);
}

/// Several initiators on A reach one target QP; each names one of B's SRQs, and each SRQ gets
/// exactly its own messages on its own CQ.
#[test]
fn one_target_serves_several_srqs_of_its_domain() {
    let mut p = xrc_pair();
    let b = &mut p.b;
    let xrcd = b.hca.qp(b.qpn).unwrap().xrcd().unwrap();
    let cq2 = b.hca.create_cq(64).unwrap();
    let attr = SrqInitAttr {
        max_wr: 16,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq2 = b.hca.create_xrc_srq(b.pd, xrcd, cq2, &attr).unwrap();
    let srqn2 = b.hca.srq_num(srq2).unwrap();
    let sge = Sge::new(b.mr.addr + 0x4000, 64, b.mr.lkey);
    b.hca
        .post_srq_recv(srq2, &[RecvWr::new(20, vec![sge])])
        .unwrap();
    p.b.post_recv(10, 0x2000, 64);
    p.a.hca.mr_write(p.a.mr.handle, 0, b"to-srq-1").unwrap();
    p.a.hca.mr_write(p.a.mr.handle, 64, b"to-srq-2").unwrap();
    let first = SendWr::new(1, WrOpcode::Send)
        .with_sge(p.sge_a(0, 8))
        .signaled();
    let second = SendWr::new(2, WrOpcode::Send)
        .with_sge(p.sge_a(64, 8))
        .signaled()
        .with_xrc_srqn(srqn2);
    let mut wrs = p.for_b(&[first]);
    wrs.push(second);
    p.a.hca.post_send(p.a.qpn, &wrs).unwrap();
    p.run(1_000_000_000);
    assert_eq!(
        p.a.done(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(p.b.done(), vec![(10, WcStatus::Success)]);
    let w2 = p.b.hca.poll_cq(cq2, 8).unwrap();
    assert_eq!(w2.len(), 1);
    assert_eq!((w2[0].wr_id, w2[0].byte_len), (20, 8));
    assert_eq!(p.b.mem(0x2000, 8), b"to-srq-1");
    assert_eq!(p.b.mem(0x4000, 8), b"to-srq-2");
}

/// The XRCETH names an SRQ number nobody has: NAK-Invalid RD Request at the ePSN, the
/// initiator's WR fails with IBV_WC_REM_INV_RD_REQ_ERR, both QPs end in ERR, the drop counter
/// counts it.
#[test]
fn unknown_srq_number_draws_nak_invalid_rd_request() {
    let mut p = xrc_pair();
    p.b.post_recv(1, 0, 64);
    let wr = SendWr::new(9, WrOpcode::Send)
        .with_sge(p.sge_a(0, 16))
        .signaled()
        .with_xrc_srqn(0xabcde);
    p.a.hca.post_send(p.a.qpn, &[wr]).unwrap();
    p.run(1_000_000_000);
    let nak = p
        .log
        .iter()
        .filter(|(d, _)| *d == Dir::BtoA)
        .map(|(_, f)| RocePacket::parse(f).unwrap().transport.headers)
        .next()
        .unwrap();
    assert_eq!(nak.bth.opcode, Opcode::XRC_ACKNOWLEDGE);
    assert_eq!(nak.aeth.unwrap().syndrome, 0x64);
    assert_eq!(nak.bth.psn.value(), 0x100);
    assert_eq!(p.a.done(), vec![(9, WcStatus::RemInvRdReqErr)]);
    assert_eq!(p.b.hca.counters().xrc_bad_srq, 1);
    assert_eq!(p.b.hca.query_qp(p.b.qpn).unwrap().qp_state, QpState::Err);
    assert_eq!(p.a.hca.query_qp(p.a.qpn).unwrap().qp_state, QpState::Err);
    // The SRQ's receive is untouched.
    assert!(p.b.wcs().is_empty());
    assert!(p.b.hca.poll_async_event().is_some_and(|e| matches!(
        e,
        AsyncEvent::QpRequestError { qpn } if qpn == p.b.qpn
    )));
}

/// An XRC SRQ of another XRC domain, and an ordinary SRQ, are XRCETH violations too.
#[test]
fn srq_of_another_domain_or_not_xrc_draws_nak_invalid_rd_request() {
    for ordinary in [false, true] {
        let mut p = xrc_pair();
        let b = &mut p.b;
        let attr = SrqInitAttr {
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
        };
        let other = if ordinary {
            b.hca.create_srq(b.pd, &attr).unwrap()
        } else {
            let xrcd2 = b.hca.alloc_xrcd().unwrap();
            b.hca.create_xrc_srq(b.pd, xrcd2, b.cq, &attr).unwrap()
        };
        let sge = Sge::new(b.mr.addr, 64, b.mr.lkey);
        b.hca
            .post_srq_recv(other, &[RecvWr::new(3, vec![sge])])
            .unwrap();
        let srqn = b.hca.srq_num(other).unwrap();
        let wr = SendWr::new(9, WrOpcode::Send)
            .with_sge(p.sge_a(0, 16))
            .signaled()
            .with_xrc_srqn(srqn);
        p.a.hca.post_send(p.a.qpn, &[wr]).unwrap();
        p.run(1_000_000_000);
        assert_eq!(
            p.a.done(),
            vec![(9, WcStatus::RemInvRdReqErr)],
            "{ordinary}"
        );
        assert_eq!(p.b.hca.counters().xrc_bad_srq, 1);
        assert!(p.b.wcs().is_empty());
    }
}

/// Within a message every packet names the message's SRQ: a MIDDLE naming another SRQ of the
/// domain is an XRCETH violation.
#[test]
fn srq_changing_within_a_message_draws_nak_invalid_rd_request() {
    let mut p = xrc_pair();
    let b = &mut p.b;
    let xrcd = b.hca.qp(b.qpn).unwrap().xrcd().unwrap();
    let attr = SrqInitAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq2 = b.hca.create_xrc_srq(b.pd, xrcd, b.cq, &attr).unwrap();
    let srqn2 = b.hca.srq_num(srq2).unwrap();
    p.b.post_recv(1, 0, 4096);
    p.inject(
        Dir::AtoB,
        hdr(Opcode::RC_SEND_FIRST, 0x100),
        &pattern(1024, 1),
    );
    let mut middle = hdr(Opcode::RC_SEND_MIDDLE, 0x101);
    middle.xrceth = Some(Xrceth {
        resv8: 0,
        xrcsrq: XrcSrqn::new(srqn2),
    });
    p.inject(Dir::AtoB, middle, &pattern(1024, 2));
    let out = p.drain(Dir::BtoA);
    let last = out.last().unwrap();
    assert_eq!(last.raw_opcode(), Opcode::XRC_ACKNOWLEDGE);
    assert_eq!((last.syndrome(), last.psn()), (Some(0x64), 0x101));
    assert_eq!(p.b.hca.counters().xrc_bad_srq, 1);
    // The receive the message had taken completes with flush error on the SRQ's CQ.
    assert_eq!(p.b.done(), vec![(1, WcStatus::WrFlushErr)]);
}

/// A packet with XRC opcodes (XRCETH) sent to an RC QP, and an RC packet sent to an XRC
/// target, are dropped by the header checks: no response, counted as wrong service.
#[test]
fn xrc_packets_to_rc_qps_and_rc_packets_to_xrc_targets_are_dropped() {
    let mut rc = Pair::new(0x100, 0x900, ConnectOptions::default());
    rc.b.post_recv(1, 0, 64);
    let mut h = hdr(Opcode::XRC_SEND_ONLY, 0x100);
    h.bth.ack_req = true;
    h.xrceth = Some(Xrceth {
        resv8: 0,
        xrcsrq: XrcSrqn::new(1),
    });
    rc.inject(Dir::AtoB, h, b"xrc");
    assert!(rc.drain(Dir::BtoA).is_empty());
    assert_eq!(rc.b.hca.counters().wrong_service, 1);
    assert!(rc.b.wcs().is_empty());

    let mut x = xrc_pair();
    x.b.post_recv(1, 0, 64);
    let mut f = x.frame(Dir::AtoB, hdr(Opcode::RC_SEND_ONLY, 0x100), b"rc!");
    // Back to the RC opcode (and an XRCETH-sized payload prefix, as a confused sender would).
    common::patch_opcode(&mut f, Opcode::RC_SEND_ONLY.0);
    x.inject_frame(Dir::AtoB, &f);
    assert!(x.drain(Dir::BtoA).is_empty());
    assert_eq!(x.b.hca.counters().wrong_service, 1);
    assert!(x.b.wcs().is_empty());
}

/// The target QP is shared: an opener holds it too, and it lives until the last holder
/// destroys it; after that, packets for it are dropped as for any absent QP.
#[test]
fn target_qp_lives_until_its_last_user_destroys_it() {
    let mut p = xrc_pair();
    let (qpn, xrcd) = (p.b.qpn, p.b.hca.qp(p.b.qpn).unwrap().xrcd().unwrap());
    p.b.hca.open_xrc_tgt_qp(xrcd, qpn).unwrap();
    assert_eq!(p.b.hca.qp(qpn).unwrap().opens(), 2);
    // The domain is held by the SRQ and the QP.
    assert!(matches!(
        p.b.hca.dealloc_xrcd(xrcd),
        Err(XrcdError::Busy { .. })
    ));
    p.b.hca.destroy_qp(qpn).unwrap();
    assert!(p.b.hca.qp(qpn).is_some(), "the opener still holds it");
    p.b.post_recv(1, 0, 64);
    p.post_a(&[SendWr::new(1, WrOpcode::Send)
        .with_sge(p.sge_a(0, 8))
        .signaled()]);
    p.run(1_000_000_000);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.done(), vec![(1, WcStatus::Success)]);
    p.b.hca.destroy_qp(qpn).unwrap();
    assert!(p.b.hca.qp(qpn).is_none());
    p.inject(Dir::AtoB, hdr(Opcode::RC_SEND_ONLY, 0x101), b"late");
    assert!(p.drain(Dir::BtoA).is_empty());
    assert_eq!(p.b.hca.counters().no_such_qp, 1);
    // Opening a QP that is gone fails; the domain is freed once its SRQ goes.
    assert!(matches!(
        p.b.hca.open_xrc_tgt_qp(xrcd, qpn),
        Err(XrcdError::NoSuchTgtQp { .. })
    ));
    let srq = p.b.srq.unwrap();
    p.b.hca.destroy_srq(srq).unwrap();
    p.b.hca.dealloc_xrcd(xrcd).unwrap();
}

#[test]
fn xrc_objects_refuse_what_they_do_not_have() {
    let mut p = xrc_pair();
    // Neither half has a receive queue.
    for qpn in [p.a.qpn, p.b.qpn] {
        let sge = Sge::new(0, 0, 0);
        assert!(matches!(
            p.a.hca
                .post_recv(qpn, &[RecvWr::new(1, vec![sge])])
                .or_else(|_| p.b.hca.post_recv(qpn, &[RecvWr::new(1, vec![sge])])),
            Err(PostRecvError::NoReceiveQueue { .. })
        ));
    }
    // A target has no send queue.
    assert!(p
        .b
        .hca
        .post_send(p.b.qpn, &[SendWr::new(1, WrOpcode::Send)])
        .is_err());
    // Targets are made in a domain, not a PD.
    let b = &mut p.b;
    let init = QpInitAttr::new(QpType::XrcRecv, b.cq, QpCap::default());
    assert_eq!(
        b.hca.create_qp(b.pd, &init),
        Err(CreateQpError::XrcTgtNeedsXrcd)
    );
    // An XRC SRQ holds its CQ.
    assert!(b.hca.destroy_cq(b.cq).is_err());
    let srq = b.srq.unwrap();
    assert!(matches!(
        b.hca.destroy_srq(srq),
        Ok(()) | Err(DestroySrqError::Busy { .. })
    ));
}

#[test]
fn xrc_over_a_4k_mtu_path_keeps_every_byte() {
    let opts = ConnectOptions {
        path_mtu: Mtu::Mtu4096,
        ..ConnectOptions::default()
    };
    let mut p = Pair::new_svc(Svc::Xrc, 5, 0xff_fffe, opts);
    let data = pattern(3 * 4096 + 17, 11);
    p.a.hca.mr_write(p.a.mr.handle, 0, &data).unwrap();
    p.b.post_recv(1, 0x10000, 4 * 4096);
    p.post_a(&[SendWr::new(1, WrOpcode::Send)
        .with_sge(p.sge_a(0, data.len() as u32))
        .signaled()]);
    p.run(1_000_000_000);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.mem(0x10000, data.len()), data);
}
