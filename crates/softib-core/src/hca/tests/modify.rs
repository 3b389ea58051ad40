//! modify_qp: the transition table, attribute masks, value checks and state side effects.

use super::*;
use crate::error::ModifyQpError;
use crate::verbs::ah::AhAttrError;
use crate::verbs::event::{AsyncEvent, QpErrorCause};
use crate::verbs::qp::{AttrRule, TRANSITIONS};
use crate::verbs::types::{WcOpcode, WcStatus};
use crate::verbs::wr::{RecvWr, SendWr, Sge, WqeState, WrOpcode};

#[test]
fn every_legal_transition_succeeds_with_its_minimal_mask() {
    let mut checked = 0;
    for tr in TRANSITIONS {
        for t in TYPES {
            if tr.rule(t).is_none() || !reachable(t, tr.from) {
                continue;
            }
            let mut f = Fixture::for_type(t);
            let qpn = f.qp(t);
            f.bring_to(qpn, tr.from);
            f.hca
                .modify_qp(
                    qpn,
                    &valid_attr(tr.to, tr.from),
                    min_mask(tr.from, tr.to, t),
                )
                .unwrap_or_else(|e| panic!("{t} {} -> {}: {e}", tr.from, tr.to));
            assert_eq!(f.hca.qp(qpn).unwrap().state(), tr.to, "{t}");
            checked += 1;
        }
    }
    // 22 rows × 5 types, minus the three SQE rows for RC (an RC QP never enters SQE).
    assert_eq!(TRANSITIONS.len(), 22);
    assert_eq!(checked, 22 * 5 - 3);
}

#[test]
fn every_legal_transition_accepts_all_its_optional_attributes() {
    for tr in TRANSITIONS {
        for t in TYPES {
            let Some(rule) = tr.rule(t) else { continue };
            if !reachable(t, tr.from) {
                continue;
            }
            let mut f = Fixture::for_type(t);
            let qpn = f.qp(t);
            f.bring_to(qpn, tr.from);
            f.hca
                .modify_qp(qpn, &valid_attr(tr.to, tr.from), rule.allowed())
                .unwrap_or_else(|e| {
                    panic!("{t} {} -> {} with {}: {e}", tr.from, tr.to, rule.allowed())
                });
            assert_eq!(f.hca.qp(qpn).unwrap().state(), tr.to);
        }
    }
}

#[test]
fn each_missing_required_attribute_is_named() {
    let mut checked = 0;
    for tr in TRANSITIONS {
        for t in TYPES {
            let Some(rule) = tr.rule(t) else { continue };
            if !reachable(t, tr.from) {
                continue;
            }
            for (name, bit) in rule.required.iter_names() {
                let mut f = Fixture::for_type(t);
                let qpn = f.qp(t);
                f.bring_to(qpn, tr.from);
                let mask = (rule.required | QpAttrMask::STATE).difference(bit);
                let err = f
                    .hca
                    .modify_qp(qpn, &valid_attr(tr.to, tr.from), mask)
                    .unwrap_err();
                assert_eq!(
                    err,
                    ModifyQpError::MissingAttributes {
                        cur_state: tr.from,
                        next_state: tr.to,
                        missing: bit,
                        required: rule.required,
                    },
                    "{t} {} -> {} without {name}",
                    tr.from,
                    tr.to
                );
                assert!(err.to_string().contains(name));
                assert_eq!(f.hca.qp(qpn).unwrap().state(), tr.from);
                checked += 1;
            }
        }
    }
    // RESET -> INIT: 3 + 3 + 3 + 1 + 1; INIT -> RTR: 6 + 4; RTR -> RTS: 5 + 1 + 1.
    assert_eq!(checked, 28);
}

