//! IBA 9.7.7.2 compliance: end-to-end (message-level) credits of the RC service (seed 001:
//! C9-144, C9-150.2.1 … C9-164, o9-99).
//!
//! Responder statements: requests are crafted and injected into B (its expected PSN starts at
//! [`P`]) and B's responses are collected without being delivered. Requester statements: work
//! is posted on A, A's packets are collected without being delivered, and acknowledgements are
//! crafted as B would send them. The end-to-end tests let the two HCAs talk through the
//! harness. Every assertion is on exact packets: opcode, PSN, AckReq, AETH syndrome and MSN.

mod common;

use common::{hdr, Dir, Pair, Seen};
use softib_core::setup::{connect, ConnectOptions, EndpointInfo};
use softib_core::verbs::qp::{QpAttr, QpAttrMask};
use softib_core::verbs::types::{QpState, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_wire::aeth::Aeth;
use softib_wire::atomic_eth::AtomicEth;
use softib_wire::immdt::ImmDt;
use softib_wire::opcode::Opcode;
use softib_wire::reth::Reth;
use softib_wire::transport::TransportHeaders;
use softib_wire::{Msn, Psn};

/// A's initial request PSN = B's initial expected PSN.
const P: u32 = 0x100;
const MTU: u32 = 1024;
/// The "invalid" credit code: no end-to-end flow control information.
const NO_CREDITS: u8 = 0x1f;
/// RNR NAK with the default min_rnr_timer (code 12, 0.64 ms).
const RNR: u8 = 0x20 | 12;
/// Ttr for the default timeout exponent 14.
const TTR_NS: u64 = 4096 << 14;

fn psn(d: u32) -> u32 {
    P.wrapping_add(d) & 0xff_ffff
}

fn pair() -> Pair {
    Pair::new(P, 0x900, ConnectOptions::default())
}

fn deep() -> ConnectOptions {
    ConnectOptions {
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..ConnectOptions::default()
    }
}

// ----- responder side: crafted requests into B ---------------------------------------------

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

fn to_b(p: &mut Pair, h: TransportHeaders, payload: &[u8]) {
    p.inject(Dir::AtoB, h, payload);
}

fn from_b(p: &mut Pair) -> Vec<Seen> {
    p.drain(Dir::BtoA)
}

fn send_only(p: &mut Pair, psn: u32, payload: &[u8]) {
    to_b(p, req(Opcode::RC_SEND_ONLY, psn, true), payload);
}

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

fn write_imm_only(p: &mut Pair, psn: u32, off: u64, payload: &[u8]) {
    let (va, rkey) = (p.b.mr.addr + off, p.b.mr.rkey);
    let mut h = with_reth(
        req(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, psn, true),
        va,
        rkey,
        payload.len() as u32,
    );
    h.immdt = Some(ImmDt { imm: 0x1234 });
    to_b(p, h, payload);
}

fn read(p: &mut Pair, psn: u32, off: u64, len: u32) {
    let (va, rkey) = (p.b.mr.addr + off, p.b.mr.rkey);
    to_b(
        p,
        with_reth(req(Opcode::RC_RDMA_READ_REQUEST, psn, true), va, rkey, len),
        &[],
    );
}

fn fetch_add(p: &mut Pair, psn: u32, off: u64) {
    let (va, rkey) = (p.b.mr.addr + off, p.b.mr.rkey);
    let mut h = req(Opcode::RC_FETCH_ADD, psn, true);
    h.atomic_eth = Some(AtomicEth {
        va,
        rkey,
        swap_add: 1,
        compare: 0,
    });
    to_b(p, h, &[]);
}

/// (opcode, PSN, raw AETH syndrome, MSN) of each packet.
fn aeths(v: &[Seen]) -> Vec<(Opcode, u32, Option<u8>, Option<u32>)> {
    v.iter()
        .map(|s| (s.opcode(), s.psn(), s.syndrome(), s.msn()))
        .collect()
}

/// Posts `n` receives of 64 bytes on B (wr_ids from `first`).
fn recvs_b(p: &mut Pair, first: u64, n: u64) {
    for i in 0..n {
        p.recv_b(first + i, 64 * ((first + i) % 1024), 64);
    }
}

// ----- requester side: work on A, crafted acknowledgements -----------------------------------

fn send(p: &Pair, id: u64, len: u32) -> SendWr {
    SendWr::new(id, WrOpcode::Send)
        .with_sge(p.sge_a(0, len))
        .signaled()
}

fn remote(p: &Pair, off: u64) -> RemoteAddr {
    RemoteAddr {
        addr: p.b.mr.addr + off,
        rkey: p.b.mr.rkey,
    }
}

fn write(p: &Pair, id: u64, len: u32) -> SendWr {
    SendWr::new(
        id,
        WrOpcode::RdmaWrite {
            remote: remote(p, 0),
        },
    )
    .with_sge(p.sge_a(0, len))
    .signaled()
}

fn rdma_read(p: &Pair, id: u64, len: u32) -> SendWr {
    SendWr::new(
        id,
        WrOpcode::RdmaRead {
            remote: remote(p, 0),
        },
    )
    .with_sge(p.sge_a(65536, len))
    .signaled()
}

fn from_a(p: &mut Pair) -> Vec<Seen> {
    p.drain(Dir::AtoB)
}

/// (opcode, PSN, AckReq) of each packet.
fn reqs(v: &[Seen]) -> Vec<(Opcode, u32, bool)> {
    v.iter()
        .map(|s| (s.opcode(), s.psn(), s.ack_req()))
        .collect()
}

/// An Acknowledge as B would send it to A.
fn ack_to_a(p: &mut Pair, psn: u32, syndrome: u8, msn: u32) {
    let mut h = hdr(Opcode::RC_ACKNOWLEDGE, psn);
    h.aeth = Some(Aeth {
        syndrome,
        msn: Msn::new(msn),
    });
    p.inject(Dir::BtoA, h, &[]);
}

// ----- responder: which QPs generate credits (9.7.7.2) ---------------------------------------

/// An RC QP on B attached to a new SRQ holding `srq_recvs` receives, connected to A's QP
/// with B's expected PSN `epsn`; returns a function that injects a request into it.
fn srq_qp(
    p: &mut Pair,
    srq_recvs: u64,
    epsn: u32,
) -> (
    softib_core::verbs::SrqHandle,
    impl Fn(&mut Pair, TransportHeaders, &[u8]),
) {
    let (srq, q2) = p.b_srq_qp(srq_recvs, epsn);
    (
        srq,
        move |p: &mut Pair, h: TransportHeaders, payload: &[u8]| p.inject_to_b_qp(q2, h, payload),
    )
}

#[test]
fn c9_150_2_1_only_qps_without_an_srq_generate_credits() {
    // Without an SRQ the credit field follows the receives posted: 0, then 3, then 2 after a
    // SEND used one.
    let mut p = pair();
    write_only(&mut p, P, 8192, b"w");
    let mut out = from_b(&mut p);
    recvs_b(&mut p, 1, 3);
    write_only(&mut p, psn(1), 8192, b"w");
    out.extend(from_b(&mut p));
    send_only(&mut p, psn(2), b"s");
    out.extend(from_b(&mut p));
    assert_eq!(
        aeths(&out),
        vec![
            (Opcode::RC_ACKNOWLEDGE, P, Some(0x00), Some(1)),
            (Opcode::RC_ACKNOWLEDGE, psn(1), Some(0x03), Some(2)),
            (Opcode::RC_ACKNOWLEDGE, psn(2), Some(0x02), Some(3)),
        ]
    );
    // With an SRQ: the invalid code on every acknowledgement, however many receives the SRQ
    // holds, and no unsolicited ACK when receives are posted after an RNR NAK.
    let (srq, to_q2) = srq_qp(&mut p, 8, 0x7000);
    let mut out = Vec::new();
    for i in 0..8 {
        to_q2(&mut p, req(Opcode::RC_SEND_ONLY, 0x7000 + i, true), b"srq");
        out.extend(from_b(&mut p));
    }
    let (va, rkey) = (p.b.mr.addr + 65536, p.b.mr.rkey);
    let w = with_reth(req(Opcode::RC_RDMA_WRITE_ONLY, 0x7008, true), va, rkey, 1);
    to_q2(&mut p, w, b"w");
    out.extend(from_b(&mut p));
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    let r = with_reth(req(Opcode::RC_RDMA_READ_REQUEST, 0x7009, true), va, rkey, 8);
    to_q2(&mut p, r, &[]);
    out.extend(from_b(&mut p));
    assert_eq!(out.len(), 10, "{out:?}");
    assert!(
        out.iter()
            .all(|s| s.syndrome() == Some(NO_CREDITS) && s.msn().is_some()),
        "{out:?}"
    );
    to_q2(
        &mut p,
        req(Opcode::RC_SEND_ONLY, 0x700a, true),
        b"srq empty",
    );
    assert_eq!(
        aeths(&from_b(&mut p)),
        vec![(Opcode::RC_ACKNOWLEDGE, 0x700a, Some(RNR), Some(10))]
    );
    let wr = RecvWr::new(
        200,
        vec![Sge {
            addr: p.b.mr.addr,
            length: 64,
            lkey: p.b.mr.lkey,
        }],
    );
    p.b.hca.post_srq_recv(srq, &[wr]).unwrap();
    assert!(from_b(&mut p).is_empty(), "an SRQ QP sends no credits");
}

// ----- responder: initial credits (9.7.7.2.2) -------------------------------------------------

#[test]
fn c9_155_initial_credits_zero_in_reset_then_one_per_receive_from_init() {
    // Four receives posted in INIT: on entering RTR, B offers them in an unsolicited ACK with
    // PSN = initial PSN - 1 (0x000000 -> 0xFFFFFF) and MSN 0.
    let mut p = Pair::new_with_init(0, 0x900, ConnectOptions::default(), |_, b| {
        for i in 0..4 {
            b.post_recv(i, 64 * i, 64);
        }
    });
    assert_eq!(
        aeths(&from_b(&mut p)),
        vec![(Opcode::RC_ACKNOWLEDGE, 0xff_ffff, Some(0x04), Some(0))]
    );
    // No receives in INIT: nothing to offer.
    let mut q = Pair::new_with_init(0, 0x900, ConnectOptions::default(), |_, _| {});
    assert!(from_b(&mut q).is_empty());
    // Through RESET the count starts over at 0: receives cannot be posted there, and the
    // four posted before do not come back.
    p.b.hca
        .modify_qp(
            p.b.qpn,
            &QpAttr {
                qp_state: QpState::Reset,
                ..QpAttr::default()
            },
            QpAttrMask::STATE,
        )
        .unwrap();
    let wr = RecvWr::new(
        9,
        vec![Sge {
            addr: p.b.mr.addr,
            length: 64,
            lkey: p.b.mr.lkey,
        }],
    );
    assert!(p.b.hca.post_recv(p.b.qpn, &[wr]).is_err());
    let remote = EndpointInfo {
        qpn: p.a.qpn,
        psn: Psn::new(0),
        gid: softib_core::gid_of_ipv4(common::IP_A),
        lid: 0,
    };
    let o = ConnectOptions {
        sgid_index: 1,
        ..ConnectOptions::default()
    };
    connect(&mut p.b.hca, p.b.qpn, Psn::new(0x900), &remote, &o).unwrap();
    assert!(from_b(&mut p).is_empty(), "no credits after RESET");
    write_only(&mut p, 0, 8192, b"w");
    assert_eq!(
        aeths(&from_b(&mut p)),
        vec![(Opcode::RC_ACKNOWLEDGE, 0, Some(0x00), Some(1))]
    );
    // Each receive posted from then on is one credit.
    recvs_b(&mut p, 20, 2);
    write_only(&mut p, 1, 8192, b"w");
    assert_eq!(
        aeths(&from_b(&mut p)),
        vec![(Opcode::RC_ACKNOWLEDGE, 1, Some(0x02), Some(2))]
    );
}

// ----- responder: credit count and encoding (9.7.7.2.3, 9.7.7.2.4) ---------------------------

#[test]
fn c9_157_2_1_consuming_messages_take_a_credit_others_do_not() {
    let mut p = Pair::new_with_init(P, 0x900, deep(), |_, b| {
        for i in 0..4 {
            b.post_recv(i, 1024 * i, 2048);
        }
    });
    let mut out = from_b(&mut p);
    send_only(&mut p, P, b"send");
    out.extend(from_b(&mut p));
    write_only(&mut p, psn(1), 8192, b"write");
    out.extend(from_b(&mut p));
    read(&mut p, psn(2), 0, 16);
    out.extend(from_b(&mut p));
    write_imm_only(&mut p, psn(3), 8192, b"imm");
    out.extend(from_b(&mut p));
    fetch_add(&mut p, psn(4), 16384);
    out.extend(from_b(&mut p));
    // A two-packet SEND: while it is in progress, the receive WQE it landed in still counts
    // (it is posted beyond the MSN); once it completes, it does not.
    to_b(
        &mut p,
        req(Opcode::RC_SEND_FIRST, psn(5), true),
        &[1; MTU as usize],
    );
    out.extend(from_b(&mut p));
    to_b(&mut p, req(Opcode::RC_SEND_LAST, psn(6), true), b"end");
    out.extend(from_b(&mut p));
    use Opcode as O;
    assert_eq!(
        aeths(&out),
        vec![
            (O::RC_ACKNOWLEDGE, P - 1, Some(4), Some(0)),
            (O::RC_ACKNOWLEDGE, P, Some(3), Some(1)),
            (O::RC_ACKNOWLEDGE, psn(1), Some(3), Some(2)),
            (O::RC_RDMA_READ_RESPONSE_ONLY, psn(2), Some(3), Some(3)),
            (O::RC_ACKNOWLEDGE, psn(3), Some(2), Some(4)),
            (O::RC_ATOMIC_ACKNOWLEDGE, psn(4), Some(2), Some(5)),
            (O::RC_ACKNOWLEDGE, psn(5), Some(2), Some(5)),
            (O::RC_ACKNOWLEDGE, psn(6), Some(1), Some(6)),
        ]
    );
    assert_eq!(p.b.done().len(), 3, "SEND, WRITE with immediate, SEND");
}

#[test]
fn c9_158_2_1_every_acknowledgement_carries_the_table_52_code_rounded_down() {
    // (receives available, Table 52 code): the largest table value not above the count.
    let cases: [(u64, u8); 14] = [
        (0, 0x00),
        (1, 0x01),
        (4, 0x04),
        (5, 0x04),
        (6, 0x05),
        (7, 0x05),
        (8, 0x06),
        (11, 0x06),
        (12, 0x07),
        (16, 0x08),
        (23, 0x08),
        (100, 0x0d),
        (767, 0x12),
        (1000, 0x13),
    ];
    for (n, code) in cases {
        let mut p = pair();
        recvs_b(&mut p, 0, n);
        write_only(&mut p, P, 8192, b"w");
        let out = from_b(&mut p);
        assert_eq!(
            aeths(&out),
            vec![(Opcode::RC_ACKNOWLEDGE, P, Some(code), Some(1))],
            "{n} receives"
        );
    }
    // Every kind of positive acknowledgement carries it: READ responses (first and last
    // packet), atomic ACKs, and the answers to duplicates; NAKs carry no credits.
    let mut p = Pair::new(P, 0x900, deep());
    recvs_b(&mut p, 0, 5);
    read(&mut p, P, 0, 3 * MTU);
    fetch_add(&mut p, psn(3), 16384);
    send_only(&mut p, psn(4), b"s");
    let mut out = from_b(&mut p);
    // Duplicates: READ (whole), atomic, SEND.
    read(&mut p, P, 0, 3 * MTU);
    fetch_add(&mut p, psn(3), 16384);
    send_only(&mut p, psn(4), b"s");
    out.extend(from_b(&mut p));
    // Sequence error NAK.
    send_only(&mut p, psn(9), b"ahead");
    out.extend(from_b(&mut p));
    use Opcode as O;
    assert_eq!(
        aeths(&out),
        vec![
            (O::RC_RDMA_READ_RESPONSE_FIRST, P, Some(0x04), Some(1)),
            (O::RC_RDMA_READ_RESPONSE_MIDDLE, psn(1), None, None),
            (O::RC_RDMA_READ_RESPONSE_LAST, psn(2), Some(0x04), Some(1)),
            (O::RC_ATOMIC_ACKNOWLEDGE, psn(3), Some(0x04), Some(2)),
            (O::RC_ACKNOWLEDGE, psn(4), Some(0x04), Some(3)),
            (O::RC_RDMA_READ_RESPONSE_FIRST, P, Some(0x04), Some(3)),
            (O::RC_RDMA_READ_RESPONSE_MIDDLE, psn(1), None, None),
            (O::RC_RDMA_READ_RESPONSE_LAST, psn(2), Some(0x04), Some(3)),
            (O::RC_ATOMIC_ACKNOWLEDGE, psn(3), Some(0x04), Some(3)),
            (O::RC_ACKNOWLEDGE, psn(4), Some(0x04), Some(3)),
            (O::RC_ACKNOWLEDGE, psn(5), Some(0x60), Some(3)),
        ]
    );
}

#[test]
fn c9_161_credits_count_receives_beyond_each_aeths_own_msn() {
    // Three receives. SEND (MSN 1), READ (MSN 2) and SEND (MSN 3) queue their responses; a
    // fourth receive is posted before they go out. Each AETH counts the receives posted by
    // then beyond those its own MSN's messages used: 4 - 1, 4 - 1, 4 - 2; so MSN + credits
    // is 4, 5, 5 - the last SSN a requester may send if every later message is a SEND.
    let mut p = pair();
    recvs_b(&mut p, 0, 3);
    send_only(&mut p, P, b"s1");
    read(&mut p, psn(1), 0, 16);
    send_only(&mut p, psn(2), b"s3");
    p.recv_b(3, 4096, 64);
    assert_eq!(
        aeths(&from_b(&mut p)),
        vec![
            (Opcode::RC_ACKNOWLEDGE, P, Some(3), Some(1)),
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn(1), Some(3), Some(2)),
            (Opcode::RC_ACKNOWLEDGE, psn(2), Some(2), Some(3)),
        ]
    );
}

