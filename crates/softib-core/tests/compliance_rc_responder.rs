//! IBA 9.7 compliance of the RC and XRC responder (seed 001: C9-60 … C9-158 and their o9
//! companions).
//!
//! Each test is named after the statement it checks. Requests are crafted and injected into
//! B as if A's requester had sent them (B's expected PSN starts at [`P`]); B's responses are
//! collected without being delivered, and every assertion is on the exact packets (opcode,
//! PSN, AETH syndrome, MSN, payload), the completions and the memory.
//!
//! A statement that also binds XRC runs its scenario (`<statement>_case(svc)`) twice: on an RC
//! pair in the test named after the statement, and on an XRC pair (B an XRC target whose
//! requests land in its XRC SRQ, `common::Svc::Xrc`) in `<statement>_xrc_...`, or for an HCA RC
//! rule whose XRC counterpart is an o9 statement, in `<o9 statement>_xrc_...` (C9-74's XRC
//! run is o9-39's test; C9-147 … C9-149's are o9-91.a1's). On XRC the requests carry an XRCETH
//! naming B's SRQ, and the harness checks every response for XRC opcodes and the "invalid"
//! credit code an SRQ sends.
//!
//! A statement that binds RD runs it a third time on an RD pair (`common::Svc::Rd`,
//! `<statement>_rd_...`, or `<o9 statement>_rd_...` where RD's rule is an o9 twin: C9-76's RD
//! run is o9-42's, C9-81's o9-48's): B's RD QP receives through B's EE context, which holds
//! the PSNs, and the harness checks every response for RD opcodes, an RDETH and credit bits 0.
//! Where RD differs, the scenario says so: an EE context's NAK ends the message, not the EE
//! context (no ERR, no flush; the requester resynchronises), and faults are armed on the EE
//! context's responder. RD's own rules are in `compliance_rd.rs`.

mod common;

use common::{hdr, patch_opcode, Dir, Pair, Seen, Svc};
use softib_core::setup::ConnectOptions;
use softib_core::verbs::mr::MrInfo;
use softib_core::verbs::types::{AccessFlags, QpState, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, Sge};
use softib_wire::aeth::{AethSyndrome, NakCode};
use softib_wire::atomic_eth::AtomicEth;
use softib_wire::immdt::ImmDt;
use softib_wire::opcode::Opcode;
use softib_wire::reth::Reth;
use softib_wire::transport::TransportHeaders;
use softib_wire::xrceth::Xrceth;
use softib_wire::XrcSrqn;

/// B's initial expected PSN (A's initial request PSN).
const P: u32 = 0x100;
/// Path MTU of the default connection.
const MTU: usize = 1024;
/// AETH syndrome of a positive ACK as these tests compare it: bits 4:0 of a positive ACK carry
/// B's end-to-end credit count, which `compliance_rc_credits.rs` checks, so [`syn`] reports
/// them cleared.
const ACK: u8 = 0x00;
const NAK_SEQ: u8 = 0x60;
const NAK_INV: u8 = 0x61;
const NAK_ACCESS: u8 = 0x62;
const NAK_REMOTE_OP: u8 = 0x63;

fn pair(svc: Svc) -> Pair {
    pair_with(svc, ConnectOptions::default())
}

fn pair_with(svc: Svc, o: ConnectOptions) -> Pair {
    Pair::new_svc(svc, P, 0x900, o)
}

fn deep() -> ConnectOptions {
    ConnectOptions {
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..ConnectOptions::default()
    }
}

fn psn(d: u32) -> u32 {
    P.wrapping_add(d) & 0xff_ffff
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

// ----- request builders --------------------------------------------------------------------

fn req(op: Opcode, psn: u32, ack_req: bool) -> TransportHeaders {
    let mut h = hdr(op, psn);
    h.bth.ack_req = ack_req;
    h
}

fn with_reth(mut h: TransportHeaders, va: u64, rkey: u32, len: u32) -> TransportHeaders {
    h.reth = Some(Reth {
        va,
        rkey,
        dma_len: len,
    });
    h
}

fn read_req(psn: u32, va: u64, rkey: u32, len: u32) -> TransportHeaders {
    with_reth(req(Opcode::RC_RDMA_READ_REQUEST, psn, true), va, rkey, len)
}

fn fetch_add(psn: u32, va: u64, rkey: u32, add: u64) -> TransportHeaders {
    let mut h = req(Opcode::RC_FETCH_ADD, psn, true);
    h.atomic_eth = Some(AtomicEth {
        va,
        rkey,
        swap_add: add,
        compare: 0,
    });
    h
}

/// Injects into B.
fn to_b(p: &mut Pair, h: TransportHeaders, payload: &[u8]) {
    p.inject(Dir::AtoB, h, payload);
}

/// What B transmits now.
fn from_b(p: &mut Pair) -> Vec<Seen> {
    p.drain(Dir::BtoA)
}

/// A SEND ONLY of `payload` at `psn`.
fn send_only(p: &mut Pair, psn: u32, ack_req: bool, payload: &[u8]) {
    to_b(p, req(Opcode::RC_SEND_ONLY, psn, ack_req), payload);
}

/// An RDMA WRITE ONLY of `payload` at byte `off` of B's region.
fn write_only(p: &mut Pair, psn: u32, off: u64, payload: &[u8]) {
    let (va, rkey) = (p.b.mr.addr + off, p.b.mr.rkey);
    let h = with_reth(
        req(Opcode::RC_RDMA_WRITE_ONLY, psn, true),
        va,
        rkey,
        payload.len() as u32,
    );
    to_b(p, h, payload);
}

/// An RDMA READ of `len` bytes at byte `off` of B's region.
fn read(p: &mut Pair, psn: u32, off: u64, len: u32) {
    let (va, rkey) = (p.b.mr.addr + off, p.b.mr.rkey);
    to_b(p, read_req(psn, va, rkey, len), &[]);
}

/// The AETH syndrome of a packet, with the credit bits of a positive ACK cleared (see [`ACK`]).
fn syn(s: &Seen) -> Option<u8> {
    s.syndrome()
        .map(|b| if b & 0x60 == 0 { b & 0xe0 } else { b })
}

/// (opcode, PSN, syndrome as [`syn`] reports it) of each packet.
fn ops(v: &[Seen]) -> Vec<(Opcode, u32, Option<u8>)> {
    v.iter().map(|s| (s.opcode(), s.psn(), syn(s))).collect()
}

/// The single response `out` holds is an Acknowledge with `syndrome` at `psn`.
#[track_caller]
fn assert_ack(out: &[Seen], syndrome: u8, psn: u32) {
    assert_eq!(
        ops(out),
        vec![(Opcode::RC_ACKNOWLEDGE, psn, Some(syndrome))],
        "{out:?}"
    );
}

fn is_nak(s: &Seen) -> bool {
    matches!(
        s.aeth_syndrome(),
        Some(AethSyndrome::Nak(_) | AethSyndrome::RnrNak { .. })
    )
}

/// A second region on B, of `pd` (B's own PD when `None`), with `access`.
fn extra_mr(p: &mut Pair, access: AccessFlags, other_pd: bool) -> MrInfo {
    let pd = if other_pd {
        p.b.hca.alloc_pd().unwrap()
    } else {
        p.b.pd
    };
    p.b.hca
        .reg_mr(pd, pattern(16 * 1024, 3), access, None)
        .unwrap()
}

/// The state of B's connection: its QP's, or on RD its EE context's.
/// Arms a one-shot responder fault on B's responder: its QP's, or on RD its EE context's.
fn arm_fault(p: &mut Pair, fault: softib_core::transport::rc::ResponderFault) {
    match p.b.eecn {
        Some(e) => p.b.hca.inject_eec_responder_fault(e, fault).unwrap(),
        None => p.b.hca.inject_responder_fault(p.b.qpn, fault).unwrap(),
    }
}

fn b_state(p: &Pair) -> QpState {
    p.b.conn_state()
}

/// The state B's connection is left in by a NAK that ends an RC or XRC connection (invalid
/// request, remote access or operational error): ERR, but RTS for an EE context, whose NAKs
/// end the message only (the requester resynchronises, docs/rd.md).
fn after_fatal_nak(svc: Svc) -> QpState {
    match svc {
        Svc::Rd => QpState::Rts,
        _ => QpState::Err,
    }
}

// ----- PSN classes (9.7.4.1.2) ----------------------------------------------------------------

#[test]
fn c9_74_request_psn_compared_with_epsn() {
    c9_74_case(Svc::Rc);
}

#[test]
fn o9_39_xrc_request_psn_compared_with_epsn() {
    c9_74_case(Svc::Xrc);
}

#[test]
fn o9_39_rd_request_psn_compared_with_epsn() {
    c9_74_case(Svc::Rd);
}

fn c9_74_case(svc: Svc) {
    let mut p = pair(svc);
    for i in 0..3 {
        p.recv_b(i + 1, 4096 * i, 256);
    }
    // PSN = ePSN: executed.
    send_only(&mut p, P, true, b"new");
    assert_ack(&from_b(&mut p), ACK, P);
    assert_eq!(p.b.done(), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.mem(0, 3), b"new");
    // PSN = ePSN - 1: a duplicate, acknowledged again, not executed.
    send_only(&mut p, P, true, b"dup");
    assert_ack(&from_b(&mut p), ACK, P);
    assert!(p.b.done().is_empty());
    assert_eq!(p.b.mem(4096, 3), vec![0; 3]);
    // PSN = ePSN + 1: invalid, NAK-PSN sequence error carrying ePSN.
    send_only(&mut p, psn(2), true, b"far");
    assert_ack(&from_b(&mut p), NAK_SEQ, psn(1));
    assert!(p.b.done().is_empty());
    assert_eq!(p.rq_psn_b(), psn(1));
}

#[test]
fn c9_75_epsn_skips_read_response_psns() {
    c9_75_case(Svc::Rc);
}

#[test]
fn o9_40_xrc_epsn_skips_read_response_psns() {
    c9_75_case(Svc::Xrc);
}

#[test]
fn o9_40_rd_epsn_skips_read_response_psns() {
    c9_75_case(Svc::Rd);
}

fn c9_75_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 8192, 256);
    // A READ of 3 PMTU at P produces 3 response packets: ePSN becomes P + 3.
    read(&mut p, P, 0, 3 * MTU as u32);
    let out = from_b(&mut p);
    assert_eq!(out.len(), 3);
    assert_eq!(p.rq_psn_b(), psn(3));
    // A request at P + 1 is a duplicate (inside the READ's PSN run), not a new request.
    send_only(&mut p, psn(1), true, b"x");
    assert_ack(&from_b(&mut p), ACK, psn(2));
    assert!(p.b.done().is_empty(), "the duplicate consumed no receive");
    // P + 3 is the next new request.
    send_only(&mut p, psn(3), true, b"y");
    assert_ack(&from_b(&mut p), ACK, psn(3));
    assert_eq!(p.b.done(), vec![(1, WcStatus::Success)]);
    // A zero-length READ takes exactly one PSN.
    read(&mut p, psn(4), 0, 0);
    assert_eq!(from_b(&mut p).len(), 1);
    assert_eq!(p.rq_psn_b(), psn(5));
}

#[test]
fn c9_76_epsn_moves_only_in_receiving_states() {
    c9_76_case(Svc::Rc);
}

#[test]
fn o9_41_xrc_epsn_moves_only_in_receiving_states() {
    c9_76_case(Svc::Xrc);
}

/// o9-42: an EE context updates ePSN only in a state that accepts requests. A second EE
/// context of B's RDD, in INIT, neither executes a request nor moves its ePSN; in RTR it
/// does, from its programmed ePSN; B's first EE context in ERR executes nothing and keeps its
/// ePSN, while the RD QP behind it (which does not enter ERR with it) still receives through
/// the other.
#[test]
fn o9_42_rd_epsn_moves_only_in_receiving_states() {
    use softib_core::verbs::ah::AhAttr;
    use softib_core::verbs::qp::{QpAttr, QpAttrMask};
    let mut p = pair(Svc::Rd);
    let rdd = p.b.rdd.unwrap();
    let e2 = p.b.hca.create_eec(rdd).unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    let mask = QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX;
    p.b.hca.modify_eec(e2, &init, mask).unwrap();
    p.recv_b(21, 0, 64);
    let via_e2 = |p: &mut Pair, psn: u32| {
        let mut h = req(Opcode::RC_SEND_ONLY, psn, true);
        h.rdeth = Some(softib_wire::rdeth::Rdeth { resv8: 0, eecn: e2 });
        p.inject(Dir::AtoB, h, b"via e2");
    };
    let rq_psn = |p: &Pair| p.b.hca.query_eec(e2).unwrap().rq_psn.value();
    let before = rq_psn(&p);
    via_e2(&mut p, before);
    assert!(from_b(&mut p).is_empty());
    assert!(p.b.done().is_empty(), "nothing executed in INIT");
    assert_eq!(rq_psn(&p), before);
    // In RTR it receives, from the programmed ePSN on.
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: AhAttr::global(1, softib_core::gid_of_ipv4(common::IP_A), 1),
        path_mtu: softib_core::verbs::types::Mtu::Mtu1024,
        dest_qp_num: p.a.eecn.unwrap().value(),
        rq_psn: softib_wire::Psn::new(0x4242),
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    let mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    p.b.hca.modify_eec(e2, &rtr, mask).unwrap();
    via_e2(&mut p, 0x4242);
    let out = from_b(&mut p);
    assert_eq!(ops(&out), vec![(Opcode::RC_ACKNOWLEDGE, 0x4242, Some(ACK))]);
    assert_eq!(
        out[0].headers.rdeth.map(|r| r.eecn),
        p.a.eecn,
        "answered through e2's remote EE context"
    );
    assert_eq!(p.b.done(), vec![(21, WcStatus::Success)]);
    assert_eq!(rq_psn(&p), 0x4243);
    // B's first EE context in ERR: nothing executed, ePSN stays; the RD QP is not in ERR
    // and keeps its receive.
    p.recv_b(1, 1024, 64);
    let err = QpAttr::to_state(QpState::Err);
    p.b.modify_conn(&err, QpAttrMask::STATE).unwrap();
    assert!(p.b.done().is_empty());
    send_only(&mut p, P, true, b"to an EEC in ERR");
    assert!(from_b(&mut p).is_empty());
    assert!(p.b.done().is_empty());
    assert_eq!(p.rq_psn_b(), P);
    assert_eq!(p.b.hca.query_qp(p.b.qpn).unwrap().qp_state, QpState::Rts);
    via_e2(&mut p, 0x4243);
    assert_ack(&from_b(&mut p), ACK, 0x4243);
    assert_eq!(p.b.done(), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.mem(1024, 6), b"via e2");
}

/// C9-76 on RC and o9-41 on XRC (RD's o9-42 has its own test above).
fn c9_76_case(svc: Svc) {
    use softib_core::verbs::ah::AhAttr;
    use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
    use softib_core::verbs::types::QpType;
    let mut p = pair(svc);
    // A second QP on B, brought to INIT only: on XRC a second target QP of B's XRC domain,
    // whose requests land in the same XRC SRQ.
    let q2 = match svc {
        Svc::Rc => {
            let cap = QpCap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            };
            let (pd, cq) = (p.b.pd, p.b.cq);
            p.b.hca
                .create_qp(pd, &QpInitAttr::new(QpType::Rc, cq, cap))
                .unwrap()
        }
        Svc::Xrc => {
            let xrcd = p.b.hca.qp(p.b.qpn).unwrap().xrcd().unwrap();
            p.b.hca.create_xrc_tgt_qp(xrcd).unwrap()
        }
        Svc::Rd => unreachable!("o9_42_rd_epsn_moves_only_in_receiving_states"),
    };
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: ConnectOptions::default().access,
        ..QpAttr::default()
    };
    let mask =
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS;
    p.b.hca.modify_qp(q2, &init, mask).unwrap();
    let sge = Sge {
        addr: p.b.mr.addr,
        length: 64,
        lkey: p.b.mr.lkey,
    };
    match svc {
        Svc::Rc => {
            p.b.hca
                .post_recv(q2, &[RecvWr::new(21, vec![sge])])
                .unwrap()
        }
        _ => p.b.post_recv_wrs(&[RecvWr::new(21, vec![sge])]),
    }
    let to_q2 = |p: &mut Pair, psn: u32| {
        let mut f = p.frame(Dir::AtoB, req(Opcode::RC_SEND_ONLY, psn, true), b"to q2");
        common::patch_transport(&mut f, |t| {
            t[5..8].copy_from_slice(&q2.value().to_be_bytes()[1..])
        });
        p.inject_frame(Dir::AtoB, &f);
    };
    let rq_psn = |p: &Pair| p.b.hca.query_qp(q2).unwrap().rq_psn.value();
    let before = rq_psn(&p);
    to_q2(&mut p, before);
    assert!(from_b(&mut p).is_empty());
    assert!(p.b.done().is_empty(), "nothing executed in INIT");
    assert_eq!(rq_psn(&p), before);
    // In RTR it receives, from the programmed ePSN on.
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: AhAttr::global(1, softib_core::gid_of_ipv4(common::IP_A), 1),
        path_mtu: softib_core::verbs::types::Mtu::Mtu1024,
        dest_qp_num: p.a.qpn.value(),
        rq_psn: softib_wire::Psn::new(0x4242),
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    let mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    p.b.hca.modify_qp(q2, &rtr, mask).unwrap();
    to_q2(&mut p, 0x4242);
    assert_ack(&from_b(&mut p), ACK, 0x4242);
    assert_eq!(p.b.done(), vec![(21, WcStatus::Success)]);
    assert_eq!(rq_psn(&p), 0x4243);
    // In ERR nothing is executed and ePSN stays. An RC QP's receive is flushed by the move to
    // ERR; an XRC target's SRQ is not the QP's, so its receive stays posted.
    p.recv_b(1, 0, 64);
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    p.b.hca.modify_qp(p.b.qpn, &err, QpAttrMask::STATE).unwrap();
    let flushed = match svc {
        Svc::Rc => vec![(1, WcStatus::WrFlushErr)],
        _ => vec![],
    };
    assert_eq!(p.b.done(), flushed);
    send_only(&mut p, P, true, b"to a QP in ERR");
    assert!(from_b(&mut p).is_empty());
    assert!(p.b.done().is_empty());
    assert_eq!(p.rq_psn_b(), P);
    assert_eq!(p.b.mem(0, 5), b"to q2");
    if svc == Svc::Xrc {
        // The SRQ's receive was not consumed by the QP in ERR: the QP in RTS takes it.
        to_q2(&mut p, 0x4243);
        assert_ack(&from_b(&mut p), ACK, 0x4243);
        assert_eq!(p.b.done(), vec![(1, WcStatus::Success)]);
    }
}

