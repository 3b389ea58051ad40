//! The QP state transition table: for each (current state, next state, QP type), whether the
//! transition is legal and which attributes it requires and allows.
//!
//! The table is Linux's `qp_state_table` (`drivers/infiniband/core/verbs.c`,
//! `ib_modify_qp_is_ok`) restated as data, with two documented choices:
//!
//! * RC has no SQE → RTS row: an RC QP never enters SQE (send errors take it to ERR); Linux
//!   lists the transition as valid with no attributes.
//! * XRC_SEND and XRC_RECV use Linux's `IB_QPT_XRC_INI` and `IB_QPT_XRC_TGT` columns.
//! * Linux has no RD. An RD QP follows UD's column with the access flags allowed wherever the
//!   Q_Key is, and no SQ PSN (its PSNs are its EE contexts'); an EE context follows RC's column
//!   without the access flags, which are the QPs' (docs/rd.md).
//! * The raw datagram types use Linux's `IB_QPT_RAW_PACKET` column (port required at
//!   RESET → INIT, `RATE_LIMIT` optional in RTR → RTS and RTS → RTS).
//!
//! As in Linux, RESET → ERR is not a legal transition (a QP in RESET has nothing to flush);
//! every other state may move to RESET or ERR, and a modify without [`QpAttrMask::STATE`] is a
//! transition from the current state to itself (legal only for INIT, RTS, SQD, RESET and ERR).
//! [`QpAttrMask::STATE`] is always allowed.

use super::attr::QpAttrMask;
use crate::error::ModifyQpError;
use crate::verbs::types::{QpState, QpType};

/// Attributes a transition requires and the further attributes it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AttrRule {
    /// Attributes that must be in the mask.
    pub required: QpAttrMask,
    /// Attributes that may be in the mask.
    pub optional: QpAttrMask,
}

impl AttrRule {
    /// Every attribute the mask may hold (including `STATE`).
    pub const fn allowed(&self) -> QpAttrMask {
        self.required.union(self.optional).union(QpAttrMask::STATE)
    }
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// Current state.
    pub from: QpState,
    /// Next state.
    pub to: QpState,
    /// Rule for RC; `None` when the transition is illegal for RC.
    pub rc: Option<AttrRule>,
    /// Rule for UC.
    pub uc: Option<AttrRule>,
    /// Rule for UD.
    pub ud: Option<AttrRule>,
    /// Rule for the raw datagram types.
    pub raw: Option<AttrRule>,
    /// Rule for XRC initiators (XRC_SEND).
    pub xrc_ini: Option<AttrRule>,
    /// Rule for XRC targets (XRC_RECV).
    pub xrc_tgt: Option<AttrRule>,
    /// Rule for RD QPs.
    pub rd: Option<AttrRule>,
    /// Rule for EE contexts (not a QP type: see [`eec_transition_rule`]).
    pub eec: Option<AttrRule>,
}

impl Transition {
    /// The rule for `qp_type`.
    pub const fn rule(&self, qp_type: QpType) -> Option<AttrRule> {
        match qp_type {
            QpType::Rc => self.rc,
            QpType::Uc => self.uc,
            QpType::Ud => self.ud,
            QpType::RawIpv6 | QpType::RawEthertype => self.raw,
            QpType::XrcSend => self.xrc_ini,
            QpType::XrcRecv => self.xrc_tgt,
            QpType::Rd => self.rd,
        }
    }
}

type M = QpAttrMask;

const fn rule(required: QpAttrMask, optional: QpAttrMask) -> Option<AttrRule> {
    Some(AttrRule { required, optional })
}

const EMPTY: Option<AttrRule> = rule(M::empty(), M::empty());

/// A transition legal for every type with no attributes besides `STATE`.
const fn plain(from: QpState, to: QpState) -> Transition {
    Transition {
        from,
        to,
        rc: EMPTY,
        uc: EMPTY,
        ud: EMPTY,
        raw: EMPTY,
        xrc_ini: EMPTY,
        xrc_tgt: EMPTY,
        rd: EMPTY,
        eec: EMPTY,
    }
}

