//! IBA 9.7 compliance of what is RD's own (seed 001: o9-34 … o9-38.a2, o9-72, o9-74, C9-127,
//! o9-79.a1, o9-85): the RDD checks at both ends, the RESYNC a requester sends after a
//! message fails and the responder's acceptance of it, the QPN checks within a message and on
//! duplicates, the responder's hand-off of a request to the RD QP BTH names (Q_Key, RDD, QP
//! type), credit bits, P_Keys at the EE context, responses taken only by the QP whose message
//! is outstanding, and one transport timer per EE context. The rules RD shares with RC run in
//! the RC compliance files on an RD pair (`*_rd_*`, `common::Svc::Rd`).
//!
//! The pair: A and B each have an RDD, an RD QP (`qpn`, Q_Key [`RD_QKEY`]) and an EE context
//! connected to the other's; A's requests start at PSN [`P`]. Tests add RD QPs and RDDs where
//! they need them, craft packets as the other side would send them and look at the exact
//! packets, completions and memory.

mod common;

use common::{hdr, patch_transport, Dir, Pair, Seen, Svc, RD_QKEY};
use softib_core::setup::{connect_eec, ConnectOptions, EndpointInfo};
use softib_core::time::Instant;
use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
use softib_core::verbs::types::{QpState, QpType, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RemoteAddr, SendWr, WrOpcode};
use softib_wire::aeth::Aeth;
use softib_wire::deth::Deth;
use softib_wire::opcode::Opcode;
use softib_wire::reth::Reth;
use softib_wire::transport::TransportHeaders;
use softib_wire::{Msn, Psn, Qpn};

/// A's initial request PSN (B's initial expected PSN).
const P: u32 = 0x100;
const MTU: usize = 1024;
const ACK: u8 = 0x00;
const NAK_SEQ: u8 = 0x60;
const NAK_INV: u8 = 0x61;
const NAK_ACCESS: u8 = 0x62;
const NAK_INV_RD: u8 = 0x64;
/// Operation bits of RD RESYNC (0x55): the harness sends RC-numbered operations in the RD
/// class.
const RESYNC: Opcode = Opcode(0x15);

fn pair() -> Pair {
    pair_with(P, ConnectOptions::default())
}

fn pair_with(psn_a: u32, o: ConnectOptions) -> Pair {
    Pair::new_svc(Svc::Rd, psn_a, 0x900, o)
}