#[test]
fn c9_77_new_request_executed_and_acknowledged() {
    c9_77_case(Svc::Rc);
}

#[test]
fn o9_43_xrc_new_request_executed_and_acknowledged() {
    c9_77_case(Svc::Xrc);
}

#[test]
fn o9_43_rd_new_request_executed_and_acknowledged() {
    c9_77_case(Svc::Rd);
}

fn c9_77_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(7, 0, 4096);
    let data = pattern(MTU + 100, 1);
    to_b(&mut p, req(Opcode::RC_SEND_FIRST, P, false), &data[..MTU]);
    assert!(from_b(&mut p).is_empty(), "no AckReq yet: the ACK may wait");
    to_b(
        &mut p,
        req(Opcode::RC_SEND_LAST, psn(1), true),
        &data[MTU..],
    );
    let out = from_b(&mut p);
    assert_ack(&out, ACK, psn(1));
    assert_eq!(out[0].msn(), Some(1));
    let wc = p.b.wcs();
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, data.len() as u32)
    );
    assert_eq!(p.b.mem(0, data.len()), data);
    assert_eq!(p.rq_psn_b(), psn(2));
}

#[test]
fn c9_79_invalid_psn_naks_after_completing_earlier_requests() {
    c9_79_case(Svc::Rc);
}

#[test]
fn o9_45_xrc_invalid_psn_naks_after_completing_earlier_requests() {
    c9_79_case(Svc::Xrc);
}

#[test]
fn o9_45_rd_invalid_psn_naks_after_completing_earlier_requests() {
    c9_79_case(Svc::Rd);
}

fn c9_79_case(svc: Svc) {
    let mut p = pair(svc);
    for i in 0..3 {
        p.recv_b(i + 1, 1024 * i, 64);
    }
    send_only(&mut p, P, false, b"one");
    send_only(&mut p, psn(1), false, b"two");
    // P + 2 is lost; P + 3 arrives.
    send_only(&mut p, psn(3), true, b"four");
    let out = from_b(&mut p);
    // One NAK-PSN sequence error carrying ePSN; its MSN shows both earlier SENDs completed.
    assert_ack(&out, NAK_SEQ, psn(2));
    assert_eq!(out[0].msn(), Some(2));
    assert_eq!(
        p.b.done(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    // The early packet was not executed and ePSN did not move.
    assert_eq!(p.b.mem(2048, 4), vec![0; 4]);
    assert_eq!(p.rq_psn_b(), psn(2));
    assert_eq!(b_state(&p), QpState::Rts, "the connection is not torn down");
}

/// B after a NAK-PSN sequence error: SEND P and P+1 executed, P+3 drew the NAK (ePSN P+2).
fn after_seq_nak(svc: Svc) -> Pair {
    let mut p = pair(svc);
    for i in 0..4 {
        p.recv_b(i + 1, 1024 * i, 64);
    }
    send_only(&mut p, P, false, b"a");
    send_only(&mut p, psn(1), false, b"b");
    send_only(&mut p, psn(3), true, b"d");
    assert_ack(&from_b(&mut p), NAK_SEQ, psn(2));
    p
}

#[test]
fn c9_80_silent_after_sequence_nak_until_valid_request() {
    c9_80_case(Svc::Rc);
}

#[test]
fn o9_46_xrc_silent_after_sequence_nak_until_valid_request() {
    c9_80_case(Svc::Xrc);
}

#[test]
fn o9_46_rd_silent_after_sequence_nak_until_valid_request() {
    c9_80_case(Svc::Rd);
}

fn c9_80_case(svc: Svc) {
    let mut p = after_seq_nak(svc);
    // More ahead-of-sequence packets: silence.
    send_only(&mut p, psn(4), true, b"e");
    write_only(&mut p, psn(5), 8192, b"w");
    send_only(&mut p, psn(3), true, b"d");
    assert!(from_b(&mut p).is_empty());
    // A valid duplicate is answered.
    send_only(&mut p, P, false, b"a");
    assert_ack(&from_b(&mut p), ACK, psn(1));
    // The retransmission at ePSN is executed and acknowledged.
    send_only(&mut p, psn(2), true, b"c");
    assert_ack(&from_b(&mut p), ACK, psn(2));
    send_only(&mut p, psn(3), true, b"d");
    assert_ack(&from_b(&mut p), ACK, psn(3));
    assert_eq!(p.b.done().len(), 4);
}

#[test]
fn c9_114_no_other_nak_while_sequence_nak_outstanding() {
    c9_114_case(Svc::Rc);
}

#[test]
fn c9_114_xrc_no_other_nak_while_sequence_nak_outstanding() {
    c9_114_case(Svc::Xrc);
}

#[test]
fn c9_114_rd_no_other_nak_while_sequence_nak_outstanding() {
    c9_114_case(Svc::Rd);
}

fn c9_114_case(svc: Svc) {
    let mut p = after_seq_nak(svc);
    // Ahead-of-sequence packets that would be invalid requests if new draw no NAK either.
    to_b(&mut p, req(Opcode::RC_SEND_MIDDLE, psn(3), true), &[0; MTU]);
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    to_b(&mut p, read_req(psn(4), va, rkey, (1 << 31) + 1), &[]);
    let mut bad = p.frame(Dir::AtoB, req(Opcode::RC_SEND_ONLY, psn(5), true), b"zz");
    patch_opcode(&mut bad, reserved(svc, 0x1e));
    p.inject_frame(Dir::AtoB, &bad);
    let end = p.b.mr.length - 1;
    write_only(&mut p, psn(6), end, b"past the end");
    assert!(from_b(&mut p).is_empty());
    assert_eq!(b_state(&p), QpState::Rts);
    // The valid request at ePSN is handled normally again.
    send_only(&mut p, psn(2), true, b"c");
    assert_ack(&from_b(&mut p), ACK, psn(2));
}

#[test]
fn c9_121_sequence_nak_carries_epsn_of_lost_packet() {
    c9_121_case(Svc::Rc);
}

#[test]
fn c9_121_xrc_sequence_nak_carries_epsn_of_lost_packet() {
    c9_121_case(Svc::Xrc);
}

#[test]
fn c9_121_rd_sequence_nak_carries_epsn_of_lost_packet() {
    c9_121_case(Svc::Rd);
}

fn c9_121_case(svc: Svc) {
    // Three SENDs; on RD, whose EE context sends one message at a time (a lost packet is
    // detected by the next packet of the same message), each of three packets.
    let len = match svc {
        Svc::Rd => 2 * MTU + 100,
        _ => 100,
    };
    let mut p = pair(svc);
    let data = pattern(3 * len, 9);
    p.a.hca.mr_write(p.a.mr.handle, 0, &data).unwrap();
    for i in 0..3u64 {
        p.recv_b(i + 1, 4096 * i, len as u32);
    }
    let mut dropped = false;
    p.filter = Box::new(move |d, f| {
        let s = common::decode(f);
        if d == Dir::AtoB && s.psn() == psn(1) && !dropped {
            dropped = true;
            return false;
        }
        true
    });
    let wrs: Vec<_> = (0..3u64)
        .map(|i| {
            softib_core::verbs::wr::SendWr::new(i + 1, softib_core::verbs::wr::WrOpcode::Send)
                .with_sge(p.sge_a(len as u64 * i, len as u32))
                .signaled()
        })
        .collect();
    p.post_a(&wrs);
    p.run(10_000_000_000);
    let naks: Vec<_> = p
        .log
        .iter()
        .filter(|(d, _)| *d == Dir::BtoA)
        .map(|(_, f)| common::decode(f))
        .filter(is_nak)
        .collect();
    assert_eq!(naks.len(), 1, "{naks:?}");
    assert_eq!(
        (naks[0].psn(), naks[0].syndrome()),
        (psn(1), Some(NAK_SEQ)),
        "the NAK names the lost packet's PSN"
    );
    // No receive WQE was consumed by the out-of-order packet: each SEND landed in its own.
    let wc = p.b.wcs();
    let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect();
    assert_eq!(
        got,
        (1..=3)
            .map(|i| (i, WcStatus::Success, len as u32))
            .collect::<Vec<_>>()
    );
    for i in 0..3 {
        assert_eq!(p.b.mem(4096 * i, len), data[len * i..len * (i + 1)]);
    }
    assert_eq!(p.a.done().len(), 3);
}

#[test]
fn c9_122_requests_after_sequence_nak_discarded_unless_epsn_or_duplicate() {
    c9_122_case(Svc::Rc);
}

#[test]
fn c9_122_xrc_requests_after_sequence_nak_discarded_unless_epsn_or_duplicate() {
    c9_122_case(Svc::Xrc);
}

#[test]
fn c9_122_rd_requests_after_sequence_nak_discarded_unless_epsn_or_duplicate() {
    c9_122_case(Svc::Rd);
}

fn c9_122_case(svc: Svc) {
    let mut p = after_seq_nak(svc);
    assert_eq!(p.b.done().len(), 2);
    // Ahead-of-sequence packets are not executed: no receive consumed, no memory written.
    send_only(&mut p, psn(3), true, b"d");
    write_only(&mut p, psn(4), 8192, b"written?");
    assert!(from_b(&mut p).is_empty());
    assert_eq!(p.b.done(), vec![]);
    assert_eq!(p.b.mem(8192, 8), vec![0; 8]);
    assert_eq!(p.rq_psn_b(), psn(2));
    // A duplicate is still answered (and not executed again).
    send_only(&mut p, psn(1), true, b"b");
    assert_ack(&from_b(&mut p), ACK, psn(1));
    assert_eq!(p.b.done(), vec![]);
}

// ----- opcode sequence and validation (9.7.4.1.3, 9.7.4.1.4) ---------------------------------

/// One request packet: headers and payload.
type Packet = (TransportHeaders, Vec<u8>);
/// What a case shows, its packets, and the PSN the NAK must carry.
type Case = (&'static str, Vec<Packet>, u32);

/// Injects `packets` into a fresh pair (receives posted) and returns B's responses.
fn fresh_run(svc: Svc, packets: &[Packet]) -> (Pair, Vec<Seen>) {
    let mut p = pair(svc);
    for i in 0..4 {
        p.recv_b(i + 1, 4096 * i, 4096);
    }
    let (va, rkey) = (p.b.mr.addr + 65536, p.b.mr.rkey);
    for (h, payload) in packets {
        let mut h = *h;
        if let Some(r) = h.reth.as_mut() {
            r.va = va;
            r.rkey = rkey;
        }
        to_b(&mut p, h, payload);
    }
    let out = from_b(&mut p);
    (p, out)
}

fn first(op: Opcode, psn: u32) -> Packet {
    let h = req(op, psn, false);
    let h = if op == Opcode::RC_RDMA_WRITE_FIRST {
        with_reth(h, 0, 0, 3 * MTU as u32)
    } else {
        h
    };
    (h, vec![1; MTU])
}

fn pkt(op: Opcode, psn: u32, len: usize) -> Packet {
    let h = req(op, psn, true);
    let h = if matches!(op, Opcode::RC_RDMA_WRITE_ONLY | Opcode::RC_RDMA_WRITE_FIRST) {
        with_reth(h, 0, 0, len as u32)
    } else {
        h
    };
    (h, vec![2; len])
}

#[test]
fn c9_81_opcode_sequence_violations_nak_invalid_request() {
    c9_81_case(Svc::Rc);
}

#[test]
fn o9_47_xrc_opcode_sequence_violations_nak_invalid_request() {
    c9_81_case(Svc::Xrc);
}

#[test]
fn o9_48_rd_opcode_sequence_violations_nak_invalid_request() {
    c9_81_case(Svc::Rd);
}

fn c9_81_case(svc: Svc) {
    use Opcode as O;
    let cases: Vec<Case> = vec![
        (
            "MIDDLE with no FIRST",
            vec![pkt(O::RC_SEND_MIDDLE, P, MTU)],
            P,
        ),
        ("LAST with no FIRST", vec![pkt(O::RC_SEND_LAST, P, 8)], P),
        (
            "FIRST after FIRST",
            vec![first(O::RC_SEND_FIRST, P), first(O::RC_SEND_FIRST, psn(1))],
            psn(1),
        ),
        (
            "ONLY after FIRST",
            vec![first(O::RC_SEND_FIRST, P), pkt(O::RC_SEND_ONLY, psn(1), 8)],
            psn(1),
        ),
        (
            "RDMA WRITE MIDDLE after SEND FIRST",
            vec![
                first(O::RC_SEND_FIRST, P),
                pkt(O::RC_RDMA_WRITE_MIDDLE, psn(1), MTU),
            ],
            psn(1),
        ),
        (
            "SEND LAST after RDMA WRITE FIRST",
            vec![
                first(O::RC_RDMA_WRITE_FIRST, P),
                pkt(O::RC_SEND_LAST, psn(1), 8),
            ],
            psn(1),
        ),
        (
            "MIDDLE after ONLY",
            vec![
                pkt(O::RC_SEND_ONLY, P, 8),
                pkt(O::RC_SEND_MIDDLE, psn(1), MTU),
            ],
            psn(1),
        ),
    ];
    for (what, packets, bad) in cases {
        let (_, out) = fresh_run(svc, &packets);
        let naks: Vec<_> = out.iter().filter(|s| is_nak(s)).collect();
        assert_eq!(naks.len(), 1, "{what}: {out:?}");
        assert_eq!(
            (naks[0].opcode(), naks[0].psn(), naks[0].syndrome()),
            (O::RC_ACKNOWLEDGE, bad, Some(NAK_INV)),
            "{what}"
        );
    }
}

#[test]
fn c9_82_function_and_resources_checked_before_execution() {
    c9_82_case(Svc::Rc);
}

#[test]
fn c9_82_xrc_function_and_resources_checked_before_execution() {
    c9_82_case(Svc::Xrc);
}

#[test]
fn c9_82_rd_function_and_resources_checked_before_execution() {
    c9_82_case(Svc::Rd);
}

fn c9_82_case(svc: Svc) {
    // An ATOMIC on a receive queue without remote atomics: refused before it runs.
    let mut p = pair_with(
        svc,
        ConnectOptions {
            access: ConnectOptions::default().access - AccessFlags::REMOTE_ATOMIC,
            ..ConnectOptions::default()
        },
    );
    p.b.hca
        .mr_write(p.b.mr.handle, 64, &7u64.to_le_bytes())
        .unwrap();
    let (va, rkey) = (p.b.mr.addr + 64, p.b.mr.rkey);
    to_b(&mut p, fetch_add(P, va, rkey, 1), &[]);
    let out = from_b(&mut p);
    assert_eq!(out.len(), 1);
    assert!(is_nak(&out[0]));
    assert!(out[0].headers.atomic_ack_eth.is_none());
    assert_eq!(p.b.mem(64, 8), 7u64.to_le_bytes());
    assert_eq!(p.rq_psn_b(), P);
    // An ATOMIC beyond the READ/ATOMIC resources (1): refused before it runs.
    let mut p = pair(svc);
    p.b.hca
        .mr_write(p.b.mr.handle, 64, &7u64.to_le_bytes())
        .unwrap();
    to_b(&mut p, fetch_add(P, va, rkey, 1), &[]);
    to_b(&mut p, fetch_add(psn(1), va, rkey, 1), &[]);
    assert_eq!(p.b.mem(64, 8), 8u64.to_le_bytes(), "only the first one ran");
    assert_eq!(p.rq_psn_b(), psn(1));
    let out = from_b(&mut p);
    assert_eq!(out[0].op_psn(), (Opcode::RC_ATOMIC_ACKNOWLEDGE, P));
    assert!(is_nak(&out[1]));
}

#[test]
fn c9_83_unsupported_function_naks_invalid_request() {
    c9_83_case(Svc::Rc);
}

#[test]
fn o9_50_xrc_unsupported_function_naks_invalid_request() {
    c9_83_case(Svc::Xrc);
}

#[test]
fn o9_50_rd_unsupported_function_naks_invalid_request() {
    c9_83_case(Svc::Rd);
}

fn c9_83_case(svc: Svc) {
    let all = ConnectOptions::default().access;
    for missing in [
        AccessFlags::REMOTE_WRITE,
        AccessFlags::REMOTE_READ,
        AccessFlags::REMOTE_ATOMIC,
    ] {
        let mut p = pair_with(
            svc,
            ConnectOptions {
                access: all - missing,
                ..ConnectOptions::default()
            },
        );
        p.b.hca
            .mr_write(p.b.mr.handle, 0, &7u64.to_le_bytes())
            .unwrap();
        let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
        match missing {
            AccessFlags::REMOTE_WRITE => write_only(&mut p, P, 64, b"no rdma write"),
            AccessFlags::REMOTE_READ => read(&mut p, P, 0, 64),
            _ => to_b(&mut p, fetch_add(P, va, rkey, 1), &[]),
        }
        assert_ack(&from_b(&mut p), NAK_INV, P);
        assert_eq!(p.b.mem(0, 8), 7u64.to_le_bytes(), "{missing:?}");
        assert_eq!(p.b.mem(64, 4), vec![0; 4], "{missing:?}");
    }
}

/// Reserved RC opcodes (IBA Table 38): 0x15, 0x18..=0x1B, 0x1E, 0x1F (XRC's are the same
/// operation bits).
const RESERVED_RC_OPCODES: [u8; 7] = [0x15, 0x18, 0x19, 0x1a, 0x1b, 0x1e, 0x1f];
/// The operation bits of the reserved RD opcodes: 0x56 ..= 0x5B, 0x5E, 0x5F (RD has no SEND
/// with invalidate, and 0x55 is its RESYNC).
const RESERVED_RD_OPCODES: [u8; 8] = [0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1e, 0x1f];

/// The operation bits of `svc`'s reserved opcodes.
fn reserved_ops(svc: Svc) -> Vec<u8> {
    match svc {
        Svc::Rd => RESERVED_RD_OPCODES.to_vec(),
        _ => RESERVED_RC_OPCODES.to_vec(),
    }
}

/// The reserved opcode of operation bits `op` (one of [`reserved_ops`]) in `svc`'s class:
/// 0x15 is RC's, 0xB5 XRC's, 0x56 RD's.
fn reserved(svc: Svc, op: u8) -> u8 {
    assert!(reserved_ops(svc).contains(&op));
    svc.opcode(Opcode(op)).0
}

#[test]
fn c9_84_reserved_opcode_naks_invalid_request() {
    c9_84_case(Svc::Rc);
}

#[test]
fn o9_51_xrc_reserved_opcode_naks_invalid_request() {
    c9_84_case(Svc::Xrc);
}

#[test]
fn o9_51_rd_reserved_opcode_naks_invalid_request() {
    c9_84_case(Svc::Rd);
}

fn c9_84_case(svc: Svc) {
    // The reserved codes of the QP's own class (RC: 0x15 ..., XRC: 0xB5 ..., RD: 0x56 ...).
    for op in reserved_ops(svc).into_iter().map(|op| reserved(svc, op)) {
        let mut p = pair(svc);
        p.recv_b(1, 0, 64);
        let mut f = p.frame(Dir::AtoB, req(Opcode::RC_SEND_ONLY, P, true), b"12345678");
        patch_opcode(&mut f, op);
        p.inject_frame(Dir::AtoB, &f);
        let out = from_b(&mut p);
        assert_ack(&out, NAK_INV, P);
        assert_eq!(p.b.mem(0, 8), vec![0; 8], "opcode {op:#x} not executed");
        // The QP enters ERR after the NAK: an RC QP's own receive is flushed, an XRC SRQ's
        // stays posted (the SRQ is not the QP's); neither was consumed by the packet. An EE
        // context stays in RTS and its RD QP keeps its receive.
        let flushed = match svc {
            Svc::Rc => vec![(1, WcStatus::WrFlushErr)],
            Svc::Xrc | Svc::Rd => vec![],
        };
        assert_eq!(p.b.done(), flushed, "opcode {op:#x}");
        assert_eq!(b_state(&p), after_fatal_nak(svc), "opcode {op:#x}");
    }
    // Only a packet that is otherwise valid is judged: with a bad ICRC it is just dropped.
    let mut p = pair(svc);
    let mut f = p.frame(Dir::AtoB, req(Opcode::RC_SEND_ONLY, P, true), b"12345678");
    patch_opcode(&mut f, reserved(svc, 0x18));
    let n = f.len();
    f[n - 1] ^= 0x40;
    p.inject_frame(Dir::AtoB, &f);
    assert!(from_b(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().malformed, 1);
    // A reserved code of another reliable class (XRC's to an RC QP, RC's to an XRC target or
    // an RD QP) is a packet of the wrong service: dropped by the header checks, not judged.
    let other = match svc {
        Svc::Rc => Svc::Xrc,
        Svc::Xrc | Svc::Rd => Svc::Rc,
    };
    let mut f = p.frame(Dir::AtoB, req(Opcode::RC_SEND_ONLY, P, true), b"12345678");
    patch_opcode(&mut f, reserved(other, 0x18));
    p.inject_frame(Dir::AtoB, &f);
    assert!(from_b(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().wrong_service, 1);
    assert_eq!(b_state(&p), QpState::Rts);
}

#[test]
fn c9_85_pad_count_on_first_or_middle_naks_invalid_request() {
    c9_85_case(Svc::Rc);
}

#[test]
fn o9_52_xrc_pad_count_on_first_or_middle_naks_invalid_request() {
    c9_85_case(Svc::Xrc);
}

#[test]
fn o9_52_rd_pad_count_on_first_or_middle_naks_invalid_request() {
    c9_85_case(Svc::Rd);
}

fn c9_85_case(svc: Svc) {
    // SEND FIRST with PadCnt 1.
    let mut p = pair(svc);
    p.recv_b(1, 0, 4096);
    let f = p.frame_with_pad(
        Dir::AtoB,
        req(Opcode::RC_SEND_FIRST, P, false),
        &[5; MTU - 1],
        Some(1),
    );
    p.inject_frame(Dir::AtoB, &f);
    assert_ack(&from_b(&mut p), NAK_INV, P);
    // RDMA WRITE MIDDLE with PadCnt 3 after a good FIRST.
    let mut p = pair(svc);
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    let h = with_reth(
        req(Opcode::RC_RDMA_WRITE_FIRST, P, false),
        va,
        rkey,
        3 * MTU as u32,
    );
    to_b(&mut p, h, &[1; MTU]);
    let f = p.frame_with_pad(
        Dir::AtoB,
        req(Opcode::RC_RDMA_WRITE_MIDDLE, psn(1), false),
        &[2; MTU - 3],
        Some(3),
    );
    p.inject_frame(Dir::AtoB, &f);
    assert_ack(&from_b(&mut p), NAK_INV, psn(1));
    assert_eq!(
        p.b.mem(MTU, 4),
        vec![0; 4],
        "the padded MIDDLE was not placed"
    );
}

#[test]
fn c9_86_no_read_atomic_resources_naks_invalid_request() {
    c9_86_case(Svc::Rc);
}

#[test]
fn o9_53_xrc_no_read_atomic_resources_naks_invalid_request() {
    c9_86_case(Svc::Xrc);
}

#[test]
fn o9_53_rd_no_read_atomic_resources_naks_invalid_request() {
    c9_86_case(Svc::Rd);
}

fn c9_86_case(svc: Svc) {
    // max_dest_rd_atomic 1: a second READ while the first response is still owed is refused.
    let mut p = pair(svc);
    read(&mut p, P, 0, 64);
    read(&mut p, psn(1), 0, 64);
    let out = from_b(&mut p);
    assert_eq!(
        ops(&out),
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, P, Some(ACK)),
            (Opcode::RC_ACKNOWLEDGE, psn(1), Some(NAK_INV)),
        ]
    );
    // The same for an ATOMIC behind a READ.
    let mut p = pair(svc);
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    read(&mut p, P, 0, 64);
    to_b(&mut p, fetch_add(psn(1), va + 256, rkey, 1), &[]);
    let out = from_b(&mut p);
    assert_eq!(out[1].op_psn(), (Opcode::RC_ACKNOWLEDGE, psn(1)));
    assert_eq!(out[1].syndrome(), Some(NAK_INV));
    assert_eq!(p.b.mem(256, 8), vec![0; 8]);
    // Once the first response has gone out, the resource is free again.
    let mut p = pair(svc);
    read(&mut p, P, 0, 64);
    assert_eq!(from_b(&mut p).len(), 1);
    read(&mut p, psn(1), 0, 64);
    assert_eq!(
        ops(&from_b(&mut p)),
        vec![(Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn(1), Some(ACK))]
    );
}

#[test]
fn c9_87_requests_before_invalid_opcode_complete_before_nak() {
    c9_87_case(Svc::Rc);
}

#[test]
fn o9_54_xrc_requests_before_invalid_opcode_complete_before_nak() {
    c9_87_case(Svc::Xrc);
}

#[test]
fn o9_54_rd_requests_before_invalid_opcode_complete_before_nak() {
    c9_87_case(Svc::Rd);
}

fn c9_87_case(svc: Svc) {
    let mut p = pair(svc);
    for i in 0..3 {
        p.recv_b(i + 1, 1024 * i, 64);
    }
    send_only(&mut p, P, false, b"first");
    send_only(&mut p, psn(1), false, b"second");
    let mut f = p.frame(Dir::AtoB, req(Opcode::RC_SEND_ONLY, psn(2), true), b"bad!");
    patch_opcode(&mut f, reserved(svc, 0x1b));
    p.inject_frame(Dir::AtoB, &f);
    // Both SENDs completed before the NAK went out...
    let wc = p.b.wcs();
    assert_eq!(
        wc.iter()
            .map(|w| (w.wr_id, w.status, w.byte_len))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, 5), (2, WcStatus::Success, 6)]
    );
    // ...and the NAK, with the bad packet's PSN, reports them done through its MSN.
    let out = from_b(&mut p);
    assert_ack(&out, NAK_INV, psn(2));
    assert_eq!(out[0].msn(), Some(2));
}

// ----- R_Key (9.7.4.1.5) ------------------------------------------------------------------------

#[test]
fn c9_88_zero_length_rdma_skips_rkey_check() {
    c9_88_case(Svc::Rc);
}

#[test]
fn o9_55_xrc_zero_length_rdma_skips_rkey_check() {
    c9_88_case(Svc::Xrc);
}

#[test]
fn o9_55_rd_zero_length_rdma_skips_rkey_check() {
    c9_88_case(Svc::Rd);
}

fn c9_88_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(9, 0, 64);
    let garbage = (0xdead_0000_u64, 0x0bad_cafe_u32);
    // Zero-length RDMA WRITE with a garbage R_Key: acknowledged.
    let h = with_reth(
        req(Opcode::RC_RDMA_WRITE_ONLY, P, true),
        garbage.0,
        garbage.1,
        0,
    );
    to_b(&mut p, h, &[]);
    assert_ack(&from_b(&mut p), ACK, P);
    // Zero-length RDMA WRITE with immediate: acknowledged, the immediate consumes a receive.
    let mut h = with_reth(
        req(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, psn(1), true),
        garbage.0,
        garbage.1,
        0,
    );
    h.immdt = Some(ImmDt { imm: 0x1234_5678 });
    to_b(&mut p, h, &[]);
    assert_ack(&from_b(&mut p), ACK, psn(1));
    let wc = p.b.wcs();
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].imm_data),
        (
            9,
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            Some(0x1234_5678)
        )
    );
    // Zero-length RDMA READ with a garbage R_Key: one empty Read Response Only.
    to_b(&mut p, read_req(psn(2), garbage.0, garbage.1, 0), &[]);
    let out = from_b(&mut p);
    assert_eq!(
        ops(&out),
        vec![(Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn(2), Some(ACK))]
    );
    assert!(out[0].payload.is_empty());
    assert_eq!(b_state(&p), QpState::Rts);
}