const fn m(a: QpAttrMask, b: QpAttrMask) -> QpAttrMask {
    a.union(b)
}

// Attribute groups that recur in the table.
const PKEY_PORT: M = m(M::PKEY_INDEX, M::PORT);
const CONN_INIT: M = m(PKEY_PORT, M::ACCESS_FLAGS);
const UD_INIT: M = m(PKEY_PORT, M::QKEY);
const UC_RTR: M = m(m(M::AV, M::PATH_MTU), m(M::DEST_QPN, M::RQ_PSN));
const RC_RTR: M = m(UC_RTR, m(M::MAX_DEST_RD_ATOMIC, M::MIN_RNR_TIMER));
const CONN_RTR_OPT: M = m(M::ALT_PATH, m(M::ACCESS_FLAGS, M::PKEY_INDEX));
const RC_RTS: M = m(
    m(M::TIMEOUT, M::RETRY_CNT),
    m(M::RNR_RETRY, m(M::SQ_PSN, M::MAX_QP_RD_ATOMIC)),
);
/// XRC target RTR → RTS: a target sends only responses, so no retry counts, SQ PSN aside.
const XRC_TGT_RTS: M = m(M::TIMEOUT, M::SQ_PSN);
const XRC_INI_SQD_OPT: M = m(
    m(UC_SQD_OPT, M::PORT),
    m(
        m(M::TIMEOUT, M::RETRY_CNT),
        m(M::RNR_RETRY, M::MAX_QP_RD_ATOMIC),
    ),
);
const XRC_TGT_SQD_OPT: M = m(
    m(UC_SQD_OPT, M::PORT),
    m(M::TIMEOUT, m(M::MAX_DEST_RD_ATOMIC, M::MIN_RNR_TIMER)),
);
const RD_INIT: M = m(M::PORT, M::QKEY);
const RD_INIT_OPT: M = m(M::PKEY_INDEX, M::ACCESS_FLAGS);
const RD_OPT: M = m(M::QKEY, M::ACCESS_FLAGS);
const RD_TO_RTS_OPT: M = m(M::CUR_STATE, RD_OPT);
const EEC_TO_RTS_OPT: M = m(
    m(M::CUR_STATE, M::ALT_PATH),
    m(M::PATH_MIG_STATE, M::MIN_RNR_TIMER),
);
const UD_TO_RTS_OPT: M = m(M::CUR_STATE, M::QKEY);
const UC_TO_RTS_OPT: M = m(
    m(M::CUR_STATE, M::ALT_PATH),
    m(M::ACCESS_FLAGS, M::PATH_MIG_STATE),
);
const RC_TO_RTS_OPT: M = m(UC_TO_RTS_OPT, M::MIN_RNR_TIMER);
const UC_SQD_OPT: M = m(
    m(M::AV, M::ALT_PATH),
    m(M::ACCESS_FLAGS, m(M::PKEY_INDEX, M::PATH_MIG_STATE)),
);
const RC_SQD_OPT: M = m(
    m(UC_SQD_OPT, M::PORT),
    m(
        m(M::TIMEOUT, M::RETRY_CNT),
        m(
            m(M::RNR_RETRY, M::MAX_QP_RD_ATOMIC),
            m(M::MAX_DEST_RD_ATOMIC, M::MIN_RNR_TIMER),
        ),
    ),
);

use QpState::{
    Err as ERR, Init as INIT, Reset as RESET, Rtr as RTR, Rts as RTS, Sqd as SQD, Sqe as SQE,
};