// ----- responder: unsolicited ACKs (9.7.7.2.1) ------------------------------------------------

#[test]
fn c9_152_unsolicited_ack_repeats_the_latest_ack_with_the_current_msn() {
    let mut p = pair();
    p.recv_b(1, 0, 64);
    send_only(&mut p, P, b"s1");
    write_only(&mut p, psn(1), 8192, b"w2");
    send_only(&mut p, psn(2), b"no receive");
    assert_eq!(
        aeths(&from_b(&mut p)),
        vec![
            (Opcode::RC_ACKNOWLEDGE, psn(1), Some(0x00), Some(2)),
            (Opcode::RC_ACKNOWLEDGE, psn(2), Some(RNR), Some(2)),
        ]
    );
    // The requester waits for receives: posting three sends it the news at once, as a copy
    // of the latest positive ACK (PSN P + 1) with the current MSN and the new credits.
    recvs_b(&mut p, 2, 3);
    assert_eq!(
        aeths(&from_b(&mut p)),
        vec![(Opcode::RC_ACKNOWLEDGE, psn(1), Some(0x03), Some(2))]
    );
    // It knows now; more receives are no news worth an ACK of their own.
    p.recv_b(5, 4096, 64);
    assert!(from_b(&mut p).is_empty());
    send_only(&mut p, psn(2), b"retried");
    assert_eq!(
        aeths(&from_b(&mut p)),
        vec![(Opcode::RC_ACKNOWLEDGE, psn(2), Some(0x03), Some(3))]
    );

    // After a READ response the unsolicited ACK is still a plain Acknowledge, at the PSN of
    // the READ's last response packet.
    let mut p = pair();
    read(&mut p, P, 0, 2 * MTU);
    send_only(&mut p, psn(2), b"no receive");
    let out = from_b(&mut p);
    assert_eq!(out.len(), 3);
    recvs_b(&mut p, 1, 2);
    assert_eq!(
        aeths(&from_b(&mut p)),
        vec![(Opcode::RC_ACKNOWLEDGE, psn(1), Some(0x02), Some(1))]
    );
}

