//! IBA 9.8 compliance of the UC service (seed 000: C9-165 … C9-199).
//!
//! Each test is named after the statement it checks. Requester tests post work on A and look
//! at the packets A transmits (collected, not delivered). Responder tests craft UC request
//! packets as A would send them and inject them into B; they look at B's completions, B's
//! memory, B's counters and at what B transmits (a UC responder never sends anything).

mod common;

use common::uc::uc_pair;
use common::{hdr, patch_transport, Dir, Pair, Seen};
use softib_core::setup::ConnectOptions;
use softib_core::verbs::qp::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
use softib_core::verbs::types::{AccessFlags, QpState, QpType, WcOpcode, WcStatus};
use softib_core::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WrOpcode};
use softib_wire::immdt::ImmDt;
use softib_wire::opcode::Opcode;
use softib_wire::reth::Reth;
use softib_wire::transport::TransportHeaders;

/// A's first request PSN (B's initial ePSN).
const P: u32 = 0x100;
const MTU: usize = 1024;

fn pair() -> Pair {
    uc_pair(P, 0x900, ConnectOptions::default())
}

fn psn(d: u32) -> u32 {
    P.wrapping_add(d) & 0xff_ffff
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn send(p: &Pair, id: u64, off: u64, len: u32) -> SendWr {
    SendWr::new(id, WrOpcode::Send)
        .with_sge(p.sge_a(off, len))
        .signaled()
}

fn remote(p: &Pair, off: u64) -> RemoteAddr {
    RemoteAddr {
        addr: p.b.mr.addr + off,
        rkey: p.b.mr.rkey,
    }
}

fn write(p: &Pair, id: u64, off: u64, len: u32, roff: u64) -> SendWr {
    SendWr::new(
        id,
        WrOpcode::RdmaWrite {
            remote: remote(p, roff),
        },
    )
    .with_sge(p.sge_a(off, len))
    .signaled()
}

fn write_imm(p: &Pair, id: u64, off: u64, len: u32, roff: u64, imm: u32) -> SendWr {
    SendWr::new(
        id,
        WrOpcode::RdmaWriteWithImm {
            remote: remote(p, roff),
            imm,
        },
    )
    .with_sge(p.sge_a(off, len))
    .signaled()
}

/// What A transmits now (not delivered).
fn from_a(p: &mut Pair) -> Vec<Seen> {
    p.drain(Dir::AtoB)
}

/// Opcode bytes of a packet list.
fn ops(s: &[Seen]) -> Vec<Opcode> {
    s.iter().map(|x| x.opcode()).collect()
}

/// Writes `data` into A's region at `off`.
fn fill_a(p: &mut Pair, off: usize, data: &[u8]) {
    p.a.hca.mr_write(p.a.mr.handle, off, data).unwrap();
}

/// Injects one UC packet from A into B.
fn inj(p: &mut Pair, h: TransportHeaders, payload: &[u8]) {
    p.inject(Dir::AtoB, h, payload);
}

/// A UC SEND packet header.
fn send_h(op: Opcode, psn: u32) -> TransportHeaders {
    hdr(op, psn)
}

/// A UC WRITE FIRST / ONLY header with a RETH.
fn write_h(op: Opcode, psn: u32, va: u64, rkey: u32, dma_len: u32) -> TransportHeaders {
    let mut h = hdr(op, psn);
    h.reth = Some(Reth { va, rkey, dma_len });
    h
}

/// Asserts that B sent nothing at all (UC never acknowledges) and returns its completions.
fn b_silent_wcs(p: &mut Pair) -> Vec<softib_core::verbs::cq::WorkCompletion> {
    assert!(p.drain(Dir::BtoA).is_empty(), "a UC responder never sends");
    p.b.wcs()
}

/// Injects a 3-packet SEND (FIRST, MIDDLE, LAST) at PSNs `at`, `at+1`, `at+2`, leaving out the
/// packets whose index is in `skip`; the payload is `pattern(2*MTU+100, seed)`.
fn send3(p: &mut Pair, at: u32, seed: u8, skip: &[usize]) -> Vec<u8> {
    let data = pattern(2 * MTU + 100, seed);
    let parts = [
        (Opcode::UC_SEND_FIRST, &data[..MTU]),
        (Opcode::UC_SEND_MIDDLE, &data[MTU..2 * MTU]),
        (Opcode::UC_SEND_LAST, &data[2 * MTU..]),
    ];
    for (i, (op, d)) in parts.iter().enumerate() {
        if !skip.contains(&i) {
            inj(p, send_h(*op, (at + i as u32) & 0xff_ffff), d);
        }
    }
    data
}

// ----- C9-165 … C9-171: responder validation ---------------------------------------------

#[test]
fn c9_165_uc_invalid_header_fields_dropped_silently() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    let data = pattern(64, 1);
    // Bad ICRC.
    let mut f = p.frame(Dir::AtoB, send_h(Opcode::UC_SEND_ONLY, P), &data);
    let n = f.len();
    f[n - 1] ^= 0xff;
    p.inject_frame(Dir::AtoB, &f);
    // Unknown destination QP.
    let mut f = p.frame(Dir::AtoB, send_h(Opcode::UC_SEND_ONLY, P), &data);
    patch_transport(&mut f, |t| t[5..8].copy_from_slice(&[0x00, 0x77, 0x77]));
    p.inject_frame(Dir::AtoB, &f);
    // P_Key not in B's table.
    let mut f = p.frame(Dir::AtoB, send_h(Opcode::UC_SEND_ONLY, P), &data);
    patch_transport(&mut f, |t| t[2..4].copy_from_slice(&[0x12, 0x34]));
    p.inject_frame(Dir::AtoB, &f);
    // An opcode of another service class (RC SEND ONLY) to the UC QP.
    inj(&mut p, send_h(Opcode::RC_SEND_ONLY, P), &data);
    let c = *p.b.hca.counters();
    assert_eq!(
        (c.icrc_err, c.no_such_qp, c.bad_pkey, c.wrong_service),
        (1, 1, 1, 1)
    );
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.rq_psn_b(), P, "no dropped packet moved the ePSN");
    // The receive WQE is untouched: a valid packet still lands in it.
    inj(&mut p, send_h(Opcode::UC_SEND_ONLY, P), &data);
    let wcs = b_silent_wcs(&mut p);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::Success));
}

