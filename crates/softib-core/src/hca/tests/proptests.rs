//! Property: random sequences of modify_qp (mixed with posts and engine errors) never panic,
//! only take transitions the table allows, leave a QP untouched when they fail, and keep the
//! queues empty in RESET and ERR.

use super::*;
use crate::verbs::event::QpErrorCause;
use crate::verbs::qp::{transition_rule, TRANSITIONS};
use crate::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Modify {
        to: QpState,
        /// `Some(i)`: ignore `to` and take a legal transition from the current state with its
        /// required mask plus `extra`, so legal transitions are actually reached: the last one
        /// listed (the "forward" move) for `i >= 4`, else the i-th modulo the count. `None`:
        /// `to` with `extra` alone as the mask.
        legal: Option<usize>,
        extra: u32,
        attr: QpAttr,
    },
    PostSend(usize),
    PostRecv(usize),
    EngineError,
    SqError,
}

fn state() -> impl Strategy<Value = QpState> {
    prop::sample::select(QpState::ALL.to_vec())
}

/// Mostly valid values, sometimes out of range, so that both legal transitions and value
/// errors are exercised.
fn mostly<T: core::fmt::Debug + Clone + 'static>(
    valid: impl Strategy<Value = T> + 'static,
    any: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    prop_oneof![9 => valid, 1 => any].boxed()
}