// ----- requester: limited WQEs (9.7.7.2.5) ----------------------------------------------------

#[test]
fn c9_156_without_initial_credits_the_first_send_is_limited() {
    // No credits offered: a three-packet SEND sends only its first packet, with AckReq, and
    // the READ behind it waits too.
    let mut p = Pair::new(P, 0x900, deep());
    let (s, r) = (send(&p, 1, 3 * MTU), rdma_read(&p, 2, 16));
    p.post_a(&[s, r]);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![(Opcode::RC_SEND_FIRST, P, true)]
    );
    p.advance_to(TTR_NS / 2);
    assert!(from_a(&mut p).is_empty());
    // Its ACK carries one credit at MSN 0 (the receive the SEND landed in): the message is
    // covered and the rest goes out, then the READ.
    ack_to_a(&mut p, P, 0x01, 0);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![
            (Opcode::RC_SEND_MIDDLE, psn(1), false),
            (Opcode::RC_SEND_LAST, psn(2), false),
            (Opcode::RC_RDMA_READ_REQUEST, psn(3), true),
        ]
    );
}

#[test]
fn c9_159_send_queue_out_of_credits_becomes_limited() {
    // Two credits. SEND, three WRITEs (they need none), SEND: both SENDs are covered; the
    // third SEND is the first without a credit.
    let mut p = pair();
    p.unsolicited_ack(Dir::BtoA, 0x02, 0);
    let wrs = [
        send(&p, 1, 2 * MTU),
        write(&p, 2, 8),
        write(&p, 3, 8),
        write(&p, 4, 8),
        send(&p, 5, 2 * MTU),
        send(&p, 6, 2 * MTU),
        write(&p, 7, 8),
    ];
    p.post_a(&wrs);
    use Opcode as O;
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![
            (O::RC_SEND_FIRST, P, false),
            (O::RC_SEND_LAST, psn(1), false),
            (O::RC_RDMA_WRITE_ONLY, psn(2), false),
            (O::RC_RDMA_WRITE_ONLY, psn(3), false),
            (O::RC_RDMA_WRITE_ONLY, psn(4), false),
            (O::RC_SEND_FIRST, psn(5), false),
            // The next SEND has no credit: ask for an ACK now.
            (O::RC_SEND_LAST, psn(6), true),
            (O::RC_SEND_FIRST, psn(7), true),
        ]
    );
}