#[test]
fn c9_166_uc_psn_checked_out_of_order_message_dropped() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    // FIRST, then the LAST with the MIDDLE's PSN skipped: out of order.
    let data = pattern(2 * MTU + 100, 2);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, P), &data[..MTU]);
    inj(
        &mut p,
        send_h(Opcode::UC_SEND_LAST, psn(2)),
        &data[MTU..2 * MTU],
    );
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().uc_out_of_order, 1);
    assert_eq!(p.b.hca.counters().uc_msgs_dropped, 1);
}

#[test]
fn c9_167_uc_opcode_sequence_checked() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    // A MIDDLE and a LAST in PSN order but with no FIRST before them.
    inj(&mut p, send_h(Opcode::UC_SEND_MIDDLE, P), &pattern(MTU, 3));
    inj(
        &mut p,
        send_h(Opcode::UC_SEND_LAST, psn(1)),
        &pattern(10, 3),
    );
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().uc_opcode_seq_err, 2);
    // The receive WQE was not consumed.
    inj(
        &mut p,
        send_h(Opcode::UC_SEND_ONLY, psn(2)),
        &pattern(10, 4),
    );
    assert_eq!(b_silent_wcs(&mut p)[0].wr_id, 1);
}

/// A UC pair whose B QP grants `access` (A keeps the default).
fn pair_b_access(access: AccessFlags) -> Pair {
    let mut p = pair();
    let qpn = p.b.qpn;
    let attr = QpAttr {
        qp_access_flags: access,
        ..QpAttr::default()
    };
    p.b.hca
        .modify_qp(qpn, &attr, QpAttrMask::ACCESS_FLAGS)
        .unwrap();
    p
}

#[test]
fn c9_168_uc_write_to_qp_without_remote_write_dropped() {
    let mut p = pair_b_access(AccessFlags::LOCAL_WRITE);
    p.recv_b(1, 0, 64);
    let (va, rkey) = (p.b.mr.addr + 8192, p.b.mr.rkey);
    inj(
        &mut p,
        write_h(Opcode::UC_RDMA_WRITE_ONLY, P, va, rkey, 16),
        &[0xaa; 16],
    );
    // Even a zero-length WRITE with immediate: the QP does not do RDMA WRITE.
    let mut h = write_h(Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, psn(1), 0, 0, 0);
    h.immdt = Some(ImmDt { imm: 7 });
    inj(&mut p, h, &[]);
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.mem(8192, 16), vec![0; 16]);
    assert_eq!(p.b.hca.counters().uc_op_not_supported, 2);
    // SEND is supported.
    inj(&mut p, send_h(Opcode::UC_SEND_ONLY, psn(2)), &[1, 2, 3]);
    assert_eq!(b_silent_wcs(&mut p).len(), 1);
}

#[test]
fn c9_169_uc_no_receive_wqe_or_small_buffer_dropped() {
    let mut p = pair();
    // No receive posted: SEND and WRITE with immediate are dropped (no RNR NAK on UC).
    inj(&mut p, send_h(Opcode::UC_SEND_ONLY, P), &[1; 8]);
    let (va, rkey) = (p.b.mr.addr + 8192, p.b.mr.rkey);
    let mut h = write_h(
        Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        psn(1),
        va,
        rkey,
        8,
    );
    h.immdt = Some(ImmDt { imm: 9 });
    inj(&mut p, h, &[2; 8]);
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().uc_no_recv_wqe, 2);
    assert_eq!(p.b.mem(8192, 8), vec![0; 8], "nothing placed without a WQE");
    // A receive too small for the message: dropped, no completion.
    p.recv_b(1, 0, 4);
    inj(&mut p, send_h(Opcode::UC_SEND_ONLY, psn(2)), &[3; 8]);
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().uc_recv_overflow, 1);
}

#[test]
fn c9_170_uc_write_rkey_checked() {
    let mut p = pair();
    let va = p.b.mr.addr + 8192;
    let bad = p.b.mr.rkey ^ 0x5a00;
    inj(
        &mut p,
        write_h(Opcode::UC_RDMA_WRITE_ONLY, P, va, bad, 16),
        &[0xbb; 16],
    );
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.mem(8192, 16), vec![0; 16]);
    assert_eq!(p.b.hca.counters().uc_rkey_violation, 1);
    // The right key writes.
    let rkey = p.b.mr.rkey;
    inj(
        &mut p,
        write_h(Opcode::UC_RDMA_WRITE_ONLY, psn(1), va, rkey, 16),
        &[0xbb; 16],
    );
    assert_eq!(p.b.mem(8192, 16), vec![0xbb; 16]);
}