#[test]
fn each_disallowed_attribute_is_named() {
    for tr in TRANSITIONS {
        for t in TYPES {
            let Some(rule) = tr.rule(t) else { continue };
            if !reachable(t, tr.from) {
                continue;
            }
            let mut f = Fixture::for_type(t);
            let qpn = f.qp(t);
            f.bring_to(qpn, tr.from);
            let before = f.hca.query_qp(qpn).unwrap();
            for (name, bit) in QpAttrMask::all().difference(rule.allowed()).iter_names() {
                let mask = rule.required | QpAttrMask::STATE | bit;
                let err = f
                    .hca
                    .modify_qp(qpn, &valid_attr(tr.to, tr.from), mask)
                    .unwrap_err();
                assert_eq!(
                    err,
                    ModifyQpError::AttributesNotAllowed {
                        cur_state: tr.from,
                        next_state: tr.to,
                        invalid: bit,
                        allowed: rule.allowed(),
                    },
                    "{t} {} -> {} with {name}",
                    tr.from,
                    tr.to
                );
                assert!(err.to_string().contains(name));
            }
            assert_eq!(f.hca.query_qp(qpn).unwrap(), before);
        }
    }
}

#[test]
fn illegal_transitions_fail() {
    let mut checked = 0;
    for t in TYPES {
        for from in QpState::ALL {
            if !reachable(t, from) {
                continue;
            }
            for to in QpState::ALL {
                if crate::verbs::qp::transition_rule(from, to, t).is_some() {
                    continue;
                }
                let mut f = Fixture::for_type(t);
                let qpn = f.qp(t);
                f.bring_to(qpn, from);
                let err = f
                    .hca
                    .modify_qp(qpn, &valid_attr(to, from), QpAttrMask::all())
                    .unwrap_err();
                assert_eq!(
                    err,
                    ModifyQpError::InvalidTransition {
                        cur_state: from,
                        next_state: to,
                        qp_type: t
                    }
                );
                assert_eq!(f.hca.qp(qpn).unwrap().state(), from);
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "{checked}");
    // Spot checks of well-known illegal moves.
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    for (to, mask) in [
        (QpState::Rtr, QpAttrMask::all()),
        (QpState::Err, QpAttrMask::STATE),
        (QpState::Sqe, QpAttrMask::STATE),
    ] {
        assert!(matches!(
            f.hca.modify_qp(qpn, &valid_attr(to, QpState::Reset), mask),
            Err(ModifyQpError::InvalidTransition { .. })
        ));
    }
}

#[test]
fn modify_without_state_stays_in_the_current_state() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rts);
    let mut a = valid_attr(QpState::Rts, QpState::Rts);
    a.min_rnr_timer = 20;
    f.hca.modify_qp(qpn, &a, QpAttrMask::MIN_RNR_TIMER).unwrap();
    let q = f.hca.query_qp(qpn).unwrap();
    assert_eq!(q.qp_state, QpState::Rts);
    assert_eq!(q.min_rnr_timer, 20);
    // RTR -> RTR is not a legal "stay".
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rtr);
    assert!(matches!(
        f.hca.modify_qp(qpn, &a, QpAttrMask::MIN_RNR_TIMER),
        Err(ModifyQpError::InvalidTransition {
            cur_state: QpState::Rtr,
            next_state: QpState::Rtr,
            ..
        })
    ));
}

#[test]
fn cur_state_must_match() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Ud);
    f.bring_to(qpn, QpState::Rts);
    let a = valid_attr(QpState::Rts, QpState::Sqd);
    assert_eq!(
        f.hca
            .modify_qp(qpn, &a, QpAttrMask::STATE | QpAttrMask::CUR_STATE),
        Err(ModifyQpError::BadCurrentState {
            claimed: QpState::Sqd,
            actual: QpState::Rts
        })
    );
    let a = valid_attr(QpState::Rts, QpState::Rts);
    f.hca
        .modify_qp(qpn, &a, QpAttrMask::STATE | QpAttrMask::CUR_STATE)
        .unwrap();
    // CUR_STATE is only accepted from RTR, RTS, SQD, SQE.
    let qpn = f.qp(QpType::Ud);
    f.bring_to(qpn, QpState::Init);
    let a = valid_attr(QpState::Init, QpState::Init);
    assert!(matches!(
        f.hca
            .modify_qp(qpn, &a, QpAttrMask::STATE | QpAttrMask::CUR_STATE),
        Err(ModifyQpError::AttributesNotAllowed { invalid, .. }) if invalid == QpAttrMask::CUR_STATE
    ));
}