/// The whole table. Pairs not listed are illegal for every type.
pub const TRANSITIONS: &[Transition] = &[
    plain(RESET, RESET),
    Transition {
        from: RESET,
        to: INIT,
        rc: rule(CONN_INIT, M::empty()),
        uc: rule(CONN_INIT, M::empty()),
        ud: rule(UD_INIT, M::empty()),
        raw: rule(M::PORT, M::empty()),
        xrc_ini: rule(CONN_INIT, M::empty()),
        xrc_tgt: rule(CONN_INIT, M::empty()),
        rd: rule(RD_INIT, RD_INIT_OPT),
        eec: rule(PKEY_PORT, M::empty()),
    },
    plain(INIT, RESET),
    plain(INIT, ERR),
    Transition {
        from: INIT,
        to: INIT,
        rc: rule(M::empty(), CONN_INIT),
        uc: rule(M::empty(), CONN_INIT),
        ud: rule(M::empty(), UD_INIT),
        raw: EMPTY,
        xrc_ini: rule(M::empty(), CONN_INIT),
        xrc_tgt: rule(M::empty(), CONN_INIT),
        rd: rule(M::empty(), m(RD_INIT, RD_INIT_OPT)),
        eec: rule(M::empty(), PKEY_PORT),
    },
    Transition {
        from: INIT,
        to: RTR,
        rc: rule(RC_RTR, CONN_RTR_OPT),
        uc: rule(UC_RTR, CONN_RTR_OPT),
        ud: rule(M::empty(), m(M::PKEY_INDEX, M::QKEY)),
        raw: EMPTY,
        xrc_ini: rule(UC_RTR, CONN_RTR_OPT),
        xrc_tgt: rule(RC_RTR, CONN_RTR_OPT),
        rd: rule(M::empty(), m(M::PKEY_INDEX, RD_OPT)),
        eec: rule(RC_RTR, m(M::ALT_PATH, M::PKEY_INDEX)),
    },
    plain(RTR, RESET),
    plain(RTR, ERR),
    Transition {
        from: RTR,
        to: RTS,
        rc: rule(RC_RTS, RC_TO_RTS_OPT),
        uc: rule(M::SQ_PSN, UC_TO_RTS_OPT),
        ud: rule(M::SQ_PSN, UD_TO_RTS_OPT),
        raw: rule(M::empty(), M::RATE_LIMIT),
        xrc_ini: rule(RC_RTS, UC_TO_RTS_OPT),
        xrc_tgt: rule(XRC_TGT_RTS, RC_TO_RTS_OPT),
        rd: rule(M::empty(), RD_TO_RTS_OPT),
        eec: rule(RC_RTS, EEC_TO_RTS_OPT),
    },
    plain(RTS, RESET),
    plain(RTS, ERR),
    Transition {
        from: RTS,
        to: RTS,
        rc: rule(M::empty(), RC_TO_RTS_OPT),
        uc: rule(M::empty(), UC_TO_RTS_OPT),
        ud: rule(M::empty(), UD_TO_RTS_OPT),
        raw: rule(M::empty(), M::RATE_LIMIT),
        xrc_ini: rule(M::empty(), UC_TO_RTS_OPT),
        xrc_tgt: rule(M::empty(), RC_TO_RTS_OPT),
        rd: rule(M::empty(), RD_TO_RTS_OPT),
        eec: rule(M::empty(), EEC_TO_RTS_OPT),
    },
    Transition {
        from: RTS,
        to: SQD,
        rc: rule(M::empty(), M::EN_SQD_ASYNC_NOTIFY),
        uc: rule(M::empty(), M::EN_SQD_ASYNC_NOTIFY),
        ud: rule(M::empty(), M::EN_SQD_ASYNC_NOTIFY),
        raw: EMPTY,
        xrc_ini: rule(M::empty(), M::EN_SQD_ASYNC_NOTIFY),
        xrc_tgt: rule(M::empty(), M::EN_SQD_ASYNC_NOTIFY),
        rd: rule(M::empty(), M::EN_SQD_ASYNC_NOTIFY),
        eec: rule(M::empty(), M::EN_SQD_ASYNC_NOTIFY),
    },
    plain(SQD, RESET),
    plain(SQD, ERR),
    Transition {
        from: SQD,
        to: RTS,
        rc: rule(M::empty(), RC_TO_RTS_OPT),
        uc: rule(M::empty(), UC_TO_RTS_OPT),
        ud: rule(M::empty(), UD_TO_RTS_OPT),
        raw: EMPTY,
        xrc_ini: rule(M::empty(), UC_TO_RTS_OPT),
        xrc_tgt: rule(M::empty(), RC_TO_RTS_OPT),
        rd: rule(M::empty(), RD_TO_RTS_OPT),
        eec: rule(M::empty(), EEC_TO_RTS_OPT),
    },
    Transition {
        from: SQD,
        to: SQD,
        rc: rule(M::empty(), RC_SQD_OPT),
        uc: rule(M::empty(), UC_SQD_OPT),
        ud: rule(M::empty(), m(M::PKEY_INDEX, M::QKEY)),
        raw: EMPTY,
        xrc_ini: rule(M::empty(), XRC_INI_SQD_OPT),
        xrc_tgt: rule(M::empty(), XRC_TGT_SQD_OPT),
        rd: rule(M::empty(), m(M::PKEY_INDEX, RD_OPT)),
        eec: rule(M::empty(), RC_SQD_OPT.difference(M::ACCESS_FLAGS)),
    },
    plain(SQE, RESET),
    plain(SQE, ERR),
    Transition {
        from: SQE,
        to: RTS,
        rc: None,
        uc: rule(M::empty(), m(M::CUR_STATE, M::ACCESS_FLAGS)),
        ud: rule(M::empty(), m(M::CUR_STATE, M::QKEY)),
        raw: EMPTY,
        xrc_ini: None,
        xrc_tgt: None,
        rd: rule(M::empty(), RD_TO_RTS_OPT),
        eec: None,
    },
    plain(ERR, RESET),
    plain(ERR, ERR),
];