/// Figure 117 is not in the seeds; softib checks, in order: PSN, opcode sequence, operation
/// supported, receive resources, length / PadCnt, R_Key (9.8.1's order, with the lengths
/// where Linux rxe checks them). A packet with several faults is counted under the first one.
#[test]
fn c9_171_uc_validation_order_on_multi_fault_packets() {
    // PSN before length: an out-of-order MIDDLE that is also short.
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, P), &pattern(MTU, 1));
    inj(&mut p, send_h(Opcode::UC_SEND_MIDDLE, psn(5)), &[1; 3]);
    let c = *p.b.hca.counters();
    assert_eq!((c.uc_out_of_order, c.uc_length_err), (1, 0));

    // Opcode sequence before length: an in-order WRITE MIDDLE inside a SEND, short as well.
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, P), &pattern(MTU, 1));
    inj(
        &mut p,
        send_h(Opcode::UC_RDMA_WRITE_MIDDLE, psn(1)),
        &[1; 3],
    );
    let c = *p.b.hca.counters();
    assert_eq!((c.uc_opcode_seq_err, c.uc_length_err), (1, 0));

    // Operation before length and R_Key: a WRITE to a QP without remote write, with a bad
    // R_Key and a payload longer than the PMTU.
    let mut p = pair_b_access(AccessFlags::LOCAL_WRITE);
    inj(
        &mut p,
        write_h(Opcode::UC_RDMA_WRITE_ONLY, P, 0, 0xdead, 2000),
        &pattern(MTU + 4, 1),
    );
    let c = *p.b.hca.counters();
    assert_eq!(
        (c.uc_op_not_supported, c.uc_length_err, c.uc_rkey_violation),
        (1, 0, 0)
    );

    // Resources before length: an over-long SEND ONLY with no receive WQE posted; with one,
    // the length fails and the WQE stays for the next message.
    let mut p = pair();
    inj(
        &mut p,
        send_h(Opcode::UC_SEND_ONLY, P),
        &pattern(MTU + 4, 1),
    );
    let c = *p.b.hca.counters();
    assert_eq!((c.uc_no_recv_wqe, c.uc_length_err), (1, 0));
    p.recv_b(1, 0, 4096);
    inj(
        &mut p,
        send_h(Opcode::UC_SEND_ONLY, psn(1)),
        &pattern(MTU + 4, 1),
    );
    let c = *p.b.hca.counters();
    assert_eq!((c.uc_no_recv_wqe, c.uc_length_err), (1, 1));
    inj(&mut p, send_h(Opcode::UC_SEND_ONLY, psn(2)), &[1; 8]);
    assert_eq!(b_silent_wcs(&mut p)[0].wr_id, 1);

    // Length before R_Key: a WRITE ONLY longer than the PMTU with a bad R_Key.
    let mut p = pair();
    inj(
        &mut p,
        write_h(Opcode::UC_RDMA_WRITE_ONLY, P, 0, 0xdead, MTU as u32 + 4),
        &pattern(MTU + 4, 1),
    );
    let c = *p.b.hca.counters();
    assert_eq!((c.uc_length_err, c.uc_rkey_violation), (1, 0));

    // Resources before R_Key: a WRITE ONLY with immediate, bad R_Key, no receive WQE.
    let mut p = pair();
    let mut h = write_h(Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, P, 0, 0xdead, 8);
    h.immdt = Some(ImmDt { imm: 1 });
    inj(&mut p, h, &[1; 8]);
    let c = *p.b.hca.counters();
    assert_eq!((c.uc_no_recv_wqe, c.uc_rkey_violation), (1, 0));
    // With a receive WQE the R_Key fails, and the WQE stays for the next message.
    p.recv_b(1, 0, 64);
    inj(&mut p, h, &[1; 8]);
    let c = *p.b.hca.counters();
    assert_eq!((c.uc_no_recv_wqe, c.uc_rkey_violation), (1, 1));
    inj(&mut p, send_h(Opcode::UC_SEND_ONLY, psn(2)), &[1; 8]);
    assert_eq!(b_silent_wcs(&mut p)[0].wr_id, 1);
}

// ----- C9-172 … C9-180: requester ----------------------------------------------------------

#[test]
fn c9_172_uc_every_packet_carries_current_psn() {
    let mut p = pair();
    fill_a(&mut p, 0, &pattern(3 * MTU, 1));
    p.post_a(&[
        send(&p, 1, 0, 2500),
        write(&p, 2, 0, 100, 0),
        send(&p, 3, 0, 0),
    ]);
    let s = from_a(&mut p);
    let psns: Vec<u32> = s.iter().map(|x| x.psn()).collect();
    assert_eq!(psns, (0..5).map(psn).collect::<Vec<_>>());
    assert_eq!(p.sq_psn_a(), psn(5));
}

#[test]
fn c9_173_uc_first_packet_carries_programmed_psn() {
    for first in [0u32, 0x123456, 0xff_ffff] {
        let mut p = uc_pair(first, 0x900, ConnectOptions::default());
        p.post_a(&[send(&p, 1, 0, 8)]);
        let s = from_a(&mut p);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].psn(), first);
        assert_eq!(s[0].opcode(), Opcode::UC_SEND_ONLY);
    }
}

#[test]
fn c9_174_uc_psn_moves_only_in_sending_states() {
    // A UC QP in INIT and in RTR accepts no send WRs and sends nothing; its PSN stays.
    let mut p = pair();
    let (pd, cq) = (p.a.pd, p.a.cq);
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let q =
        p.a.hca
            .create_qp(pd, &QpInitAttr::new(QpType::Uc, cq, cap))
            .unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::LOCAL_WRITE,
        ..QpAttr::default()
    };
    p.a.hca
        .modify_qp(
            q,
            &init,
            QpAttrMask::STATE
                | QpAttrMask::PORT
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::ACCESS_FLAGS,
        )
        .unwrap();
    let wr = send(&p, 1, 0, 8);
    assert!(p.a.hca.post_send(q, &[wr]).is_err());
    assert!(from_a(&mut p).is_empty());
    assert_eq!(p.a.hca.query_qp(q).unwrap().sq_psn.value(), 0);

    // In SQD a WQE not yet started stays queued and takes no PSN; back in RTS it goes.
    let mut p = pair();
    let qpn = p.a.qpn;
    let sqd = QpAttr {
        qp_state: QpState::Sqd,
        ..QpAttr::default()
    };
    p.a.hca.modify_qp(qpn, &sqd, QpAttrMask::STATE).unwrap();
    p.post_a(&[send(&p, 1, 0, 8)]);
    assert!(from_a(&mut p).is_empty());
    assert_eq!(p.sq_psn_a(), P);
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    p.a.hca.modify_qp(qpn, &rts, QpAttrMask::STATE).unwrap();
    let s = from_a(&mut p);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].psn(), P);
    assert_eq!(p.sq_psn_a(), psn(1));
}

#[test]
fn c9_175_uc_psn_increments_mod_2_24() {
    let mut p = uc_pair(0xff_fffe, 0x900, ConnectOptions::default());
    p.post_a(&[send(&p, 1, 0, 3 * MTU as u32 + 1), send(&p, 2, 0, 1)]);
    let s = from_a(&mut p);
    let psns: Vec<u32> = s.iter().map(|x| x.psn()).collect();
    assert_eq!(psns, vec![0xff_fffe, 0xff_ffff, 0, 1, 2]);
}