fn psn(d: u32) -> u32 {
    P.wrapping_add(d) & 0xff_ffff
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn send(p: &Pair, id: u64, off: u64, len: u32) -> SendWr {
    SendWr::new(id, WrOpcode::Send)
        .with_sge(p.sge_a(off, len))
        .signaled()
}

fn req(op: Opcode, psn: u32, ack_req: bool) -> TransportHeaders {
    let mut h = hdr(op, psn);
    h.bth.ack_req = ack_req;
    h
}

/// A request as A's QP `src` would send it (the harness fills in the RDETH; the DETH names
/// `src` and carries `qkey`).
fn req_from(op: Opcode, psn: u32, src: Qpn, qkey: u32) -> TransportHeaders {
    let mut h = req(op, psn, true);
    h.deth = Some(Deth {
        qkey,
        resv8: 0,
        src_qp: src,
    });
    h
}

/// A RESYNC at `psn` from A's QP `src` for B's QP `dest`.
fn resync(p: &mut Pair, psn: u32, src: Qpn, dest: Qpn) {
    let h = req_from(RESYNC, psn, src, RD_QKEY);
    p.inject_to_b_qp(dest, h, &[]);
}

fn ack_hdr(psn: u32, syndrome: u8) -> TransportHeaders {
    let mut h = hdr(Opcode::RC_ACKNOWLEDGE, psn);
    h.aeth = Some(Aeth {
        syndrome,
        msn: Msn::new(0),
    });
    h
}

/// Injects into A an Acknowledge with `syndrome` at `psn`, addressed to A's QP `to`.
fn ack_to(p: &mut Pair, to: Qpn, psn: u32, syndrome: u8) {
    let mut f = p.frame(Dir::BtoA, ack_hdr(psn, syndrome), &[]);
    patch_transport(&mut f, |t| {
        t[5..8].copy_from_slice(&to.value().to_be_bytes()[1..])
    });
    p.inject_frame(Dir::BtoA, &f);
}

/// [`ack_to`] A's own QP.
fn ack_a(p: &mut Pair, psn: u32, syndrome: u8) {
    let a0 = p.a.qpn;
    ack_to(p, a0, psn, syndrome);
}

fn from_a(p: &mut Pair) -> Vec<Seen> {
    p.drain(Dir::AtoB)
}

fn from_b(p: &mut Pair) -> Vec<Seen> {
    p.drain(Dir::BtoA)
}

/// (opcode as sent, PSN, syndrome) of each packet.
fn ops(v: &[Seen]) -> Vec<(Opcode, u32, Option<u8>)> {
    v.iter()
        .map(|s| (s.raw_opcode(), s.psn(), s.syndrome()))
        .collect()
}

/// (BTH:DestQP, DETH:SrcQP) of a packet.
fn qpns(s: &Seen) -> (Qpn, Option<Qpn>) {
    (s.headers.bth.dest_qp, s.headers.deth.map(|d| d.src_qp))
}

/// (wr_id, status, QP) of every completion on a side's CQ.
fn wcs(side: &mut common::Side) -> Vec<(u64, WcStatus, Qpn)> {
    side.wcs()
        .iter()
        .map(|w| (w.wr_id, w.status, w.qp_num))
        .collect()
}

fn qp_state(side: &common::Side, qpn: Qpn) -> QpState {
    side.hca.query_qp(qpn).unwrap().qp_state
}

/// Frames of `dir` in the pair's log, decoded.
fn logged(p: &Pair, dir: Dir) -> Vec<Seen> {
    p.log
        .iter()
        .filter(|(d, _)| *d == dir)
        .map(|(_, f)| common::decode(f))
        .collect()
}

/// A second RD QP on B in B's RDD, with B's PD and CQ and the harness's Q_Key.
fn b_qp2(p: &mut Pair) -> Qpn {
    let (pd, rdd, cq) = (p.b.pd, p.b.rdd.unwrap(), p.b.cq);
    p.b.rd_qp(pd, rdd, cq, RD_QKEY)
}

/// A second RD QP on A in A's RDD, with A's PD and CQ.
fn a_qp2(p: &mut Pair) -> Qpn {
    let (pd, rdd, cq) = (p.a.pd, p.a.rdd.unwrap(), p.a.cq);
    p.a.rd_qp(pd, rdd, cq, RD_QKEY)
}

// ----- the requester's RDD check (9.7.3.1) --------------------------------------------------------

/// o9-34: a send queue whose RDD is not the selected EE context's cannot use it. softib's
/// outcome (Table 61 is not in the seeds): the WQE completes with `IBV_WC_LOC_QP_OP_ERR`
/// without a packet on the wire, its QP enters SQE (its later WQEs are flushed), and the EE
/// context, untouched, carries the next message of a QP of its own RDD.
#[test]
fn o9_34_rd_requester_rdd_mismatch_completes_in_error_without_a_packet() {
    let mut p = pair();
    let rdd2 = p.a.hca.alloc_rdd().unwrap();
    let (pd, cq) = (p.a.pd, p.a.cq);
    let q2 = p.a.rd_qp(pd, rdd2, cq, RD_QKEY);
    let (eec, b) = (p.a.eecn.unwrap(), p.b.qpn);
    let wrs: Vec<_> = (1..=2)
        .map(|i| send(&p, i, 0, 16).with_rd(eec, b, RD_QKEY))
        .collect();
    p.a.hca.post_send(q2, &wrs).unwrap();
    assert!(from_a(&mut p).is_empty(), "nothing reaches the wire");
    assert_eq!(
        wcs(&mut p.a),
        vec![(1, WcStatus::LocQpOpErr, q2), (2, WcStatus::WrFlushErr, q2)]
    );
    assert_eq!(qp_state(&p.a, q2), QpState::Sqe);
    assert_eq!(p.a.conn_state(), QpState::Rts);
    assert_eq!(p.sq_psn_a(), P, "no PSN was used");
    // The EE context goes on with A's own QP.
    p.recv_b(1, 0, 64);
    let wr = send(&p, 3, 0, 16);
    p.post_a(&[wr]);
    p.run(1_000_000_000);
    assert_eq!(wcs(&mut p.a), vec![(3, WcStatus::Success, p.a.qpn)]);
    assert_eq!(p.b.done(), vec![(1, WcStatus::Success)]);
    assert_eq!(p.a.hca.counters().sent_pkts, 1);
}

// ----- RESYNC (9.7.3.1, 9.7.5.1.1) -------------------------------------------------------------

/// After the RESYNC at `at` went out: its ACK is taken only at exactly `at` (the response
/// PSN the requester expects was reset to it), and the next message follows at `at` + 1.
fn resync_then_next(p: &mut Pair, at: u32, next_id: u64) {
    let sent = from_a(p);
    assert_eq!(ops(&sent), vec![(Opcode::RD_RESYNC, at, None)]);
    assert_eq!(p.sq_psn_a(), (at + 1) & 0xff_ffff);
    // An ACK for the aborted message's PSNs is no answer to the RESYNC.
    ack_a(p, at.wrapping_sub(1) & 0xff_ffff, ACK);
    assert!(
        from_a(p).is_empty(),
        "the next message waits for the RESYNC's ACK"
    );
    ack_a(p, at, ACK);
    let out = from_a(p);
    assert_eq!(
        ops(&out),
        vec![(Opcode::RD_SEND_ONLY, (at + 1) & 0xff_ffff, None)],
        "the next message"
    );
    ack_a(p, (at + 1) & 0xff_ffff, ACK);
    assert_eq!(p.a.done(), vec![(next_id, WcStatus::Success)]);
}

/// o9-35.a1: the RESYNC of an aborted message takes the PSN one above the highest the
/// message used, and the requester expects its response there: the seed's examples (request
/// PSNs 4, 5, 6 → RESYNC 7; a READ at 24 expecting 5 responses → RESYNC 29), a READ aborted
/// after some of its responses, a message aborted when only its first packet had gone out,
/// and one aborted after a retransmission.
#[test]
fn o9_35_a1_rd_resync_psn_is_one_above_the_highest_psn_of_the_aborted_message() {
    // Request PSNs 4, 5, 6 -> RESYNC 7.
    let mut p = pair_with(4, ConnectOptions::default());
    let wrs = vec![send(&p, 1, 0, 3 * MTU as u32), send(&p, 2, 0, 8)];
    p.post_a(&wrs);
    assert_eq!(
        from_a(&mut p).iter().map(Seen::psn).collect::<Vec<_>>(),
        vec![4, 5, 6]
    );
    ack_a(&mut p, 6, NAK_INV);
    // Its QP entered SQE (wr 2 is flushed); the RESYNC is the EE context's.
    assert_eq!(
        p.a.done(),
        vec![(1, WcStatus::RemInvReqErr), (2, WcStatus::WrFlushErr)]
    );
    let a0 = p.a.qpn;
    assert_eq!(qp_state(&p.a, a0), QpState::Sqe);
    let q2 = a_qp2(&mut p);
    let wr = send(&p, 3, 0, 8);
    let wr = p.for_b(&[wr]);
    p.a.hca.post_send(q2, &wr).unwrap();
    let sent = from_a(&mut p);
    assert_eq!(ops(&sent), vec![(Opcode::RD_RESYNC, 7, None)]);
    assert_eq!(p.sq_psn_a(), 8);
    ack_to(&mut p, a0, 6, ACK);
    ack_to(&mut p, a0, 7, ACK);
    assert_eq!(
        ops(&from_a(&mut p)),
        vec![(Opcode::RD_SEND_ONLY, 8, None)],
        "q2's message follows the RESYNC"
    );
    ack_to(&mut p, q2, 8, ACK);
    assert_eq!(wcs(&mut p.a), vec![(3, WcStatus::Success, q2)]);

    // A READ at PSN 24 expecting 5 responses -> RESYNC 29.
    let mut p = pair_with(24, ConnectOptions::default());
    let read = |p: &Pair| {
        SendWr::new(
            1,
            WrOpcode::RdmaRead {
                remote: RemoteAddr::new(p.b.mr.addr, p.b.mr.rkey),
            },
        )
        .with_sge(p.sge_a(0, 5 * MTU as u32))
        .signaled()
    };
    let wr = read(&p);
    p.post_a(&[wr]);
    assert_eq!(
        ops(&from_a(&mut p)),
        vec![(Opcode::RD_RDMA_READ_REQUEST, 24, None)]
    );
    assert_eq!(p.sq_psn_a(), 29);
    ack_a(&mut p, 24, NAK_ACCESS);
    assert_eq!(p.a.done(), vec![(1, WcStatus::RemAccessErr)]);
    let wr = send(&p, 2, 0, 8);
    reopen(&mut p, &[wr]);
    resync_then_next(&mut p, 29, 2);

    // The same READ aborted after two of its responses: still RESYNC 29.
    let mut p = pair_with(24, ConnectOptions::default());
    let wr = read(&p);
    p.post_a(&[wr]);
    assert_eq!(from_a(&mut p).len(), 1);
    for (i, op) in [
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
    ]
    .into_iter()
    .enumerate()
    {
        let mut h = hdr(op, 24 + i as u32);
        if i == 0 {
            h.aeth = Some(Aeth {
                syndrome: ACK,
                msn: Msn::new(1),
            });
        }
        p.inject(Dir::BtoA, h, &[9; MTU]);
    }
    ack_a(&mut p, 26, NAK_ACCESS);
    assert_eq!(p.a.done(), vec![(1, WcStatus::RemAccessErr)]);
    let wr = send(&p, 2, 0, 8);
    reopen(&mut p, &[wr]);
    resync_then_next(&mut p, 29, 2);

    // Only the first packet of a 3-packet SEND had gone out: RESYNC P + 1.
    let mut p = pair();
    let wr = send(&p, 1, 0, 3 * MTU as u32);
    p.post_a(&[wr]);
    assert_eq!(p.drain_one(Dir::AtoB).unwrap().psn(), P);
    ack_a(&mut p, P, NAK_INV);
    assert_eq!(p.a.done(), vec![(1, WcStatus::RemInvReqErr)]);
    let wr = send(&p, 2, 0, 8);
    reopen(&mut p, &[wr]);
    resync_then_next(&mut p, psn(1), 2);

    // A 2-packet SEND sent twice (the timer expired), then NAKed: RESYNC P + 2.
    let mut p = pair_with(
        P,
        ConnectOptions {
            timeout: 8,
            ..ConnectOptions::default()
        },
    );
    let wr = send(&p, 1, 0, 2 * MTU as u32);
    p.post_a(&[wr]);
    assert_eq!(from_a(&mut p).len(), 2);
    let t = p.a.hca.poll_timeout().unwrap().as_nanos();
    p.advance_to(t);
    assert_eq!(from_a(&mut p).len(), 2, "retransmitted");
    ack_a(&mut p, psn(1), NAK_INV);
    assert_eq!(p.a.done(), vec![(1, WcStatus::RemInvReqErr)]);
    let wr = send(&p, 2, 0, 8);
    reopen(&mut p, &[wr]);
    resync_then_next(&mut p, psn(2), 2);
}

/// Brings A's QP, left in SQE by a failed message, back to RTS and posts `wrs` on it.
fn reopen(p: &mut Pair, wrs: &[SendWr]) {
    let a0 = p.a.qpn;
    assert_eq!(qp_state(&p.a, a0), QpState::Sqe);
    p.a.hca
        .modify_qp(a0, &QpAttr::to_state(QpState::Rts), QpAttrMask::STATE)
        .unwrap();
    p.post_a(wrs);
}

/// o9-35.a2: the RESYNC names the aborted request's QPs: BTH:DestQP its destination, DETH
/// its source (here A's second QP, whose message to B's second QP had a wrong Q_Key). B
/// answers the RESYNC to that source QP, and the EE context then carries A's first QP's
/// message. (The failed QP is in SQE, which stops its send queue only: B's message to it
/// still lands.)
#[test]
fn o9_35_a2_rd_resync_carries_the_aborted_requests_qpns() {
    let mut p = pair();
    let q2 = a_qp2(&mut p);
    let b2 = b_qp2(&mut p);
    let eec = p.a.eecn.unwrap();
    let bad = send(&p, 1, 0, 16).with_rd(eec, b2, RD_QKEY ^ 1);
    p.a.hca.post_send(q2, &[bad]).unwrap();
    p.recv_b(7, 0, 64);
    let good = send(&p, 2, 0, 16);
    p.post_a(&[good]);
    p.run(1_000_000_000);
    let a_sent = logged(&p, Dir::AtoB);
    let resyncs: Vec<&Seen> = a_sent
        .iter()
        .filter(|s| s.raw_opcode() == Opcode::RD_RESYNC)
        .collect();
    assert_eq!(resyncs.len(), 1);
    let aborted = &a_sent[0];
    assert_eq!(qpns(aborted), (b2, Some(q2)), "the aborted request");
    assert_eq!(qpns(resyncs[0]), qpns(aborted));
    assert_eq!(resyncs[0].headers.rdeth, aborted.headers.rdeth);
    // B's answers: the NAK and the RESYNC's ACK to q2, the other message's ACK to A's QP.
    let answers: Vec<_> = logged(&p, Dir::BtoA)
        .iter()
        .map(|s| (s.headers.bth.dest_qp, s.psn(), s.syndrome()))
        .collect();
    assert_eq!(
        answers,
        vec![
            (q2, P, Some(NAK_INV_RD)),
            (q2, psn(1), Some(ACK)),
            (p.a.qpn, psn(2), Some(ACK)),
        ]
    );
    let mut got = wcs(&mut p.a);
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        vec![
            (1, WcStatus::RemInvRdReqErr, q2),
            (2, WcStatus::Success, p.a.qpn)
        ]
    );
    assert_eq!(p.b.done(), vec![(7, WcStatus::Success)]);
    // q2's send queue stopped; its receive queue did not: B's message to it lands.
    let sge = softib_core::verbs::wr::Sge::new(p.a.mr.addr + 8192, 64, p.a.mr.lkey);
    p.a.hca
        .post_recv(q2, &[softib_core::verbs::wr::RecvWr::new(8, vec![sge])])
        .unwrap();
    let wr = SendWr::new(4, WrOpcode::SendWithImm(0x0b0b))
        .with_sge(softib_core::verbs::wr::Sge::new(
            p.b.mr.addr,
            5,
            p.b.mr.lkey,
        ))
        .signaled()
        .with_rd(p.b.eecn.unwrap(), q2, RD_QKEY);
    p.post_b(&[wr]);
    p.run(1_000_000_000);
    assert_eq!(p.b.done(), vec![(4, WcStatus::Success)]);
    let w = p.a.wcs();
    assert_eq!(
        w.iter()
            .map(|w| (w.wr_id, w.status, w.qp_num, w.src_qp, w.imm_data))
            .collect::<Vec<_>>(),
        vec![(8, WcStatus::Success, q2, p.b.qpn, Some(0x0b0b))]
    );
    assert_eq!(qp_state(&p.a, q2), QpState::Sqe);
}