fn attr() -> impl Strategy<Value = QpAttr> {
    (
        (
            state(),
            state(),
            mostly(1u8..=3, 1u8..=5),
            mostly(0u8..=31, any::<u8>()),
            mostly(0u8..=7, any::<u8>()),
            mostly(0u8..=7, any::<u8>()),
            mostly(0u8..=31, any::<u8>()),
        ),
        (
            mostly(Just(1u8), any::<u8>()),
            mostly(Just(0u16), 0u16..3),
            mostly(Just(0u8), 0u8..3),
            mostly(Just(true), any::<bool>()),
            mostly(0u8..=128, any::<u8>()),
            mostly(0u8..=128, any::<u8>()),
        ),
        (
            mostly(0u32..(1 << 24), any::<u32>()),
            mostly(Just(1u8), any::<u8>()),
            mostly(Just(0u16), 0u16..3),
            mostly(0u8..=31, any::<u8>()),
            mostly(0u32..16, any::<u32>()),
        ),
    )
        .prop_map(
            |(
                (qp_state, cur, mtu, timeout, retry, rnr, min_rnr),
                (port, pkey, sgid, grh, rd, dest_rd),
                (dest_qpn, alt_port, alt_pkey, alt_timeout, access),
            )| {
                let mut a = valid_attr(qp_state, cur);
                a.path_mtu = Mtu::from_raw(mtu).unwrap();
                a.timeout = timeout;
                a.retry_cnt = retry;
                a.rnr_retry = rnr;
                a.min_rnr_timer = min_rnr;
                a.port_num = port;
                a.pkey_index = pkey;
                a.max_rd_atomic = rd;
                a.max_dest_rd_atomic = dest_rd;
                a.dest_qp_num = dest_qpn;
                a.alt_port_num = alt_port;
                a.alt_pkey_index = alt_pkey;
                a.alt_timeout = alt_timeout;
                a.qp_access_flags = AccessFlags::from_bits_retain(access);
                if grh {
                    a.ah_attr.grh.as_mut().unwrap().sgid_index = sgid;
                } else {
                    a.ah_attr.grh = None;
                }
                a
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        14 => (
            state(),
            prop::option::weighted(0.7, 0usize..8),
            prop::bits::u32::masked(QpAttrMask::all().bits() | (1 << 30)),
            attr(),
        )
            .prop_map(|(to, legal, extra, attr)| Op::Modify {
                to,
                legal,
                // With the required mask add at most STATE / CUR_STATE, so the mask often fits.
                extra: if legal.is_some() { extra & 0x3 } else { extra },
                attr,
            }),
        2 => (0usize..4).prop_map(Op::PostSend),
        2 => (0usize..4).prop_map(Op::PostRecv),
        1 => Just(Op::EngineError),
        1 => Just(Op::SqError),
    ]
}

fn snapshot(hca: &Hca, qpn: Qpn) -> (QpAttr, usize, usize) {
    let qp = hca.qp(qpn).unwrap();
    (
        hca.query_qp(qpn).unwrap(),
        qp.send_queue().len(),
        qp.recv_queue().len(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_modify_sequences_respect_the_table(
        t in prop::sample::select(super::TYPES.to_vec()),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let mut f = Fixture::for_type(t);
        let qpn = f.qp(t);
        let mut prev = QpState::Reset;
        for op in ops {
            let before = snapshot(&f.hca, qpn);
            let cur = before.0.qp_state;
            match op {
                Op::Modify { mut to, legal, extra, mut attr } => {
                    let mut mask = QpAttrMask::from_bits_retain(extra);
                    if let Some(i) = legal {
                        let next: Vec<_> = TRANSITIONS
                            .iter()
                            .filter(|tr| tr.from == cur && tr.rule(t).is_some())
                            .collect();
                        let tr = if i >= 4 { next[next.len() - 1] } else { next[i % next.len()] };
                        to = tr.to;
                        mask |= tr.rule(t).unwrap().required | QpAttrMask::STATE;
                        attr.cur_qp_state = cur;
                    }
                    attr.qp_state = to;
                    match f.hca.modify_qp(qpn, &attr, mask) {
                        Ok(()) => {
                            let next = if mask.contains(QpAttrMask::STATE) { to } else { cur };
                            prop_assert!(
                                transition_rule(cur, next, t).is_some(),
                                "{} {} -> {} accepted", t, cur, next
                            );
                            let rule = transition_rule(cur, next, t).unwrap();
                            prop_assert!(mask.contains(rule.required));
                            prop_assert!(rule.allowed().contains(mask));
                            prop_assert_eq!(f.hca.qp(qpn).unwrap().state(), next);
                        }
                        Err(_) => {
                            prop_assert_eq!(snapshot(&f.hca, qpn), before);
                        }
                    }
                }
                Op::PostSend(n) => {
                    let wrs: Vec<_> = (0..n as u64)
                        .map(|i| SendWr::new(i, WrOpcode::Send).with_sge(Sge::new(0, 8, 1)))
                        .collect();
                    if f.hca.post_send(qpn, &wrs).is_err() {
                        prop_assert_eq!(snapshot(&f.hca, qpn), before);
                    }
                }
                Op::PostRecv(n) => {
                    let wrs: Vec<_> = (0..n as u64).map(|i| RecvWr::new(i, vec![])).collect();
                    if f.hca.post_recv(qpn, &wrs).is_err() {
                        prop_assert_eq!(snapshot(&f.hca, qpn), before);
                    }
                }
                Op::EngineError => {
                    f.hca.set_qp_error(qpn, QpErrorCause::Fatal).unwrap();
                    let s = f.hca.qp(qpn).unwrap().state();
                    prop_assert!(s == QpState::Err || (cur == QpState::Reset && s == cur));
                }
                Op::SqError => {
                    f.hca.set_sq_error(qpn).unwrap();
                    let s = f.hca.qp(qpn).unwrap().state();
                    match cur {
                        QpState::Rts | QpState::Sqd if t == QpType::Rc => prop_assert_eq!(s, QpState::Err),
                        QpState::Rts | QpState::Sqd => prop_assert_eq!(s, QpState::Sqe),
                        _ => prop_assert_eq!(s, cur),
                    }
                }
            }
            let (attr, sq, rq) = snapshot(&f.hca, qpn);
            let s = attr.qp_state;
            if matches!(s, QpState::Reset | QpState::Err) {
                prop_assert_eq!((sq, rq), (0, 0), "queues not empty in {}", s);
            }
            if s == QpState::Sqe {
                prop_assert_eq!(sq, 0);
                prop_assert!(t != QpType::Rc);
            }
            prop_assert!(sq <= CAP.max_send_wr as usize && rq <= CAP.max_recv_wr as usize);
            // Every change follows a table edge, or is an engine move to ERR (never from
            // RESET) or to SQE (from RTS / SQD).
            prop_assert!(
                s == prev
                    || transition_rule(prev, s, t).is_some()
                    || (s == QpState::Err && prev != QpState::Reset)
                    || (s == QpState::Sqe && matches!(prev, QpState::Rts | QpState::Sqd)),
                "{} {} -> {}", t, prev, s
            );
            prev = s;
            // Drain so CQ capacity never limits long sequences.
            f.drain();
        }
    }
}
