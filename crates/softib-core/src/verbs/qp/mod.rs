//! Queue pairs: attributes, the state transition table and the QP object the data path works on.

pub mod attr;
pub mod state;

pub use attr::{QpAttr, QpAttrMask, QpCap, QpInitAttr};
pub use state::{
    check_eec_transition, check_transition, eec_transition_rule, transition_rule, AttrRule,
    Transition, TRANSITIONS,
};

use super::types::{QpState, QpType};
use super::wr::{RecvWqe, SendWqe, WqeState};
use super::{CqHandle, PdHandle, RddHandle, SrqHandle, XrcdHandle};
use softib_wire::{Psn, Qpn};
use std::collections::VecDeque;

/// Per-service transport state of a QP.
///
/// The control path sets the sequence numbers from `modify_qp` (`SQ_PSN`, `RQ_PSN`) and clears
/// them on RESET. The RC/UC/UD requester, completer and responder keep the rest of their
/// per-QP state (outstanding PSN window, retry counters, timers, responder resources) here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TransportState {
    /// PSN of the next request packet the requester sends.
    pub(crate) next_psn: Psn,
    /// PSN the responder expects next.
    pub(crate) expected_psn: Psn,
    /// RC requester / completer state.
    pub(crate) req: crate::transport::rc::Requester,
    /// RC responder state.
    pub(crate) resp: crate::transport::rc::Responder,
    /// Queued on the HCA's transmit list.
    pub(crate) tx_queued: bool,
    /// Deadline under which the QP is registered in the HCA's timer set.
    pub(crate) timer_key: Option<crate::time::Instant>,
    /// RoCEv2 headers of the QP's packets, used while the address vector, the local GID and
    /// the UDP source port they were made for are unchanged.
    pub(crate) tx_headers: Option<crate::hca::TxHeaders>,
    /// EE context: the RD QP it took its last message from (round robin over the QPs).
    pub(crate) rd_cursor: u32,
}

/// A queue pair inside the HCA.
#[derive(Debug, Clone)]
pub struct Qp {
    pub(crate) qpn: Qpn,
    pub(crate) qp_type: QpType,
    pub(crate) pd: PdHandle,
    pub(crate) send_cq: CqHandle,
    pub(crate) recv_cq: CqHandle,
    pub(crate) srq: Option<SrqHandle>,
    /// The XRC domain of an XRC target QP.
    pub(crate) xrcd: Option<XrcdHandle>,
    /// The reliable datagram domain of an RD QP or an EE context.
    pub(crate) rdd: Option<RddHandle>,
    /// XRC target QP: the users that hold it (its creator and every `open_xrc_tgt_qp`); the
    /// QP is destroyed when the last of them destroys it. 1 for every other QP.
    pub(crate) opens: u32,
    pub(crate) sq_sig_all: bool,
    /// Current attributes; `attr.qp_state` is the state.
    pub(crate) attr: QpAttr,
    /// Send queue, oldest first.
    pub(crate) sq: VecDeque<SendWqe>,
    /// Receive queue, oldest first (empty when the QP uses an SRQ).
    pub(crate) rq: VecDeque<RecvWqe>,
    /// In SQD: the drained notification is still owed.
    pub(crate) sq_draining: bool,
    /// An alternate path has been loaded (`IBV_QP_ALT_PATH`), so the QP may be armed.
    pub(crate) alt_path_loaded: bool,
    /// Transport state of the data path.
    pub(crate) transport: TransportState,
}

/// The transport state a QP of `qp_type` starts with (and returns to on RESET): an XRC
/// initiator sends without end-to-end credits from the start, since its targets receive through
/// SRQs, which never generate credits (9.7.7.2.4 "invalid" code, C9-153).
fn initial_transport(qp_type: QpType) -> TransportState {
    let mut t = TransportState::default();
    // RD defines no end-to-end credits (o9-72): an EE context never waits for them.
    t.req.credits.unlimited = matches!(qp_type, QpType::XrcSend | QpType::Rd);
    t
}

impl Qp {
    pub(crate) fn new(qpn: Qpn, pd: PdHandle, init: &QpInitAttr) -> Qp {
        let attr = QpAttr {
            cap: init.cap,
            ..QpAttr::default()
        };
        Qp {
            qpn,
            qp_type: init.qp_type,
            pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            xrcd: None,
            rdd: None,
            opens: 1,
            sq_sig_all: init.sq_sig_all,
            attr,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            sq_draining: false,
            alt_path_loaded: false,
            transport: initial_transport(init.qp_type),
        }
    }

    /// QP number.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }

    /// Transport service.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.attr.qp_state
    }

    /// Protection domain.
    pub fn pd(&self) -> PdHandle {
        self.pd
    }

    /// Shared receive queue, if any.
    pub fn srq(&self) -> Option<SrqHandle> {
        self.srq
    }

    /// XRC domain of an XRC target QP.
    pub fn xrcd(&self) -> Option<XrcdHandle> {
        self.xrcd
    }

    /// Reliable datagram domain of an RD QP.
    pub fn rdd(&self) -> Option<RddHandle> {
        self.rdd
    }

    /// Users holding an XRC target QP (its creator and each opener); 1 for other QPs.
    pub fn opens(&self) -> u32 {
        self.opens
    }

    /// The queued send WQEs, oldest first.
    pub fn send_queue(&self) -> impl ExactSizeIterator<Item = &SendWqe> + '_ {
        self.sq.iter()
    }

    /// The queued receive WQEs, oldest first (empty with an SRQ).
    pub fn recv_queue(&self) -> impl ExactSizeIterator<Item = &RecvWqe> + '_ {
        self.rq.iter()
    }

    /// The creation attributes as they are now.
    pub fn init_attr(&self) -> QpInitAttr {
        QpInitAttr {
            send_cq: self.send_cq,
            recv_cq: self.recv_cq,
            srq: self.srq,
            cap: self.attr.cap,
            qp_type: self.qp_type,
            sq_sig_all: self.sq_sig_all,
        }
    }

    /// True while a send WQE is in the requester's hands.
    pub(crate) fn sq_in_flight(&self) -> bool {
        self.sq.iter().any(|w| w.state == WqeState::InProgress)
    }

    /// Attributes as `query_qp` reports them: the stored attributes with the live PSNs and
    /// the SQ drain flag.
    pub(crate) fn query(&self) -> QpAttr {
        let mut a = self.attr;
        a.cur_qp_state = a.qp_state;
        a.sq_psn = self.transport.next_psn;
        a.rq_psn = self.transport.expected_psn;
        a.sq_draining = self.attr.qp_state == QpState::Sqd && self.sq_draining;
        a
    }

    /// Back to the state right after creation: queues emptied without completions, attributes
    /// and transport state cleared (the capabilities stay).
    pub(crate) fn reset(&mut self) {
        let cap = self.attr.cap;
        self.attr = QpAttr::default();
        self.attr.cap = cap;
        self.sq.clear();
        self.rq.clear();
        self.sq_draining = false;
        self.alt_path_loaded = false;
        self.transport = initial_transport(self.qp_type);
    }
}