#[test]
fn c9_89_rkey_violations_nak_remote_access_error() {
    c9_89_case(Svc::Rc);
}

#[test]
fn c9_89_xrc_rkey_violations_nak_remote_access_error() {
    c9_89_case(Svc::Xrc);
}

#[test]
fn c9_89_rd_rkey_violations_nak_remote_access_error() {
    c9_89_case(Svc::Rd);
}

fn c9_89_case(svc: Svc) {
    let cases = [
        "WRITE past the end of the region",
        "wrong R_Key",
        "READ without remote read right",
        "WRITE to a region of another PD",
        "ATOMIC with a wrong R_Key",
    ];
    for (i, what) in cases.iter().enumerate() {
        let mut p = pair(svc);
        // A good WRITE first, so the offending packet is not the first PSN.
        write_only(&mut p, P, 0, b"ok");
        assert_ack(&from_b(&mut p), ACK, P);
        let (addr, len, rkey) = (p.b.mr.addr, p.b.mr.length, p.b.mr.rkey);
        let bad = psn(1);
        match i {
            0 => write_only(&mut p, bad, len - 8, &[1; 16]),
            1 => {
                let h = with_reth(
                    req(Opcode::RC_RDMA_WRITE_ONLY, bad, true),
                    addr,
                    rkey ^ 0x5a5a_0000,
                    16,
                );
                to_b(&mut p, h, &[1; 16]);
            }
            2 => {
                let mr = extra_mr(
                    &mut p,
                    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                    false,
                );
                to_b(&mut p, read_req(bad, mr.addr, mr.rkey, 64), &[]);
            }
            3 => {
                let mr = extra_mr(
                    &mut p,
                    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                    true,
                );
                let h = with_reth(
                    req(Opcode::RC_RDMA_WRITE_ONLY, bad, true),
                    mr.addr,
                    mr.rkey,
                    16,
                );
                to_b(&mut p, h, &[1; 16]);
                assert_eq!(
                    p.b.hca.mr_bytes(mr.handle).unwrap()[..16],
                    pattern(16, 3)[..],
                    "{what}"
                );
            }
            _ => to_b(&mut p, fetch_add(bad, addr, rkey ^ 1, 1), &[]),
        }
        let out = from_b(&mut p);
        assert_eq!(
            ops(&out),
            vec![(Opcode::RC_ACKNOWLEDGE, bad, Some(NAK_ACCESS))],
            "{what}"
        );
        assert_eq!(p.b.mem(len as usize - 8, 8), vec![0; 8], "{what}");
    }
    if svc == Svc::Xrc {
        xrc_rkey_checked_in_the_pd_of_the_named_srq();
    }
}

/// XRC: a request's R_Key is checked in the protection domain of the XRC SRQ its XRCETH
/// names. A second SRQ of B's domain in another PD, with a region of that PD: a WRITE to the
/// region through that SRQ is executed, the same WRITE through B's first SRQ is a PD violation.
fn xrc_rkey_checked_in_the_pd_of_the_named_srq() {
    use softib_core::verbs::srq::SrqInitAttr;
    let mut p = pair(Svc::Xrc);
    let srqn1 = p.b_srqn().unwrap();
    let b = &mut p.b;
    let pd2 = b.hca.alloc_pd().unwrap();
    let xrcd = b.hca.qp(b.qpn).unwrap().xrcd().unwrap();
    let attr = SrqInitAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq2 = b.hca.create_xrc_srq(pd2, xrcd, b.cq, &attr).unwrap();
    let srqn2 = b.hca.srq_num(srq2).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr2 = b.hca.reg_mr(pd2, vec![0; 4096], access, None).unwrap();
    let write = |psn: u32, srqn: u32| {
        let mut h = with_reth(
            req(Opcode::RC_RDMA_WRITE_ONLY, psn, true),
            mr2.addr,
            mr2.rkey,
            8,
        );
        h.xrceth = Some(Xrceth {
            resv8: 0,
            xrcsrq: XrcSrqn::new(srqn),
        });
        h
    };
    to_b(&mut p, write(P, srqn2), b"via srq2");
    assert_ack(&from_b(&mut p), ACK, P);
    assert_eq!(p.b.hca.mr_bytes(mr2.handle).unwrap()[..8], *b"via srq2");
    to_b(&mut p, write(psn(1), srqn1), b"via srq1");
    assert_ack(&from_b(&mut p), NAK_ACCESS, psn(1));
    assert_eq!(p.b.hca.mr_bytes(mr2.handle).unwrap()[..8], *b"via srq2");
}

#[test]
fn c9_90_requests_before_rkey_violation_complete_before_nak() {
    c9_90_case(Svc::Rc);
}