/// o9-38.a2: a responder accepts a RESYNC in any sequence state and with any QPNs. At or
/// after ePSN — here in the middle of a SEND, whose partly filled receive WQE completes in
/// error — ePSN becomes its PSN + 1 and it is acknowledged with its own PSN, to the QP that
/// sent it; behind ePSN it is a duplicate: ePSN stays, and the answer still carries its PSN.
/// It is accepted after a sequence NAK too, and far ahead of ePSN.
#[test]
fn o9_38_a2_rd_resync_accepted_in_any_state() {
    let mut p = pair();
    let (a0, b0) = (p.a.qpn, p.b.qpn);
    p.recv_b(1, 0, 4096);
    p.recv_b(2, 8192, 64);
    p.inject(Dir::AtoB, req(Opcode::RC_SEND_FIRST, P, false), &[1; MTU]);
    assert!(from_b(&mut p).is_empty());
    resync(&mut p, psn(1), a0, b0);
    let out = from_b(&mut p);
    assert_eq!(ops(&out), vec![(Opcode::RD_ACKNOWLEDGE, psn(1), Some(ACK))]);
    assert_eq!(out[0].headers.bth.dest_qp, a0);
    assert_eq!(p.rq_psn_b(), psn(2));
    let w = p.b.wcs();
    assert_eq!(
        w.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.qp_num))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::RemAbortErr, WcOpcode::Recv, b0)],
        "the SEND in progress was aborted"
    );
    // The next SEND starts a new message in the next receive WQE.
    p.inject(Dir::AtoB, req(Opcode::RC_SEND_ONLY, psn(2), true), b"after");
    assert_eq!(
        ops(&from_b(&mut p)),
        vec![(Opcode::RD_ACKNOWLEDGE, psn(2), Some(ACK))]
    );
    assert_eq!(p.b.done(), vec![(2, WcStatus::Success)]);
    assert_eq!(p.b.mem(8192, 5), b"after");
    // Behind ePSN: a duplicate, answered with its own PSN; ePSN stays.
    resync(&mut p, P, a0, b0);
    assert_eq!(
        ops(&from_b(&mut p)),
        vec![(Opcode::RD_ACKNOWLEDGE, P, Some(ACK))]
    );
    assert_eq!(p.rq_psn_b(), psn(3));
    // Whatever its QPNs (a QP of A's that does not exist, a QP of B's that is not RD): at
    // ePSN, accepted and answered to its source.
    let stranger = Qpn::new(0x4321);
    resync(&mut p, psn(3), stranger, Qpn::new(0x7777));
    let out = from_b(&mut p);
    assert_eq!(ops(&out), vec![(Opcode::RD_ACKNOWLEDGE, psn(3), Some(ACK))]);
    assert_eq!(out[0].headers.bth.dest_qp, stranger);
    assert_eq!(p.rq_psn_b(), psn(4));
    // After a sequence NAK (the responder is discarding everything ahead of ePSN).
    p.inject(Dir::AtoB, req(Opcode::RC_SEND_ONLY, psn(9), true), b"x");
    assert_eq!(
        ops(&from_b(&mut p)),
        vec![(Opcode::RD_ACKNOWLEDGE, psn(4), Some(NAK_SEQ))]
    );
    resync(&mut p, psn(4), a0, b0);
    assert_eq!(
        ops(&from_b(&mut p)),
        vec![(Opcode::RD_ACKNOWLEDGE, psn(4), Some(ACK))]
    );
    // Far ahead of ePSN (inside the valid region): ePSN jumps past it.
    resync(&mut p, psn(1000), a0, b0);
    assert_eq!(
        ops(&from_b(&mut p)),
        vec![(Opcode::RD_ACKNOWLEDGE, psn(1000), Some(ACK))]
    );
    assert_eq!(p.rq_psn_b(), psn(1001));
    assert_eq!(p.b.conn_state(), QpState::Rts);
    assert!(p.b.done().is_empty());
}