#[test]
fn c9_160_no_reordering_around_a_limited_wqe() {
    // Zero credits: the READ behind a limited SEND does not overtake it.
    let mut p = Pair::new(P, 0x900, deep());
    let wrs = [send(&p, 1, 2 * MTU), rdma_read(&p, 2, 16), write(&p, 3, 8)];
    p.post_a(&wrs);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![(Opcode::RC_SEND_FIRST, P, true)]
    );
    // Credits arrive in an unsolicited ACK (initial PSN - 1): everything follows in order.
    p.unsolicited_ack(Dir::BtoA, 0x08, 0);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![
            (Opcode::RC_SEND_LAST, psn(1), false),
            (Opcode::RC_RDMA_READ_REQUEST, psn(2), true),
            (Opcode::RC_RDMA_WRITE_ONLY, psn(3), true),
        ]
    );
}

#[test]
fn c9_162_limited_wqe_read_write_and_atomic_still_go_out_in_order() {
    // Zero credits: READ, WRITE and FETCH_ADD go out; the SEND behind them is limited (one
    // packet, AckReq) and the WRITE after it waits.
    let mut p = Pair::new(P, 0x900, deep());
    let faa = SendWr::new(
        3,
        WrOpcode::AtomicFetchAdd {
            remote_addr: p.b.mr.addr + 16384,
            rkey: p.b.mr.rkey,
            add: 1,
        },
    )
    .with_sge(p.sge_a(32768, 8))
    .signaled();
    let wrs = [
        rdma_read(&p, 1, 2 * MTU),
        write(&p, 2, 2 * MTU),
        faa,
        send(&p, 4, 3 * MTU),
        write(&p, 5, 8),
    ];
    p.post_a(&wrs);
    use Opcode as O;
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![
            (O::RC_RDMA_READ_REQUEST, P, true),
            (O::RC_RDMA_WRITE_FIRST, psn(2), false),
            (O::RC_RDMA_WRITE_LAST, psn(3), false),
            (O::RC_FETCH_ADD, psn(4), true),
            (O::RC_SEND_FIRST, psn(5), true),
        ]
    );
    p.advance_to(TTR_NS / 2);
    assert!(from_a(&mut p).is_empty());
}