#[test]
fn c9_90_xrc_requests_before_rkey_violation_complete_before_nak() {
    c9_90_case(Svc::Xrc);
}

#[test]
fn c9_90_rd_requests_before_rkey_violation_complete_before_nak() {
    c9_90_case(Svc::Rd);
}

fn c9_90_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 0, 64);
    send_only(&mut p, P, false, b"before");
    let (addr, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    let h = with_reth(
        req(Opcode::RC_RDMA_WRITE_ONLY, psn(1), true),
        addr,
        rkey.wrapping_add(1),
        8,
    );
    to_b(&mut p, h, b"bad key!");
    assert_eq!(p.b.done()[0], (1, WcStatus::Success));
    let out = from_b(&mut p);
    assert_ack(&out, NAK_ACCESS, psn(1));
    assert_eq!(
        out[0].msn(),
        Some(1),
        "the SEND was complete when the NAK left"
    );
    assert_eq!(p.b.mem(0, 6), b"before");
}

#[test]
fn c9_124_remote_access_nak_carries_faulting_packet_psn() {
    c9_124_case(Svc::Rc);
}

#[test]
fn c9_124_xrc_remote_access_nak_carries_faulting_packet_psn() {
    c9_124_case(Svc::Xrc);
}

#[test]
fn c9_124_rd_remote_access_nak_carries_faulting_packet_psn() {
    c9_124_case(Svc::Rd);
}

fn c9_124_case(svc: Svc) {
    let mut p = pair(svc);
    // A 2-PMTU WRITE ending at the region's last byte; its third packet runs past the end.
    let (end, rkey) = (p.b.mr.addr + p.b.mr.length, p.b.mr.rkey);
    let h = with_reth(
        req(Opcode::RC_RDMA_WRITE_FIRST, P, false),
        end - 2 * MTU as u64,
        rkey,
        2 * MTU as u32,
    );
    to_b(&mut p, h, &[1; MTU]);
    to_b(
        &mut p,
        req(Opcode::RC_RDMA_WRITE_MIDDLE, psn(1), false),
        &[2; MTU],
    );
    assert!(from_b(&mut p).is_empty());
    to_b(
        &mut p,
        req(Opcode::RC_RDMA_WRITE_MIDDLE, psn(2), true),
        &[3; MTU],
    );
    assert_ack(&from_b(&mut p), NAK_ACCESS, psn(2));
    let len = p.b.mr.length as usize;
    assert_eq!(p.b.mem(len - 2 * MTU, MTU), vec![1; MTU]);
    assert_eq!(p.b.mem(len - MTU, MTU), vec![2; MTU]);
}

#[test]
fn o9_73_atomic_remote_access_nak_carries_the_atomic_psn() {
    o9_73_case(Svc::Rc);
}

#[test]
fn o9_73_xrc_atomic_remote_access_nak_carries_the_atomic_psn() {
    o9_73_case(Svc::Xrc);
}

#[test]
fn o9_73_rd_atomic_remote_access_nak_carries_the_atomic_psn() {
    o9_73_case(Svc::Rd);
}

fn o9_73_case(svc: Svc) {
    // softib's responder supports atomics, so o9-73 binds it: a FETCH_ADD with a bad R_Key,
    // behind a good one, is NAKed with its own PSN and leaves memory alone.
    let mut p = pair(svc);
    let (addr, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    to_b(&mut p, fetch_add(P, addr, rkey, 5), &[]);
    let out = from_b(&mut p);
    assert_eq!(out.len(), 1, "the good atomic is answered");
    to_b(&mut p, fetch_add(psn(1), addr, rkey ^ 0x100, 7), &[]);
    assert_ack(&from_b(&mut p), NAK_ACCESS, psn(1));
    assert_eq!(p.b.mem(0, 8), 5u64.to_le_bytes());
}

#[test]
fn o9_63_read_validated_before_later_requests_and_acked_after_its_response() {
    // For an HCA RC responder o9-63 is C9-101's rule; that test's scenario is the check.
    c9_101_case(Svc::Rc);
}

// ----- lengths (9.7.4.1.6) ----------------------------------------------------------------------

#[test]
fn c9_91_send_longer_than_receive_buffer_naks_invalid_request() {
    c9_91_case(Svc::Rc);
}

#[test]
fn c9_91_xrc_send_longer_than_receive_buffer_naks_invalid_request() {
    c9_91_case(Svc::Xrc);
}

#[test]
fn c9_91_rd_send_longer_than_receive_buffer_naks_invalid_request() {
    c9_91_case(Svc::Rd);
}

fn c9_91_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 0, 64);
    send_only(&mut p, P, true, &[4; 65]);
    assert_ack(&from_b(&mut p), NAK_INV, P);
    assert_eq!(p.b.done()[0], (1, WcStatus::LocLenErr));
    // A multi-packet SEND that overflows at its LAST packet.
    let mut p = pair(svc);
    p.recv_b(1, 0, 1500);
    to_b(&mut p, req(Opcode::RC_SEND_FIRST, P, false), &[1; MTU]);
    to_b(&mut p, req(Opcode::RC_SEND_LAST, psn(1), true), &[2; 500]);
    assert_ack(&from_b(&mut p), NAK_INV, psn(1));
    assert_eq!(p.b.done()[0], (1, WcStatus::LocLenErr));
}

#[test]
fn c9_92_payload_length_checked_against_opcode() {
    c9_92_case(Svc::Rc);
}

#[test]
fn c9_92_xrc_payload_length_checked_against_opcode() {
    c9_92_case(Svc::Xrc);
}

#[test]
fn c9_92_rd_payload_length_checked_against_opcode() {
    c9_92_case(Svc::Rd);
}

fn c9_92_case(svc: Svc) {
    use Opcode as O;
    let cases: Vec<Case> = vec![
        (
            "short MIDDLE",
            vec![
                first(O::RC_SEND_FIRST, P),
                pkt(O::RC_SEND_MIDDLE, psn(1), MTU - 4),
            ],
            psn(1),
        ),
        (
            "long MIDDLE",
            vec![
                first(O::RC_SEND_FIRST, P),
                pkt(O::RC_SEND_MIDDLE, psn(1), MTU + 4),
            ],
            psn(1),
        ),
        ("short FIRST", vec![pkt(O::RC_SEND_FIRST, P, MTU - 4)], P),
        (
            "ONLY of PMTU + 4",
            vec![pkt(O::RC_SEND_ONLY, P, MTU + 4)],
            P,
        ),
        (
            "empty LAST",
            vec![first(O::RC_SEND_FIRST, P), pkt(O::RC_SEND_LAST, psn(1), 0)],
            psn(1),
        ),
        (
            "LAST of PMTU + 4",
            vec![
                first(O::RC_SEND_FIRST, P),
                pkt(O::RC_SEND_LAST, psn(1), MTU + 4),
            ],
            psn(1),
        ),
        (
            "RDMA WRITE ONLY of PMTU + 4",
            vec![pkt(O::RC_RDMA_WRITE_ONLY, P, MTU + 4)],
            P,
        ),
        (
            "short RDMA WRITE FIRST",
            vec![pkt(O::RC_RDMA_WRITE_FIRST, P, MTU - 8)],
            P,
        ),
    ];
    for (what, packets, bad) in cases {
        let (_, out) = fresh_run(svc, &packets);
        assert_eq!(
            ops(&out),
            vec![(Opcode::RC_ACKNOWLEDGE, bad, Some(NAK_INV))],
            "{what}"
        );
    }
    // The limits themselves are fine: ONLY of 0 and PMTU, LAST of 1.
    let (_, out) = fresh_run(svc, &[pkt(O::RC_SEND_ONLY, P, 0)]);
    assert_ack(&out, ACK, P);
    let (_, out) = fresh_run(svc, &[pkt(O::RC_SEND_ONLY, P, MTU)]);
    assert_ack(&out, ACK, P);
    let (_, out) = fresh_run(
        svc,
        &[first(O::RC_SEND_FIRST, P), pkt(O::RC_SEND_LAST, psn(1), 1)],
    );
    assert_ack(&out, ACK, psn(1));
}

#[test]
fn c9_93_length_failure_makes_an_invalid_request() {
    c9_93_case(Svc::Rc);
}

#[test]
fn c9_93_xrc_length_failure_makes_an_invalid_request() {
    c9_93_case(Svc::Xrc);
}

#[test]
fn c9_93_rd_length_failure_makes_an_invalid_request() {
    c9_93_case(Svc::Rd);
}

fn c9_93_case(svc: Svc) {
    let mut p = pair(svc);
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    let h = with_reth(
        req(Opcode::RC_RDMA_WRITE_FIRST, P, false),
        va,
        rkey,
        3 * MTU as u32,
    );
    to_b(&mut p, h, &[1; MTU]);
    to_b(
        &mut p,
        req(Opcode::RC_RDMA_WRITE_MIDDLE, psn(1), true),
        &[2; MTU - 24],
    );
    // Not executed, NAK-Invalid Request with PSN = ePSN, ePSN unchanged.
    assert_ack(&from_b(&mut p), NAK_INV, psn(1));
    assert_eq!(p.b.mem(0, MTU), vec![1; MTU]);
    assert_eq!(p.b.mem(MTU, MTU), vec![0; MTU]);
    assert_eq!(p.rq_psn_b(), psn(1));
}

#[test]
fn c9_94_read_dma_length_over_2_31_naks_invalid_request() {
    c9_94_case(Svc::Rc);
}

#[test]
fn c9_94_xrc_read_dma_length_over_2_31_naks_invalid_request() {
    c9_94_case(Svc::Xrc);
}

#[test]
fn c9_94_rd_read_dma_length_over_2_31_naks_invalid_request() {
    c9_94_case(Svc::Rd);
}

fn c9_94_case(svc: Svc) {
    for len in [(1u32 << 31) + 1, u32::MAX] {
        let mut p = pair(svc);
        let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
        // The R_Key is valid for the first byte; the length alone is at fault (and the
        // invalid request wins over the access error the range would also cause).
        to_b(&mut p, read_req(P, va, rkey, len), &[]);
        assert_ack(&from_b(&mut p), NAK_INV, P);
    }
}

// ----- acknowledgements (9.7.5.1.1, 9.7.5.1.2, 9.7.5.1.6) ----------------------------------------

#[test]
fn c9_95_ack_psn_is_latest_new_request_packet() {
    c9_95_case(Svc::Rc);
}

#[test]
fn c9_95_xrc_ack_psn_is_latest_new_request_packet() {
    c9_95_case(Svc::Xrc);
}

#[test]
fn c9_95_rd_ack_psn_is_latest_new_request_packet() {
    c9_95_case(Svc::Rd);
}

fn c9_95_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 0, 16 * 1024);
    p.recv_b(2, 32 * 1024, 64);
    for i in 0..10u32 {
        let op = match i {
            0 => Opcode::RC_SEND_FIRST,
            9 => Opcode::RC_SEND_LAST,
            _ => Opcode::RC_SEND_MIDDLE,
        };
        to_b(&mut p, req(op, psn(i), i == 9), &[i as u8; MTU]);
    }
    // One ACK, carrying the last packet's PSN.
    assert_ack(&from_b(&mut p), ACK, psn(9));
    // Duplicates never pull the ACK PSN back.
    to_b(&mut p, req(Opcode::RC_SEND_MIDDLE, psn(3), true), &[3; MTU]);
    assert_ack(&from_b(&mut p), ACK, psn(9));
    to_b(&mut p, req(Opcode::RC_SEND_FIRST, P, true), &[0; MTU]);
    assert_ack(&from_b(&mut p), ACK, psn(9));
    // The next new request moves it on.
    send_only(&mut p, psn(10), true, b"next");
    assert_ack(&from_b(&mut p), ACK, psn(10));
}

#[test]
fn c9_116_ackreq_forces_a_response_covering_the_packet() {
    c9_116_case(Svc::Rc);
}

#[test]
fn c9_116_xrc_ackreq_forces_a_response_covering_the_packet() {
    c9_116_case(Svc::Xrc);
}

#[test]
fn c9_116_rd_ackreq_forces_a_response_covering_the_packet() {
    c9_116_case(Svc::Rd);
}

fn c9_116_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 0, 4096);
    // AckReq on a FIRST packet: a response with PSN >= that packet's PSN must be scheduled.
    to_b(&mut p, req(Opcode::RC_SEND_FIRST, P, true), &[1; MTU]);
    let out = from_b(&mut p);
    assert_ack(&out, ACK, P);
    // Without AckReq the responder may stay silent.
    to_b(
        &mut p,
        req(Opcode::RC_SEND_MIDDLE, psn(1), false),
        &[2; MTU],
    );
    to_b(&mut p, req(Opcode::RC_SEND_LAST, psn(2), false), &[3; 8]);
    assert!(from_b(&mut p).is_empty());
    // AckReq on a later packet: one covering response, PSN at least that packet's.
    write_only(&mut p, psn(3), 8192, b"w");
    let out = from_b(&mut p);
    assert_eq!(out.len(), 1);
    assert!(out[0].psn() == psn(3), "{out:?}");
}

#[test]
fn c9_101_read_validated_first_and_later_acks_follow_read_response() {
    c9_101_case(Svc::Rc);
}

#[test]
fn c9_101_xrc_read_validated_first_and_later_acks_follow_read_response() {
    c9_101_case(Svc::Xrc);
}

#[test]
fn c9_101_rd_read_validated_first_and_later_acks_follow_read_response() {
    c9_101_case(Svc::Rd);
}

#[test]
fn o9_63_xrc_read_validated_before_later_requests_and_acked_after_its_response() {
    c9_101_case(Svc::Xrc);
}

#[test]
fn o9_63_rd_read_validated_before_later_requests_and_acked_after_its_response() {
    c9_101_case(Svc::Rd);
}

fn c9_101_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 65536, 64);
    read(&mut p, P, 0, 3 * MTU as u32);
    send_only(&mut p, psn(3), true, b"after the read");
    let out = from_b(&mut p);
    assert_eq!(
        out.iter().map(|s| s.op_psn()).collect::<Vec<_>>(),
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, P),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, psn(1)),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, psn(2)),
            (Opcode::RC_ACKNOWLEDGE, psn(3)),
        ]
    );
    // A READ with a bad R_Key is refused before the SEND behind it executes.
    let mut p = pair(svc);
    p.recv_b(1, 65536, 64);
    let addr = p.b.mr.addr;
    to_b(&mut p, read_req(P, addr, 0x77, 64), &[]);
    send_only(&mut p, psn(1), true, b"behind a bad read");
    let out = from_b(&mut p);
    if svc == Svc::Rd {
        // The EE context lives on with ePSN at the READ's: the SEND behind it is out of
        // sequence (the requester resynchronises before anything else).
        assert_eq!(
            ops(&out),
            vec![
                (Opcode::RC_ACKNOWLEDGE, P, Some(NAK_ACCESS)),
                (Opcode::RC_ACKNOWLEDGE, P, Some(NAK_SEQ))
            ]
        );
    } else {
        assert_ack(&out, NAK_ACCESS, P);
    }
    assert_eq!(p.b.mem(65536, 8), vec![0; 8]);
    assert!(p.b.done().iter().all(|&(_, s)| s == WcStatus::WrFlushErr));
}

// ----- RDMA READ responses (9.7.5.1.3) ---------------------------------------------------------

/// B's responses to one READ of `len` bytes at `first_psn` (B's data is a pattern).
fn read_shape(svc: Svc, first_psn: u32, len: u32) -> (Vec<Seen>, Vec<u8>) {
    let mut p = Pair::new_svc(svc, first_psn, 0x900, ConnectOptions::default());
    let data = pattern(8 * MTU, 11);
    p.b.hca.mr_write(p.b.mr.handle, 0, &data).unwrap();
    read(&mut p, first_psn, 0, len);
    (from_b(&mut p), data[..len as usize].to_vec())
}

#[test]
fn c9_96_read_response_psns_consecutive_from_request_psn() {
    c9_96_case(Svc::Rc);
}

#[test]
fn c9_96_xrc_read_response_psns_consecutive_from_request_psn() {
    c9_96_case(Svc::Xrc);
}

#[test]
fn c9_96_rd_read_response_psns_consecutive_from_request_psn() {
    c9_96_case(Svc::Rd);
}

fn c9_96_case(svc: Svc) {
    let (out, _) = read_shape(svc, P, 3 * MTU as u32);
    assert_eq!(
        out.iter().map(|s| s.op_psn()).collect::<Vec<_>>(),
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, P),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, psn(1)),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, psn(2)),
        ]
    );
    // Across the PSN wrap.
    let (out, _) = read_shape(svc, 0xff_fffe, 4 * MTU as u32);
    assert_eq!(
        out.iter().map(|s| s.psn()).collect::<Vec<_>>(),
        vec![0xff_fffe, 0xff_ffff, 0, 1]
    );
}

#[test]
fn c9_97_multi_packet_read_response_has_aeth_first_and_last() {
    c9_97_case(Svc::Rc);
}

#[test]
fn c9_97_xrc_multi_packet_read_response_has_aeth_first_and_last() {
    c9_97_case(Svc::Xrc);
}

