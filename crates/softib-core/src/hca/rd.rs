//! RD (reliable datagram): reliable datagram domains, EE contexts and RD QPs — the objects
//! (docs/rd.md, step 1).
//!
//! An EE context is the reliable connection of RD: it carries what an RC QP's connection
//! carries (path, PSNs, timers, retry counters, responder resources), so it is kept as the same
//! object the reliable engine runs on — a [`Qp`] holding that state — stored in the QP map under
//! a key of its own number space: [`EEC_KEY`] | EECN, beside QPNs (< 2^24). Its attributes are
//! set with the QP attribute structure, `dest_qp_num` naming the remote EECN, and its state
//! machine is the `eec` column of the transition table.

use super::Hca;
use crate::error::{ModifyQpError, RdError};
use crate::table::Key;
use crate::verbs::cq::WorkCompletion;
use crate::verbs::qp::{check_eec_transition, Qp, QpAttr, QpAttrMask, QpCap, QpInitAttr};
use crate::verbs::types::{QpState, QpType, WcStatus};
use crate::verbs::{CqHandle, PdHandle, RddHandle};
use softib_wire::psn::MASK24;
use softib_wire::{Eecn, Qpn};

/// The QP map keys of EE contexts: this bit, or'ed with the EECN.
pub(crate) const EEC_KEY: u32 = 1 << 24;

/// Largest number of RDDs, and of EE contexts, an HCA holds at once.
pub const MAX_RDD: u32 = 1 << 16;
pub const MAX_EEC: u32 = 1 << 16;

/// A reliable datagram domain: only a count of the RD QPs and EE contexts in it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rdd {
    pub(crate) users: usize,
}

/// The EECN of an EE context's key; `None` for a QP's.
pub(crate) fn eecn_of_key(key: u32) -> Option<Eecn> {
    (key & EEC_KEY != 0).then(|| Eecn::new(key & MASK24))
}

/// The QPN of a QP's key; `None` for an EE context's.
pub(crate) fn qpn_of_key(key: u32) -> Option<Qpn> {
    (key & EEC_KEY == 0).then(|| Qpn::new(key))
}

/// The QP map key of EE context `eecn`.
pub(crate) fn eec_key(eecn: Eecn) -> u32 {
    EEC_KEY | eecn.value()
}

impl Hca {
    /// Allocates a reliable datagram domain.
    pub fn alloc_rdd(&mut self) -> Result<RddHandle, RdError> {
        if self.rdds.len() >= MAX_RDD as usize {
            return Err(RdError::TooMany {
                what: "reliable datagram domains",
                max: MAX_RDD,
            });
        }
        Ok(RddHandle(self.rdds.insert(Rdd::default())))
    }

    /// Frees a reliable datagram domain; fails while RD QPs or EE contexts belong to it.
    pub fn dealloc_rdd(&mut self, rdd: RddHandle) -> Result<(), RdError> {
        let d = self.rdds.get(rdd.0).ok_or(RdError::NoSuchRdd(rdd))?;
        if d.users > 0 {
            return Err(RdError::Busy {
                rdd,
                users: d.users,
            });
        }
        self.rdds.remove(rdd.0);
        Ok(())
    }

    fn rdd_use(&mut self, rdd: RddHandle, delta: isize) {
        if let Some(d) = self.rdds.get_mut(rdd.0) {
            d.users = d.users.saturating_add_signed(delta);
        }
    }

    /// Creates an RD QP of `rdd` in RESET: queues, PD and CQs as any QP (an SRQ too); its
    /// messages travel through the EE contexts of `rdd`. `init.qp_type` must be [`QpType::Rd`].
    pub fn create_rd_qp(
        &mut self,
        pd: PdHandle,
        rdd: RddHandle,
        init: &QpInitAttr,
    ) -> Result<Qpn, RdError> {
        if init.qp_type != QpType::Rd {
            return Err(RdError::NotRd(init.qp_type));
        }
        if self.rdds.get(rdd.0).is_none() {
            return Err(RdError::NoSuchRdd(rdd));
        }
        let qpn = self.create_qp_numbered(pd, init, None)?;
        if let Some(qp) = self.qps.get_mut(&qpn.value()) {
            qp.rdd = Some(rdd);
        }
        self.rdd_use(rdd, 1);
        Ok(qpn)
    }