#[test]
fn c9_163_limited_send_sends_one_packet_with_ackreq_then_waits() {
    // One credit: SEND 1 is covered, SEND 2 (three packets) is limited.
    let mut p = pair();
    p.unsolicited_ack(Dir::BtoA, 0x01, 0);
    let wrs = [send(&p, 1, 8), send(&p, 2, 3 * MTU), write(&p, 3, 8)];
    p.post_a(&wrs);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![
            (Opcode::RC_SEND_ONLY, P, true),
            (Opcode::RC_SEND_FIRST, psn(1), true),
        ]
    );
    // The ACK of SEND 1 does not acknowledge the limited packet: still waiting.
    ack_to_a(&mut p, P, 0x00, 1);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    assert!(from_a(&mut p).is_empty());
    // The limited packet times out: it is resent (credits never hold back retransmission),
    // asking again, and nothing new goes with it.
    p.advance_to(p.now.as_nanos() + 4 * TTR_NS);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![(Opcode::RC_SEND_FIRST, psn(1), true)]
    );
    // Acknowledged, but still no credit for it (a responder may count it that way): one
    // more packet, with AckReq, and wait again.
    ack_to_a(&mut p, psn(1), 0x00, 1);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![(Opcode::RC_SEND_MIDDLE, psn(2), true)]
    );
    assert!(from_a(&mut p).is_empty());
    // Acknowledged with a credit that covers SEND 2: the rest of the queue goes.
    ack_to_a(&mut p, psn(2), 0x01, 1);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![
            (Opcode::RC_SEND_LAST, psn(3), false),
            (Opcode::RC_RDMA_WRITE_ONLY, psn(4), true),
        ]
    );
}