#[test]
fn c9_97_rd_multi_packet_read_response_has_aeth_first_and_last() {
    c9_97_case(Svc::Rd);
}

fn c9_97_case(svc: Svc) {
    for n in [2usize, 3, 5] {
        let (out, _) = read_shape(svc, P, (n * MTU) as u32);
        assert_eq!(out.len(), n);
        let aeth: Vec<bool> = out.iter().map(|s| s.headers.aeth.is_some()).collect();
        let mut want = vec![false; n];
        want[0] = true;
        want[n - 1] = true;
        assert_eq!(aeth, want);
    }
}

#[test]
fn c9_98_single_packet_read_response_has_aeth() {
    c9_98_case(Svc::Rc);
}

#[test]
fn c9_98_xrc_single_packet_read_response_has_aeth() {
    c9_98_case(Svc::Xrc);
}

#[test]
fn c9_98_rd_single_packet_read_response_has_aeth() {
    c9_98_case(Svc::Rd);
}

fn c9_98_case(svc: Svc) {
    for len in [0, 1, MTU as u32] {
        let (out, _) = read_shape(svc, P, len);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].opcode(), Opcode::RC_RDMA_READ_RESPONSE_ONLY);
        assert!(out[0].headers.aeth.is_some(), "len {len}");
    }
}

#[test]
fn c9_99_read_response_payload_sizes() {
    c9_99_case(Svc::Rc);
}

#[test]
fn c9_99_xrc_read_response_payload_sizes() {
    c9_99_case(Svc::Xrc);
}

#[test]
fn c9_99_rd_read_response_payload_sizes() {
    c9_99_case(Svc::Rd);
}

fn c9_99_case(svc: Svc) {
    use Opcode as O;
    let m = MTU;
    let cases: [(usize, Vec<(Opcode, usize)>); 5] = [
        (0, vec![(O::RC_RDMA_READ_RESPONSE_ONLY, 0)]),
        (1, vec![(O::RC_RDMA_READ_RESPONSE_ONLY, 1)]),
        (m, vec![(O::RC_RDMA_READ_RESPONSE_ONLY, m)]),
        (
            m + 1,
            vec![
                (O::RC_RDMA_READ_RESPONSE_FIRST, m),
                (O::RC_RDMA_READ_RESPONSE_LAST, 1),
            ],
        ),
        (
            3 * m,
            vec![
                (O::RC_RDMA_READ_RESPONSE_FIRST, m),
                (O::RC_RDMA_READ_RESPONSE_MIDDLE, m),
                (O::RC_RDMA_READ_RESPONSE_LAST, m),
            ],
        ),
    ];
    for (len, want) in cases {
        let (out, data) = read_shape(svc, P, len as u32);
        let got: Vec<_> = out.iter().map(|s| (s.opcode(), s.payload.len())).collect();
        assert_eq!(got, want, "READ of {len}");
        let joined: Vec<u8> = out.iter().flat_map(|s| s.payload.clone()).collect();
        assert_eq!(joined, data, "READ of {len} returns the data");
    }
}

#[test]
fn c9_117_read_responses_increase_consecutively_across_reads() {
    c9_117_case(Svc::Rc);
}

#[test]
fn c9_117_xrc_read_responses_increase_consecutively_across_reads() {
    c9_117_case(Svc::Xrc);
}

#[test]
fn c9_117_rd_read_responses_increase_consecutively_across_reads() {
    c9_117_case(Svc::Rd);
}

fn c9_117_case(svc: Svc) {
    let mut p = pair_with(svc, deep());
    read(&mut p, P, 0, 2 * MTU as u32);
    read(&mut p, psn(2), 0, 3 * MTU as u32);
    read(&mut p, psn(5), 0, 10);
    let out = from_b(&mut p);
    assert_eq!(
        out.iter().map(|s| s.psn()).collect::<Vec<_>>(),
        (0..6).map(psn).collect::<Vec<_>>()
    );
    let aeth: Vec<bool> = out.iter().map(|s| s.headers.aeth.is_some()).collect();
    assert_eq!(aeth, vec![true, true, true, false, true, true]);
}

#[test]
fn c9_118_read_response_only_carries_ack_aeth() {
    c9_118_case(Svc::Rc);
}

#[test]
fn c9_118_xrc_read_response_only_carries_ack_aeth() {
    c9_118_case(Svc::Xrc);
}

#[test]
fn c9_118_rd_read_response_only_carries_ack_aeth() {
    c9_118_case(Svc::Rd);
}

fn c9_118_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 0, 64);
    send_only(&mut p, P, false, b"m1");
    read(&mut p, psn(1), 0, 0);
    let out = from_b(&mut p);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].opcode(), Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    let aeth = out[0].headers.aeth.expect("AETH in Read Response Only");
    assert!(matches!(
        AethSyndrome::from_byte(aeth.syndrome),
        AethSyndrome::Ack { .. }
    ));
    assert_eq!(aeth.msn.value(), 2);
}

// ----- atomics (9.7.5.1.4) --------------------------------------------------------------------

#[test]
fn o9_58_atomic_response_psn_is_request_psn() {
    o9_58_case(Svc::Rc);
}

#[test]
fn o9_58_xrc_atomic_response_psn_is_request_psn() {
    o9_58_case(Svc::Xrc);
}

#[test]
fn o9_58_rd_atomic_response_psn_is_request_psn() {
    o9_58_case(Svc::Rd);
}

fn o9_58_case(svc: Svc) {
    let mut p = pair_with(svc, deep());
    p.b.hca
        .mr_write(p.b.mr.handle, 64, &40u64.to_le_bytes())
        .unwrap();
    let (va, rkey) = (p.b.mr.addr + 64, p.b.mr.rkey);
    to_b(&mut p, fetch_add(P, va, rkey, 2), &[]);
    let mut cas = req(Opcode::RC_COMPARE_SWAP, psn(1), true);
    cas.atomic_eth = Some(AtomicEth {
        va,
        rkey,
        swap_add: 99,
        compare: 42,
    });
    to_b(&mut p, cas, &[]);
    let out = from_b(&mut p);
    assert_eq!(
        out.iter().map(|s| s.op_psn()).collect::<Vec<_>>(),
        vec![
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, P),
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, psn(1)),
        ]
    );
    let orig: Vec<u64> = out
        .iter()
        .map(|s| s.headers.atomic_ack_eth.unwrap().orig_remote_data)
        .collect();
    assert_eq!(orig, vec![40, 42]);
    assert_eq!(p.b.mem(64, 8), 99u64.to_le_bytes());
}

#[test]
fn o9_66_duplicate_atomic_replays_saved_result() {
    o9_66_case(Svc::Rc);
}

#[test]
fn o9_66_xrc_duplicate_atomic_replays_saved_result() {
    o9_66_case(Svc::Xrc);
}

#[test]
fn o9_66_rd_duplicate_atomic_replays_saved_result() {
    o9_66_case(Svc::Rd);
}

fn o9_66_case(svc: Svc) {
    let mut p = pair_with(
        svc,
        ConnectOptions {
            timeout: 8,
            ..ConnectOptions::default()
        },
    );
    p.b.hca
        .mr_write(p.b.mr.handle, 64, &40u64.to_le_bytes())
        .unwrap();
    let mut dropped = false;
    p.filter = Box::new(move |d, f| {
        let s = common::decode(f);
        if d == Dir::BtoA && s.opcode() == Opcode::RC_ATOMIC_ACKNOWLEDGE && !dropped {
            dropped = true;
            return false;
        }
        true
    });
    let (target, rkey) = (p.b.mr.addr + 64, p.b.mr.rkey);
    let wr = softib_core::verbs::wr::SendWr::new(
        1,
        softib_core::verbs::wr::WrOpcode::AtomicFetchAdd {
            remote_addr: target,
            rkey,
            add: 2,
        },
    )
    .with_sge(p.sge_a(0, 8))
    .signaled();
    p.post_a(&[wr]);
    p.run(10_000_000_000);
    let trace: Vec<_> = p.log.iter().map(|(d, f)| (*d, common::decode(f))).collect();
    let faa: Vec<_> = trace
        .iter()
        .filter(|(d, _)| *d == Dir::AtoB)
        .map(|(_, s)| s.op_psn())
        .collect();
    assert_eq!(
        faa,
        vec![(Opcode::RC_FETCH_ADD, P), (Opcode::RC_FETCH_ADD, P)]
    );
    let acks: Vec<_> = trace
        .iter()
        .filter(|(d, _)| *d == Dir::BtoA)
        .map(|(_, s)| {
            (
                s.op_psn(),
                s.headers.atomic_ack_eth.unwrap().orig_remote_data,
            )
        })
        .collect();
    assert_eq!(acks, vec![((Opcode::RC_ATOMIC_ACKNOWLEDGE, P), 40)]);
    assert_eq!(p.b.mem(64, 8), 42u64.to_le_bytes(), "executed once");
    assert_eq!(p.a.mem(0, 8), 40u64.to_le_bytes());
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
}

#[test]
fn o9_67_duplicate_atomic_without_saved_result_dropped() {
    o9_67_case(Svc::Rc);
}

#[test]
fn o9_67_xrc_duplicate_atomic_without_saved_result_dropped() {
    o9_67_case(Svc::Xrc);
}

#[test]
fn o9_67_rd_duplicate_atomic_without_saved_result_dropped() {
    o9_67_case(Svc::Rd);
}

fn o9_67_case(svc: Svc) {
    // max_dest_rd_atomic 1: only the latest atomic's result is kept.
    let mut p = pair(svc);
    p.b.hca
        .mr_write(p.b.mr.handle, 64, &40u64.to_le_bytes())
        .unwrap();
    let (va, rkey) = (p.b.mr.addr + 64, p.b.mr.rkey);
    to_b(&mut p, fetch_add(P, va, rkey, 2), &[]);
    assert_eq!(from_b(&mut p).len(), 1);
    to_b(&mut p, fetch_add(psn(1), va, rkey, 2), &[]);
    assert_eq!(from_b(&mut p).len(), 1);
    // The first one is out of the window now: silently dropped, not executed.
    to_b(&mut p, fetch_add(P, va, rkey, 2), &[]);
    assert!(from_b(&mut p).is_empty());
    assert_eq!(p.b.mem(64, 8), 44u64.to_le_bytes());
    assert_eq!(p.rq_psn_b(), psn(2));
    // The remembered one is still replayed.
    to_b(&mut p, fetch_add(psn(1), va, rkey, 2), &[]);
    let out = from_b(&mut p);
    assert_eq!(out[0].headers.atomic_ack_eth.unwrap().orig_remote_data, 42);
    assert_eq!(p.b.mem(64, 8), 44u64.to_le_bytes());
}

// ----- duplicates (9.7.5.1.4) ----------------------------------------------------------------------

/// SEND at P, RDMA WRITE at P+1, READ (100 B) at P+2, FETCH_ADD at P+3, each answered.
fn four_executed(svc: Svc) -> Pair {
    let mut p = pair_with(svc, deep());
    p.recv_b(1, 0, 64);
    p.recv_b(2, 1024, 64);
    p.b.hca
        .mr_write(p.b.mr.handle, 16384, &pattern(100, 1))
        .unwrap();
    p.b.hca
        .mr_write(p.b.mr.handle, 64, &40u64.to_le_bytes())
        .unwrap();
    send_only(&mut p, P, true, b"hello");
    assert_ack(&from_b(&mut p), ACK, P);
    write_only(&mut p, psn(1), 8192, b"written");
    assert_ack(&from_b(&mut p), ACK, psn(1));
    read(&mut p, psn(2), 16384, 100);
    assert_eq!(from_b(&mut p).len(), 1);
    let (va, rkey) = (p.b.mr.addr + 64, p.b.mr.rkey);
    to_b(&mut p, fetch_add(psn(3), va, rkey, 2), &[]);
    assert_eq!(from_b(&mut p).len(), 1);
    assert_eq!(p.b.done(), vec![(1, WcStatus::Success)]);
    p
}

#[test]
fn c9_78_valid_duplicates_answered_per_duplicate_rules() {
    c9_78_case(Svc::Rc);
}

#[test]
fn o9_44_xrc_valid_duplicates_answered_per_duplicate_rules() {
    c9_78_case(Svc::Xrc);
}

#[test]
fn o9_44_rd_valid_duplicates_answered_per_duplicate_rules() {
    c9_78_case(Svc::Rd);
}

fn c9_78_case(svc: Svc) {
    let mut p = four_executed(svc);
    // Memory changes behind the responder's back.
    p.b.hca.mr_write(p.b.mr.handle, 8192, &[0; 7]).unwrap();
    p.b.hca
        .mr_write(p.b.mr.handle, 16384, &pattern(100, 77))
        .unwrap();
    let (va, rkey) = (p.b.mr.addr + 64, p.b.mr.rkey);
    // SEND: ACK with the latest PSN, no second delivery.
    send_only(&mut p, P, true, b"hello");
    assert_ack(&from_b(&mut p), ACK, psn(3));
    assert!(p.b.done().is_empty());
    // RDMA WRITE: ACK, not executed again.
    write_only(&mut p, psn(1), 8192, b"written");
    assert_ack(&from_b(&mut p), ACK, psn(3));
    assert_eq!(p.b.mem(8192, 7), vec![0; 7]);
    // READ: the data is read again.
    read(&mut p, psn(2), 16384, 100);
    let out = from_b(&mut p);
    assert_eq!(
        out.iter().map(|s| s.op_psn()).collect::<Vec<_>>(),
        vec![(Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn(2))]
    );
    assert_eq!(out[0].payload, pattern(100, 77));
    // ATOMIC: the saved result, not executed again.
    to_b(&mut p, fetch_add(psn(3), va, rkey, 2), &[]);
    let out = from_b(&mut p);
    assert_eq!(out[0].op_psn(), (Opcode::RC_ATOMIC_ACKNOWLEDGE, psn(3)));
    assert_eq!(out[0].headers.atomic_ack_eth.unwrap().orig_remote_data, 40);
    assert_eq!(p.b.mem(64, 8), 42u64.to_le_bytes());
    assert_eq!(p.rq_psn_b(), psn(4));
}

#[test]
fn c9_102_valid_duplicate_gets_a_response() {
    c9_102_case(Svc::Rc);
}

#[test]
fn c9_102_xrc_valid_duplicate_gets_a_response() {
    c9_102_case(Svc::Xrc);
}

#[test]
fn c9_102_rd_valid_duplicate_gets_a_response() {
    c9_102_case(Svc::Rd);
}

fn c9_102_case(svc: Svc) {
    let mut p = pair(svc);
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    let h = with_reth(
        req(Opcode::RC_RDMA_WRITE_FIRST, P, false),
        va,
        rkey,
        3 * MTU as u32,
    );
    to_b(&mut p, h, &[1; MTU]);
    to_b(
        &mut p,
        req(Opcode::RC_RDMA_WRITE_MIDDLE, psn(1), false),
        &[2; MTU],
    );
    to_b(
        &mut p,
        req(Opcode::RC_RDMA_WRITE_LAST, psn(2), true),
        &[3; MTU],
    );
    assert_ack(&from_b(&mut p), ACK, psn(2));
    // A duplicate MIDDLE without AckReq still draws a response.
    to_b(
        &mut p,
        req(Opcode::RC_RDMA_WRITE_MIDDLE, psn(1), false),
        &[2; MTU],
    );
    assert_ack(&from_b(&mut p), ACK, psn(2));
}

#[test]
fn c9_103_duplicates_leave_epsn_unchanged() {
    c9_103_case(Svc::Rc);
}

#[test]
fn c9_103_xrc_duplicates_leave_epsn_unchanged() {
    c9_103_case(Svc::Xrc);
}

#[test]
fn c9_103_rd_duplicates_leave_epsn_unchanged() {
    c9_103_case(Svc::Rd);
}

