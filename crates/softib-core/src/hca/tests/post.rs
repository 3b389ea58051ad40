//! post_send / post_recv validation: one test per rule, all-or-nothing behaviour.

use super::*;
use crate::error::{PostRecvError, PostSendError};
use crate::verbs::ah::AhAttr;
use crate::verbs::types::{SendFlags, WcOpcode, WcStatus};
use crate::verbs::wr::{RecvWr, RemoteAddr, SendWr, Sge, WqePayload, WrOpcode};

const SGE: Sge = Sge::new(0x7f00_0000_0000, 16, 0x1234_5600);
const REMOTE: RemoteAddr = RemoteAddr::new(0x5000, 0x777);

fn rts(t: QpType) -> (Fixture, Qpn) {
    let mut f = Fixture::for_type(t);
    let qpn = f.qp(t);
    f.bring_to(qpn, QpState::Rts);
    (f, qpn)
}

fn send() -> SendWr {
    SendWr::new(1, WrOpcode::Send).with_sge(SGE)
}

fn cas() -> WrOpcode {
    WrOpcode::AtomicCmpSwp {
        remote_addr: 0x5000,
        rkey: 0x777,
        compare: 1,
        swap: 2,
    }
}

fn faa() -> WrOpcode {
    WrOpcode::AtomicFetchAdd {
        remote_addr: 0x5000,
        rkey: 0x777,
        add: 1,
    }
}

#[test]
fn send_state_rules() {
    for (state, ok) in [
        (QpState::Reset, false),
        (QpState::Init, false),
        (QpState::Rtr, false),
        (QpState::Rts, true),
        (QpState::Sqd, true),
    ] {
        let mut f = Fixture::new();
        let qpn = f.qp(QpType::Rc);
        f.bring_to(qpn, state);
        let r = f.hca.post_send(qpn, &[send()]);
        if ok {
            r.unwrap();
            assert_eq!(f.hca.qp(qpn).unwrap().send_queue().len(), 1);
        } else {
            assert_eq!(r, Err(PostSendError::InvalidState { state }));
        }
    }
}

#[test]
fn send_in_err_completes_at_once_with_flush_error() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Err);
    // More WRs than the queue holds: nothing is queued, so space is not a limit.
    let wrs: Vec<_> = (0..20)
        .map(|i| SendWr::new(i, WrOpcode::RdmaWrite { remote: REMOTE }))
        .collect();
    f.hca.post_send(qpn, &wrs).unwrap();
    let wcs = f.drain();
    assert_eq!(wcs.len(), 20);
    for (i, w) in wcs.iter().enumerate() {
        assert_eq!(w.wr_id, i as u64);
        assert_eq!(w.status, WcStatus::WrFlushErr);
        assert_eq!(w.opcode, WcOpcode::RdmaWrite);
    }
    assert_eq!(f.hca.qp(qpn).unwrap().send_queue().len(), 0);
    // WRs are still validated in ERR.
    let bad = SendWr::new(1, WrOpcode::Send).with_sg_list(vec![SGE; 5]);
    assert!(matches!(
        f.hca.post_send(qpn, &[bad]),
        Err(PostSendError::TooManySge { index: 0, .. })
    ));
}

#[test]
fn send_queue_full_names_the_first_wr_that_does_not_fit() {
    let (mut f, qpn) = rts(QpType::Rc);
    let wrs: Vec<_> = (0..6).map(|i| SendWr::new(i, WrOpcode::Send)).collect();
    f.hca.post_send(qpn, &wrs).unwrap();
    let more: Vec<_> = (6..10).map(|i| SendWr::new(i, WrOpcode::Send)).collect();
    assert_eq!(
        f.hca.post_send(qpn, &more),
        Err(PostSendError::QueueFull {
            index: 2,
            max_send_wr: 8
        })
    );
    // All or nothing: still 6.
    assert_eq!(f.hca.qp(qpn).unwrap().send_queue().len(), 6);
    f.hca.post_send(qpn, &more[..2]).unwrap();
    assert_eq!(f.hca.qp(qpn).unwrap().send_queue().len(), 8);
}

#[test]
fn too_many_sges() {
    let (mut f, qpn) = rts(QpType::Rc);
    let wr = SendWr::new(1, WrOpcode::Send).with_sg_list(vec![SGE; 5]);
    assert_eq!(
        f.hca.post_send(qpn, &[send(), wr]),
        Err(PostSendError::TooManySge {
            index: 1,
            num_sge: 5,
            max: 4
        })
    );
    assert_eq!(f.hca.qp(qpn).unwrap().send_queue().len(), 0);
}