// ----- the responder's hand-off to the QP BTH names (9.7.4.1, 9.7.5.2.8) -------------------

/// o9-38: the receive queue's RDD differs from that of the EE context the request came
/// through: the request is not executed and a NAK-Invalid RD Request goes back with the EE
/// context's PSN (ePSN) and P_Key, to the requesting QP. The EE context stays in RTS and
/// keeps its ePSN. End to end, the requester's WR completes with
/// `IBV_WC_REM_INV_RD_REQ_ERR`, its QP enters SQE and the EE context resynchronises.
#[test]
fn o9_38_rd_responder_rdd_mismatch_naks_invalid_rd_request() {
    let mut p = pair();
    let rdd2 = p.b.hca.alloc_rdd().unwrap();
    let (pd, cq) = (p.b.pd, p.b.cq);
    let b2 = p.b.rd_qp(pd, rdd2, cq, RD_QKEY);
    let sge = softib_core::verbs::wr::Sge::new(p.b.mr.addr, 64, p.b.mr.lkey);
    p.b.hca
        .post_recv(b2, &[softib_core::verbs::wr::RecvWr::new(9, vec![sge])])
        .unwrap();
    p.inject_to_b_qp(b2, req(Opcode::RC_SEND_ONLY, P, true), b"other rdd");
    let out = from_b(&mut p);
    assert_eq!(
        ops(&out),
        vec![(Opcode::RD_ACKNOWLEDGE, P, Some(NAK_INV_RD))]
    );
    assert_eq!(out[0].headers.bth.pkey, 0xffff, "the EE context's P_Key");
    assert_eq!(out[0].headers.bth.dest_qp, p.a.qpn);
    assert!(p.b.done().is_empty(), "not executed");
    assert_eq!(p.b.mem(0, 9), vec![0; 9]);
    assert_eq!(p.b.hca.counters().rd_bad_dest, 1);
    assert_eq!(p.b.conn_state(), QpState::Rts);
    assert_eq!(p.rq_psn_b(), P);

    // End to end.
    let mut p = pair();
    let rdd2 = p.b.hca.alloc_rdd().unwrap();
    let (pd, cq) = (p.b.pd, p.b.cq);
    let b2 = p.b.rd_qp(pd, rdd2, cq, RD_QKEY);
    let eec = p.a.eecn.unwrap();
    let wr = send(&p, 1, 0, 8).with_rd(eec, b2, RD_QKEY);
    p.post_a(&[wr]);
    p.run(1_000_000_000);
    assert_eq!(wcs(&mut p.a), vec![(1, WcStatus::RemInvRdReqErr, p.a.qpn)]);
    assert_eq!(qp_state(&p.a, p.a.qpn), QpState::Sqe);
    assert_eq!(p.a.conn_state(), QpState::Rts);
    assert_eq!(p.b.conn_state(), QpState::Rts);
    let sent = logged(&p, Dir::AtoB);
    assert_eq!(
        sent.iter().map(|s| s.raw_opcode()).collect::<Vec<_>>(),
        vec![Opcode::RD_SEND_ONLY, Opcode::RD_RESYNC]
    );
}