#[test]
fn c9_176_uc_opcode_sequences_and_encoding() {
    let mut p = pair();
    let m = MTU as u32;
    p.post_a(&[
        send(&p, 1, 0, 10),
        send(&p, 2, 0, 2 * m),
        SendWr::new(3, WrOpcode::SendWithImm(0x11)).with_sge(p.sge_a(0, 10)),
        SendWr::new(4, WrOpcode::SendWithImm(0x12)).with_sge(p.sge_a(0, 3 * m)),
        write(&p, 5, 0, 10, 0),
        write(&p, 6, 0, m + 1, 0),
        write_imm(&p, 7, 0, 10, 0, 0x13),
        write_imm(&p, 8, 0, 3 * m, 0, 0x14),
    ]);
    let s = from_a(&mut p);
    use Opcode as O;
    assert_eq!(
        ops(&s),
        vec![
            O::UC_SEND_ONLY,
            O::UC_SEND_FIRST,
            O::UC_SEND_LAST,
            O::UC_SEND_ONLY_WITH_IMMEDIATE,
            O::UC_SEND_FIRST,
            O::UC_SEND_MIDDLE,
            O::UC_SEND_LAST_WITH_IMMEDIATE,
            O::UC_RDMA_WRITE_ONLY,
            O::UC_RDMA_WRITE_FIRST,
            O::UC_RDMA_WRITE_LAST,
            O::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            O::UC_RDMA_WRITE_FIRST,
            O::UC_RDMA_WRITE_MIDDLE,
            O::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        ]
    );
    // Table 38 encodings (0x20 + the RC code) and the headers each opcode carries.
    let bytes: Vec<u8> = ops(&s).iter().map(|o| o.0).collect();
    assert_eq!(
        bytes,
        vec![0x24, 0x20, 0x22, 0x25, 0x20, 0x21, 0x23, 0x2a, 0x26, 0x28, 0x2b, 0x26, 0x27, 0x29]
    );
    for x in &s {
        let info = x.opcode().info().unwrap();
        assert_eq!(info.service, softib_wire::Service::Uc);
        assert!(!x.ack_req(), "UC never asks for an acknowledgement");
        assert!(x.headers.aeth.is_none());
    }
    assert_eq!(s[3].headers.immdt, Some(ImmDt { imm: 0x11 }));
    assert_eq!(s[6].headers.immdt, Some(ImmDt { imm: 0x12 }));
    assert_eq!(s[13].headers.immdt, Some(ImmDt { imm: 0x14 }));
    let reth = s[8].headers.reth.expect("WRITE FIRST carries a RETH");
    assert_eq!(reth.dma_len, m + 1);
    assert!(s[9].headers.reth.is_none());
}

#[test]
fn c9_177_uc_first_and_middle_carry_pmtu() {
    let mut p = pair();
    p.post_a(&[
        send(&p, 1, 0, 3 * MTU as u32 + 5),
        write(&p, 2, 0, 2 * MTU as u32 + 1, 0),
    ]);
    let s = from_a(&mut p);
    for x in &s {
        let info = x.opcode().info().unwrap();
        if matches!(
            info.position,
            softib_wire::Position::First | softib_wire::Position::Middle
        ) {
            assert_eq!(x.payload.len(), MTU);
            assert_eq!(x.headers.bth.pad_cnt, 0);
        }
    }
    assert_eq!(s.len(), 4 + 3);
}

#[test]
fn c9_178_uc_only_carries_zero_to_pmtu() {
    let mut p = pair();
    p.post_a(&[
        send(&p, 1, 0, 0),
        send(&p, 2, 0, MTU as u32),
        write(&p, 3, 0, 0, 0),
        write(&p, 4, 0, MTU as u32, 0),
    ]);
    let s = from_a(&mut p);
    assert_eq!(
        ops(&s),
        vec![
            Opcode::UC_SEND_ONLY,
            Opcode::UC_SEND_ONLY,
            Opcode::UC_RDMA_WRITE_ONLY,
            Opcode::UC_RDMA_WRITE_ONLY
        ]
    );
    let lens: Vec<usize> = s.iter().map(|x| x.payload.len()).collect();
    assert_eq!(lens, vec![0, MTU, 0, MTU]);
}

#[test]
fn c9_179_uc_last_carries_one_to_pmtu() {
    let mut p = pair();
    p.post_a(&[
        send(&p, 1, 0, MTU as u32 + 1),
        send(&p, 2, 0, 2 * MTU as u32),
    ]);
    let s = from_a(&mut p);
    assert_eq!(s[1].opcode(), Opcode::UC_SEND_LAST);
    assert_eq!(s[1].payload.len(), 1);
    assert_eq!(s[3].opcode(), Opcode::UC_SEND_LAST);
    assert_eq!(s[3].payload.len(), MTU);
}

#[test]
fn c9_180_uc_send_completes_when_last_packet_is_on_the_wire() {
    let mut p = pair();
    fill_a(&mut p, 0, &pattern(3 * MTU, 5));
    p.post_a(&[send(&p, 1, 0, 2 * MTU as u32 + 10), write(&p, 2, 0, 10, 0)]);
    // Packet by packet: no completion until the message's last packet has been handed out.
    assert!(p.drain_one(Dir::AtoB).is_some());
    assert!(p.a.wcs().is_empty());
    assert!(p.drain_one(Dir::AtoB).is_some());
    assert!(p.a.wcs().is_empty());
    let last = p.drain_one(Dir::AtoB).unwrap();
    assert_eq!(last.opcode(), Opcode::UC_SEND_LAST);
    let wcs = p.a.wcs();
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::Success));
    assert_eq!(wcs[0].opcode, WcOpcode::Send);
    assert_eq!(wcs[0].byte_len, 2 * MTU as u32 + 10);
    // The WRITE completes as soon as its ONLY packet is out; nothing came back from B.
    assert_eq!(
        p.drain_one(Dir::AtoB).unwrap().opcode(),
        Opcode::UC_RDMA_WRITE_ONLY
    );
    let wcs = p.a.wcs();
    assert_eq!((wcs[0].wr_id, wcs[0].opcode), (2, WcOpcode::RdmaWrite));
    assert_eq!(p.a.hca.counters().rcvd_pkts, 0);

    // A local error (an L_Key that does not cover the gather list) terminates the request
    // with an error completion.
    let mut p = pair();
    let bad = Sge {
        addr: p.a.mr.addr,
        length: 16,
        lkey: p.a.mr.lkey ^ 0x100,
    };
    p.post_a(&[SendWr::new(9, WrOpcode::Send).with_sge(bad).signaled()]);
    assert!(from_a(&mut p).is_empty());
    let wcs = p.a.wcs();
    assert_eq!((wcs[0].wr_id, wcs[0].status), (9, WcStatus::LocProtErr));
}

// ----- C9-181 … C9-186: responder PSN --------------------------------------------------------