/// Runs `modify_qp` for RC INIT -> RTR (or RTR -> RTS for `rts = true`) with one field
/// changed by `tweak`, and returns the error. Checks that the QP is unchanged.
fn rc_value_error(rts: bool, extra: QpAttrMask, tweak: impl Fn(&mut QpAttr)) -> ModifyQpError {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    let (from, to) = if rts {
        (QpState::Rtr, QpState::Rts)
    } else {
        (QpState::Init, QpState::Rtr)
    };
    f.bring_to(qpn, from);
    let before = f.hca.query_qp(qpn).unwrap();
    let mut a = valid_attr(to, from);
    tweak(&mut a);
    let err = f
        .hca
        .modify_qp(qpn, &a, min_mask(from, to, QpType::Rc) | extra)
        .unwrap_err();
    assert_eq!(f.hca.query_qp(qpn).unwrap(), before, "{err}");
    err
}

#[test]
fn value_checks() {
    let none = QpAttrMask::empty();
    assert_eq!(
        rc_value_error(false, none, |a| a.path_mtu = Mtu::Mtu2048),
        ModifyQpError::PathMtuTooLarge {
            requested: Mtu::Mtu2048,
            active: Mtu::Mtu1024,
            port: 1
        }
    );
    assert_eq!(
        rc_value_error(true, none, |a| a.timeout = 32),
        ModifyQpError::TimeoutOutOfRange {
            attr: QpAttrMask::TIMEOUT,
            value: 32
        }
    );
    assert_eq!(
        rc_value_error(true, none, |a| a.retry_cnt = 8),
        ModifyQpError::RetryCountOutOfRange(8)
    );
    assert_eq!(
        rc_value_error(true, none, |a| a.rnr_retry = 8),
        ModifyQpError::RnrRetryOutOfRange(8)
    );
    assert_eq!(
        rc_value_error(false, none, |a| a.min_rnr_timer = 32),
        ModifyQpError::MinRnrTimerOutOfRange(32)
    );
    assert_eq!(
        rc_value_error(true, none, |a| a.max_rd_atomic = 129),
        ModifyQpError::MaxRdAtomicTooLarge {
            requested: 129,
            max: 128
        }
    );
    assert_eq!(
        rc_value_error(false, none, |a| a.max_dest_rd_atomic = 200),
        ModifyQpError::MaxDestRdAtomicTooLarge {
            requested: 200,
            max: 128
        }
    );
    assert_eq!(
        rc_value_error(false, none, |a| a.dest_qp_num = 1 << 24),
        ModifyQpError::DestQpnOutOfRange(1 << 24)
    );
    assert_eq!(
        rc_value_error(false, QpAttrMask::PKEY_INDEX, |a| a.pkey_index = 1),
        ModifyQpError::PkeyIndexOutOfRange {
            attr: QpAttrMask::PKEY_INDEX,
            index: 1,
            port: 1,
            table_len: 1
        }
    );
    assert_eq!(
        rc_value_error(false, none, |a| a.ah_attr.grh = None),
        ModifyQpError::InvalidAddressVector {
            attr: QpAttrMask::AV,
            source: AhAttrError::GrhRequired { port: 1 }
        }
    );
    assert_eq!(
        rc_value_error(false, none, |a| a
            .ah_attr
            .grh
            .as_mut()
            .unwrap()
            .sgid_index = 3),
        ModifyQpError::InvalidAddressVector {
            attr: QpAttrMask::AV,
            source: AhAttrError::SgidIndexOutOfRange {
                port: 1,
                index: 3,
                table_len: 1
            }
        }
    );
    assert_eq!(
        rc_value_error(false, none, |a| a.ah_attr.port_num = 2),
        ModifyQpError::InvalidAddressVector {
            attr: QpAttrMask::AV,
            source: AhAttrError::InvalidPort {
                port: 2,
                num_ports: 1
            }
        }
    );
    assert_eq!(
        rc_value_error(false, QpAttrMask::ALT_PATH, |a| a.alt_timeout = 40),
        ModifyQpError::TimeoutOutOfRange {
            attr: QpAttrMask::ALT_PATH,
            value: 40
        }
    );
    assert_eq!(
        rc_value_error(false, QpAttrMask::ALT_PATH, |a| a.alt_port_num = 0),
        ModifyQpError::InvalidPort {
            attr: QpAttrMask::ALT_PATH,
            port: 0,
            num_ports: 1
        }
    );
    assert_eq!(
        rc_value_error(false, QpAttrMask::ALT_PATH, |a| a.alt_pkey_index = 5),
        ModifyQpError::PkeyIndexOutOfRange {
            attr: QpAttrMask::ALT_PATH,
            index: 5,
            port: 1,
            table_len: 1
        }
    );
    assert_eq!(
        rc_value_error(false, QpAttrMask::ACCESS_FLAGS, |a| a.qp_access_flags =
            AccessFlags::from_bits_retain(1 << 20)),
        ModifyQpError::InvalidAccessFlags(1 << 20)
    );
}