#[test]
fn rdma_read_respects_max_sge_rd() {
    let mut config = HcaConfig::new(1);
    config.device.max_sge_rd = 2;
    let mut f = Fixture::with_config(config);
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rts);
    let read = |n| SendWr::new(1, WrOpcode::RdmaRead { remote: REMOTE }).with_sg_list(vec![SGE; n]);
    f.hca.post_send(qpn, &[read(2)]).unwrap();
    assert_eq!(
        f.hca.post_send(qpn, &[read(3)]),
        Err(PostSendError::TooManyReadSge {
            index: 0,
            num_sge: 3,
            max: 2
        })
    );
    // Writes are bounded by max_send_sge only.
    f.hca
        .post_send(
            qpn,
            &[SendWr::new(2, WrOpcode::RdmaWrite { remote: REMOTE }).with_sg_list(vec![SGE; 3])],
        )
        .unwrap();
}

#[test]
fn inline_size_limit() {
    let (mut f, qpn) = rts(QpType::Rc);
    f.hca
        .post_send(
            qpn,
            &[SendWr::new(1, WrOpcode::Send).with_inline(vec![7; 64])],
        )
        .unwrap();
    assert_eq!(
        f.hca.post_send(
            qpn,
            &[SendWr::new(2, WrOpcode::Send).with_inline(vec![7; 65])]
        ),
        Err(PostSendError::InlineTooLong {
            index: 0,
            len: 65,
            max: 64
        })
    );
    let wqe = f.hca.qp(qpn).unwrap().send_queue().next().unwrap().clone();
    assert_eq!(wqe.payload, WqePayload::Inline(vec![7; 64]));
    assert_eq!(wqe.length, 64);
    assert!(wqe.flags.contains(SendFlags::INLINE));
}

#[test]
fn inline_consistency() {
    let (mut f, qpn) = rts(QpType::Rc);
    let both = SendWr::new(1, WrOpcode::Send)
        .with_sge(SGE)
        .with_inline(vec![1]);
    assert_eq!(
        f.hca.post_send(qpn, &[both]),
        Err(PostSendError::InlineWithSgList { index: 0 })
    );
    let flag_only = send().with_flags(SendFlags::INLINE);
    assert_eq!(
        f.hca.post_send(qpn, &[flag_only]),
        Err(PostSendError::InlineFlagWithoutData { index: 0 })
    );
    let read = SendWr::new(1, WrOpcode::RdmaRead { remote: REMOTE }).with_inline(vec![1; 8]);
    assert_eq!(
        f.hca.post_send(qpn, &[read]),
        Err(PostSendError::InlineNotSupported {
            index: 0,
            opcode: "IBV_WR_RDMA_READ"
        })
    );
    let atomic = SendWr::new(1, cas()).with_inline(vec![1; 8]);
    assert!(matches!(
        f.hca.post_send(qpn, &[atomic]),
        Err(PostSendError::InlineNotSupported { index: 0, .. })
    ));
}

#[test]
fn message_length_limit() {
    let mut config = HcaConfig::new(1);
    config.ports[0].max_msg_sz = 100;
    let mut f = Fixture::with_config(config);
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rts);
    let wr = |len| SendWr::new(1, WrOpcode::Send).with_sge(Sge::new(0, len, 1));
    f.hca.post_send(qpn, &[wr(100)]).unwrap();
    assert_eq!(
        f.hca.post_send(qpn, &[wr(101)]),
        Err(PostSendError::MessageTooLong {
            index: 0,
            len: 101,
            max: 100
        })
    );
    // The sum of the SGEs counts, without overflow.
    let big = SendWr::new(1, WrOpcode::Send).with_sg_list(vec![Sge::new(0, u32::MAX, 1); 4]);
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rts);
    assert_eq!(
        f.hca.post_send(qpn, &[big]),
        Err(PostSendError::MessageTooLong {
            index: 0,
            len: 4 * u64::from(u32::MAX),
            max: 1 << 31
        })
    );
}