/// C9-127: NAK-Invalid RD Request when the QP BTH names is not an RD QP (an RC QP, a UD QP,
/// no QP at all), when the Q_Key of the DETH is not the QP's, when its RDD is not the EE
/// context's, or when it is an RD QP not able to receive (INIT). Each NAK carries ePSN and goes
/// to the requesting QP; nothing is executed, and the EE context, which a NAK does not end,
/// takes the next request at the same ePSN.
#[test]
fn c9_127_rd_request_for_a_qp_not_rd_or_with_a_wrong_qkey_naks_invalid_rd_request() {
    let mut p = pair();
    let (pd, cq) = (p.b.pd, p.b.cq);
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let rc =
        p.b.hca
            .create_qp(pd, &QpInitAttr::new(QpType::Rc, cq, cap))
            .unwrap();
    let ud =
        p.b.hca
            .create_qp(pd, &QpInitAttr::new(QpType::Ud, cq, cap))
            .unwrap();
    let rdd2 = p.b.hca.alloc_rdd().unwrap();
    let other_rdd = p.b.rd_qp(pd, rdd2, cq, RD_QKEY);
    let other_qkey = p.b.rd_qp(pd, p.b.rdd.unwrap(), cq, RD_QKEY ^ 0x10);
    let in_init =
        p.b.hca
            .create_rd_qp(pd, p.b.rdd.unwrap(), &QpInitAttr::new(QpType::Rd, cq, cap))
            .unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qkey: RD_QKEY,
        ..QpAttr::default()
    };
    p.b.hca
        .modify_qp(
            in_init,
            &init,
            QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::QKEY,
        )
        .unwrap();
    p.recv_b(1, 0, 64);
    let a0 = p.a.qpn;
    let cases: [(&str, Qpn, u32); 6] = [
        ("an RC QP", rc, RD_QKEY),
        ("a UD QP", ud, RD_QKEY),
        ("no QP", Qpn::new(0xab_cdef), RD_QKEY),
        ("the RD QP with a wrong Q_Key", p.b.qpn, RD_QKEY ^ 1),
        ("an RD QP of another RDD", other_rdd, RD_QKEY),
        ("an RD QP holding another Q_Key", other_qkey, RD_QKEY),
    ];
    for (n, (what, dest, qkey)) in cases.into_iter().enumerate() {
        let h = req_from(Opcode::RC_SEND_ONLY, P, a0, qkey);
        p.inject_to_b_qp(dest, h, b"12345678");
        let out = from_b(&mut p);
        assert_eq!(
            ops(&out),
            vec![(Opcode::RD_ACKNOWLEDGE, P, Some(NAK_INV_RD))],
            "{what}"
        );
        assert_eq!(out[0].headers.bth.dest_qp, a0, "{what}");
        assert_eq!(p.b.hca.counters().rd_bad_dest, n as u64 + 1, "{what}");
        assert_eq!(p.rq_psn_b(), P, "{what}");
        assert_eq!(p.b.conn_state(), QpState::Rts, "{what}");
    }
    // An RD QP in INIT (not yet able to receive).
    let h = req_from(Opcode::RC_SEND_ONLY, P, a0, RD_QKEY);
    p.inject_to_b_qp(in_init, h, b"12345678");
    assert_eq!(
        ops(&from_b(&mut p)),
        vec![(Opcode::RD_ACKNOWLEDGE, P, Some(NAK_INV_RD))]
    );
    assert!(p.b.done().is_empty());
    assert_eq!(p.b.mem(0, 8), vec![0; 8]);
    // The right QP with the right Q_Key, at the same ePSN.
    p.inject(Dir::AtoB, req(Opcode::RC_SEND_ONLY, P, true), b"12345678");
    assert_eq!(
        ops(&from_b(&mut p)),
        vec![(Opcode::RD_ACKNOWLEDGE, P, Some(ACK))]
    );
    assert_eq!(p.b.done(), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.mem(0, 8), b"12345678");
}