#[test]
fn port_and_pkey_checks_at_init() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Ud);
    let mask = min_mask(QpState::Reset, QpState::Init, QpType::Ud);
    let mut a = valid_attr(QpState::Init, QpState::Reset);
    a.port_num = 2;
    assert_eq!(
        f.hca.modify_qp(qpn, &a, mask),
        Err(ModifyQpError::InvalidPort {
            attr: QpAttrMask::PORT,
            port: 2,
            num_ports: 1
        })
    );
    a.port_num = 0;
    assert!(matches!(
        f.hca.modify_qp(qpn, &a, mask),
        Err(ModifyQpError::InvalidPort { port: 0, .. })
    ));
    assert_eq!(f.hca.qp(qpn).unwrap().state(), QpState::Reset);
}

#[test]
fn two_port_hca_checks_the_av_port_against_the_qp_port() {
    let mut config = HcaConfig::new(1);
    let mut second = config.ports[0].clone();
    second.active_mtu = Mtu::Mtu4096;
    second.pkeys = vec![0xFFFF, 0x8001];
    config.ports.push(second);
    let mut f = Fixture::with_config(config);
    let qpn = f.qp(QpType::Rc);
    let mut a = valid_attr(QpState::Init, QpState::Reset);
    a.port_num = 2;
    a.pkey_index = 1;
    f.hca
        .modify_qp(qpn, &a, min_mask(QpState::Reset, QpState::Init, QpType::Rc))
        .unwrap();
    let mut a = valid_attr(QpState::Rtr, QpState::Init);
    // The AV still names port 1.
    a.path_mtu = Mtu::Mtu4096;
    let mask = min_mask(QpState::Init, QpState::Rtr, QpType::Rc);
    assert_eq!(
        f.hca.modify_qp(qpn, &a, mask),
        Err(ModifyQpError::AddressVectorPortMismatch {
            attr: QpAttrMask::AV,
            av_port: 1,
            qp_port: 2
        })
    );
    a.ah_attr.port_num = 2;
    // Port 2's active MTU is 4096, so the path MTU fits.
    f.hca.modify_qp(qpn, &a, mask).unwrap();
    assert_eq!(f.hca.query_qp(qpn).unwrap().path_mtu, Mtu::Mtu4096);
    assert_eq!(f.hca.query_qp(qpn).unwrap().pkey_index, 1);
}

#[test]
fn attributes_and_psns_are_stored_and_reported() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rts);
    let q = f.hca.query_qp(qpn).unwrap();
    let v = valid_attr(QpState::Rts, QpState::Rtr);
    assert_eq!(q.qp_state, QpState::Rts);
    assert_eq!(q.cur_qp_state, QpState::Rts);
    assert_eq!(q.sq_psn, v.sq_psn);
    assert_eq!(q.rq_psn, v.rq_psn);
    assert_eq!(q.dest_qp_num, 0x12);
    assert_eq!(q.path_mtu, Mtu::Mtu1024);
    assert_eq!(q.timeout, 14);
    assert_eq!(q.max_rd_atomic, 4);
    assert_eq!(q.max_dest_rd_atomic, 4);
    assert_eq!(q.qp_access_flags, v.qp_access_flags);
    assert_eq!(q.ah_attr, v.ah_attr);
    assert_eq!(q.cap, CAP);
    // Not in any minimal mask: untouched.
    assert_eq!(q.qkey, 0);
    assert_eq!(q.path_mig_state, PathMigState::Migrated);
    assert!(!q.sq_draining);
}