/// The rule for moving a `qp_type` QP from `from` to `to`, or `None` if that is illegal.
pub fn transition_rule(from: QpState, to: QpState, qp_type: QpType) -> Option<AttrRule> {
    TRANSITIONS
        .iter()
        .find(|t| t.from == from && t.to == to)
        .and_then(|t| t.rule(qp_type))
}

/// The rule for moving an EE context from `from` to `to`, or `None` if that is illegal.
pub fn eec_transition_rule(from: QpState, to: QpState) -> Option<AttrRule> {
    TRANSITIONS
        .iter()
        .find(|t| t.from == from && t.to == to)
        .and_then(|t| t.eec)
}

/// Checks a modify mask against the table (Linux `ib_modify_qp_is_ok`), naming what is wrong:
/// an illegal transition, the required attributes missing, or the attributes not allowed.
pub fn check_transition(
    cur_state: QpState,
    next_state: QpState,
    qp_type: QpType,
    mask: QpAttrMask,
) -> Result<AttrRule, ModifyQpError> {
    let rule = transition_rule(cur_state, next_state, qp_type).ok_or(
        ModifyQpError::InvalidTransition {
            cur_state,
            next_state,
            qp_type,
        },
    )?;
    check_mask(rule, cur_state, next_state, mask)
}

/// [`check_transition`] for an EE context.
pub fn check_eec_transition(
    cur_state: QpState,
    next_state: QpState,
    mask: QpAttrMask,
) -> Result<AttrRule, ModifyQpError> {
    let rule =
        eec_transition_rule(cur_state, next_state).ok_or(ModifyQpError::InvalidEecTransition {
            cur_state,
            next_state,
        })?;
    check_mask(rule, cur_state, next_state, mask)
}