#[test]
fn o9_99_limited_write_with_immediate_sends_the_whole_message_then_waits() {
    let mut p = pair();
    let wi = SendWr::new(
        1,
        WrOpcode::RdmaWriteWithImm {
            remote: remote(&p, 0),
            imm: 7,
        },
    )
    .with_sge(p.sge_a(0, 3 * MTU))
    .signaled();
    let wrs = [wi, write(&p, 2, 8)];
    p.post_a(&wrs);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![
            (Opcode::RC_RDMA_WRITE_FIRST, P, false),
            (Opcode::RC_RDMA_WRITE_MIDDLE, psn(1), false),
            (Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, psn(2), true),
        ]
    );
    p.advance_to(TTR_NS / 2);
    assert!(from_a(&mut p).is_empty(), "waits for the acknowledgement");
    ack_to_a(&mut p, psn(2), 0x00, 1);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![(Opcode::RC_RDMA_WRITE_ONLY, psn(3), true)]
    );
}

// ----- requester: taking credits (9.7.6.1.4, 9.7.7.2.2, 9.7.7.2.5) ----------------------------

#[test]
fn c9_144_credits_are_taken_from_duplicate_acknowledgements() {
    let mut p = pair();
    let wr = send(&p, 1, 8);
    p.post_a(&[wr]);
    assert_eq!(reqs(&from_a(&mut p)), vec![(Opcode::RC_SEND_ONLY, P, true)]);
    ack_to_a(&mut p, P, 0x00, 1);
    assert_eq!(p.a.done(), vec![(1, WcStatus::Success)]);
    let wrs = [send(&p, 2, 8), send(&p, 3, 8)];
    p.post_a(&wrs);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![(Opcode::RC_SEND_ONLY, psn(1), true)]
    );
    // A duplicate of the first ACK (PSN P, already acknowledged) with two credits beyond
    // MSN 1: SEND 3 is covered and goes; the duplicate completes nothing.
    let ignored = p.a.hca.counters().ignored_responses;
    ack_to_a(&mut p, P, 0x02, 1);
    assert_eq!(p.a.hca.counters().ignored_responses, ignored + 1);
    assert!(p.a.done().is_empty());
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![(Opcode::RC_SEND_ONLY, psn(2), true)]
    );
    // SEND 4 has no credit (limited, AckReq) and SEND 5 waits behind it. Ghosts from the
    // invalid region ahead of the send queue give nothing (C9-136), not even the "invalid"
    // code.
    let wrs = [send(&p, 4, 8), send(&p, 5, 8)];
    p.post_a(&wrs);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![(Opcode::RC_SEND_ONLY, psn(3), true)]
    );
    ack_to_a(&mut p, psn(100), 0x1e, 1);
    ack_to_a(&mut p, psn(100), NO_CREDITS, 1);
    assert!(from_a(&mut p).is_empty());
    assert!(p.a.done().is_empty());
}