/// o9-38.a1: a new MIDDLE or LAST whose QPNs are not those of the latest FIRST is ignored —
/// no response, ePSN unchanged, nothing placed — whether its destination or its source
/// differs, and the message goes on with its own packets; a duplicate whose QPNs are not
/// those of the latest new request is ignored too, while one with them is answered.
#[test]
fn o9_38_a1_rd_packets_naming_other_qpns_ignored() {
    let mut p = pair();
    let (a0, b0) = (p.a.qpn, p.b.qpn);
    let b2 = b_qp2(&mut p);
    p.recv_b(1, 0, 4096);
    let data = pattern(2 * MTU + 10, 3);
    p.inject(
        Dir::AtoB,
        req(Opcode::RC_SEND_FIRST, P, false),
        &data[..MTU],
    );
    // A MIDDLE for another destination QP, and one from another source QP.
    p.inject_to_b_qp(b2, req(Opcode::RC_SEND_MIDDLE, psn(1), true), &[0xee; MTU]);
    let other_src = req_from(Opcode::RC_SEND_MIDDLE, psn(1), Qpn::new(0x99), RD_QKEY);
    p.inject(Dir::AtoB, other_src, &[0xdd; MTU]);
    assert!(from_b(&mut p).is_empty());
    assert_eq!(p.rq_psn_b(), psn(1));
    assert_eq!(p.b.hca.counters().rd_qpn_mismatch, 2);
    // The message's own packets.
    p.inject(
        Dir::AtoB,
        req(Opcode::RC_SEND_MIDDLE, psn(1), false),
        &data[MTU..2 * MTU],
    );
    // A LAST from another source, then the right one.
    let other_src = req_from(Opcode::RC_SEND_LAST, psn(2), Qpn::new(0x99), RD_QKEY);
    p.inject(Dir::AtoB, other_src, &[0xcc; 10]);
    assert!(from_b(&mut p).is_empty());
    p.inject(
        Dir::AtoB,
        req(Opcode::RC_SEND_LAST, psn(2), true),
        &data[2 * MTU..],
    );
    assert_eq!(
        ops(&from_b(&mut p)),
        vec![(Opcode::RD_ACKNOWLEDGE, psn(2), Some(ACK))]
    );
    let w = p.b.wcs();
    assert_eq!(
        w.iter()
            .map(|w| (w.wr_id, w.status, w.byte_len, w.qp_num, w.src_qp))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, data.len() as u32, b0, a0)]
    );
    assert_eq!(p.b.mem(0, data.len()), data);
    // Duplicates of the message: with other QPNs ignored, with its own answered.
    p.inject_to_b_qp(
        b2,
        req(Opcode::RC_SEND_LAST, psn(2), true),
        &data[2 * MTU..],
    );
    let other_src = req_from(Opcode::RC_SEND_LAST, psn(2), Qpn::new(0x99), RD_QKEY);
    p.inject(Dir::AtoB, other_src, &data[2 * MTU..]);
    assert!(from_b(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().rd_qpn_mismatch, 5);
    p.inject(
        Dir::AtoB,
        req(Opcode::RC_SEND_LAST, psn(2), true),
        &data[2 * MTU..],
    );
    let out = from_b(&mut p);
    assert_eq!(ops(&out), vec![(Opcode::RD_ACKNOWLEDGE, psn(2), Some(ACK))]);
    assert_eq!(out[0].headers.bth.dest_qp, a0);
    assert!(p.b.done().is_empty(), "no duplicate execution");
    assert_eq!(p.rq_psn_b(), psn(3));
}