/// The attributes of `mask` against `rule`: every required one present, nothing else.
fn check_mask(
    rule: AttrRule,
    cur_state: QpState,
    next_state: QpState,
    mask: QpAttrMask,
) -> Result<AttrRule, ModifyQpError> {
    let missing = rule.required.difference(mask);
    if !missing.is_empty() {
        return Err(ModifyQpError::MissingAttributes {
            cur_state,
            next_state,
            missing,
            required: rule.required,
        });
    }
    let invalid = mask.difference(rule.allowed());
    if !invalid.is_empty() {
        return Err(ModifyQpError::AttributesNotAllowed {
            cur_state,
            next_state,
            invalid,
            allowed: rule.allowed(),
        });
    }
    Ok(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_duplicate_rows() {
        for (i, a) in TRANSITIONS.iter().enumerate() {
            for b in &TRANSITIONS[i + 1..] {
                assert!(
                    !(a.from == b.from && a.to == b.to),
                    "{:?} -> {:?} listed twice",
                    a.from,
                    a.to
                );
            }
        }
    }

    #[test]
    fn reset_and_err_reachability() {
        for t in QpType::ALL {
            for s in QpState::ALL {
                assert!(
                    transition_rule(s, QpState::Reset, t).is_some(),
                    "{s}->RESET"
                );
                let to_err = transition_rule(s, QpState::Err, t);
                // Linux: RESET -> ERR is illegal, everything else may enter ERR.
                assert_eq!(to_err.is_some(), s != QpState::Reset, "{s}->ERR {t}");
                assert_eq!(to_err.unwrap_or_default(), AttrRule::default());
            }
        }
    }

    #[test]
    fn linux_rows_spot_checks() {
        let rc_rtr = transition_rule(QpState::Init, QpState::Rtr, QpType::Rc).unwrap();
        assert_eq!(
            rc_rtr.required,
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER
        );
        assert_eq!(
            rc_rtr.optional,
            M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX
        );
        let rc_rts = transition_rule(QpState::Rtr, QpState::Rts, QpType::Rc).unwrap();
        assert_eq!(
            rc_rts.required,
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC
        );
        let ud_init = transition_rule(QpState::Reset, QpState::Init, QpType::Ud).unwrap();
        assert_eq!(ud_init.required, M::PKEY_INDEX | M::PORT | M::QKEY);
        let ud_rtr = transition_rule(QpState::Init, QpState::Rtr, QpType::Ud).unwrap();
        assert_eq!(ud_rtr.required, M::empty());
        assert!(transition_rule(QpState::Sqe, QpState::Rts, QpType::Rc).is_none());
        assert!(transition_rule(QpState::Sqe, QpState::Rts, QpType::Uc).is_some());
        assert!(transition_rule(QpState::Rtr, QpState::Rtr, QpType::Rc).is_none());
        assert!(transition_rule(QpState::Init, QpState::Rts, QpType::Rc).is_none());
        assert!(transition_rule(QpState::Rtr, QpState::Sqd, QpType::Rc).is_none());
        assert_eq!(
            transition_rule(QpState::Reset, QpState::Init, QpType::RawIpv6)
                .unwrap()
                .required,
            M::PORT
        );
    }

    #[test]
    fn check_names_missing_and_invalid() {
        match check_transition(
            QpState::Reset,
            QpState::Init,
            QpType::Rc,
            M::STATE | M::PORT,
        ) {
            Err(ModifyQpError::MissingAttributes {
                missing, required, ..
            }) => {
                assert_eq!(missing, M::PKEY_INDEX | M::ACCESS_FLAGS);
                assert_eq!(required, CONN_INIT);
            }
            other => panic!("{other:?}"),
        }
        match check_transition(
            QpState::Reset,
            QpState::Init,
            QpType::Rc,
            M::STATE | CONN_INIT | M::QKEY,
        ) {
            Err(ModifyQpError::AttributesNotAllowed { invalid, .. }) => {
                assert_eq!(invalid, M::QKEY)
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            check_transition(QpState::Reset, QpState::Rts, QpType::Ud, M::STATE),
            Err(ModifyQpError::InvalidTransition {
                cur_state: QpState::Reset,
                next_state: QpState::Rts,
                qp_type: QpType::Ud
            })
        );
        assert!(check_transition(
            QpState::Reset,
            QpState::Init,
            QpType::Rc,
            M::STATE | CONN_INIT
        )
        .is_ok());
    }
}