fn opcode_allowed(t: QpType, op: WrOpcode) -> bool {
    let (mut f, qpn) = rts(t);
    let len = if op.is_atomic() { 8 } else { 64 };
    let mut wr = SendWr::new(1, op).with_sge(Sge::new(0, len, 1));
    if t.is_raw() {
        // Raw datagrams are addressed by an AH (DLID) like UD.
        let ah = f.hca.create_ah(f.pd, &AhAttr::local(1, 9)).unwrap();
        wr = wr.with_ud(ah, Qpn::new(0), 0);
    }
    if t == QpType::Ud {
        let ah = f
            .hca
            .create_ah(
                f.pd,
                &AhAttr::global(1, crate::verbs::types::Gid::from_ipv4([10, 0, 0, 9]), 0),
            )
            .unwrap();
        wr = wr.with_ud(ah, Qpn::new(0x20), 0x1111_1111);
    }
    match f.hca.post_send(qpn, &[wr]) {
        Ok(()) => true,
        Err(PostSendError::OpcodeNotSupported {
            index: 0,
            opcode,
            qp_type,
        }) => {
            assert_eq!(opcode, op.name());
            assert_eq!(qp_type, t);
            false
        }
        Err(e) => panic!("{t} {}: {e}", op.name()),
    }
}

#[test]
fn opcodes_per_qp_type() {
    let ops = [
        WrOpcode::Send,
        WrOpcode::SendWithImm(1),
        WrOpcode::SendWithInv(0x100),
        WrOpcode::RdmaWrite { remote: REMOTE },
        WrOpcode::RdmaWriteWithImm {
            remote: REMOTE,
            imm: 1,
        },
        WrOpcode::RdmaRead { remote: REMOTE },
        cas(),
        faa(),
    ];
    //                        S     SImm  SInv   W      WImm   R      CAS    FAA
    let table: [(QpType, [bool; 8]); 5] = [
        (QpType::Rc, [true, true, true, true, true, true, true, true]),
        (
            QpType::Uc,
            [true, true, false, true, true, false, false, false],
        ),
        (
            QpType::Ud,
            [true, true, false, false, false, false, false, false],
        ),
        (
            QpType::RawIpv6,
            [true, false, false, false, false, false, false, false],
        ),
        (
            QpType::RawEthertype,
            [true, false, false, false, false, false, false, false],
        ),
    ];
    for (t, allowed) in table {
        for (op, ok) in ops.iter().zip(allowed) {
            assert_eq!(opcode_allowed(t, *op), ok, "{t} {}", op.name());
        }
    }
}

#[test]
fn atomics_need_eight_bytes() {
    let (mut f, qpn) = rts(QpType::Rc);
    for op in [cas(), faa()] {
        f.hca
            .post_send(qpn, &[SendWr::new(1, op).with_sge(Sge::new(0x10, 8, 1))])
            .unwrap();
        for sges in [
            vec![Sge::new(0x10, 4, 1)],
            vec![Sge::new(0x10, 16, 1)],
            vec![],
            vec![Sge::new(0x10, 4, 1), Sge::new(0x20, 8, 1)],
        ] {
            let len: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
            assert_eq!(
                f.hca
                    .post_send(qpn, &[SendWr::new(2, op).with_sg_list(sges)]),
                Err(PostSendError::AtomicLength { index: 0, len })
            );
        }
        // Two SGEs totalling 8 bytes are fine.
        f.hca
            .post_send(
                qpn,
                &[SendWr::new(3, op).with_sg_list(vec![Sge::new(0, 4, 1), Sge::new(8, 4, 1)])],
            )
            .unwrap();
    }
}

#[test]
fn ud_needs_a_valid_destination() {
    let (mut f, qpn) = rts(QpType::Ud);
    let gid = crate::verbs::types::Gid::from_ipv4([10, 0, 0, 9]);
    let ah = f.hca.create_ah(f.pd, &AhAttr::global(1, gid, 0)).unwrap();
    assert_eq!(
        f.hca.post_send(qpn, &[send()]),
        Err(PostSendError::MissingUdDest { index: 0 })
    );
    // An AH that was destroyed.
    let gone = f.hca.create_ah(f.pd, &AhAttr::global(1, gid, 0)).unwrap();
    f.hca.destroy_ah(gone).unwrap();
    assert_eq!(
        f.hca
            .post_send(qpn, &[send().with_ud(gone, Qpn::new(0x20), 1)]),
        Err(PostSendError::InvalidAh { index: 0, ah: gone })
    );
    // An AH of another PD.
    let pd2 = f.hca.alloc_pd().unwrap();
    let other = f.hca.create_ah(pd2, &AhAttr::global(1, gid, 0)).unwrap();
    assert_eq!(
        f.hca
            .post_send(qpn, &[send().with_ud(other, Qpn::new(0x20), 1)]),
        Err(PostSendError::AhPdMismatch {
            index: 0,
            ah: other
        })
    );
    f.hca
        .post_send(qpn, &[send().with_ud(ah, Qpn::new(0x20), 0x1111_1111)])
        .unwrap();
    let wqe = f.hca.qp(qpn).unwrap().send_queue().next().unwrap().clone();
    let dest = wqe.ud.unwrap();
    assert_eq!(dest.av, AhAttr::global(1, gid, 0));
    assert_eq!(dest.remote_qpn, Qpn::new(0x20));
    // The queued WR keeps its address vector after the AH is destroyed.
    f.hca.destroy_ah(ah).unwrap();
    assert_eq!(
        f.hca.qp(qpn).unwrap().send_queue().next().unwrap().ud,
        Some(dest)
    );
}