    /// Creates an EE context of `rdd` in RESET; its number (EECN) is the next free one from 1
    /// upward.
    pub fn create_eec(&mut self, rdd: RddHandle) -> Result<Eecn, RdError> {
        if self.rdds.get(rdd.0).is_none() {
            return Err(RdError::NoSuchRdd(rdd));
        }
        if self.eec_count() >= MAX_EEC as usize {
            return Err(RdError::TooMany {
                what: "EE contexts",
                max: MAX_EEC,
            });
        }
        let qps = &self.qps;
        let eecn = Eecn::new(
            self.numbers
                .eecns
                .next_free(&mut self.next_eecn, |n| qps.contains_key(&(EEC_KEY | n)))
                .unwrap_or(self.numbers.eecns.first),
        );
        let none = CqHandle(Key::NONE);
        let init = QpInitAttr {
            send_cq: none,
            recv_cq: none,
            srq: None,
            cap: QpCap::default(),
            qp_type: QpType::Rd,
            sq_sig_all: false,
        };
        let mut eec = Qp::new(Qpn::new(eecn.value()), PdHandle(Key::NONE), &init);
        eec.rdd = Some(rdd);
        self.qps.insert(eec_key(eecn), eec);
        self.rdd_use(rdd, 1);
        Ok(eecn)
    }

    /// Gives EE context `eecn` its next message when it has none in hand (one message at a
    /// time, docs/rd.md): the oldest send WQE of the next RD QP, round robin after the last one
    /// served, whose queue starts with a WQE for this EEC. The WQE moves from the QP's send
    /// queue to the EEC's, which the reliable engine then sends like an RC QP's. A QP of
    /// another RDD than the EEC's cannot use it (o9-34): its WQE completes in error
    /// (`IBV_WC_LOC_QP_OP_ERR`) without a packet and the QP enters SQE.
    ///
    /// An EE context in ERR takes no more messages: the WQEs waiting for it complete with
    /// flush error ([`Hca::rd_flush_waiting`]).
    pub(crate) fn rd_kick(&mut self, eecn: Eecn) {
        let key = eec_key(eecn);
        let Some(eec) = self.qps.get(&key) else {
            return;
        };
        if eec.attr.qp_state == QpState::Err {
            self.rd_flush_waiting(eecn);
            return;
        }
        if eec.attr.qp_state != QpState::Rts || !eec.sq.is_empty() {
            return;
        }
        let (rdd, cursor) = (eec.rdd, eec.transport.rd_cursor);
        let rd_qps = self.qps.count_below(EEC_KEY);
        // QPNs after the cursor first, then from the start.
        let start = self.qps.count_below(cursor.saturating_add(1));
        for i in (start..rd_qps).chain(0..start.min(rd_qps)) {
            let qp = &self.qps.qps[i];
            let takes = qp.qp_type == QpType::Rd
                && matches!(qp.attr.qp_state, QpState::Rts | QpState::Sqd)
                && qp
                    .sq
                    .front()
                    .is_some_and(|w| w.rd.is_some_and(|d| d.eecn == eecn));
            if !takes {
                continue;
            }
            let qpn = qp.qpn;
            let same_rdd = qp.rdd == rdd;
            let qp = &mut self.qps.qps[i];
            let Some(wqe) = qp.sq.pop_front() else {
                continue;
            };
            if !same_rdd {
                let wc = WorkCompletion::new(
                    wqe.wr_id,
                    WcStatus::LocQpOpErr,
                    wqe.opcode.wc_opcode(),
                    qpn,
                );
                let cq = qp.send_cq;
                let _ = self.push_completion(cq, wc, false);
                let _ = self.set_sq_error(qpn);
                continue;
            }
            let eec = self.qps.get_mut(&key).expect("looked up above");
            eec.transport.rd_cursor = qpn.value();
            eec.sq.push_back(wqe);
            self.schedule_tx(key);
            return;
        }
    }