#[test]
fn c9_181_uc_responder_keeps_an_epsn() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    assert_eq!(p.rq_psn_b(), P);
    send3(&mut p, P, 1, &[]);
    assert_eq!(p.rq_psn_b(), psn(3));
    assert_eq!(b_silent_wcs(&mut p).len(), 1);
}

#[test]
fn c9_182_uc_epsn_unchanged_outside_receiving_states() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    let qpn = p.b.qpn;
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    p.b.hca.modify_qp(qpn, &err, QpAttrMask::STATE).unwrap();
    let _ = p.b.wcs();
    inj(&mut p, send_h(Opcode::UC_SEND_ONLY, psn(7)), &[1; 4]);
    assert_eq!(p.b.hca.counters().bad_state, 1);
    assert_eq!(p.rq_psn_b(), P);
    assert!(b_silent_wcs(&mut p).is_empty());

    // RESET -> INIT: no receiving yet, the ePSN stays 0 whatever arrives.
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    p.b.hca.modify_qp(qpn, &reset, QpAttrMask::STATE).unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::LOCAL_WRITE,
        ..QpAttr::default()
    };
    p.b.hca
        .modify_qp(
            qpn,
            &init,
            QpAttrMask::STATE
                | QpAttrMask::PORT
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::ACCESS_FLAGS,
        )
        .unwrap();
    p.recv_b(2, 0, 4096);
    inj(&mut p, send_h(Opcode::UC_SEND_ONLY, psn(9)), &[1; 4]);
    assert_eq!(p.rq_psn_b(), 0);
    assert!(b_silent_wcs(&mut p).is_empty());
}

#[test]
fn c9_183_uc_psn_other_than_epsn_is_out_of_order() {
    for bad in [psn(2), psn(0)] {
        // FIRST at P, then a MIDDLE at ePSN + 1 or at ePSN - 1: both out of order.
        let mut p = pair();
        p.recv_b(1, 0, 4096);
        let data = pattern(2 * MTU + 100, 3);
        inj(&mut p, send_h(Opcode::UC_SEND_FIRST, P), &data[..MTU]);
        inj(
            &mut p,
            send_h(Opcode::UC_SEND_MIDDLE, bad),
            &data[MTU..2 * MTU],
        );
        // The rest of the message, in order after the bad packet, cannot complete it.
        inj(
            &mut p,
            send_h(Opcode::UC_SEND_LAST, bad.wrapping_add(1)),
            &data[2 * MTU..],
        );
        assert!(b_silent_wcs(&mut p).is_empty());
        assert_eq!(p.b.hca.counters().uc_out_of_order, 1);
        assert_eq!(p.b.hca.counters().uc_msgs_dropped, 1);
    }
}

#[test]
fn c9_184_uc_first_or_only_accepted_at_any_psn() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    p.recv_b(2, 4096, 4096);
    p.recv_b(3, 8192, 4096);
    // An ONLY far ahead of the ePSN, another far behind it: both delivered, each time the
    // next packet is expected at its PSN + 1.
    for (at, id) in [(0x55_5555u32, 1u64), (0x00_0003, 2)] {
        let d = pattern(40, id as u8);
        inj(&mut p, send_h(Opcode::UC_SEND_ONLY, at), &d);
        assert_eq!(p.rq_psn_b(), at + 1);
        let wcs = b_silent_wcs(&mut p);
        assert_eq!((wcs[0].wr_id, wcs[0].status), (id, WcStatus::Success));
        assert_eq!(p.b.mem(4096 * (id as usize - 1), 40), d);
    }
    // A FIRST at an arbitrary PSN starts a message that continues from there.
    let d = send3(&mut p, 0xab_cdef, 9, &[]);
    let wcs = b_silent_wcs(&mut p);
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (3, d.len() as u32));
    assert_eq!(p.b.mem(8192, d.len()), d);
    assert_eq!(p.rq_psn_b(), 0xab_cdef + 3);
}

#[test]
fn c9_185_uc_in_order_messages_delivered_and_epsn_advances() {
    let mut p = pair();
    for i in 0..3 {
        p.recv_b(i, 4096 * i, 4096);
    }
    let mut at = P;
    let mut sent = Vec::new();
    for i in 0..3u8 {
        sent.push(send3(&mut p, at, i, &[]));
        at += 3;
        assert_eq!(p.rq_psn_b(), at);
    }
    let wcs = b_silent_wcs(&mut p);
    assert_eq!(wcs.len(), 3);
    for (i, d) in sent.iter().enumerate() {
        assert_eq!(wcs[i].wr_id, i as u64);
        assert_eq!(p.b.mem(4096 * i, d.len()), *d);
    }
}

#[test]
fn c9_186_uc_lost_middle_drops_message_and_next_first_is_delivered() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    p.recv_b(2, 4096, 4096);
    // Message 1 loses its MIDDLE: its LAST is out of order, the message is dropped.
    send3(&mut p, P, 1, &[1]);
    assert!(b_silent_wcs(&mut p).is_empty());
    // Message 2 follows; its FIRST starts a new message.
    let d = send3(&mut p, psn(3), 2, &[]);
    let wcs = b_silent_wcs(&mut p);
    assert_eq!(wcs.len(), 1);
    // The dropped message's receive WQE was reused: message 2 landed in receive 1, over the
    // bytes message 1 had placed there.
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (1, d.len() as u32));
    assert_eq!(p.b.mem(0, d.len()), d);
    // The out-of-order packet can itself be the FIRST: lose the LAST of message 3, and the
    // FIRST of message 4 (out of order) drops message 3 and starts message 4.
    send3(&mut p, psn(6), 3, &[2]);
    let d = send3(&mut p, psn(9), 4, &[]);
    let wcs = b_silent_wcs(&mut p);
    assert_eq!((wcs.len(), wcs[0].wr_id), (1, 2));
    assert_eq!(p.b.mem(4096, d.len()), d);
    assert_eq!(p.b.hca.counters().uc_msgs_dropped, 2);
}

// ----- C9-187 … C9-191: opcode sequence and operation ---------------------------------------