fn c9_103_case(svc: Svc) {
    let mut p = pair_with(svc, deep());
    p.recv_b(1, 0, 64);
    p.recv_b(2, 1024, 64);
    send_only(&mut p, P, true, b"s");
    read(&mut p, psn(1), 4096, 2 * MTU as u32);
    assert_eq!(from_b(&mut p).len(), 3);
    assert_eq!(p.rq_psn_b(), psn(3));
    let (addr, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    // A duplicate READ asking for more than the original (fails: dropped).
    to_b(
        &mut p,
        read_req(psn(1), addr + 4096, rkey, 4 * MTU as u32),
        &[],
    );
    // A duplicate READ with a bad R_Key (fails: dropped).
    to_b(&mut p, read_req(psn(1), addr + 4096, rkey ^ 3, 64), &[]);
    // A duplicate ATOMIC with no saved result (fails: dropped).
    to_b(&mut p, fetch_add(P, addr, rkey, 1), &[]);
    assert!(from_b(&mut p).is_empty());
    assert_eq!(p.rq_psn_b(), psn(3));
    // A duplicate SEND and a valid duplicate READ.
    send_only(&mut p, P, true, b"s");
    read(&mut p, psn(2), 4096 + MTU as u64, MTU as u32);
    assert_eq!(from_b(&mut p).len(), 2);
    assert_eq!(p.rq_psn_b(), psn(3));
    // ePSN is where it was: the next new request is accepted.
    send_only(&mut p, psn(3), true, b"t");
    assert_ack(&from_b(&mut p), ACK, psn(3));
    assert_eq!(p.b.done().len(), 2);
}

#[test]
fn c9_104_duplicate_read_answered_before_later_duplicate_ack() {
    c9_104_case(Svc::Rc);
}

#[test]
fn c9_104_xrc_duplicate_read_answered_before_later_duplicate_ack() {
    c9_104_case(Svc::Xrc);
}

#[test]
fn c9_104_rd_duplicate_read_answered_before_later_duplicate_ack() {
    c9_104_case(Svc::Rd);
}

fn c9_104_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 4096, 64);
    read(&mut p, P, 0, 100);
    send_only(&mut p, psn(1), true, b"s");
    assert_eq!(from_b(&mut p).len(), 2);
    read(&mut p, P, 0, 100);
    send_only(&mut p, psn(1), true, b"s");
    let out = from_b(&mut p);
    assert_eq!(
        out.iter().map(|s| s.op_psn()).collect::<Vec<_>>(),
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, P),
            (Opcode::RC_ACKNOWLEDGE, psn(1)),
        ]
    );
}

#[test]
fn c9_105_duplicate_send_write_only_acknowledged() {
    c9_105_case(Svc::Rc);
}

#[test]
fn c9_105_xrc_duplicate_send_write_only_acknowledged() {
    c9_105_case(Svc::Xrc);
}

#[test]
fn c9_105_rd_duplicate_send_write_only_acknowledged() {
    c9_105_case(Svc::Rd);
}

fn c9_105_case(svc: Svc) {
    let mut p = pair_with(svc, deep());
    p.recv_b(1, 0, 64);
    p.recv_b(2, 1024, 64);
    send_only(&mut p, P, false, b"s1");
    write_only(&mut p, psn(1), 8192, b"w1");
    read(&mut p, psn(2), 16384, 8);
    send_only(&mut p, psn(3), true, b"s2");
    assert_eq!(from_b(&mut p).len(), 3, "ACK P+1, READ response, ACK P+3");
    assert_eq!(p.b.done().len(), 2);
    p.b.hca.mr_write(p.b.mr.handle, 8192, b"xx").unwrap();
    // Duplicate WRITE: ACK with the most recently completed new request's PSN, no write.
    write_only(&mut p, psn(1), 8192, b"w1");
    assert_ack(&from_b(&mut p), ACK, psn(3));
    assert_eq!(p.b.mem(8192, 2), b"xx");
    // Duplicate SEND: no second receive completion.
    send_only(&mut p, psn(3), true, b"s2");
    assert_ack(&from_b(&mut p), ACK, psn(3));
    assert!(p.b.done().is_empty());
    // After the answer to an earlier duplicate READ.
    read(&mut p, psn(2), 16384, 8);
    send_only(&mut p, P, false, b"s1");
    let out = from_b(&mut p);
    assert_eq!(
        out.iter().map(|s| s.op_psn()).collect::<Vec<_>>(),
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn(2)),
            (Opcode::RC_ACKNOWLEDGE, psn(3)),
        ]
    );
    assert!(p.b.done().is_empty());
}

#[test]
fn c9_106_error_answering_duplicate_send_or_write_dropped_silently() {
    c9_106_case(Svc::Rc);
}

#[test]
fn c9_106_xrc_error_answering_duplicate_send_or_write_dropped_silently() {
    c9_106_case(Svc::Xrc);
}

#[test]
fn c9_106_rd_error_answering_duplicate_send_or_write_dropped_silently() {
    c9_106_case(Svc::Rd);
}

fn c9_106_case(svc: Svc) {
    use softib_core::transport::rc::ResponderFault;
    let mut p = pair(svc);
    p.recv_b(1, 0, 64);
    p.recv_b(2, 1024, 64);
    send_only(&mut p, P, true, b"hello");
    assert_ack(&from_b(&mut p), ACK, P);
    write_only(&mut p, psn(1), 8192, b"written");
    assert_ack(&from_b(&mut p), ACK, psn(1));
    assert_eq!(p.b.done(), vec![(1, WcStatus::Success)]);
    // Without a fault, a duplicate SEND is acknowledged.
    send_only(&mut p, P, true, b"hello");
    assert_ack(&from_b(&mut p), ACK, psn(1));
    // With one, the duplicate SEND draws neither ACK nor NAK, and nothing else changes.
    arm_fault(&mut p, ResponderFault::DuplicateAckError);
    send_only(&mut p, P, true, b"hello");
    assert!(from_b(&mut p).is_empty());
    assert_eq!(b_state(&p), QpState::Rts);
    assert_eq!(p.rq_psn_b(), psn(2));
    assert!(p.b.done().is_empty());
    // The same for a duplicate RDMA WRITE, which is not executed either.
    p.b.hca.mr_write(p.b.mr.handle, 8192, b"xx").unwrap();
    arm_fault(&mut p, ResponderFault::DuplicateAckError);
    write_only(&mut p, psn(1), 8192, b"written");
    assert!(from_b(&mut p).is_empty());
    assert_eq!(b_state(&p), QpState::Rts);
    assert_eq!(p.b.mem(8192, 2), b"xx");
    // The fault is one-shot: the retried duplicate is acknowledged, and new requests go on.
    write_only(&mut p, psn(1), 8192, b"written");
    assert_ack(&from_b(&mut p), ACK, psn(1));
    send_only(&mut p, psn(2), true, b"next");
    assert_ack(&from_b(&mut p), ACK, psn(2));
    assert_eq!(p.b.done(), vec![(2, WcStatus::Success)]);
    // A fault on an unknown QP is refused.
    let other = softib_wire::Qpn::new(p.b.qpn.value() ^ 0x40);
    assert!(p
        .b
        .hca
        .inject_responder_fault(other, ResponderFault::DuplicateAckError)
        .is_err());
}

#[test]
fn o9_68_atomic_result_not_reproducible_duplicate_dropped_silently() {
    o9_68_case(Svc::Rc);
}

#[test]
fn o9_68_xrc_atomic_result_not_reproducible_duplicate_dropped_silently() {
    o9_68_case(Svc::Xrc);
}

#[test]
fn o9_68_rd_atomic_result_not_reproducible_duplicate_dropped_silently() {
    o9_68_case(Svc::Rd);
}

fn o9_68_case(svc: Svc) {
    use softib_core::transport::rc::ResponderFault;
    let mut p = pair(svc);
    p.recv_b(1, 0, 64);
    p.recv_b(2, 1024, 64);
    p.b.hca
        .mr_write(p.b.mr.handle, 64, &40u64.to_le_bytes())
        .unwrap();
    let (va, rkey) = (p.b.mr.addr + 64, p.b.mr.rkey);
    send_only(&mut p, P, true, b"s");
    assert_ack(&from_b(&mut p), ACK, P);
    to_b(&mut p, fetch_add(psn(1), va, rkey, 2), &[]);
    let out = from_b(&mut p);
    assert_eq!(out[0].op_psn(), (Opcode::RC_ATOMIC_ACKNOWLEDGE, psn(1)));
    arm_fault(&mut p, ResponderFault::AtomicReplayUnavailable);
    // The fault is not spent on a duplicate of another kind.
    send_only(&mut p, P, true, b"s");
    assert_ack(&from_b(&mut p), ACK, psn(1));
    // The duplicate ATOMIC whose saved result cannot be reproduced: no ACK, no NAK, and the
    // atomic is not executed again.
    to_b(&mut p, fetch_add(psn(1), va, rkey, 2), &[]);
    assert!(from_b(&mut p).is_empty());
    assert_eq!(b_state(&p), QpState::Rts);
    assert_eq!(p.rq_psn_b(), psn(2));
    assert_eq!(p.b.mem(64, 8), 42u64.to_le_bytes());
    // One-shot: the next retry gets the saved result, and new traffic goes on.
    to_b(&mut p, fetch_add(psn(1), va, rkey, 2), &[]);
    let out = from_b(&mut p);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].op_psn(), (Opcode::RC_ATOMIC_ACKNOWLEDGE, psn(1)));
    assert_eq!(out[0].headers.atomic_ack_eth.unwrap().orig_remote_data, 40);
    assert_eq!(p.b.mem(64, 8), 42u64.to_le_bytes());
    send_only(&mut p, psn(2), true, b"next");
    assert_ack(&from_b(&mut p), ACK, psn(2));
    assert_eq!(p.b.done().len(), 2);
}

#[test]
fn o9_68_requester_recovers_when_a_duplicate_atomic_is_dropped() {
    o9_68_recovery_case(Svc::Rc);
}

#[test]
fn o9_68_xrc_requester_recovers_when_a_duplicate_atomic_is_dropped() {
    o9_68_recovery_case(Svc::Xrc);
}

#[test]
fn o9_68_rd_requester_recovers_when_a_duplicate_atomic_is_dropped() {
    o9_68_recovery_case(Svc::Rd);
}

fn o9_68_recovery_case(svc: Svc) {
    use softib_core::transport::rc::ResponderFault;
    let mut p = pair_with(
        svc,
        ConnectOptions {
            timeout: 8,
            ..ConnectOptions::default()
        },
    );
    p.b.hca
        .mr_write(p.b.mr.handle, 64, &40u64.to_le_bytes())
        .unwrap();
    // The ATOMIC ACK is lost on the wire, and the first retry meets the fault.
    let mut dropped = false;
    p.filter = Box::new(move |d, f| {
        let s = common::decode(f);
        if d == Dir::BtoA && s.opcode() == Opcode::RC_ATOMIC_ACKNOWLEDGE && !dropped {
            dropped = true;
            return false;
        }
        true
    });
    arm_fault(&mut p, ResponderFault::AtomicReplayUnavailable);
    let (target, rkey) = (p.b.mr.addr + 64, p.b.mr.rkey);
    let wr = softib_core::verbs::wr::SendWr::new(
        1,
        softib_core::verbs::wr::WrOpcode::AtomicFetchAdd {
            remote_addr: target,
            rkey,
            add: 2,
        },
    )
    .with_sge(p.sge_a(0, 8))
    .signaled();
    p.post_a(&[wr]);
    p.run(10_000_000_000);
    let trace: Vec<_> = p.log.iter().map(|(d, f)| (*d, common::decode(f))).collect();
    let sent: Vec<_> = trace.iter().map(|(d, s)| (*d, s.op_psn())).collect();
    assert_eq!(
        sent,
        vec![
            (Dir::AtoB, (Opcode::RC_FETCH_ADD, P)),
            (Dir::AtoB, (Opcode::RC_FETCH_ADD, P)),
            (Dir::AtoB, (Opcode::RC_FETCH_ADD, P)),
            (Dir::BtoA, (Opcode::RC_ATOMIC_ACKNOWLEDGE, P)),
        ],
        "the request (its ACK lost on the wire, not logged), the retry dropped silently, \
         the retry answered"
    );
    assert_eq!(p.b.mem(64, 8), 42u64.to_le_bytes(), "executed once");
    assert_eq!(p.a.mem(0, 8), 40u64.to_le_bytes());
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    assert_eq!(b_state(&p), QpState::Rts);
}

#[test]
fn c9_107_duplicate_read_rereads_data_from_duplicate_psn() {
    c9_107_case(Svc::Rc);
}

#[test]
fn c9_107_xrc_duplicate_read_rereads_data_from_duplicate_psn() {
    c9_107_case(Svc::Xrc);
}

#[test]
fn c9_107_rd_duplicate_read_rereads_data_from_duplicate_psn() {
    c9_107_case(Svc::Rd);
}

fn c9_107_case(svc: Svc) {
    let mut p = pair(svc);
    p.b.hca
        .mr_write(p.b.mr.handle, 0, &pattern(2 * MTU, 1))
        .unwrap();
    read(&mut p, P, 0, 2 * MTU as u32);
    let out = from_b(&mut p);
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].payload, pattern(2 * MTU, 1)[MTU..]);
    let fresh = pattern(2 * MTU, 50);
    p.b.hca.mr_write(p.b.mr.handle, 0, &fresh).unwrap();
    // The whole READ again.
    read(&mut p, P, 0, 2 * MTU as u32);
    let out = from_b(&mut p);
    assert_eq!(
        out.iter().map(|s| s.op_psn()).collect::<Vec<_>>(),
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, P),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, psn(1)),
        ]
    );
    let joined: Vec<u8> = out.iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(joined, fresh);
    // Its second half, resumed at the second response PSN.
    read(&mut p, psn(1), MTU as u64, MTU as u32);
    let out = from_b(&mut p);
    assert_eq!(
        out.iter().map(|s| s.op_psn()).collect::<Vec<_>>(),
        vec![(Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn(1))]
    );
    assert_eq!(out[0].payload, fresh[MTU..]);
    assert_eq!(p.rq_psn_b(), psn(2));
}

#[test]
fn c9_108_duplicate_read_failing_before_first_packet_dropped() {
    c9_108_case(Svc::Rc);
}

#[test]
fn c9_108_xrc_duplicate_read_failing_before_first_packet_dropped() {
    c9_108_case(Svc::Xrc);
}

#[test]
fn c9_108_rd_duplicate_read_failing_before_first_packet_dropped() {
    c9_108_case(Svc::Rd);
}

fn c9_108_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 0, 64);
    let mr = extra_mr(&mut p, AccessFlags::all(), false);
    to_b(&mut p, read_req(P, mr.addr, mr.rkey, 100), &[]);
    assert_eq!(from_b(&mut p).len(), 1);
    p.b.hca.dereg_mr(mr.handle).unwrap();
    to_b(&mut p, read_req(P, mr.addr, mr.rkey, 100), &[]);
    assert!(from_b(&mut p).is_empty());
    assert_eq!(b_state(&p), QpState::Rts);
    send_only(&mut p, psn(1), true, b"still fine");
    assert_ack(&from_b(&mut p), ACK, psn(1));
}

#[test]
fn c9_109_duplicate_read_failing_midway_stops_without_nak() {
    c9_109_case(Svc::Rc);
}

#[test]
fn c9_109_xrc_duplicate_read_failing_midway_stops_without_nak() {
    c9_109_case(Svc::Xrc);
}

#[test]
fn c9_109_rd_duplicate_read_failing_midway_stops_without_nak() {
    c9_109_case(Svc::Rd);
}

fn c9_109_case(svc: Svc) {
    let mut p = pair(svc);
    let mr = extra_mr(&mut p, AccessFlags::all(), false);
    to_b(&mut p, read_req(P, mr.addr, mr.rkey, 3 * MTU as u32), &[]);
    assert_eq!(from_b(&mut p).len(), 3);
    // The duplicate starts streaming, then its memory goes away.
    to_b(&mut p, read_req(P, mr.addr, mr.rkey, 3 * MTU as u32), &[]);
    let first = p.drain_one(Dir::BtoA).unwrap();
    assert_eq!(first.op_psn(), (Opcode::RC_RDMA_READ_RESPONSE_FIRST, P));
    p.b.hca.dereg_mr(mr.handle).unwrap();
    // No further response packet, no NAK, and the connection goes on.
    assert!(from_b(&mut p).is_empty());
    assert_eq!(b_state(&p), QpState::Rts);
    assert_eq!(p.rq_psn_b(), psn(3));
    p.recv_b(1, 0, 64);
    send_only(&mut p, psn(3), true, b"next");
    assert_ack(&from_b(&mut p), ACK, psn(3));
}

#[test]
fn c9_110_earlier_duplicate_preempts_current_response() {
    c9_110_preemption_case(Svc::Rc);
}

#[test]
fn c9_110_xrc_earlier_duplicate_preempts_current_response() {
    c9_110_preemption_case(Svc::Xrc);
}

#[test]
fn c9_110_rd_earlier_duplicate_preempts_current_response() {
    c9_110_preemption_case(Svc::Rd);
}