    /// EE context `eecn` is in ERR: the send WQEs at the head of RD QPs' send queues that name
    /// it complete with flush error, in order (they can no longer be sent through it;
    /// docs/rd.md, softib's choice). Their QPs stay in their state: a WQE behind them for
    /// another EE context goes on, and that EE context is kicked.
    pub(crate) fn rd_flush_waiting(&mut self, eecn: Eecn) {
        let mut flushed = Vec::new();
        let mut next = Vec::new();
        let rd_qps = self.qps.count_below(EEC_KEY);
        for qp in &mut self.qps.qps[..rd_qps] {
            if qp.qp_type != QpType::Rd {
                continue;
            }
            while qp
                .sq
                .front()
                .is_some_and(|w| w.rd.is_some_and(|d| d.eecn == eecn))
            {
                let w = qp.sq.pop_front().expect("looked at");
                let wc = WorkCompletion::flushed(w.wr_id, w.opcode.wc_opcode(), qp.qpn);
                flushed.push((qp.send_cq, wc));
            }
            if let Some(d) = qp.sq.front().and_then(|w| w.rd) {
                next.push(d.eecn);
            }
        }
        for (cq, wc) in flushed {
            let _ = self.push_completion(cq, wc, false);
        }
        for e in next {
            if e != eecn {
                self.rd_kick(e);
            }
        }
    }

    /// The send queue of RD QP `qpn` is flushed (it entered SQE or ERR, or is being destroyed):
    /// a message of it that an EE context carries belongs to that queue too. The EE context
    /// stops sending it, the WQE completes with flush error on the QP, and the EE context
    /// aborts the message with a RESYNC (o9-35) and serves its next one, as after a
    /// QP-level failure (docs/rd.md, softib's choice).
    pub(crate) fn rd_abort_carried(&mut self, qpn: Qpn) {
        let carried: Vec<u32> = self.qps.qps[self.qps.count_below(EEC_KEY)..]
            .iter()
            .filter(|eec| {
                eec.sq
                    .front()
                    .and_then(|w| w.rd)
                    .is_some_and(|d| d.src_qpn == qpn && !d.resync)
            })
            .map(|eec| eec_key(Eecn::new(eec.qpn.value())))
            .collect();
        for key in carried {
            self.rc_complete_error(key, 0, WcStatus::WrFlushErr);
        }
    }

    /// EE context `eecn` enters ERR (its retries ran out, or software moved it there): its
    /// timers stop, the message it carries completes with flush error on its QP (unless it
    /// was its RESYNC, which has none), and the WQEs waiting for it are flushed.
    pub(crate) fn rd_eec_error(&mut self, eecn: Eecn) {
        let key = eec_key(eecn);
        let Some(eec) = self.qps.get_mut(&key) else {
            return;
        };
        eec.attr.qp_state = QpState::Err;
        eec.transport.req = Default::default();
        eec.transport.req.credits.unlimited = true;
        let carried = std::mem::take(&mut eec.sq);
        eec.transport.timer_key = None;
        self.timers.retain(|&(_, k)| k != key);
        for w in carried {
            let Some(rd) = w.rd.filter(|d| !d.resync) else {
                continue;
            };
            if let Some((cq, owner)) = self.send_completion_target(key, Some(rd)) {
                let wc = WorkCompletion::flushed(w.wr_id, w.opcode.wc_opcode(), owner);
                let _ = self.push_completion(cq, wc, false);
            }
        }
        self.rd_flush_waiting(eecn);
    }

    /// The protection domain of send WQE `i` of `key`'s send queue: its QP's (for an EE
    /// context, the RD QP that posted it).
    #[inline]
    pub(crate) fn wqe_pd(&self, key: u32, i: usize) -> PdHandle {
        let qp = &self.qps[&key];
        if key & EEC_KEY == 0 {
            return qp.pd;
        }
        match qp.sq.get(i).and_then(|w| w.rd) {
            Some(rd) => self
                .qps
                .get(&rd.src_qpn.value())
                .map_or(PdHandle(Key::NONE), |q| q.pd),
            _ => qp.pd,
        }
    }

    /// The CQ and QPN a send completion of `key`'s WQE `w` goes to: the QP's, or for an EE
    /// context the RD QP that posted it.
    pub(crate) fn send_completion_target(
        &self,
        key: u32,
        rd: Option<crate::verbs::wr::RdWqeDest>,
    ) -> Option<(CqHandle, Qpn)> {
        match rd {
            Some(rd) if key & EEC_KEY != 0 => {
                let qp = self.qps.get(&rd.src_qpn.value())?;
                Some((qp.send_cq, rd.src_qpn))
            }
            _ => Some((self.qps.get(&key)?.send_cq, Qpn::new(key))),
        }
    }