#[test]
fn c9_153_credits_matter_only_when_the_responder_generates_them() {
    // Credits advertised (none): the second SEND waits for an ACK.
    let mut p = pair();
    p.unsolicited_ack(Dir::BtoA, 0x00, 0);
    let wrs = [send(&p, 1, 8), send(&p, 2, 8)];
    p.post_a(&wrs);
    assert_eq!(reqs(&from_a(&mut p)), vec![(Opcode::RC_SEND_ONLY, P, true)]);
    // The invalid code: no flow control, from then on for the whole connection.
    let mut p = pair();
    p.unsolicited_ack(Dir::BtoA, NO_CREDITS, 0);
    let wrs = [send(&p, 1, 2 * MTU), send(&p, 2, 8)];
    p.post_a(&wrs);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![
            (Opcode::RC_SEND_FIRST, P, false),
            (Opcode::RC_SEND_LAST, psn(1), false),
            (Opcode::RC_SEND_ONLY, psn(2), true),
        ]
    );
    ack_to_a(&mut p, psn(2), 0x00, 2);
    let wrs = [send(&p, 3, 8), send(&p, 4, 8)];
    p.post_a(&wrs);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![
            (Opcode::RC_SEND_ONLY, psn(3), false),
            (Opcode::RC_SEND_ONLY, psn(4), true),
        ]
    );
}

#[test]
fn c9_164_credit_updates_are_accepted_at_any_time() {
    let mut p = pair();
    let wrs: Vec<SendWr> = (1..=4).map(|i| send(&p, i, 2 * MTU)).collect();
    p.post_a(&wrs);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![(Opcode::RC_SEND_FIRST, P, true)]
    );
    // Mid-message, before any acknowledgement: an unsolicited ACK (initial PSN - 1, MSN 0)
    // with two credits.
    p.unsolicited_ack(Dir::BtoA, 0x02, 0);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![
            (Opcode::RC_SEND_LAST, psn(1), false),
            (Opcode::RC_SEND_FIRST, psn(2), false),
            (Opcode::RC_SEND_LAST, psn(3), true),
            (Opcode::RC_SEND_FIRST, psn(4), true),
        ]
    );
    let timer = p.a.hca.poll_timeout();
    // A repeat of the latest news changes nothing; neither does an older, smaller count.
    p.unsolicited_ack(Dir::BtoA, 0x02, 0);
    p.unsolicited_ack(Dir::BtoA, 0x01, 0);
    assert!(from_a(&mut p).is_empty());
    // Another with more credits: the waiting SEND goes on; nothing completes and the
    // transport timer is left alone.
    p.unsolicited_ack(Dir::BtoA, 0x04, 0);
    assert_eq!(
        reqs(&from_a(&mut p)),
        vec![
            (Opcode::RC_SEND_LAST, psn(5), false),
            (Opcode::RC_SEND_FIRST, psn(6), false),
            (Opcode::RC_SEND_LAST, psn(7), true),
        ]
    );
    assert!(p.a.done().is_empty());
    assert_eq!(p.a.hca.poll_timeout(), timer);
    ack_to_a(&mut p, psn(7), 0x00, 4);
    let done: Vec<_> = p.a.done().iter().map(|d| d.0).collect();
    assert_eq!(done, vec![1, 2, 3, 4]);
}

// ----- end to end -------------------------------------------------------------------------------