fn c9_110_preemption_case(svc: Svc) {
    let mut p = pair_with(svc, deep());
    p.recv_b(1, 16 * 1024, 64);
    p.b.hca
        .mr_write(p.b.mr.handle, 0, &pattern(8 * MTU, 5))
        .unwrap();
    read(&mut p, P, 0, 100);
    assert_eq!(from_b(&mut p).len(), 1);
    // A long READ at P+1 (response PSNs P+1 ..= P+8), then a SEND at P+9 asking for an ACK.
    read(&mut p, psn(1), 0, 8 * MTU as u32);
    send_only(&mut p, psn(9), true, b"after");
    assert_eq!(
        p.drain_one(Dir::BtoA).unwrap().op_psn(),
        (Opcode::RC_RDMA_READ_RESPONSE_FIRST, psn(1))
    );
    assert_eq!(
        p.drain_one(Dir::BtoA).unwrap().op_psn(),
        (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, psn(2))
    );
    // A duplicate of a later PSN does not interrupt the stream: it waits its turn.
    send_only(&mut p, psn(9), true, b"after");
    assert_eq!(
        p.drain_one(Dir::BtoA).unwrap().op_psn(),
        (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, psn(3))
    );
    // A duplicate of the earlier READ arrives while the long response streams: it is answered
    // at once and the interrupted response stops there. The acknowledgement of the new SEND
    // still goes out (the requester would not resend a request whose ACK it lost to
    // pre-emption), as does the answer to the later duplicate SEND.
    read(&mut p, P, 0, 100);
    let out = from_b(&mut p);
    assert_eq!(
        ops(&out),
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, P, Some(ACK)),
            (Opcode::RC_ACKNOWLEDGE, psn(9), Some(ACK)),
            (Opcode::RC_ACKNOWLEDGE, psn(9), Some(ACK)),
        ]
    );
    assert_eq!(out[0].payload, pattern(100, 5));
    assert_eq!(p.b.done(), vec![(1, WcStatus::Success)]);
    // The requester resends what stays unanswered: the READ resumed at its first missing
    // response PSN, by the subset rule.
    let off = 3 * MTU as u64;
    read(&mut p, psn(4), off, 5 * MTU as u32);
    let out = from_b(&mut p);
    assert_eq!(
        out.iter().map(|s| s.op_psn()).collect::<Vec<_>>(),
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, psn(4)),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, psn(5)),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, psn(6)),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, psn(7)),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, psn(8)),
        ]
    );
    let joined: Vec<u8> = out.iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(joined, pattern(8 * MTU, 5)[3 * MTU..]);
    assert_eq!(b_state(&p), QpState::Rts);
    assert_eq!(p.rq_psn_b(), psn(10));
}

#[test]
fn c9_110_duplicates_answered_in_psn_order_before_queued_responses() {
    c9_110_order_case(Svc::Rc);
}

#[test]
fn c9_110_xrc_duplicates_answered_in_psn_order_before_queued_responses() {
    c9_110_order_case(Svc::Xrc);
}

#[test]
fn c9_110_rd_duplicates_answered_in_psn_order_before_queued_responses() {
    c9_110_order_case(Svc::Rd);
}

fn c9_110_order_case(svc: Svc) {
    let mut p = pair_with(svc, deep());
    p.b.hca
        .mr_write(p.b.mr.handle, 0, &pattern(2 * MTU, 9))
        .unwrap();
    p.b.hca
        .mr_write(p.b.mr.handle, 64 * 1024 - 8, &7u64.to_le_bytes())
        .unwrap();
    let (va, rkey) = (p.b.mr.addr + 64 * 1024 - 8, p.b.mr.rkey);
    read(&mut p, P, 0, 100);
    to_b(&mut p, fetch_add(psn(1), va, rkey, 1), &[]);
    assert_eq!(from_b(&mut p).len(), 2);
    // A new two-packet READ is queued, not yet begun; duplicates of the earlier ATOMIC and
    // READ arrive (latest first): they are answered in PSN order ahead of it, and the new
    // READ's response, not begun, is sent whole after them.
    read(&mut p, psn(2), 0, 2 * MTU as u32);
    to_b(&mut p, fetch_add(psn(1), va, rkey, 1), &[]);
    read(&mut p, P, 0, 100);
    let out = from_b(&mut p);
    assert_eq!(
        out.iter().map(|s| s.op_psn()).collect::<Vec<_>>(),
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, P),
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, psn(1)),
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, psn(2)),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, psn(3)),
        ]
    );
    assert_eq!(out[1].headers.atomic_ack_eth.unwrap().orig_remote_data, 7);
    assert_eq!(
        p.b.mem(64 * 1024 - 8, 8),
        8u64.to_le_bytes(),
        "executed once"
    );
}

#[test]
fn c9_115_no_nak_for_errors_while_answering_duplicates() {
    c9_115_case(Svc::Rc);
}

#[test]
fn c9_115_xrc_no_nak_for_errors_while_answering_duplicates() {
    c9_115_case(Svc::Xrc);
}

#[test]
fn c9_115_rd_no_nak_for_errors_while_answering_duplicates() {
    c9_115_case(Svc::Rd);
}

fn c9_115_case(svc: Svc) {
    let mut p = pair_with(svc, deep());
    p.recv_b(1, 0, 64);
    let (addr, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    send_only(&mut p, P, false, b"s");
    read(&mut p, psn(1), 4096, 100);
    to_b(&mut p, fetch_add(psn(2), addr + 64, rkey, 1), &[]);
    assert_eq!(from_b(&mut p).len(), 2);
    let mut out = Vec::new();
    // Duplicate READ beyond the original range, with a bad key, at a non-READ PSN.
    to_b(&mut p, read_req(psn(1), addr + 4096, rkey, 200), &[]);
    to_b(&mut p, read_req(psn(1), addr + 4096, rkey ^ 1, 100), &[]);
    to_b(&mut p, read_req(P, addr + 4096, rkey, 100), &[]);
    // Duplicate ATOMIC with no saved result.
    to_b(&mut p, fetch_add(P, addr + 64, rkey, 1), &[]);
    // Duplicate with a reserved opcode, and a duplicate SEND that would be too long if new.
    let mut f = p.frame(Dir::AtoB, req(Opcode::RC_SEND_ONLY, P, true), b"1234");
    patch_opcode(&mut f, reserved(svc, 0x1f));
    p.inject_frame(Dir::AtoB, &f);
    send_only(&mut p, P, true, &[0; MTU + 4]);
    if svc == Svc::Xrc {
        // A duplicate whose XRCETH names no XRC SRQ of the target's domain.
        let mut h = req(Opcode::RC_SEND_ONLY, P, true);
        h.xrceth = Some(Xrceth {
            resv8: 0,
            xrcsrq: XrcSrqn::new(0xabcde),
        });
        to_b(&mut p, h, b"s");
        assert_eq!(p.b.hca.counters().xrc_bad_srq, 1);
    }
    out.extend(from_b(&mut p));
    assert!(!out.iter().any(is_nak), "{out:?}");
    assert_eq!(b_state(&p), QpState::Rts);
    assert_eq!(p.rq_psn_b(), psn(3));
}

#[test]
fn c9_123_psn_behind_epsn_is_a_duplicate() {
    c9_123_case(Svc::Rc);
}

#[test]
fn c9_123_xrc_psn_behind_epsn_is_a_duplicate() {
    c9_123_case(Svc::Xrc);
}

#[test]
fn c9_123_rd_psn_behind_epsn_is_a_duplicate() {
    c9_123_case(Svc::Rd);
}

fn c9_123_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 0, 64);
    p.recv_b(2, 1024, 64);
    send_only(&mut p, P, true, b"one");
    assert_ack(&from_b(&mut p), ACK, P);
    let epsn = psn(1);
    // The oldest PSN of the duplicate region (2^23 - 1 behind ePSN) and the newest (1 behind).
    for behind in [(1u32 << 23) - 1, 1000, 1] {
        let d = epsn.wrapping_sub(behind) & 0xff_ffff;
        send_only(&mut p, d, true, b"dup");
        assert_ack(&from_b(&mut p), ACK, P);
    }
    assert!(p.b.done().len() == 1, "no duplicate was executed");
    assert_eq!(p.rq_psn_b(), epsn);
    // 2^23 - 1 ahead is outside the valid region: invalid.
    send_only(&mut p, (epsn + (1 << 23) - 1) & 0xff_ffff, true, b"x");
    assert_ack(&from_b(&mut p), NAK_SEQ, epsn);
}

/// o9-91.a1 (XRC meets 9.7 as RC does) for XRC's own invalid request, an XRCETH naming no XRC
/// SRQ of the target's domain: handled in PSN order like any request. The requests before it
/// execute and complete first; the NAK-Invalid RD Request carries its PSN (ePSN) and the MSN
/// of those requests; nothing of it executes; the target then enters ERR. The same XRCETH on
/// a duplicate is dropped silently (C9-115) and ahead of ePSN draws the sequence NAK.
#[test]
fn o9_91_a1_xrc_xrceth_violation_naks_invalid_rd_request_in_psn_order() {
    let mut p = pair(Svc::Xrc);
    for i in 0..3 {
        p.recv_b(i + 1, 1024 * i, 64);
    }
    let bad = |op: Opcode, psn: u32| {
        let mut h = req(op, psn, true);
        h.xrceth = Some(Xrceth {
            resv8: 0,
            xrcsrq: XrcSrqn::new(0xabcde),
        });
        h
    };
    send_only(&mut p, P, false, b"first");
    send_only(&mut p, psn(1), false, b"second");
    // Ahead of ePSN: a PSN sequence error, whatever its XRCETH.
    to_b(&mut p, bad(Opcode::RC_SEND_ONLY, psn(3)), b"ahead");
    assert_ack(&from_b(&mut p), NAK_SEQ, psn(2));
    // A duplicate: no answer at all.
    to_b(&mut p, bad(Opcode::RC_SEND_ONLY, P), b"first");
    assert!(from_b(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().xrc_bad_srq, 1);
    // At ePSN: an RDMA WRITE naming no SRQ.
    let (va, rkey) = (p.b.mr.addr + 8192, p.b.mr.rkey);
    let h = with_reth(bad(Opcode::RC_RDMA_WRITE_ONLY, psn(2)), va, rkey, 5);
    to_b(&mut p, h, b"third");
    assert_eq!(
        p.b.done(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let out = from_b(&mut p);
    assert_eq!(
        ops(&out),
        vec![(Opcode::RC_ACKNOWLEDGE, psn(2), Some(0x64))],
        "{out:?}"
    );
    assert_eq!(out[0].raw_opcode(), Opcode::XRC_ACKNOWLEDGE);
    assert_eq!(out[0].msn(), Some(2));
    assert_eq!(
        out[0].aeth_syndrome(),
        Some(AethSyndrome::Nak(NakCode::InvalidRdRequest))
    );
    assert_eq!(p.b.hca.counters().xrc_bad_srq, 2);
    assert_eq!(p.b.mem(8192, 5), vec![0; 5], "not executed");
    assert_eq!(p.b.mem(0, 5), b"first");
    assert_eq!(p.b.mem(1024, 6), b"second");
    assert_eq!(b_state(&p), QpState::Err);
    // The third receive stays in the SRQ (not flushed: the SRQ is not the QP's).
    assert!(p.b.done().is_empty());
}

// ----- NAKs (9.7.5.1.5, 9.7.5.2) ------------------------------------------------------------------

/// A pair whose B has executed a 3-packet RDMA WRITE (ePSN = P + 3, MSN 1).
fn after_write3(svc: Svc) -> Pair {
    let mut p = pair(svc);
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    let h = with_reth(
        req(Opcode::RC_RDMA_WRITE_FIRST, P, false),
        va,
        rkey,
        3 * MTU as u32,
    );
    to_b(&mut p, h, &[1; MTU]);
    to_b(
        &mut p,
        req(Opcode::RC_RDMA_WRITE_MIDDLE, psn(1), false),
        &[1; MTU],
    );
    to_b(
        &mut p,
        req(Opcode::RC_RDMA_WRITE_LAST, psn(2), true),
        &[1; MTU],
    );
    assert_ack(&from_b(&mut p), ACK, psn(2));
    assert_eq!(p.rq_psn_b(), psn(3));
    p
}

/// Each NAK kind B produces outside READ responses, after [`after_write3`].
fn every_nak(svc: Svc) -> Vec<(&'static str, Vec<Seen>)> {
    let e = psn(3);
    let mut v = Vec::new();
    let mut p = after_write3(svc);
    p.recv_b(1, 0, 64);
    send_only(&mut p, psn(5), true, b"ahead");
    v.push(("PSN sequence error", from_b(&mut p)));
    let mut p = after_write3(svc);
    p.recv_b(1, 0, 64);
    to_b(&mut p, req(Opcode::RC_SEND_MIDDLE, e, true), &[0; MTU]);
    v.push(("invalid request", from_b(&mut p)));
    let mut p = after_write3(svc);
    let addr = p.b.mr.addr;
    let h = with_reth(req(Opcode::RC_RDMA_WRITE_ONLY, e, true), addr, 0x99, 4);
    to_b(&mut p, h, b"oops");
    v.push(("remote access error", from_b(&mut p)));
    let mut p = after_write3(svc);
    let sge = Sge {
        addr: 0,
        length: 64,
        lkey: 0xdead_beef,
    };
    p.b.post_recv_wrs(&[RecvWr::new(1, vec![sge])]);
    send_only(&mut p, e, true, b"into a bad buffer");
    v.push(("remote operational error", from_b(&mut p)));
    let mut p = after_write3(svc);
    send_only(&mut p, e, true, b"no receive");
    v.push(("RNR", from_b(&mut p)));
    if svc == Svc::Xrc {
        // XRC: an XRCETH naming no XRC SRQ of the target's domain.
        let mut p = after_write3(svc);
        p.recv_b(1, 0, 64);
        let mut h = req(Opcode::RC_SEND_ONLY, e, true);
        h.xrceth = Some(Xrceth {
            resv8: 0,
            xrcsrq: XrcSrqn::new(0xabcde),
        });
        to_b(&mut p, h, b"to no SRQ");
        v.push(("invalid RD request", from_b(&mut p)));
        assert!(p.b.done().is_empty(), "the SRQ's receive is untouched");
    }
    v
}

#[test]
fn c9_111_naks_carry_epsn() {
    c9_111_case(Svc::Rc);
}

#[test]
fn c9_111_xrc_naks_carry_epsn() {
    c9_111_case(Svc::Xrc);
}

#[test]
fn c9_111_rd_naks_carry_epsn() {
    c9_111_case(Svc::Rd);
}

fn c9_111_case(svc: Svc) {
    for (what, out) in every_nak(svc) {
        assert_eq!(out.len(), 1, "{what}: {out:?}");
        assert!(is_nak(&out[0]), "{what}: {out:?}");
        assert_eq!(out[0].psn(), psn(3), "{what}");
    }
}

#[test]
fn c9_113_rnr_nak_carries_psn_of_nakked_request() {
    c9_113_case(Svc::Rc);
}

#[test]
fn c9_113_xrc_rnr_nak_carries_psn_of_nakked_request() {
    c9_113_case(Svc::Xrc);
}

#[test]
fn c9_113_rd_rnr_nak_carries_psn_of_nakked_request() {
    c9_113_case(Svc::Rd);
}

fn c9_113_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 0, 64);
    send_only(&mut p, P, true, b"ok");
    assert_ack(&from_b(&mut p), ACK, P);
    // A multi-packet SEND with no receive left: RNR NAK at its first packet.
    to_b(&mut p, req(Opcode::RC_SEND_FIRST, psn(1), false), &[1; MTU]);
    let out = from_b(&mut p);
    assert_eq!(
        ops(&out),
        vec![(Opcode::RC_ACKNOWLEDGE, psn(1), Some(0x20 | 12))]
    );
    // An RDMA WRITE with immediate with no receive: RNR NAK with its PSN.
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    let mut h = with_reth(
        req(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, psn(1), true),
        va,
        rkey,
        4,
    );
    h.immdt = Some(ImmDt { imm: 1 });
    to_b(&mut p, h, b"imm!");
    let out = from_b(&mut p);
    assert_eq!(
        ops(&out),
        vec![(Opcode::RC_ACKNOWLEDGE, psn(1), Some(0x20 | 12))]
    );
}

/// A READ of 3 PMTU from a second region of B that is deregistered after `sent` response
/// packets went out; returns every packet B sent.
fn read_interrupted(svc: Svc, sent: usize) -> Vec<Seen> {
    let mut p = pair(svc);
    let mr = extra_mr(&mut p, AccessFlags::all(), false);
    p.recv_b(1, 0, 64);
    send_only(&mut p, P, false, b"m1");
    to_b(
        &mut p,
        read_req(psn(1), mr.addr, mr.rkey, 3 * MTU as u32),
        &[],
    );
    let mut out: Vec<Seen> = (0..sent).map(|_| p.drain_one(Dir::BtoA).unwrap()).collect();
    p.b.hca.dereg_mr(mr.handle).unwrap();
    out.extend(from_b(&mut p));
    out
}

#[test]
fn c9_100_read_response_error_ends_response_early() {
    c9_100_case(Svc::Rc);
}

#[test]
fn c9_100_xrc_read_response_error_ends_response_early() {
    c9_100_case(Svc::Xrc);
}

#[test]
fn c9_100_rd_read_response_error_ends_response_early() {
    c9_100_case(Svc::Rd);
}

fn c9_100_case(svc: Svc) {
    let out = read_interrupted(svc, 1);
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(
        out[0].op_psn(),
        (Opcode::RC_RDMA_READ_RESPONSE_FIRST, psn(1))
    );
    assert_eq!(out[1].op_psn(), (Opcode::RC_ACKNOWLEDGE, psn(2)));
    assert!(out[1].payload.is_empty());
    assert!(matches!(
        out[1].aeth_syndrome(),
        Some(AethSyndrome::Nak(
            NakCode::RemoteAccessError | NakCode::RemoteOperationalError
        ))
    ));
}

#[test]
fn c9_112_nak_inside_read_response_carries_failing_packet_psn() {
    c9_112_case(Svc::Rc);
}

#[test]
fn c9_112_xrc_nak_inside_read_response_carries_failing_packet_psn() {
    c9_112_case(Svc::Xrc);
}

#[test]
fn c9_112_rd_nak_inside_read_response_carries_failing_packet_psn() {
    c9_112_case(Svc::Rd);
}

fn c9_112_case(svc: Svc) {
    let out = read_interrupted(svc, 2);
    assert_eq!(
        out.iter().map(|s| s.op_psn()).collect::<Vec<_>>(),
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, psn(1)),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, psn(2)),
            (Opcode::RC_ACKNOWLEDGE, psn(3)),
        ]
    );
    assert!(is_nak(&out[2]));
}