    /// A message of EE context `eecn` failed: `wc` (its error completion) goes to the RD QP
    /// that posted it (`rd`), which enters SQE. A failure of the EEC's path (transport retries
    /// exhausted) ends the EEC: it enters ERR. Any other failure belongs to the message: the
    /// EEC aborts it with a RESYNC (o9-35.a1: at `resync_psn`, the PSN after the highest the
    /// message used, which is also the response PSN the requester expects next; o9-35.a2:
    /// the aborted request's QPNs) and then serves its next message.
    pub(crate) fn rd_message_failed(
        &mut self,
        eecn: Eecn,
        rd: Option<crate::verbs::wr::RdWqeDest>,
        mut wc: WorkCompletion,
        resync_psn: softib_wire::Psn,
    ) {
        let key = eec_key(eecn);
        if let Some(rd) = rd.filter(|d| !d.resync) {
            if let Some((cq, owner)) = self.send_completion_target(key, Some(rd)) {
                wc.qp_num = owner;
                let _ = self.push_completion(cq, wc, false);
                let _ = self.set_sq_error(owner);
            }
        }
        let Some(eec) = self.qps.get_mut(&key) else {
            return;
        };
        // A fresh requester, still without credits to wait for (o9-72).
        eec.transport.req = Default::default();
        eec.transport.req.credits.unlimited = true;
        if wc.status == WcStatus::RetryExcErr || rd.is_none_or(|d| d.resync) {
            self.rd_eec_error(eecn);
            return;
        }
        let Some(rd) = rd else { return };
        let resync = crate::verbs::wr::SendWqe {
            wr_id: 0,
            opcode: crate::verbs::wr::WrOpcode::Send,
            flags: crate::verbs::types::SendFlags::empty(),
            signaled: false,
            payload: crate::verbs::wr::WqePayload::Sges(Vec::new()),
            length: 0,
            ud: None,
            xrc_srqn: 0,
            rd: Some(crate::verbs::wr::RdWqeDest { resync: true, ..rd }),
            state: crate::verbs::wr::WqeState::Posted,
            tx: Default::default(),
        };
        eec.transport.next_psn = resync_psn;
        eec.sq.push_front(resync);
        self.schedule_tx(key);
    }

    /// The receive side of RD request `t` that EE context `eec` received: the RD QP BTH:DestQP
    /// names, if it exists, is an RD QP able to receive, belongs to the EEC's RDD (o9-38) and
    /// holds the DETH's Q_Key (C9-127); `None` otherwise (NAK-Invalid RD Request).
    pub(super) fn rd_target(
        &self,
        eec: &Qp,
        t: &softib_wire::transport::TransportPacket<'_>,
    ) -> Option<super::responder::RecvTarget> {
        let dest = t.headers.bth.dest_qp.value();
        let qp = self.qps.get(&dest)?;
        // (SQE stops the send queue only: the receive queue still takes messages.)
        let ok = qp.qp_type == QpType::Rd
            && matches!(
                qp.attr.qp_state,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            )
            && qp.rdd == eec.rdd
            && t.headers.deth.is_some_and(|d| d.qkey == qp.attr.qkey);
        ok.then_some(super::responder::RecvTarget {
            qpn: dest,
            pd: qp.pd,
            srq: qp.srq,
            cq: qp.recv_cq,
            remote: None,
        })
    }

    /// EE contexts of the HCA (their keys sort after every QPN).
    fn eec_count(&self) -> usize {
        self.qps.len() - self.qps.count_below(EEC_KEY)
    }

    /// Modifies an EE context (IBA 11.2.6 ModifyEEC) as [`Hca::modify_qp`] modifies a QP: the
    /// fields of `attr` named by `mask`, checked against the EE context column of the
    /// transition table and the same value checks; `dest_qp_num` is the remote EECN.
    pub fn modify_eec(
        &mut self,
        eecn: Eecn,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), ModifyQpError> {
        self.modify_context(eec_key(eecn), attr, mask, |cur, next| {
            check_eec_transition(cur, next, mask)
        })
    }

    /// Current attributes of an EE context (IBA 11.2.6 QueryEEC), as [`Hca::query_qp`] gives a
    /// QP's.
    pub fn query_eec(&self, eecn: Eecn) -> Result<QpAttr, RdError> {
        self.qps
            .get(&eec_key(eecn))
            .map(Qp::query)
            .ok_or(RdError::NoSuchEec(eecn))
    }