#[test]
fn ud_ah_port_must_match_the_qp_port() {
    let mut config = HcaConfig::new(1);
    config.ports.push(config.ports[0].clone());
    let mut f = Fixture::with_config(config);
    let qpn = f.qp(QpType::Ud);
    f.bring_to(qpn, QpState::Rts);
    let gid = crate::verbs::types::Gid::from_ipv4([10, 0, 0, 9]);
    let ah = f.hca.create_ah(f.pd, &AhAttr::global(2, gid, 0)).unwrap();
    assert_eq!(
        f.hca
            .post_send(qpn, &[send().with_ud(ah, Qpn::new(0x20), 1)]),
        Err(PostSendError::AhPortMismatch {
            index: 0,
            ah_port: 2,
            qp_port: 1
        })
    );
}

#[test]
fn ud_message_must_fit_the_mtu() {
    let (mut f, qpn) = rts(QpType::Ud);
    let gid = crate::verbs::types::Gid::from_ipv4([10, 0, 0, 9]);
    let ah = f.hca.create_ah(f.pd, &AhAttr::global(1, gid, 0)).unwrap();
    let wr = |len| {
        SendWr::new(1, WrOpcode::Send)
            .with_sge(Sge::new(0, len, 1))
            .with_ud(ah, Qpn::new(0x20), 1)
    };
    f.hca.post_send(qpn, &[wr(1024)]).unwrap();
    assert_eq!(
        f.hca.post_send(qpn, &[wr(1025)]),
        Err(PostSendError::UdMessageTooLong {
            index: 0,
            len: 1025,
            mtu: Mtu::Mtu1024
        })
    );
}

#[test]
fn keys_and_bounds_are_not_checked_at_post_time() {
    let (mut f, qpn) = rts(QpType::Rc);
    // No memory region exists at all; posting still succeeds.
    let wr = SendWr::new(9, WrOpcode::Send).with_sge(Sge::new(u64::MAX, 16, 0xdead_beef));
    f.hca.post_send(qpn, &[wr]).unwrap();
    f.hca
        .post_recv(qpn, &[RecvWr::new(9, vec![Sge::new(0, 100, 0)])])
        .unwrap();
}

#[test]
fn queued_wqe_carries_what_the_data_path_needs() {
    let mut f = Fixture::new();
    let init = QpInitAttr {
        sq_sig_all: true,
        ..QpInitAttr::new(QpType::Rc, f.cq, CAP)
    };
    let qpn = f.hca.create_qp(f.pd, &init).unwrap();
    f.bring_to(qpn, QpState::Rts);
    let wr = SendWr::new(
        42,
        WrOpcode::RdmaWriteWithImm {
            remote: REMOTE,
            imm: 0xabcd,
        },
    )
    .with_sg_list(vec![Sge::new(0x10, 3, 1), Sge::new(0x20, 5, 1)])
    .with_flags(SendFlags::FENCE | SendFlags::SOLICITED);
    f.hca.post_send(qpn, &[wr]).unwrap();
    let wqe = f.hca.qp(qpn).unwrap().send_queue().next().unwrap().clone();
    assert_eq!(wqe.wr_id, 42);
    assert_eq!(wqe.length, 8);
    // sq_sig_all makes every WR signaled.
    assert!(wqe.signaled);
    assert_eq!(wqe.flags, SendFlags::FENCE | SendFlags::SOLICITED);
    assert_eq!(wqe.opcode.imm_data(), Some(0xabcd));
    assert_eq!(
        wqe.payload,
        WqePayload::Sges(vec![Sge::new(0x10, 3, 1), Sge::new(0x20, 5, 1)])
    );
    // Without sq_sig_all only SIGNALED WRs are.
    let (mut f, qpn) = rts(QpType::Rc);
    f.hca.post_send(qpn, &[send(), send().signaled()]).unwrap();
    let sig: Vec<_> = f
        .hca
        .qp(qpn)
        .unwrap()
        .send_queue()
        .map(|w| w.signaled)
        .collect();
    assert_eq!(sig, vec![false, true]);
}