#[test]
fn c9_113_a1_every_nak_uses_acknowledge_opcode() {
    c9_113_a1_case(Svc::Rc);
}

#[test]
fn c9_113_a1_xrc_every_nak_uses_acknowledge_opcode() {
    c9_113_a1_case(Svc::Xrc);
}

#[test]
fn c9_113_a1_rd_every_nak_uses_acknowledge_opcode() {
    c9_113_a1_case(Svc::Rd);
}

fn c9_113_a1_case(svc: Svc) {
    let mut naks: Vec<(&str, Seen)> = every_nak(svc)
        .into_iter()
        .flat_map(|(w, v)| v.into_iter().map(move |s| (w, s)))
        .collect();
    naks.extend(
        read_interrupted(svc, 1)
            .into_iter()
            .filter(is_nak)
            .map(|s| ("inside a READ response", s)),
    );
    // Six kinds, and on XRC the invalid RD request of an XRCETH violation.
    assert_eq!(naks.len(), 6 + usize::from(svc == Svc::Xrc));
    for (what, s) in naks {
        assert!(is_nak(&s), "{what}");
        assert_eq!(s.raw_opcode(), svc.opcode(Opcode::RC_ACKNOWLEDGE), "{what}");
    }
}

#[test]
fn c9_125_invalid_request_nak_carries_epsn() {
    c9_125_case(Svc::Rc);
}

#[test]
fn c9_125_xrc_invalid_request_nak_carries_epsn() {
    c9_125_case(Svc::Xrc);
}

#[test]
fn c9_125_rd_invalid_request_nak_carries_epsn() {
    c9_125_case(Svc::Rd);
}

fn c9_125_case(svc: Svc) {
    let mut p = after_write3(svc);
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    to_b(&mut p, read_req(psn(3), va, rkey, u32::MAX), &[]);
    assert_ack(&from_b(&mut p), NAK_INV, psn(3));
    let mut p = after_write3(svc);
    to_b(
        &mut p,
        req(Opcode::RC_RDMA_WRITE_LAST, psn(3), true),
        &[0; 8],
    );
    assert_ack(&from_b(&mut p), NAK_INV, psn(3));
}

#[test]
fn c9_126_remote_operational_error_carries_executing_request_psn() {
    c9_126_case(Svc::Rc);
}

#[test]
fn c9_126_xrc_remote_operational_error_carries_executing_request_psn() {
    c9_126_case(Svc::Xrc);
}

#[test]
fn c9_126_rd_remote_operational_error_carries_executing_request_psn() {
    c9_126_case(Svc::Rd);
}

fn c9_126_case(svc: Svc) {
    let mut p = pair(svc);
    // The receive's second SGE names no region: the responder fails while placing packet 2.
    let sges = vec![
        Sge {
            addr: p.b.mr.addr,
            length: MTU as u32,
            lkey: p.b.mr.lkey,
        },
        Sge {
            addr: 0x1000,
            length: MTU as u32,
            lkey: 0x00de_ad00,
        },
    ];
    p.b.post_recv_wrs(&[RecvWr::new(5, sges)]);
    to_b(&mut p, req(Opcode::RC_SEND_FIRST, P, false), &[1; MTU]);
    to_b(&mut p, req(Opcode::RC_SEND_LAST, psn(1), true), &[2; 100]);
    assert_ack(&from_b(&mut p), NAK_REMOTE_OP, psn(1));
    assert_eq!(p.b.done()[0], (5, WcStatus::LocProtErr));
}

// ----- AETH (9.7.5.2) ---------------------------------------------------------------------------

/// One response of every kind, with what its syndrome must decode to.
fn every_response(svc: Svc) -> Vec<(&'static str, Seen)> {
    let mut v: Vec<(&'static str, Seen)> = Vec::new();
    let mut p = four_executed(svc);
    send_only(&mut p, P, true, b"dup");
    v.push(("ack", from_b(&mut p).remove(0)));
    read(&mut p, psn(4), 0, 3 * MTU as u32);
    for s in from_b(&mut p) {
        v.push(("read", s));
    }
    let (va, rkey) = (p.b.mr.addr + 64, p.b.mr.rkey);
    to_b(&mut p, fetch_add(psn(7), va, rkey, 1), &[]);
    v.push(("ack", from_b(&mut p).remove(0)));
    for (what, out) in every_nak(svc) {
        let kind = match what {
            "RNR" => "rnr",
            "PSN sequence error" => "nak0",
            "invalid request" => "nak1",
            "remote access error" => "nak2",
            "remote operational error" => "nak3",
            "invalid RD request" => "nak4",
            _ => unreachable!("{what}"),
        };
        v.push((kind, out[0].clone()));
    }
    for s in read_interrupted(svc, 1) {
        let kind = if is_nak(&s) { "nak2" } else { "read" };
        v.push((kind, s));
    }
    v
}

#[test]
fn c9_119_aeth_syndrome_encoded_per_table_48() {
    c9_119_case(Svc::Rc);
}

#[test]
fn o9_71_xrc_aeth_syndrome_encoded_per_table_48() {
    c9_119_case(Svc::Xrc);
}

#[test]
fn o9_71_rd_aeth_syndrome_encoded_per_table_48() {
    c9_119_case(Svc::Rd);
}

fn c9_119_case(svc: Svc) {
    let all = every_response(svc);
    assert!(all.len() >= 12);
    for (kind, s) in all {
        let syn = s.aeth_syndrome();
        match (kind, syn) {
            (_, None) => assert_eq!(s.opcode(), Opcode::RC_RDMA_READ_RESPONSE_MIDDLE),
            // Bits 4:0 of an ACK are a credit code (B's credit count, see
            // compliance_rc_credits.rs).
            ("ack" | "read", Some(AethSyndrome::Ack { .. })) => {}
            ("rnr", Some(AethSyndrome::RnrNak { timer })) => assert_eq!(timer.code(), 12),
            ("nak0", Some(AethSyndrome::Nak(NakCode::PsnSequenceError)))
            | ("nak1", Some(AethSyndrome::Nak(NakCode::InvalidRequest)))
            | ("nak2", Some(AethSyndrome::Nak(NakCode::RemoteAccessError)))
            | ("nak3", Some(AethSyndrome::Nak(NakCode::RemoteOperationalError)))
            | ("nak4", Some(AethSyndrome::Nak(NakCode::InvalidRdRequest))) => {}
            (kind, syn) => panic!("{kind}: syndrome {syn:?} in {s:?}"),
        }
    }
    // NAK-Invalid RD Request is XRC's (an XRCETH violation), never RC's.
    let nak4 = every_response(svc)
        .iter()
        .filter(|(k, _)| *k == "nak4")
        .count();
    assert_eq!(nak4, usize::from(svc == Svc::Xrc));
}

#[test]
fn c9_119_a1_aeth_syndrome_bit_7_is_zero() {
    c9_119_a1_case(Svc::Rc);
}

#[test]
fn c9_119_a1_xrc_aeth_syndrome_bit_7_is_zero() {
    c9_119_a1_case(Svc::Xrc);
}

#[test]
fn c9_119_a1_rd_aeth_syndrome_bit_7_is_zero() {
    c9_119_a1_case(Svc::Rd);
}

#[test]
fn o9_71_a1_xrc_aeth_syndrome_bit_7_is_zero() {
    c9_119_a1_case(Svc::Xrc);
}

fn c9_119_a1_case(svc: Svc) {
    let all = every_response(svc);
    let with_aeth = all.iter().filter(|(_, s)| s.syndrome().is_some()).count();
    assert_eq!(with_aeth, 11 + usize::from(svc == Svc::Xrc));
    for (kind, s) in all {
        if let Some(syn) = s.syndrome() {
            assert_eq!(syn & 0x80, 0, "{kind}: {s:?}");
        }
    }
}

// ----- RNR (9.7.5.2.8) ----------------------------------------------------------------------------

#[test]
fn c9_129_rnr_nak_carries_min_rnr_timer() {
    c9_129_case(Svc::Rc);
}

#[test]
fn o9_76_xrc_rnr_nak_carries_min_rnr_timer() {
    c9_129_case(Svc::Xrc);
}

#[test]
fn o9_76_rd_rnr_nak_carries_min_rnr_timer() {
    c9_129_case(Svc::Rd);
}

fn c9_129_case(svc: Svc) {
    for k in [0u8, 1, 5, 14, 31] {
        let mut p = pair_with(
            svc,
            ConnectOptions {
                min_rnr_timer: k,
                ..ConnectOptions::default()
            },
        );
        send_only(&mut p, P, true, b"no receive posted");
        let out = from_b(&mut p);
        assert_ack(&out, 0x20 | k, P);
        assert_eq!(
            out[0].aeth_syndrome(),
            Some(AethSyndrome::RnrNak {
                timer: softib_wire::aeth::RnrTimer::new(k)
            })
        );
    }
}

// ----- MSN (9.7.7.1) -----------------------------------------------------------------------------

#[test]
fn c9_147_every_aeth_carries_current_msn() {
    c9_147_case(Svc::Rc);
}

#[test]
fn o9_91_a1_xrc_every_aeth_carries_current_msn() {
    c9_147_case(Svc::Xrc);
}

fn c9_147_case(svc: Svc) {
    let mut p = pair_with(svc, deep());
    p.recv_b(1, 0, 64);
    send_only(&mut p, P, true, b"m1");
    let mut got: Vec<(Opcode, Option<u32>)> = Vec::new();
    got.extend(from_b(&mut p).iter().map(|s| (s.opcode(), s.msn())));
    read(&mut p, psn(1), 0, 3 * MTU as u32);
    got.extend(from_b(&mut p).iter().map(|s| (s.opcode(), s.msn())));
    let (va, rkey) = (p.b.mr.addr + 64, p.b.mr.rkey);
    to_b(&mut p, fetch_add(psn(4), va, rkey, 1), &[]);
    got.extend(from_b(&mut p).iter().map(|s| (s.opcode(), s.msn())));
    send_only(&mut p, psn(5), true, b"no receive: RNR");
    got.extend(from_b(&mut p).iter().map(|s| (s.opcode(), s.msn())));
    send_only(&mut p, psn(7), true, b"ahead");
    got.extend(from_b(&mut p).iter().map(|s| (s.opcode(), s.msn())));
    use Opcode as O;
    assert_eq!(
        got,
        vec![
            (O::RC_ACKNOWLEDGE, Some(1)),
            (O::RC_RDMA_READ_RESPONSE_FIRST, Some(2)),
            (O::RC_RDMA_READ_RESPONSE_MIDDLE, None),
            (O::RC_RDMA_READ_RESPONSE_LAST, Some(2)),
            (O::RC_ATOMIC_ACKNOWLEDGE, Some(3)),
            (O::RC_ACKNOWLEDGE, Some(3)),
            (O::RC_ACKNOWLEDGE, Some(3)),
        ]
    );
    // A NAK that cuts a READ response short carries the MSN too (the READ counted: 2).
    let out = read_interrupted(svc, 1);
    assert_eq!(
        out.iter().map(|s| s.msn()).collect::<Vec<_>>(),
        vec![Some(2), Some(2)]
    );
}

#[test]
fn c9_148_msn_starts_at_0_and_counts_new_messages_only() {
    c9_148_case(Svc::Rc);
}

#[test]
fn o9_91_a1_xrc_msn_starts_at_0_and_counts_new_messages_only() {
    c9_148_case(Svc::Xrc);
}

fn c9_148_case(svc: Svc) {
    let mut p = pair(svc);
    // Before any message: MSN 0.
    send_only(&mut p, P, true, b"no receive yet");
    let out = from_b(&mut p);
    assert_eq!(
        (out[0].syndrome(), out[0].msn()),
        (Some(0x20 | 12), Some(0))
    );
    for i in 0..3 {
        p.recv_b(i + 1, 1024 * i, 64);
    }
    send_only(&mut p, P, true, b"s1");
    send_only(&mut p, psn(1), true, b"s2");
    read(&mut p, psn(2), 0, 3 * MTU as u32);
    send_only(&mut p, psn(5), true, b"s4");
    let msns: Vec<_> = from_b(&mut p).iter().map(|s| (s.psn(), s.msn())).collect();
    assert_eq!(
        msns,
        vec![
            (psn(1), Some(2)),
            (psn(2), Some(3)),
            (psn(3), None),
            (psn(4), Some(3)),
            (psn(5), Some(4)),
        ],
        "SEND 1 and 2 coalesced into one ACK (MSN 2), READ MSN 3, SEND MSN 4"
    );
    // Replays do not count.
    send_only(&mut p, P, true, b"s1");
    read(&mut p, psn(2), 0, 3 * MTU as u32);
    send_only(&mut p, psn(5), true, b"s4");
    let out = from_b(&mut p);
    assert_eq!(out.len(), 5);
    assert!(
        out.iter().all(|s| s.msn().is_none_or(|m| m == 4)),
        "{out:?}"
    );
    // The next new message is number 5.
    p.recv_b(9, 8192, 64);
    send_only(&mut p, psn(6), true, b"s5");
    assert_eq!(from_b(&mut p)[0].msn(), Some(5));
}

#[test]
fn c9_149_msn_in_naks_and_duplicate_acks() {
    c9_149_case(Svc::Rc);
}

#[test]
fn o9_91_a1_xrc_msn_in_naks_and_duplicate_acks() {
    c9_149_case(Svc::Xrc);
}

fn c9_149_case(svc: Svc) {
    let mut p = pair(svc);
    p.recv_b(1, 0, 64);
    p.recv_b(2, 1024, 64);
    send_only(&mut p, P, false, b"s1");
    send_only(&mut p, psn(1), true, b"s2");
    assert_eq!(from_b(&mut p)[0].msn(), Some(2));
    // Duplicate ACK.
    send_only(&mut p, P, true, b"s1");
    let dup = from_b(&mut p);
    // PSN sequence error NAK.
    send_only(&mut p, psn(4), true, b"ahead");
    let seq = from_b(&mut p);
    // RNR NAK.
    send_only(&mut p, psn(2), true, b"no receive");
    let rnr = from_b(&mut p);
    // The duplicate ACK's credit field: no receive left on RC, the "invalid" code on XRC.
    let ack = match svc {
        Svc::Rd => unreachable!("C9-149 does not bind RD"),
        Svc::Rc => ACK,
        Svc::Xrc => 0x1f,
    };
    for (what, out, syn) in [
        ("duplicate ACK", dup, ack),
        ("sequence NAK", seq, NAK_SEQ),
        ("RNR NAK", rnr, 0x20 | 12),
    ] {
        assert_eq!(
            (out.len(), out[0].syndrome(), out[0].msn()),
            (1, Some(syn), Some(2)),
            "{what}"
        );
    }
}

// ----- end-to-end credits (9.7.7.2) ---------------------------------------------------------------

#[test]
fn c9_158_2_1_ack_carries_table_52_credit_count() {
    let mut p = pair(Svc::Rc);
    for i in 0..5 {
        p.recv_b(i + 1, 1024 * i, 64);
    }
    // A WRITE consumes no receive WQE: 5 credits, encoded (rounded down) as code 4.
    write_only(&mut p, P, 8192, b"w");
    let out = from_b(&mut p);
    assert_eq!((out[0].syndrome(), out[0].msn()), (Some(0x04), Some(1)));
}

#[test]
fn o9_95_2_2_srq_attached_qp_sends_invalid_credit_code() {
    let mut p = pair(Svc::Rc);
    let (_srq, q2) = p.b_srq_qp(8, 0x7000);
    let to_q2 =
        |p: &mut Pair, h: TransportHeaders, payload: &[u8]| p.inject_to_b_qp(q2, h, payload);
    let mut syndromes = Vec::new();
    for i in 0..3 {
        to_q2(&mut p, req(Opcode::RC_SEND_ONLY, 0x7000 + i, true), b"srq");
        syndromes.extend(from_b(&mut p).iter().map(|s| s.syndrome()));
    }
    let (va, rkey) = (p.b.mr.addr + 65536, p.b.mr.rkey);
    to_q2(
        &mut p,
        with_reth(req(Opcode::RC_RDMA_WRITE_ONLY, 0x7003, true), va, rkey, 1),
        b"w",
    );
    syndromes.extend(from_b(&mut p).iter().map(|s| s.syndrome()));
    assert_eq!(syndromes, vec![Some(0x1f); 4]);
    assert_eq!(p.b.done().len(), 3, "the SENDs used the SRQ's receives");
}