    /// The reliable datagram domain of an EE context.
    pub fn eec_rdd(&self, eecn: Eecn) -> Result<RddHandle, RdError> {
        self.qps
            .get(&eec_key(eecn))
            .and_then(|e| e.rdd)
            .ok_or(RdError::NoSuchEec(eecn))
    }

    /// [`Hca::inject_responder_fault`] for the responder of EE context `eecn` (RD requests
    /// are answered by the EE context they arrive through).
    pub fn inject_eec_responder_fault(
        &mut self,
        eecn: Eecn,
        fault: crate::transport::rc::ResponderFault,
    ) -> Result<(), RdError> {
        let eec = self
            .qps
            .get_mut(&eec_key(eecn))
            .ok_or(RdError::NoSuchEec(eecn))?;
        eec.transport.resp.faults.arm(fault);
        Ok(())
    }

    /// Destroys an EE context.
    pub fn destroy_eec(&mut self, eecn: Eecn) -> Result<(), RdError> {
        let key = eec_key(eecn);
        let eec = self.qps.remove(&key).ok_or(RdError::NoSuchEec(eecn))?;
        self.timers.retain(|&(_, k)| k != key);
        self.tx_ready.retain(|&k| k != key);
        if let Some(rdd) = eec.rdd {
            self.rdd_use(rdd, -1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CreateQpError;
    use crate::verbs::ah::AhAttr;
    use crate::verbs::device::{GidEntry, HcaConfig};
    use crate::verbs::types::{AccessFlags, GidType, Mtu, QpState};
    use crate::verbs::wr::{RecvWr, SendWr, Sge, WrOpcode};
    use softib_wire::Psn;

    fn hca() -> (Hca, PdHandle, CqHandle) {
        let mut cfg = HcaConfig::new(1);
        cfg.ports[0].gids.push(GidEntry {
            gid: crate::hca::gid_of_ipv4([10, 0, 0, 1]),
            gid_type: GidType::RoceV2,
        });
        let mut h = Hca::new(cfg);
        let pd = h.alloc_pd().unwrap();
        let cq = h.create_cq(16).unwrap();
        (h, pd, cq)
    }

    fn rd_init(cq: CqHandle) -> QpInitAttr {
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        QpInitAttr::new(QpType::Rd, cq, cap)
    }

    /// RESET -> INIT -> RTR -> RTS of an EE context with the attributes of an RC connection,
    /// `dest_qp_num` naming the remote EECN.
    fn eec_to_rts(h: &mut Hca, eecn: Eecn) -> Result<(), ModifyQpError> {
        let m = QpAttrMask::STATE;
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            ..QpAttr::default()
        };
        h.modify_eec(eecn, &init, m | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX)?;
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: AhAttr::global(1, crate::hca::gid_of_ipv4([10, 0, 0, 2]), 1),
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: 7,
            rq_psn: Psn::new(0x100),
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..QpAttr::default()
        };
        let rtr_mask = m
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER;
        h.modify_eec(eecn, &rtr, rtr_mask)?;
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: Psn::new(0x900),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..QpAttr::default()
        };
        let rts_mask = m
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC;
        h.modify_eec(eecn, &rts, rts_mask)
    }