#[test]
fn reset_clears_everything_without_completions() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rts);
    f.hca
        .post_send(qpn, &[SendWr::new(1, WrOpcode::Send).signaled()])
        .unwrap();
    f.hca.post_recv(qpn, &[RecvWr::new(2, vec![])]).unwrap();
    f.hca
        .modify_qp(qpn, &QpAttr::to_state(QpState::Reset), QpAttrMask::STATE)
        .unwrap();
    let qp = f.hca.qp(qpn).unwrap();
    assert_eq!(qp.send_queue().len(), 0);
    assert_eq!(qp.recv_queue().len(), 0);
    assert!(f.drain().is_empty());
    let q = f.hca.query_qp(qpn).unwrap();
    let expect = QpAttr {
        cap: CAP,
        ..QpAttr::default()
    };
    assert_eq!(q, expect);
    // The QP can be brought up again.
    f.bring_to(qpn, QpState::Rts);
}

#[test]
fn entering_err_flushes_sends_then_receives_in_posting_order() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rts);
    let sge = Sge::new(0x1000, 8, 0x100);
    let sends = [
        SendWr::new(10, WrOpcode::Send).with_sge(sge).signaled(),
        // Unsignaled WRs are flushed too.
        SendWr::new(
            11,
            WrOpcode::RdmaWrite {
                remote: crate::verbs::wr::RemoteAddr::new(0x2000, 5),
            },
        )
        .with_sge(sge),
        SendWr::new(
            12,
            WrOpcode::RdmaRead {
                remote: crate::verbs::wr::RemoteAddr::new(0x2000, 5),
            },
        )
        .with_sge(sge),
    ];
    f.hca.post_send(qpn, &sends).unwrap();
    f.hca
        .post_recv(
            qpn,
            &[RecvWr::new(20, vec![sge]), RecvWr::new(21, vec![sge])],
        )
        .unwrap();
    f.hca
        .modify_qp(qpn, &QpAttr::to_state(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    let wcs = f.drain();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.opcode)).collect();
    assert_eq!(
        got,
        vec![
            (10, WcOpcode::Send),
            (11, WcOpcode::RdmaWrite),
            (12, WcOpcode::RdmaRead),
            (20, WcOpcode::Recv),
            (21, WcOpcode::Recv),
        ]
    );
    for w in &wcs {
        assert_eq!(w.status, WcStatus::WrFlushErr);
        assert_eq!(w.qp_num, qpn);
        assert_eq!(w.byte_len, 0);
    }
    // A consumer-requested ERR raises no async event.
    assert_eq!(f.hca.poll_async_event(), None);
    // ERR -> ERR flushes nothing more.
    f.hca
        .modify_qp(qpn, &QpAttr::to_state(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    assert!(f.drain().is_empty());
}

#[test]
fn flush_goes_to_the_right_cqs() {
    let mut f = Fixture::new();
    let scq = f.hca.create_cq(7).unwrap();
    let rcq = f.hca.create_cq(7).unwrap();
    let init = QpInitAttr {
        send_cq: scq,
        recv_cq: rcq,
        ..QpInitAttr::new(QpType::Uc, scq, CAP)
    };
    let qpn = f.hca.create_qp(f.pd, &init).unwrap();
    f.bring_to(qpn, QpState::Rts);
    f.hca
        .post_send(qpn, &[SendWr::new(1, WrOpcode::Send)])
        .unwrap();
    f.hca.post_recv(qpn, &[RecvWr::new(2, vec![])]).unwrap();
    f.hca
        .modify_qp(qpn, &QpAttr::to_state(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    let s = f.hca.poll_cq(scq, 10).unwrap();
    let r = f.hca.poll_cq(rcq, 10).unwrap();
    assert_eq!(s.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(r.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![2]);
}

#[test]
fn srq_wrs_are_not_flushed_and_last_wqe_is_reported() {
    let mut f = Fixture::new();
    let srq = f
        .hca
        .create_srq(
            f.pd,
            &crate::verbs::srq::SrqInitAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    f.hca.post_srq_recv(srq, &[RecvWr::new(7, vec![])]).unwrap();
    let init = QpInitAttr {
        srq: Some(srq),
        ..QpInitAttr::new(QpType::Rc, f.cq, CAP)
    };
    let qpn = f.hca.create_qp(f.pd, &init).unwrap();
    assert_eq!(f.hca.query_qp(qpn).unwrap().cap.max_recv_wr, 0);
    f.bring_to(qpn, QpState::Rts);
    f.hca
        .modify_qp(qpn, &QpAttr::to_state(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    assert!(f.drain().is_empty());
    assert_eq!(
        f.hca.poll_async_event(),
        Some(AsyncEvent::QpLastWqeReached { qpn })
    );
    assert_eq!(f.hca.srqs.get(srq.0).unwrap().queue.len(), 1);
}

#[test]
fn engine_errors_queue_their_async_events() {
    for (cause, event) in [
        (QpErrorCause::Fatal, Some("IBV_EVENT_QP_FATAL")),
        (QpErrorCause::InvalidRequest, Some("IBV_EVENT_QP_REQ_ERR")),
        (
            QpErrorCause::AccessViolation,
            Some("IBV_EVENT_QP_ACCESS_ERR"),
        ),
        (QpErrorCause::CompletionError, None),
    ] {
        let mut f = Fixture::new();
        let qpn = f.qp(QpType::Rc);
        f.bring_to(qpn, QpState::Rts);
        f.hca
            .post_send(qpn, &[SendWr::new(1, WrOpcode::Send)])
            .unwrap();
        f.hca.set_qp_error(qpn, cause).unwrap();
        assert_eq!(f.hca.qp(qpn).unwrap().state(), QpState::Err);
        assert_eq!(f.hca.poll_async_event().map(|e| e.name()), event);
        assert_eq!(f.hca.poll_async_event(), None);
        let wcs = f.drain();
        assert_eq!(wcs.len(), 1);
        assert_eq!(wcs[0].status, WcStatus::WrFlushErr);
        // Idempotent in ERR.
        f.hca.set_qp_error(qpn, cause).unwrap();
        assert_eq!(f.hca.poll_async_event(), None);
    }
    // A QP in RESET has nothing to fail.
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.hca.set_qp_error(qpn, QpErrorCause::Fatal).unwrap();
    assert_eq!(f.hca.qp(qpn).unwrap().state(), QpState::Reset);
    assert_eq!(f.hca.poll_async_event(), None);
}

#[test]
fn sq_error_flushes_sends_keeps_receives_and_recovers() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Uc);
    f.bring_to(qpn, QpState::Rts);
    f.hca
        .post_send(
            qpn,
            &[
                SendWr::new(1, WrOpcode::Send),
                SendWr::new(2, WrOpcode::Send),
            ],
        )
        .unwrap();
    f.hca.post_recv(qpn, &[RecvWr::new(3, vec![])]).unwrap();
    f.hca.set_sq_error(qpn).unwrap();
    assert_eq!(f.hca.qp(qpn).unwrap().state(), QpState::Sqe);
    let ids: Vec<_> = f.drain().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(f.hca.qp(qpn).unwrap().recv_queue().len(), 1);
    // Sends posted in SQE complete at once with flush error.
    f.hca
        .post_send(qpn, &[SendWr::new(4, WrOpcode::Send)])
        .unwrap();
    assert_eq!(f.drain()[0].wr_id, 4);
    // SQE -> RTS resumes.
    f.hca
        .modify_qp(
            qpn,
            &valid_attr(QpState::Rts, QpState::Sqe),
            QpAttrMask::STATE | QpAttrMask::CUR_STATE,
        )
        .unwrap();
    f.hca
        .post_send(qpn, &[SendWr::new(5, WrOpcode::Send)])
        .unwrap();
    assert_eq!(f.hca.qp(qpn).unwrap().send_queue().len(), 1);
    assert!(f.drain().is_empty());
    // An RC send error goes to ERR instead.
    let rc = f.qp(QpType::Rc);
    f.bring_to(rc, QpState::Rts);
    f.hca.set_sq_error(rc).unwrap();
    assert_eq!(f.hca.qp(rc).unwrap().state(), QpState::Err);
}

#[test]
fn sqd_reports_drained_when_nothing_is_in_flight() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rts);
    // Nothing in flight: drained at once; the event is sent because notify was requested.
    let mut a = valid_attr(QpState::Sqd, QpState::Rts);
    a.en_sqd_async_notify = true;
    f.hca
        .modify_qp(qpn, &a, QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY)
        .unwrap();
    assert_eq!(
        f.hca.poll_async_event(),
        Some(AsyncEvent::SqDrained { qpn })
    );
    assert!(!f.hca.query_qp(qpn).unwrap().sq_draining);

    // Without notify: no event.
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rts);
    f.hca
        .modify_qp(qpn, &QpAttr::to_state(QpState::Sqd), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(f.hca.poll_async_event(), None);
}

#[test]
fn sqd_waits_for_in_flight_wqes() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Rc);
    f.bring_to(qpn, QpState::Rts);
    f.hca
        .post_send(
            qpn,
            &[
                SendWr::new(1, WrOpcode::Send),
                SendWr::new(2, WrOpcode::Send),
            ],
        )
        .unwrap();
    // The requester has started WR 1.
    f.hca.qps.get_mut(&qpn.value()).unwrap().sq[0].state = WqeState::InProgress;
    let mut a = valid_attr(QpState::Sqd, QpState::Rts);
    a.en_sqd_async_notify = true;
    f.hca
        .modify_qp(qpn, &a, QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY)
        .unwrap();
    assert_eq!(f.hca.poll_async_event(), None);
    assert!(f.hca.query_qp(qpn).unwrap().sq_draining);
    // Posting in SQD queues (WR 2 and 3 stay unprocessed).
    f.hca
        .post_send(qpn, &[SendWr::new(3, WrOpcode::Send)])
        .unwrap();
    f.hca.check_sq_drained(qpn);
    assert_eq!(f.hca.poll_async_event(), None);
    // WR 1 completes.
    f.hca.qps.get_mut(&qpn.value()).unwrap().sq.pop_front();
    f.hca.check_sq_drained(qpn);
    assert_eq!(
        f.hca.poll_async_event(),
        Some(AsyncEvent::SqDrained { qpn })
    );
    assert!(!f.hca.query_qp(qpn).unwrap().sq_draining);
    f.hca.check_sq_drained(qpn);
    assert_eq!(f.hca.poll_async_event(), None);
    // SQD -> RTS.
    f.hca
        .modify_qp(qpn, &QpAttr::to_state(QpState::Rts), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(f.hca.qp(qpn).unwrap().send_queue().len(), 2);
}

#[test]
fn unknown_qp() {
    let mut f = Fixture::new();
    let q = Qpn::new(0x99);
    assert_eq!(
        f.hca.modify_qp(q, &QpAttr::default(), QpAttrMask::STATE),
        Err(ModifyQpError::NoSuchQp(q))
    );
    assert!(f.hca.query_qp(q).is_err());
    assert!(f.hca.set_qp_error(q, QpErrorCause::Fatal).is_err());
    assert!(f.hca.set_sq_error(q).is_err());
    assert_eq!(AttrRule::default().allowed(), QpAttrMask::STATE);
}

/// `has_unpolled_successes`: a QP's successful completions count until they are polled;
/// flushed ones do not.
#[test]
fn unpolled_successes_are_seen_until_polled() {
    let mut f = Fixture::new();
    let qpn = f.qp(QpType::Uc);
    f.bring_to(qpn, QpState::Rts);
    assert!(!f.hca.has_unpolled_successes(qpn));
    f.hca
        .post_send(qpn, &[SendWr::new(1, WrOpcode::Send).signaled()])
        .unwrap();
    let mut out = Vec::new();
    while f.hca.poll_transmit(crate::time::Instant::ZERO, &mut out) {}
    assert!(
        f.hca.has_unpolled_successes(qpn),
        "a UC SEND completes once sent"
    );
    let wcs = f.drain();
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert!(!f.hca.has_unpolled_successes(qpn), "polled");
    f.hca.post_recv(qpn, &[RecvWr::new(2, vec![])]).unwrap();
    f.hca
        .modify_qp(qpn, &QpAttr::to_state(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    assert!(
        !f.hca.has_unpolled_successes(qpn),
        "a flushed receive is no success"
    );
    assert_eq!(f.drain().len(), 1);
    assert!(!f.hca.has_unpolled_successes(Qpn::new(0x77)), "no such QP");
}