#[test]
fn c9_187_uc_opcode_sequence_rules() {
    // (1) The first packet after connecting must be a FIRST / ONLY.
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, P), &[1; 4]);
    assert!(b_silent_wcs(&mut p).is_empty());
    // (2)-(3) after a SEND FIRST only SEND MIDDLE / LAST: a WRITE MIDDLE there is invalid.
    let data = pattern(2 * MTU, 1);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, psn(1)), &data[..MTU]);
    inj(
        &mut p,
        send_h(Opcode::UC_RDMA_WRITE_MIDDLE, psn(2)),
        &data[MTU..],
    );
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(3)), &[1; 4]);
    assert!(b_silent_wcs(&mut p).is_empty());
    // (4) after a FIRST, another FIRST: the first message is dropped, the second proceeds.
    let d = pattern(MTU + 7, 2);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, psn(4)), &data[..MTU]);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, psn(5)), &d[..MTU]);
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(6)), &d[MTU..]);
    let wcs = b_silent_wcs(&mut p);
    assert_eq!((wcs.len(), wcs[0].byte_len), (1, d.len() as u32));
    assert_eq!(p.b.mem(0, d.len()), d);
    // (5) after a LAST / ONLY only a FIRST / ONLY.
    p.recv_b(2, 4096, 64);
    inj(&mut p, send_h(Opcode::UC_SEND_MIDDLE, psn(7)), &data[..MTU]);
    assert!(b_silent_wcs(&mut p).is_empty());
    let c = *p.b.hca.counters();
    // LAST at (1), WRITE MIDDLE, SEND LAST after it, the FIRST after a FIRST, MIDDLE at (5).
    assert_eq!(c.uc_opcode_seq_err, 5);
}

#[test]
fn c9_188_uc_invalid_sequence_drops_until_first_or_only() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    let data = pattern(2 * MTU, 1);
    // FIRST of a SEND, then a LAST of a WRITE: the SEND is dropped ...
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, P), &data[..MTU]);
    inj(&mut p, send_h(Opcode::UC_RDMA_WRITE_LAST, psn(1)), &[9; 8]);
    // ... and every MIDDLE / LAST after it, in PSN order or not, until a FIRST / ONLY.
    inj(&mut p, send_h(Opcode::UC_SEND_MIDDLE, psn(2)), &data[MTU..]);
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(3)), &[1; 8]);
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(
        p.b.mem(0, 4),
        data[..4].to_vec(),
        "partial data may be there"
    );
    inj(&mut p, send_h(Opcode::UC_SEND_ONLY, psn(4)), &[5; 8]);
    let wcs = b_silent_wcs(&mut p);
    assert_eq!((wcs.len(), wcs[0].wr_id, wcs[0].byte_len), (1, 1, 8));
    assert_eq!(p.b.hca.counters().uc_opcode_seq_err, 3);
    assert_eq!(p.b.hca.counters().uc_msgs_dropped, 1);
}

#[test]
fn c9_189_uc_first_or_only_that_breaks_sequence_starts_new_message() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    let data = pattern(2 * MTU, 1);
    // FIRST, then (MIDDLE and LAST lost) an ONLY at the very next PSN: in PSN order but an
    // invalid opcode sequence; the ONLY is delivered.
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, P), &data[..MTU]);
    let d = pattern(33, 4);
    inj(&mut p, send_h(Opcode::UC_SEND_ONLY, psn(1)), &d);
    let wcs = b_silent_wcs(&mut p);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (1, 33));
    assert_eq!(p.b.mem(0, 33), d);
    // Same with a FIRST that breaks a WRITE: the WRITE is dropped, the new SEND proceeds.
    p.recv_b(2, 4096, 4096);
    let (va, rkey) = (p.b.mr.addr + 65536, p.b.mr.rkey);
    inj(
        &mut p,
        write_h(
            Opcode::UC_RDMA_WRITE_FIRST,
            psn(2),
            va,
            rkey,
            2 * MTU as u32,
        ),
        &data[..MTU],
    );
    let d = pattern(MTU + 1, 5);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, psn(3)), &d[..MTU]);
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(4)), &d[MTU..]);
    let wcs = b_silent_wcs(&mut p);
    assert_eq!((wcs.len(), wcs[0].wr_id), (1, 2));
    assert_eq!(p.b.mem(4096, d.len()), d);
    assert_eq!(p.b.hca.counters().uc_msgs_dropped, 2);
}

#[test]
fn c9_190_uc_unsupported_or_reserved_opcodes_dropped() {
    let mut p = pair_b_access(AccessFlags::LOCAL_WRITE);
    p.recv_b(1, 0, 4096);
    // UC has no READ or ATOMIC: the would-be UC codes 0x2C (READ REQUEST) .. 0x3F are
    // reserved and dropped.
    for op in [0x2cu8, 0x33, 0x34, 0x3f] {
        let mut f = p.frame(Dir::AtoB, send_h(Opcode::UC_SEND_ONLY, P), &[1; 4]);
        common::patch_opcode(&mut f, op);
        p.inject_frame(Dir::AtoB, &f);
    }
    assert_eq!(p.b.hca.counters().malformed, 4);
    // A WRITE to a QP without remote write.
    let (va, rkey) = (p.b.mr.addr + 8192, p.b.mr.rkey);
    inj(
        &mut p,
        write_h(Opcode::UC_RDMA_WRITE_ONLY, P, va, rkey, 4),
        &[1; 4],
    );
    assert_eq!(p.b.hca.counters().uc_op_not_supported, 1);
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.mem(8192, 4), vec![0; 4]);
    assert_eq!(p.rq_psn_b(), psn(1));
}

#[test]
fn c9_191_uc_invalid_requests_get_no_response() {
    let mut p = pair();
    p.recv_b(1, 0, 16);
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    let bad: Vec<(TransportHeaders, Vec<u8>)> = vec![
        (send_h(Opcode::UC_SEND_MIDDLE, P), pattern(MTU, 1)),
        (send_h(Opcode::UC_SEND_ONLY, P), pattern(MTU + 4, 1)),
        (send_h(Opcode::UC_SEND_ONLY, P), pattern(64, 1)),
        (
            write_h(Opcode::UC_RDMA_WRITE_ONLY, P, va, rkey ^ 1, 4),
            pattern(4, 1),
        ),
        (
            write_h(Opcode::UC_RDMA_WRITE_ONLY, P, va, rkey, 4),
            pattern(8, 1),
        ),
        (send_h(Opcode::UC_SEND_FIRST, P), pattern(MTU - 4, 1)),
    ];
    for (h, d) in bad {
        inj(&mut p, h, &d);
    }
    assert!(p.drain(Dir::BtoA).is_empty());
    assert_eq!(p.b.hca.counters().sent_pkts, 0);
    assert!(p.b.wcs().is_empty());
    assert_eq!(p.b.hca.qp(p.b.qpn).unwrap().state(), QpState::Rts);
}