#[test]
fn c9_151_send_queue_acts_on_the_credits_the_responder_generates() {
    // B posts two receives; A posts six one-packet SENDs. A starts without credits (a
    // limited SEND), learns B's count from each ACK, is refused once (RNR NAK) when it probes
    // past it, and B's unsolicited ACK hands out the four receives posted during the RNR wait.
    let mut p = pair();
    recvs_b(&mut p, 1, 2);
    let wrs: Vec<SendWr> = (1..=6).map(|i| send(&p, i, 8)).collect();
    p.post_a(&wrs);
    p.run(100_000);
    recvs_b(&mut p, 3, 4);
    p.run(1_000_000_000);
    let log: Vec<_> = p
        .log
        .iter()
        .map(|(d, f)| {
            let s = common::decode(f);
            (*d, s.opcode(), s.psn(), s.ack_req(), s.syndrome(), s.msn())
        })
        .collect();
    use Dir::{AtoB, BtoA};
    use Opcode as O;
    assert_eq!(
        log,
        vec![
            // Limited: no credits yet.
            (AtoB, O::RC_SEND_ONLY, P, true, None, None),
            (BtoA, O::RC_ACKNOWLEDGE, P, false, Some(0x01), Some(1)),
            // One credit: SEND 2 goes, asking for an ACK since SEND 3 has none; SEND 3 is
            // limited and probes at once.
            (AtoB, O::RC_SEND_ONLY, psn(1), true, None, None),
            (AtoB, O::RC_SEND_ONLY, psn(2), true, None, None),
            (BtoA, O::RC_ACKNOWLEDGE, psn(1), false, Some(0x00), Some(2)),
            (BtoA, O::RC_ACKNOWLEDGE, psn(2), false, Some(RNR), Some(2)),
            // Receives posted during the RNR wait: the unsolicited ACK.
            (BtoA, O::RC_ACKNOWLEDGE, psn(1), false, Some(0x04), Some(2)),
            // After the RNR timer: SEND 3 again (asking again), then SENDs 4-6 within the
            // credits.
            (AtoB, O::RC_SEND_ONLY, psn(2), true, None, None),
            (AtoB, O::RC_SEND_ONLY, psn(3), false, None, None),
            (AtoB, O::RC_SEND_ONLY, psn(4), false, None, None),
            (AtoB, O::RC_SEND_ONLY, psn(5), true, None, None),
            (BtoA, O::RC_ACKNOWLEDGE, psn(5), false, Some(0x00), Some(6)),
        ]
    );
    let done: Vec<_> = p.a.done().iter().map(|d| (d.0, d.1)).collect();
    assert_eq!(
        done,
        (1..=6).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(p.b.done().len(), 6);
}

/// SplitMix64: the test's own deterministic generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[test]
fn credits_under_loss_with_receives_posted_a_few_at_a_time() {
    // B hands out receives two at a time while A streams SENDs of up to three packets, with
    // 5% of the frames lost both ways: every message arrives once, in order, intact, and
    // every send completes successfully (limited WQEs, RNR NAKs, unsolicited ACKs and
    // retransmissions never deadlock or lose anything).
    const N: u64 = 40;
    for seed in 1..=12u64 {
        let opts = ConnectOptions {
            timeout: 10,
            min_rnr_timer: 1,
            ..ConnectOptions::default()
        };
        let mut p = Pair::new(0xff_fff0, 0x42, opts);
        let mut rng = Rng(seed);
        let mut lossy = Rng(seed ^ 0x5eed);
        p.filter = Box::new(move |_, _| lossy.next() % 100 >= 5);
        let src: Vec<u8> = (0..N * 3 * 1024).map(|i| (i * 13 + seed) as u8).collect();
        p.a.hca.mr_write(p.a.mr.handle, 0, &src).unwrap();
        let lens: Vec<u32> = (0..N).map(|_| (rng.next() % 3000) as u32).collect();
        let wrs: Vec<SendWr> = (0..N)
            .map(|i| {
                SendWr::new(i + 1, WrOpcode::Send)
                    .with_sge(p.sge_a(i * 3 * 1024, lens[i as usize]))
                    .signaled()
            })
            .collect();
        p.post_a(&wrs);
        let mut posted = 0;
        while posted < N {
            for _ in 0..2.min(N - posted) {
                p.recv_b(posted + 1, 4096 * posted, 4096);
                posted += 1;
            }
            let t = p.now.as_nanos() + 20_000 + rng.next() % 100_000;
            p.run(t);
            p.advance_to(t);
        }
        p.run(u64::MAX);
        let a: Vec<_> = p.a.done();
        assert_eq!(
            a,
            (1..=N).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>(),
            "seed {seed}"
        );
        let b = p.b.wcs();
        assert_eq!(b.len() as u64, N, "seed {seed}");
        for (i, wc) in b.iter().enumerate() {
            let len = lens[i] as usize;
            assert_eq!(
                (wc.wr_id, wc.status, wc.byte_len),
                (i as u64 + 1, WcStatus::Success, len as u32),
                "seed {seed}"
            );
            let off = i * 3 * 1024;
            assert_eq!(p.b.mem(4096 * i, len), src[off..off + len], "seed {seed}");
        }
    }
}