    #[test]
    fn eec_walks_the_connection_states_in_its_own_number_space() {
        let (mut h, pd, cq) = hca();
        let rdd = h.alloc_rdd().unwrap();
        let eecn = h.create_eec(rdd).unwrap();
        assert_eq!(eecn.value(), 1);
        assert_eq!(h.query_eec(eecn).unwrap().qp_state, QpState::Reset);
        // A QP numbered like the EEC is another object.
        let qpn = h
            .create_qp(pd, &QpInitAttr::new(QpType::Rc, cq, QpCap::default()))
            .unwrap();
        assert!(qpn.value() != eecn.value() && h.qp(Qpn::new(eecn.value())).is_none());
        eec_to_rts(&mut h, eecn).unwrap();
        let a = h.query_eec(eecn).unwrap();
        assert_eq!(a.qp_state, QpState::Rts);
        assert_eq!(a.dest_qp_num, 7);
        assert_eq!((a.sq_psn.value(), a.rq_psn.value()), (0x900, 0x100));
        assert_eq!(h.eec_rdd(eecn).unwrap(), rdd);
        // The access flags are the QPs', not the EEC's.
        let e = h.modify_eec(eecn, &QpAttr::default(), QpAttrMask::ACCESS_FLAGS);
        assert!(
            matches!(e, Err(ModifyQpError::AttributesNotAllowed { .. })),
            "{e:?}"
        );
        // SQE -> RTS is not an EE context transition, as for RC.
        let e = h.modify_eec(eecn, &QpAttr::to_state(QpState::Sqe), QpAttrMask::STATE);
        assert!(
            matches!(e, Err(ModifyQpError::InvalidEecTransition { .. })),
            "{e:?}"
        );
        h.modify_eec(eecn, &QpAttr::to_state(QpState::Err), QpAttrMask::STATE)
            .unwrap();
        h.modify_eec(eecn, &QpAttr::to_state(QpState::Reset), QpAttrMask::STATE)
            .unwrap();
        assert_eq!(h.query_eec(eecn).unwrap().dest_qp_num, 0);
        // Values are checked as for QPs: an MTU above the port's.
        h.modify_eec(
            eecn,
            &QpAttr {
                qp_state: QpState::Init,
                port_num: 2,
                ..QpAttr::default()
            },
            QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX,
        )
        .unwrap_err();
        h.destroy_eec(eecn).unwrap();
        assert_eq!(h.query_eec(eecn), Err(RdError::NoSuchEec(eecn)));
        assert_eq!(
            h.modify_eec(eecn, &QpAttr::default(), QpAttrMask::empty()),
            Err(ModifyQpError::NoSuchEec(eecn))
        );
        assert_eq!(h.destroy_eec(eecn), Err(RdError::NoSuchEec(eecn)));
    }

    #[test]
    fn rd_qps_belong_to_their_domain() {
        let (mut h, pd, cq) = hca();
        let rdd = h.alloc_rdd().unwrap();
        assert_eq!(
            h.create_qp(pd, &rd_init(cq)),
            Err(CreateQpError::RdNeedsRdd)
        );
        let rc = QpInitAttr::new(QpType::Rc, cq, QpCap::default());
        assert_eq!(
            h.create_rd_qp(pd, rdd, &rc),
            Err(RdError::NotRd(QpType::Rc))
        );
        let qpn = h.create_rd_qp(pd, rdd, &rd_init(cq)).unwrap();
        let eecn = h.create_eec(rdd).unwrap();
        assert_eq!(h.qp(qpn).unwrap().rdd(), Some(rdd));
        assert!(matches!(
            h.dealloc_rdd(rdd),
            Err(RdError::Busy { users: 2, .. })
        ));
        // UD's table with the access flags: port and Q_Key at INIT, then the state alone.
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: 0x1234,
            qp_access_flags: AccessFlags::REMOTE_WRITE,
            ..QpAttr::default()
        };
        let m = QpAttrMask::STATE;
        assert!(h.modify_qp(qpn, &init, m | QpAttrMask::PORT).is_err());
        h.modify_qp(
            qpn,
            &init,
            m | QpAttrMask::PORT | QpAttrMask::QKEY | QpAttrMask::ACCESS_FLAGS,
        )
        .unwrap();
        h.modify_qp(qpn, &QpAttr::to_state(QpState::Rtr), m)
            .unwrap();
        let sq_psn = QpAttr {
            qp_state: QpState::Rts,
            ..QpAttr::default()
        };
        // An RD QP has no PSN of its own: its EE contexts do.
        assert!(h.modify_qp(qpn, &sq_psn, m | QpAttrMask::SQ_PSN).is_err());
        h.modify_qp(qpn, &sq_psn, m).unwrap();
        assert_eq!(h.query_qp(qpn).unwrap().qkey, 0x1234);
        let sge = Sge::new(0, 0, 0);
        h.post_recv(qpn, &[RecvWr::new(1, vec![sge])]).unwrap();
        // Sending waits for the RD data path (docs/rd.md, step 2).
        assert!(h.post_send(qpn, &[SendWr::new(1, WrOpcode::Send)]).is_err());
        h.destroy_qp(qpn).unwrap();
        h.destroy_eec(eecn).unwrap();
        h.dealloc_rdd(rdd).unwrap();
        assert_eq!(h.dealloc_rdd(rdd), Err(RdError::NoSuchRdd(rdd)));
        assert_eq!(h.create_eec(rdd), Err(RdError::NoSuchRdd(rdd)));
    }
}