// ----- credits, P_Keys, responses (9.7.5.1.2, 9.7.5.2, 9.7.6.1) -------------------------------

/// o9-72: RD has no end-to-end credits: every acknowledgement an RD responder sends (ACK,
/// first and last READ response, atomic ACK, the ACK of a duplicate) carries credit bits 0,
/// however many receive WQEs its RD QP holds — where an RC QP's ACK would advertise them.
/// The RD requester, for its part, sends a message whole whatever the acknowledgements said
/// (an RC requester without credits sends one packet and waits).
#[test]
fn o9_72_rd_acknowledgements_carry_zero_credit_bits() {
    let mut p = pair();
    for i in 0..20 {
        p.recv_b(i, 4096 * i, 4096);
    }
    let mut positive = Vec::new();
    p.inject(Dir::AtoB, req(Opcode::RC_SEND_ONLY, P, true), b"one");
    positive.extend(from_b(&mut p));
    let mut h = req(Opcode::RC_RDMA_READ_REQUEST, psn(1), true);
    h.reth = Some(Reth {
        va: p.b.mr.addr,
        rkey: p.b.mr.rkey,
        dma_len: 3 * MTU as u32,
    });
    p.inject(Dir::AtoB, h, &[]);
    positive.extend(from_b(&mut p));
    let mut h = req(Opcode::RC_FETCH_ADD, psn(4), true);
    h.atomic_eth = Some(softib_wire::atomic_eth::AtomicEth {
        va: p.b.mr.addr + 65536,
        rkey: p.b.mr.rkey,
        swap_add: 1,
        compare: 0,
    });
    p.inject(Dir::AtoB, h, &[]);
    positive.extend(from_b(&mut p));
    p.inject(Dir::AtoB, req(Opcode::RC_SEND_ONLY, P, true), b"one");
    positive.extend(from_b(&mut p));
    let with_aeth: Vec<_> = positive
        .iter()
        .filter_map(|s| Some((s.raw_opcode(), s.syndrome()?)))
        .collect();
    assert_eq!(
        with_aeth,
        vec![
            (Opcode::RD_ACKNOWLEDGE, 0),
            (Opcode::RD_RDMA_READ_RESPONSE_FIRST, 0),
            (Opcode::RD_RDMA_READ_RESPONSE_LAST, 0),
            (Opcode::RD_ATOMIC_ACKNOWLEDGE, 0),
            (Opcode::RD_ACKNOWLEDGE, 0),
        ]
    );
    // The same SEND to an RC QP holding 20 receive WQEs advertises credits.
    let mut rc = Pair::new_svc(Svc::Rc, P, 0x900, ConnectOptions::default());
    for i in 0..20 {
        rc.recv_b(i, 4096 * i, 4096);
    }
    rc.inject(Dir::AtoB, req(Opcode::RC_SEND_ONLY, P, true), b"one");
    let out = rc.drain(Dir::BtoA);
    assert_ne!(out[0].syndrome().unwrap() & 0x1f, 0);
    // An RD requester heeds no credits: a 3-packet SEND to a B without receives goes out
    // whole.
    let mut p = pair();
    let wr = send(&p, 1, 0, 3 * MTU as u32);
    p.post_a(&[wr]);
    assert_eq!(from_a(&mut p).len(), 3);
}

/// o9-74: the EE context drops a request whose P_Key is not in the port's table, silently
/// (no response, nothing executed, ePSN unchanged), and hands a request with a valid one to
/// the receive queue of the QP BTH names.
#[test]
fn o9_74_rd_request_with_an_invalid_pkey_dropped_silently() {
    let mut p = pair();
    let b2 = b_qp2(&mut p);
    p.recv_b(1, 0, 64);
    let sge = softib_core::verbs::wr::Sge::new(p.b.mr.addr + 4096, 64, p.b.mr.lkey);
    p.b.hca
        .post_recv(b2, &[softib_core::verbs::wr::RecvWr::new(2, vec![sge])])
        .unwrap();
    let mut f = p.frame(Dir::AtoB, req(Opcode::RC_SEND_ONLY, P, true), b"bad pkey");
    patch_transport(&mut f, |t| {
        t[2..4].copy_from_slice(&0x1234u16.to_be_bytes())
    });
    p.inject_frame(Dir::AtoB, &f);
    assert!(from_b(&mut p).is_empty());
    assert!(p.b.done().is_empty());
    assert_eq!(p.rq_psn_b(), P);
    assert_eq!(p.b.hca.counters().bad_pkey, 1);
    // Valid P_Key, for B's second QP: its receive queue takes it.
    p.inject_to_b_qp(b2, req(Opcode::RC_SEND_ONLY, P, true), b"good key");
    assert_eq!(
        ops(&from_b(&mut p)),
        vec![(Opcode::RD_ACKNOWLEDGE, P, Some(ACK))]
    );
    let w = p.b.wcs();
    assert_eq!(
        w.iter()
            .map(|w| (w.wr_id, w.status, w.qp_num))
            .collect::<Vec<_>>(),
        vec![(2, WcStatus::Success, b2)]
    );
    assert_eq!(p.b.mem(4096, 8), b"good key");
    assert_eq!(p.b.mem(0, 8), vec![0; 8]);
}