// ----- C9-192.2.1, C9-193: R_Key -------------------------------------------------------------

#[test]
fn c9_192_2_1_uc_write_rkey_violations_dropped_memory_untouched() {
    let mut p = pair();
    let (pd_b, mr_len) = (p.b.pd, common::MR_LEN as u64);
    // A read-only region, and a region in another PD.
    let ro =
        p.b.hca
            .reg_mr(pd_b, vec![0u8; 4096], AccessFlags::REMOTE_READ, None)
            .unwrap();
    let other_pd = p.b.hca.alloc_pd().unwrap();
    let foreign =
        p.b.hca
            .reg_mr(
                other_pd,
                vec![0u8; 4096],
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                None,
            )
            .unwrap();
    let (va, rkey) = (p.b.mr.addr, p.b.mr.rkey);
    let cases = [
        (va + 64, rkey ^ 0x0100, 16u32),  // wrong R_Key
        (va + mr_len - 8, rkey, 16),      // beyond the region
        (va.wrapping_sub(8), rkey, 16),   // before the region
        (ro.addr, ro.rkey, 16),           // no remote write
        (foreign.addr, foreign.rkey, 16), // another PD
    ];
    for (i, (a, k, n)) in cases.into_iter().enumerate() {
        inj(
            &mut p,
            write_h(Opcode::UC_RDMA_WRITE_ONLY, psn(i as u32), a, k, n),
            &vec![0xcc; n as usize],
        );
    }
    assert_eq!(p.b.hca.counters().uc_rkey_violation, 5);
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.mem(64, 16), vec![0; 16]);
    assert_eq!(p.b.mem(common::MR_LEN - 8, 8), vec![0; 8]);
    assert_eq!(p.b.hca.mr_bytes(ro.handle).unwrap(), &[0u8; 4096][..]);
    assert_eq!(p.b.hca.mr_bytes(foreign.handle).unwrap(), &[0u8; 4096][..]);
    // The range is checked per packet: a WRITE whose MIDDLE runs past its DMA length is
    // dropped at that packet, the rest of the range stays as it was.
    let rkey = p.b.mr.rkey;
    let d = pattern(2 * MTU, 7);
    inj(
        &mut p,
        write_h(
            Opcode::UC_RDMA_WRITE_FIRST,
            psn(5),
            va + 8192,
            rkey,
            MTU as u32 + 10,
        ),
        &d[..MTU],
    );
    inj(
        &mut p,
        send_h(Opcode::UC_RDMA_WRITE_MIDDLE, psn(6)),
        &d[MTU..],
    );
    assert_eq!(p.b.hca.counters().uc_length_err, 1);
    assert_eq!(p.b.mem(8192 + MTU, MTU), vec![0; MTU]);
}

#[test]
fn c9_193_uc_zero_length_write_not_rkey_checked() {
    let mut p = pair();
    p.recv_b(1, 0, 64);
    // A zero-length WRITE with immediate with a garbage R_Key and address: completes with
    // the immediate.
    let mut h = write_h(
        Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        P,
        0xdead_beef_0000,
        0x1234_5678,
        0,
    );
    h.immdt = Some(ImmDt { imm: 0xfeed });
    inj(&mut p, h, &[]);
    // A zero-length WRITE without immediate is accepted silently too.
    inj(
        &mut p,
        write_h(Opcode::UC_RDMA_WRITE_ONLY, psn(1), 1, 2, 0),
        &[],
    );
    let wcs = b_silent_wcs(&mut p);
    assert_eq!(wcs.len(), 1);
    assert_eq!(
        (
            wcs[0].wr_id,
            wcs[0].status,
            wcs[0].opcode,
            wcs[0].imm_data,
            wcs[0].byte_len
        ),
        (
            1,
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            Some(0xfeed),
            0
        )
    );
    assert_eq!(p.b.hca.counters().uc_rkey_violation, 0);
    assert_eq!(p.rq_psn_b(), psn(2));
}

// ----- C9-194 … C9-199: lengths -------------------------------------------------------------

#[test]
fn c9_194_uc_send_larger_than_buffer_dropped_and_wqe_reused() {
    let mut p = pair();
    p.recv_b(1, 0, MTU as u32 + 10);
    // A 3-packet SEND into a buffer of PMTU + 10 bytes: it fits until the MIDDLE.
    let _ = send3(&mut p, P, 1, &[]);
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().uc_recv_overflow, 1);
    // The receive WQE is still there for the next message, which overwrites the partial one.
    let d = pattern(MTU + 10, 9);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, psn(3)), &d[..MTU]);
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(4)), &d[MTU..]);
    let wcs = b_silent_wcs(&mut p);
    assert_eq!(
        (wcs.len(), wcs[0].wr_id, wcs[0].byte_len),
        (1, 1, d.len() as u32)
    );
    assert_eq!(p.b.mem(0, d.len()), d);
    // The same on an SRQ: the WQE goes back to the SRQ.
    let mut p = pair();
    let srq =
        p.b.hca
            .create_srq(
                p.b.pd,
                &softib_core::verbs::srq::SrqInitAttr {
                    max_wr: 8,
                    max_sge: 1,
                    srq_limit: 0,
                },
            )
            .unwrap();
    let sge = Sge {
        addr: p.b.mr.addr,
        length: 100,
        lkey: p.b.mr.lkey,
    };
    p.b.hca
        .post_srq_recv(srq, &[RecvWr::new(77, vec![sge])])
        .unwrap();
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut init = QpInitAttr::new(QpType::Uc, p.b.cq, cap);
    init.srq = Some(srq);
    let q = p.b.hca.create_qp(p.b.pd, &init).unwrap();
    let remote = softib_core::setup::EndpointInfo {
        qpn: p.a.qpn,
        psn: softib_wire::Psn::new(P),
        gid: softib_core::gid_of_ipv4(common::IP_A),
        lid: 0,
    };
    let o = ConnectOptions {
        sgid_index: 1,
        ..ConnectOptions::default()
    };
    softib_core::setup::connect(&mut p.b.hca, q, softib_wire::Psn::new(1), &remote, &o).unwrap();
    p.inject_to_b_qp(q, send_h(Opcode::UC_SEND_FIRST, P), &pattern(MTU, 1));
    assert_eq!(p.b.hca.counters().uc_recv_overflow, 1);
    p.inject_to_b_qp(q, send_h(Opcode::UC_SEND_ONLY, psn(1)), &[4; 50]);
    let wcs = b_silent_wcs(&mut p);
    assert_eq!((wcs.len(), wcs[0].wr_id, wcs[0].byte_len), (1, 77, 50));
}