#[test]
fn recv_state_rules() {
    for (state, ok) in [
        (QpState::Reset, false),
        (QpState::Init, true),
        (QpState::Rtr, true),
        (QpState::Rts, true),
        (QpState::Sqd, true),
    ] {
        let mut f = Fixture::new();
        let qpn = f.qp(QpType::Rc);
        f.bring_to(qpn, state);
        let r = f.hca.post_recv(qpn, &[RecvWr::new(1, vec![SGE])]);
        if ok {
            r.unwrap();
            assert_eq!(f.hca.qp(qpn).unwrap().recv_queue().len(), 1);
        } else {
            assert_eq!(r, Err(PostRecvError::InvalidState { state }));
        }
    }
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Uc);
    f.bring_to(qpn, QpState::Sqe);
    f.hca.post_recv(qpn, &[RecvWr::new(1, vec![])]).unwrap();
    assert_eq!(f.hca.qp(qpn).unwrap().recv_queue().len(), 1);
}

#[test]
fn recv_in_err_completes_at_once() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Ud);
    f.bring_to(qpn, QpState::Err);
    f.hca
        .post_recv(qpn, &[RecvWr::new(5, vec![SGE]), RecvWr::new(6, vec![])])
        .unwrap();
    let got: Vec<_> = f
        .drain()
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode))
        .collect();
    assert_eq!(
        got,
        vec![
            (5, WcStatus::WrFlushErr, WcOpcode::Recv),
            (6, WcStatus::WrFlushErr, WcOpcode::Recv)
        ]
    );
}

#[test]
fn recv_queue_full_and_sge_limit() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Init);
    let wrs: Vec<_> = (0..9).map(|i| RecvWr::new(i, vec![])).collect();
    assert_eq!(
        f.hca.post_recv(qpn, &wrs),
        Err(PostRecvError::QueueFull {
            index: 8,
            max_recv_wr: 8
        })
    );
    assert_eq!(f.hca.qp(qpn).unwrap().recv_queue().len(), 0);
    let bad = RecvWr::new(1, vec![SGE; 5]);
    let err = f
        .hca
        .post_recv(qpn, &[RecvWr::new(0, vec![]), bad])
        .unwrap_err();
    assert_eq!(
        err,
        PostRecvError::TooManySge {
            index: 1,
            num_sge: 5,
            max: 4
        }
    );
    assert_eq!(err.index(), Some(1));
    assert_eq!(f.hca.qp(qpn).unwrap().recv_queue().len(), 0);
}

#[test]
fn recv_on_srq_qp_is_refused_and_take_recv_wqe_uses_the_right_queue() {
    let mut f = Fixture::new();
    let srq = f
        .hca
        .create_srq(
            f.pd,
            &crate::verbs::srq::SrqInitAttr {
                max_wr: 4,
                max_sge: 2,
                srq_limit: 0,
            },
        )
        .unwrap();
    let init = QpInitAttr {
        srq: Some(srq),
        ..QpInitAttr::new(QpType::Ud, f.cq, CAP)
    };
    let sqp = f.hca.create_qp(f.pd, &init).unwrap();
    f.bring_to(sqp, QpState::Rtr);
    assert_eq!(
        f.hca.post_recv(sqp, &[RecvWr::new(1, vec![])]),
        Err(PostRecvError::UsesSrq(sqp))
    );
    f.hca
        .post_srq_recv(srq, &[RecvWr::new(10, vec![SGE]), RecvWr::new(11, vec![])])
        .unwrap();
    let qpn = f.qp(QpType::Ud);
    f.bring_to(qpn, QpState::Rtr);
    f.hca.post_recv(qpn, &[RecvWr::new(20, vec![SGE])]).unwrap();

    let w = f.hca.take_recv_wqe(sqp).unwrap();
    assert_eq!((w.wr_id, w.length), (10, 16));
    assert_eq!(f.hca.take_recv_wqe(qpn).unwrap().wr_id, 20);
    assert_eq!(f.hca.take_recv_wqe(qpn), None);
    assert_eq!(f.hca.take_recv_wqe(sqp).unwrap().wr_id, 11);
    assert_eq!(f.hca.take_recv_wqe(sqp), None);
}

#[test]
fn unknown_qp() {
    let mut f = Fixture::new();
    let q = Qpn::new(0x55);
    assert_eq!(f.hca.post_send(q, &[]), Err(PostSendError::NoSuchQp(q)));
    assert_eq!(f.hca.post_recv(q, &[]), Err(PostRecvError::NoSuchQp(q)));
}