/// o9-79.a1: the EE context takes a response only when BTH:DestQP names the QP whose message
/// it is sending: one addressed to another QP of A (with nothing outstanding), or to no QP,
/// is dropped — no completion, the timer untouched — and the one addressed to the sending QP
/// completes its WR. Then the same with the roles swapped.
#[test]
fn o9_79_a1_rd_response_for_another_qp_than_the_active_one_dropped() {
    let mut p = pair();
    let a0 = p.a.qpn;
    let a1 = a_qp2(&mut p);
    let wr = send(&p, 1, 0, 8);
    p.post_a(&[wr]);
    assert_eq!(from_a(&mut p).len(), 1);
    let timer = p.a.hca.poll_timeout();
    ack_to(&mut p, a1, P, ACK);
    ack_to(&mut p, Qpn::new(0x55_5555), P, ACK);
    assert!(p.a.wcs().is_empty());
    assert_eq!(p.a.hca.poll_timeout(), timer);
    assert_eq!(p.a.hca.counters().rd_qpn_mismatch, 2);
    ack_to(&mut p, a0, P, ACK);
    assert_eq!(wcs(&mut p.a), vec![(1, WcStatus::Success, a0)]);
    // a1's message, through the same EE context.
    let wr = p.for_b(&[send(&p, 2, 0, 8)]);
    p.a.hca.post_send(a1, &wr).unwrap();
    let out = from_a(&mut p);
    assert_eq!(qpns(&out[0]), (p.b.qpn, Some(a1)));
    ack_to(&mut p, a0, psn(1), ACK);
    assert!(p.a.wcs().is_empty());
    ack_to(&mut p, a1, psn(1), ACK);
    assert_eq!(wcs(&mut p.a), vec![(2, WcStatus::Success, a1)]);
}

// ----- the transport timer (9.7.6.1.2) ----------------------------------------------------------

/// o9-85: the transport timer belongs to the EE context. A has two EE contexts to B (timeouts
/// 10 and 12), A's two QPs each send through one; with every response lost, each EE context
/// retransmits its own message at its own Ttr, and the ACK of one stops its timer only.
#[test]
fn o9_85_rd_transport_timer_per_ee_context() {
    let mut p = pair_with(
        P,
        ConnectOptions {
            timeout: 10,
            ..ConnectOptions::default()
        },
    );
    let a1 = a_qp2(&mut p);
    let ea2 = p.a.hca.create_eec(p.a.rdd.unwrap()).unwrap();
    let eb2 = p.b.hca.create_eec(p.b.rdd.unwrap()).unwrap();
    let o = ConnectOptions {
        sgid_index: 1,
        timeout: 12,
        ..ConnectOptions::default()
    };
    let ia = EndpointInfo {
        qpn: Qpn::new(ea2.value()),
        psn: Psn::new(0x5000),
        gid: softib_core::gid_of_ipv4(common::IP_A),
        lid: 0,
    };
    let ib = EndpointInfo {
        qpn: Qpn::new(eb2.value()),
        psn: Psn::new(0x6000),
        gid: softib_core::gid_of_ipv4(common::IP_B),
        lid: 0,
    };
    connect_eec(&mut p.a.hca, ea2, ia.psn, &ib, &o).unwrap();
    connect_eec(&mut p.b.hca, eb2, ib.psn, &ia, &o).unwrap();
    let wr = send(&p, 1, 0, 8);
    p.post_a(&[wr]);
    let wr = send(&p, 2, 0, 8).with_rd(ea2, p.b.qpn, RD_QKEY);
    p.a.hca.post_send(a1, &[wr]).unwrap();
    let eecn_of = |s: &Seen| s.headers.rdeth.unwrap().eecn;
    let (eb1, t1, t2) = (p.b.eecn.unwrap(), 4096u64 << 10, 4096u64 << 12);
    let first = from_a(&mut p);
    assert_eq!(
        first
            .iter()
            .map(|s| (eecn_of(s), s.psn()))
            .collect::<Vec<_>>(),
        vec![(eb1, P), (eb2, 0x5000)]
    );
    assert_eq!(p.a.hca.poll_timeout(), Some(Instant::from_nanos(t1)));
    p.advance_to(t1);
    let again = from_a(&mut p);
    assert_eq!(
        again
            .iter()
            .map(|s| (eecn_of(s), s.psn()))
            .collect::<Vec<_>>(),
        vec![(eb1, P)],
        "only the first EE context's timer expired"
    );
    // The first EE context's message is acknowledged: its timer stops, the second's runs on.
    ack_a(&mut p, P, ACK);
    assert_eq!(wcs(&mut p.a), vec![(1, WcStatus::Success, p.a.qpn)]);
    // The HCA may ask to be woken before t2 (`Hca::poll_timeout` is never late, but may be
    // early: the stopped timer's entry); nothing leaves until then.
    let (mut woken, t2_at) = (0, Instant::from_nanos(t2));
    while let Some(t) = p.a.hca.poll_timeout().filter(|&t| t < t2_at) {
        p.advance_to(t.as_nanos());
        assert!(
            from_a(&mut p).is_empty(),
            "nothing is retransmitted before t2"
        );
        woken += 1;
        assert!(woken < 4, "an early wake-up clears its entry");
    }
    assert_eq!(p.a.hca.poll_timeout(), Some(t2_at));
    p.advance_to(t2);
    let again = from_a(&mut p);
    assert_eq!(
        again
            .iter()
            .map(|s| (eecn_of(s), s.psn()))
            .collect::<Vec<_>>(),
        vec![(eb2, 0x5000)]
    );
    assert_eq!(p.a.hca.counters().retry_timeouts, 2);
}