#[test]
fn c9_195_uc_first_and_middle_must_carry_pmtu() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    // Short FIRST.
    inj(
        &mut p,
        send_h(Opcode::UC_SEND_FIRST, P),
        &pattern(MTU - 4, 1),
    );
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(1)), &pattern(4, 1));
    // Short MIDDLE.
    let d = pattern(2 * MTU, 2);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, psn(2)), &d[..MTU]);
    inj(
        &mut p,
        send_h(Opcode::UC_SEND_MIDDLE, psn(3)),
        &d[MTU..2 * MTU - 4],
    );
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(4)), &pattern(4, 1));
    // Long MIDDLE.
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, psn(5)), &d[..MTU]);
    inj(
        &mut p,
        send_h(Opcode::UC_SEND_MIDDLE, psn(6)),
        &pattern(MTU + 4, 3),
    );
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(7)), &pattern(4, 1));
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().uc_length_err, 3);
    assert_eq!(p.b.hca.counters().uc_msgs_dropped, 3);
}

#[test]
fn c9_196_uc_only_must_carry_at_most_pmtu() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    inj(
        &mut p,
        send_h(Opcode::UC_SEND_ONLY, P),
        &pattern(MTU + 4, 1),
    );
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().uc_length_err, 1);
    // Exactly PMTU and zero bytes are fine.
    inj(
        &mut p,
        send_h(Opcode::UC_SEND_ONLY, psn(1)),
        &pattern(MTU, 1),
    );
    p.recv_b(2, 4096, 4096);
    inj(&mut p, send_h(Opcode::UC_SEND_ONLY, psn(2)), &[]);
    let wcs = b_silent_wcs(&mut p);
    let lens: Vec<(u64, u32)> = wcs.iter().map(|w| (w.wr_id, w.byte_len)).collect();
    assert_eq!(lens, vec![(1, MTU as u32), (2, 0)]);
}

#[test]
fn c9_197_uc_last_must_carry_one_to_pmtu() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    let d = pattern(MTU, 1);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, P), &d);
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(1)), &[]);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, psn(2)), &d);
    inj(
        &mut p,
        send_h(Opcode::UC_SEND_LAST, psn(3)),
        &pattern(MTU + 4, 1),
    );
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().uc_length_err, 2);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, psn(4)), &d);
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(5)), &[1]);
    assert_eq!(b_silent_wcs(&mut p)[0].byte_len, MTU as u32 + 1);
}

#[test]
fn c9_199_uc_first_or_middle_with_padcnt_invalid() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    let d = pattern(2 * MTU, 1);
    // A FIRST of PMTU bytes on the wire, two of them pad (PadCnt 2).
    let f = p.frame_with_pad(
        Dir::AtoB,
        send_h(Opcode::UC_SEND_FIRST, P),
        &d[..MTU - 2],
        Some(2),
    );
    p.inject_frame(Dir::AtoB, &f);
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(1)), &[1; 4]);
    // A MIDDLE with PadCnt 1.
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, psn(2)), &d[..MTU]);
    let f = p.frame_with_pad(
        Dir::AtoB,
        send_h(Opcode::UC_SEND_MIDDLE, psn(3)),
        &d[MTU..2 * MTU - 1],
        Some(1),
    );
    p.inject_frame(Dir::AtoB, &f);
    inj(&mut p, send_h(Opcode::UC_SEND_LAST, psn(4)), &[1; 4]);
    assert!(b_silent_wcs(&mut p).is_empty());
    assert_eq!(p.b.hca.counters().uc_length_err, 2);
    // PadCnt on a LAST / ONLY is fine.
    let f = p.frame_with_pad(
        Dir::AtoB,
        send_h(Opcode::UC_SEND_ONLY, psn(5)),
        &[1; 5],
        Some(3),
    );
    p.inject_frame(Dir::AtoB, &f);
    assert_eq!(b_silent_wcs(&mut p)[0].byte_len, 5);
}

// ----- End to end ----------------------------------------------------------------------------

#[test]
fn uc_end_to_end_send_and_write_with_imm() {
    let mut p = pair();
    let data = pattern(3 * MTU + 17, 3);
    fill_a(&mut p, 0, &data);
    p.recv_b(1, 0, 8192);
    p.recv_b(2, 8192, 64);
    p.post_a(&[
        send(&p, 10, 0, data.len() as u32),
        write_imm(&p, 11, 0, data.len() as u32, 65536, 0xabc),
    ]);
    p.run(1_000_000);
    assert_eq!(p.b.mem(0, data.len()), data);
    assert_eq!(p.b.mem(65536, data.len()), data);
    let wcs = p.b.wcs();
    assert_eq!(wcs.len(), 2);
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (1, data.len() as u32));
    assert_eq!((wcs[1].wr_id, wcs[1].imm_data), (2, Some(0xabc)));
    assert_eq!(
        p.a.done(),
        vec![(10, WcStatus::Success), (11, WcStatus::Success)]
    );
    // Nothing ever went from B to A.
    assert!(p.log.iter().all(|(d, _)| *d == Dir::AtoB));
}

#[test]
fn uc_error_flushes_the_receive_held_by_a_message_in_progress() {
    let mut p = pair();
    p.recv_b(1, 0, 4096);
    p.recv_b(2, 4096, 4096);
    inj(&mut p, send_h(Opcode::UC_SEND_FIRST, P), &pattern(MTU, 1));
    let qpn = p.b.qpn;
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    p.b.hca.modify_qp(qpn, &err, QpAttrMask::STATE).unwrap();
    let done = p.b.done();
    assert_eq!(
        done,
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
}
