//! QP verbs: create, modify (the state machine), query, destroy, post send/receive, and the
//! state changes the transport engine triggers.

use super::Hca;
use crate::error::{CreateQpError, ModifyQpError, PostRecvError, PostSendError, QpError};
use crate::verbs::ah;
use crate::verbs::cq::WorkCompletion;
use crate::verbs::event::{AsyncEvent, QpErrorCause};
use crate::verbs::qp::{check_transition, Qp, QpAttr, QpAttrMask, QpInitAttr};
use crate::verbs::types::{AccessFlags, LinkLayer, PathMigState, QpState, QpType, WcOpcode};
use crate::verbs::wr::{
    RecvWqe, RecvWr, SendWqe, SendWr, UdWqeDest, WqePayload, WqeState, WrOpcode,
};
use crate::verbs::PdHandle;
use softib_wire::psn::MASK24;
use softib_wire::Qpn;

/// First QPN handed out (rxe: QPN 0 and 1 are the special QPs, indices below 0x11 unused).
pub(crate) const MIN_QPN: u32 = 0x11;

impl Hca {
    // ----- lifecycle --------------------------------------------------------------------

    /// Creates a QP in RESET (`ibv_create_qp`). With an SRQ the QP has no receive queue of
    /// its own and its `max_recv_wr` / `max_recv_sge` read back as 0. The QPN is the next
    /// free number from 0x11 upward. Raw datagram QPs take no SRQ and need an HCA with an
    /// InfiniBand port (the port they bind to at INIT must be one).
    pub fn create_qp(&mut self, pd: PdHandle, init: &QpInitAttr) -> Result<Qpn, CreateQpError> {
        if init.qp_type == QpType::Rd {
            return Err(CreateQpError::RdNeedsRdd);
        }
        self.create_qp_numbered(pd, init, None)
    }

    /// Creates the general services QP, QP1 (GSI), in RESET: a UD QP that sends and expects
    /// the well-known GSI Q_Key 0x80010000 whatever its own Q_Key (IBA 10.2.5, as rxe does),
    /// and accepts packets of every P_Key in its port's table. On RoCE ports there is no
    /// QP0 (no subnet manager); packets for QPN 0 are dropped as for any absent QP.
    pub fn create_gsi_qp(&mut self, pd: PdHandle, init: &QpInitAttr) -> Result<Qpn, CreateQpError> {
        if init.qp_type != QpType::Ud {
            return Err(CreateQpError::GsiNotUd {
                qp_type: init.qp_type,
            });
        }
        if self.qps.contains_key(&super::ud::GSI_QPN) {
            return Err(CreateQpError::GsiExists);
        }
        self.create_qp_numbered(pd, init, Some(Qpn::new(super::ud::GSI_QPN)))
    }

    pub(super) fn create_qp_numbered(
        &mut self,
        pd: PdHandle,
        init: &QpInitAttr,
        fixed: Option<Qpn>,
    ) -> Result<Qpn, CreateQpError> {
        if init.qp_type == QpType::XrcRecv {
            return Err(CreateQpError::XrcTgtNeedsXrcd);
        }
        if self.pds.get(pd.0).is_none() {
            return Err(CreateQpError::NoSuchPd(pd));
        }
        for cq in [init.send_cq, init.recv_cq] {
            if self.cqs.get(cq.0).is_none() {
                return Err(CreateQpError::NoSuchCq(cq));
            }
        }
        if let Some(srq) = init.srq {
            if init.qp_type.is_raw() || init.qp_type.is_xrc() {
                return Err(CreateQpError::SrqNotSupported {
                    qp_type: init.qp_type,
                });
            }
            if self.srqs.get(srq.0).is_none() {
                return Err(CreateQpError::NoSuchSrq(srq));
            }
        }
        if init.qp_type.is_raw()
            && !self
                .ports
                .iter()
                .any(|p| p.link_layer == LinkLayer::InfiniBand)
        {
            // The port is bound at INIT, where it is checked again.
            return Err(CreateQpError::RawQpNeedsInfiniBand {
                qp_type: init.qp_type,
            });
        }
        let d = &self.device;
        let mut cap = init.cap;
        if init.srq.is_some() || init.qp_type.is_xrc() {
            cap.max_recv_wr = 0;
            cap.max_recv_sge = 0;
        }
        let limits = [
            ("max_send_wr", cap.max_send_wr, d.max_qp_wr),
            ("max_recv_wr", cap.max_recv_wr, d.max_qp_wr),
            ("max_send_sge", cap.max_send_sge, d.max_sge),
            ("max_recv_sge", cap.max_recv_sge, d.max_sge),
            ("max_inline_data", cap.max_inline_data, d.max_inline_data),
        ];
        for (field, value, max) in limits {
            if value > max {
                return Err(CreateQpError::CapTooLarge { field, value, max });
            }
        }
        if self.qps.len() >= d.max_qp as usize {
            return Err(CreateQpError::TooManyQps { max: d.max_qp });
        }
        let qpn = fixed.unwrap_or_else(|| self.alloc_qpn());
        let mut init = *init;
        init.cap = cap;
        self.qps.insert(qpn.value(), Qp::new(qpn, pd, &init));
        self.pd_use(pd, 1);
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0) {
                c.users += 1;
            }
        }
        if let Some(s) = init.srq.and_then(|srq| self.srqs.get_mut(srq.0)) {
            s.users += 1;
        }
        Ok(qpn)
    }

    /// The next free QPN at or after the cursor, round the HCA's range (by default 0x11 to
    /// 2^24 - 2; 2^24 - 1 is the multicast QPN). The caller has checked `max_qp` against the
    /// range's size, so a free number exists.
    pub(super) fn alloc_qpn(&mut self) -> Qpn {
        let qps = &self.qps;
        let n = self
            .numbers
            .qpns
            .next_free(&mut self.next_qpn, |n| n >= MASK24 || qps.contains_key(&n))
            .unwrap_or(self.numbers.qpns.first);
        Qpn::new(n)
    }

    /// Destroys a QP. Outstanding WRs are flushed to the CQs first (as if the QP entered
    /// ERR, without async events), so every posted `wr_id` comes back.
    ///
    /// An XRC target QP is shared by the users that created or opened it: each destroy
    /// releases one of them, and the QP goes when the last one lets go.
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), QpError> {
        let qp = self
            .qps
            .get_mut(&qpn.value())
            .ok_or(QpError::NoSuchQp(qpn))?;
        if qp.opens > 1 {
            qp.opens -= 1;
            return Ok(());
        }
        self.placement_update(super::PlacementUpdate::QpGone { qpn: qpn.value() });
        self.flush_qp(qpn);
        self.mcast_detach_all(qpn.value());
        let qp = self
            .qps
            .remove(&qpn.value())
            .ok_or(QpError::NoSuchQp(qpn))?;
        self.express_from = None;
        // Its timer entry, which may outlive its deadlines (`datapath::rearm`).
        if let Some(t) = qp.transport.timer_key {
            self.timers.remove(&(t, qpn.value()));
        }
        self.pd_use(qp.pd, -1);
        for cq in [qp.send_cq, qp.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0) {
                c.users = c.users.saturating_sub(1);
            }
        }
        if let Some(s) = qp.srq.and_then(|srq| self.srqs.get_mut(srq.0)) {
            s.users = s.users.saturating_sub(1);
        }
        if let Some(x) = qp.xrcd.and_then(|x| self.xrcds.get_mut(x.0)) {
            x.users = x.users.saturating_sub(1);
        }
        if let Some(r) = qp.rdd.and_then(|r| self.rdds.get_mut(r.0)) {
            r.users = r.users.saturating_sub(1);
        }
        Ok(())
    }

    /// The QP object (state, queues) for inspection.
    pub fn qp(&self, qpn: Qpn) -> Option<&Qp> {
        self.qps.get(&qpn.value())
    }

    /// Current attributes (`ibv_query_qp`): every field, with the live PSNs, `cur_qp_state`
    /// equal to `qp_state`, and `sq_draining` true while an SQD drain is in progress.
    pub fn query_qp(&self, qpn: Qpn) -> Result<QpAttr, QpError> {
        self.qp(qpn).map(Qp::query).ok_or(QpError::NoSuchQp(qpn))
    }

    /// The creation attributes (`init_attr` of `ibv_query_qp`).
    pub fn query_qp_init_attr(&self, qpn: Qpn) -> Result<QpInitAttr, QpError> {
        self.qp(qpn)
            .map(Qp::init_attr)
            .ok_or(QpError::NoSuchQp(qpn))
    }

    /// Removes from QP `qpn`'s CQs the completions of its own queues that were not polled
    /// yet: every send completion, and the receive completions unless the QP receives through
    /// an SRQ (those WQEs were the SRQ's, and their completions stay). Returns how many went.
    ///
    /// Not part of any state change here: the C library calls it when an application moves a
    /// QP to RESET or destroys it, as rdma-core's mlx4 and mlx5 providers clean their CQs then
    /// (rxe leaves the completions; rdma-core's own tests recycle a QP through RESET and
    /// expect them gone).
    pub fn purge_qp_completions(&mut self, qpn: Qpn) -> Result<usize, QpError> {
        let i = self.query_qp_init_attr(qpn)?;
        let own_receives = i.srq.is_none();
        let mut removed = 0;
        let send = self.cqs.get_mut(i.send_cq.0).map_or(0, |c| {
            c.remove_where(|w| w.qp_num == qpn && (!w.opcode.is_recv() || own_receives))
        });
        removed += send;
        if i.recv_cq != i.send_cq && own_receives {
            removed += self.cqs.get_mut(i.recv_cq.0).map_or(0, |c| {
                c.remove_where(|w| w.qp_num == qpn && w.opcode.is_recv())
            });
        }
        Ok(removed)
    }

    /// True while QP `qpn`'s CQs hold a successful completion of its own queues that was not
    /// polled yet (receives through an SRQ not counted). False for a QP that does not exist.
    pub fn has_unpolled_successes(&self, qpn: Qpn) -> bool {
        let Ok(i) = self.query_qp_init_attr(qpn) else {
            return false;
        };
        let own_receives = i.srq.is_none();
        let mine = |w: &WorkCompletion| {
            w.qp_num == qpn && w.status.is_success() && (!w.opcode.is_recv() || own_receives)
        };
        self.cqs.get(i.send_cq.0).is_some_and(|c| c.any(mine))
            || (i.recv_cq != i.send_cq && self.cqs.get(i.recv_cq.0).is_some_and(|c| c.any(mine)))
    }

    // ----- modify -----------------------------------------------------------------------

    /// Modifies a QP (`ibv_modify_qp`): the fields of `attr` named by `mask`, and the state if
    /// `mask` has [`QpAttrMask::STATE`].
    ///
    /// The mask is checked against the transition table
    /// ([`TRANSITIONS`](crate::verbs::qp::TRANSITIONS)), then each attribute value: port and
    /// P_Key index in range, address vectors usable on the QP's port, path MTU ≤ the port's
    /// active MTU, timeouts ≤ 31, `retry_cnt` / `rnr_retry` ≤ 7, `min_rnr_timer` ≤ 31,
    /// `max_rd_atomic` / `max_dest_rd_atomic` within the device limits, `dest_qp_num` < 2^24.
    /// A failed modify changes nothing.
    ///
    /// Side effects of the new state: RESET empties the queues without completions and
    /// clears the attributes; ERR flushes (see [`Hca`]: sends then receives, in posting order, with
    /// `IBV_WC_WR_FLUSH_ERR`); RTS → SQD starts
    /// draining the send queue and, with `en_sqd_async_notify`, reports `SqDrained` once no
    /// send WR is in flight.
    pub fn modify_qp(
        &mut self,
        qpn: Qpn,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), ModifyQpError> {
        let qp_type = self.qp(qpn).ok_or(ModifyQpError::NoSuchQp(qpn))?.qp_type;
        self.modify_context(qpn.value(), attr, mask, |cur, next| {
            check_transition(cur, next, qp_type, mask)
        })
    }

    /// [`Hca::modify_qp`] of the QP or EE context stored under `key` (see `rd.rs`), its
    /// transition checked by `check`.
    pub(super) fn modify_context(
        &mut self,
        key: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
        check: impl FnOnce(QpState, QpState) -> Result<crate::verbs::qp::AttrRule, ModifyQpError>,
    ) -> Result<(), ModifyQpError> {
        // What the express path remembered may no longer hold.
        self.express_from = None;
        let missing = || match super::rd::eecn_of_key(key) {
            Some(eecn) => ModifyQpError::NoSuchEec(eecn),
            None => ModifyQpError::NoSuchQp(Qpn::new(key)),
        };
        let qp = self.qps.get(&key).ok_or_else(missing)?;
        let cur = qp.attr.qp_state;
        if mask.contains(QpAttrMask::CUR_STATE) && attr.cur_qp_state != cur {
            return Err(ModifyQpError::BadCurrentState {
                claimed: attr.cur_qp_state,
                actual: cur,
            });
        }
        let next = if mask.contains(QpAttrMask::STATE) {
            attr.qp_state
        } else {
            cur
        };
        check(cur, next)?;
        self.check_attr_values(qp, attr, mask)?;

        // Everything is valid: apply.
        let qp = self.qps.get_mut(&key).ok_or_else(missing)?;
        let mig_was = qp.attr.path_mig_state;
        qp.attr.apply(attr, mask);
        qp.alt_path_loaded |= mask.contains(QpAttrMask::ALT_PATH);
        if mask.contains(QpAttrMask::SQ_PSN) {
            qp.transport.next_psn = attr.sq_psn;
        }
        if mask.contains(QpAttrMask::RQ_PSN) {
            qp.transport.expected_psn = attr.rq_psn;
            // Until the first acknowledgement, an unsolicited ACK carries the first expected
            // PSN - 1 (IBA 9.7.7.2.2).
            qp.transport.resp.credits.ack_psn = attr.rq_psn.sub(1);
        }
        let reset = next == QpState::Reset;
        // A SEND under way into another HCA's XRC SRQ ends there too (its owner holds the WQE).
        let delegated = match &qp.transport.resp.msg {
            crate::transport::rc::InMessage::Delegated { srqn } if reset => Some(*srqn),
            _ => None,
        };
        match next {
            QpState::Reset => qp.reset(),
            QpState::Rts => qp.sq_draining = false,
            QpState::Sqd if cur == QpState::Rts => qp.sq_draining = true,
            _ => {}
        }
        // An EE context in RTS takes its first message; one moved to ERR ends the message it
        // carries and the ones waiting for it.
        match (super::rd::eecn_of_key(key), next) {
            (Some(eecn), QpState::Rts) => self.rd_kick(eecn),
            (Some(eecn), QpState::Err) if cur != QpState::Err => self.rd_eec_error(eecn),
            _ => {}
        }
        if let Some(qpn) = super::rd::qpn_of_key(key) {
            match next {
                QpState::Err if cur != QpState::Err => self.enter_error(qpn, None),
                QpState::Sqd if cur == QpState::Rts => self.check_sq_drained(qpn),
                QpState::Rts => self.schedule_tx(key),
                // Receives posted in INIT are credits the requester may learn of now (C9-155).
                QpState::Rtr if cur == QpState::Init => self.rc_offer_credits(key, true),
                _ => {}
            }
        }
        if let Some(srqn) = delegated {
            self.xrc_delegate_abort(srqn, key);
        }
        if mask.contains(QpAttrMask::PATH_MIG_STATE) && !reset {
            self.apply_path_mig_state(key, attr.path_mig_state, mig_was);
        }
        if super::rd::qpn_of_key(key).is_some() {
            self.placement_qp(key);
        }
        self.rearm_timer(key);
        Ok(())
    }

    /// Per-attribute value checks of `modify_qp` for the fields in `mask`.
    fn check_attr_values(
        &self,
        qp: &Qp,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), ModifyQpError> {
        let has = |f: QpAttrMask| mask.contains(f);
        let num_ports = self.device.phys_port_cnt;
        let port_num = if has(QpAttrMask::PORT) {
            attr.port_num
        } else {
            qp.attr.port_num
        };
        let port = self.port(port_num).ok_or(ModifyQpError::InvalidPort {
            attr: QpAttrMask::PORT,
            port: port_num,
            num_ports,
        })?;
        if qp.qp_type.is_raw() && port.link_layer != LinkLayer::InfiniBand {
            // Raw datagrams follow an LRH; a RoCE port has none.
            return Err(ModifyQpError::RawQpNeedsInfiniBand {
                qp_type: qp.qp_type,
                port: port_num,
            });
        }
        if has(QpAttrMask::PORT) || has(QpAttrMask::PKEY_INDEX) {
            let index = if has(QpAttrMask::PKEY_INDEX) {
                attr.pkey_index
            } else {
                qp.attr.pkey_index
            };
            if usize::from(index) >= port.pkeys.len() {
                return Err(ModifyQpError::PkeyIndexOutOfRange {
                    attr: QpAttrMask::PKEY_INDEX,
                    index,
                    port: port_num,
                    table_len: port.pkeys.len(),
                });
            }
        }
        if has(QpAttrMask::ACCESS_FLAGS) {
            let bits = attr.qp_access_flags.bits();
            if bits & !AccessFlags::all().bits() != 0 {
                return Err(ModifyQpError::InvalidAccessFlags(bits));
            }
        }
        if has(QpAttrMask::AV) {
            self.check_av(&attr.ah_attr, QpAttrMask::AV, port_num)?;
        }
        if has(QpAttrMask::PATH_MTU) && attr.path_mtu > port.active_mtu {
            return Err(ModifyQpError::PathMtuTooLarge {
                requested: attr.path_mtu,
                active: port.active_mtu,
                port: port_num,
            });
        }
        if has(QpAttrMask::TIMEOUT) && attr.timeout > 31 {
            return Err(ModifyQpError::TimeoutOutOfRange {
                attr: QpAttrMask::TIMEOUT,
                value: attr.timeout,
            });
        }
        if has(QpAttrMask::RETRY_CNT) && attr.retry_cnt > 7 {
            return Err(ModifyQpError::RetryCountOutOfRange(attr.retry_cnt));
        }
        if has(QpAttrMask::RNR_RETRY) && attr.rnr_retry > 7 {
            return Err(ModifyQpError::RnrRetryOutOfRange(attr.rnr_retry));
        }
        if has(QpAttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
            return Err(ModifyQpError::MinRnrTimerOutOfRange(attr.min_rnr_timer));
        }
        if has(QpAttrMask::MAX_QP_RD_ATOMIC)
            && u32::from(attr.max_rd_atomic) > self.device.max_qp_init_rd_atom
        {
            return Err(ModifyQpError::MaxRdAtomicTooLarge {
                requested: attr.max_rd_atomic,
                max: self.device.max_qp_init_rd_atom,
            });
        }
        if has(QpAttrMask::MAX_DEST_RD_ATOMIC)
            && u32::from(attr.max_dest_rd_atomic) > self.device.max_qp_rd_atom
        {
            return Err(ModifyQpError::MaxDestRdAtomicTooLarge {
                requested: attr.max_dest_rd_atomic,
                max: self.device.max_qp_rd_atom,
            });
        }
        if has(QpAttrMask::DEST_QPN) && attr.dest_qp_num > MASK24 {
            return Err(ModifyQpError::DestQpnOutOfRange(attr.dest_qp_num));
        }
        if has(QpAttrMask::ALT_PATH) {
            let alt = attr.alt_port_num;
            let alt_port = self.port(alt).ok_or(ModifyQpError::InvalidPort {
                attr: QpAttrMask::ALT_PATH,
                port: alt,
                num_ports,
            })?;
            if usize::from(attr.alt_pkey_index) >= alt_port.pkeys.len() {
                return Err(ModifyQpError::PkeyIndexOutOfRange {
                    attr: QpAttrMask::ALT_PATH,
                    index: attr.alt_pkey_index,
                    port: alt,
                    table_len: alt_port.pkeys.len(),
                });
            }
            if attr.alt_timeout > 31 {
                return Err(ModifyQpError::TimeoutOutOfRange {
                    attr: QpAttrMask::ALT_PATH,
                    value: attr.alt_timeout,
                });
            }
            self.check_av(&attr.alt_ah_attr, QpAttrMask::ALT_PATH, alt)?;
        }
        // Arming needs an alternate path, loaded now or before.
        let rearm = matches!(
            attr.path_mig_state,
            PathMigState::Rearm | PathMigState::Armed
        );
        if has(QpAttrMask::PATH_MIG_STATE)
            && rearm
            && !has(QpAttrMask::ALT_PATH)
            && !qp.alt_path_loaded
        {
            return Err(ModifyQpError::NoAlternatePath {
                requested: attr.path_mig_state,
            });
        }
        Ok(())
    }

    fn check_av(
        &self,
        av: &ah::AhAttr,
        which: QpAttrMask,
        qp_port: u8,
    ) -> Result<(), ModifyQpError> {
        ah::validate_ah_attr(av, &self.ports).map_err(|source| {
            ModifyQpError::InvalidAddressVector {
                attr: which,
                source,
            }
        })?;
        if av.port_num != qp_port {
            return Err(ModifyQpError::AddressVectorPortMismatch {
                attr: which,
                av_port: av.port_num,
                qp_port,
            });
        }
        Ok(())
    }

    // ----- state changes of the transport engine ----------------------------------------

    /// Moves a QP to ERR on behalf of the transport engine (or a simulator injecting a
    /// fault): flushes its WRs and queues the async event `cause` selects. Does nothing for a
    /// QP in RESET (it has no context to fail) or already in ERR.
    pub fn set_qp_error(&mut self, qpn: Qpn, cause: QpErrorCause) -> Result<(), QpError> {
        let qp = self.qp(qpn).ok_or(QpError::NoSuchQp(qpn))?;
        if matches!(qp.state(), QpState::Reset | QpState::Err) {
            return Ok(());
        }
        self.enter_error(qpn, cause.event(qpn));
        Ok(())
    }

    /// Moves a UC or UD QP in RTS or SQD to SQE after a send error, on behalf of the transport
    /// engine: the outstanding send WRs are flushed, receives continue. RC QPs go to ERR
    /// instead (with no async event: the failed WR reports the error). Other states are left
    /// alone.
    pub fn set_sq_error(&mut self, qpn: Qpn) -> Result<(), QpError> {
        let qp = self.qp(qpn).ok_or(QpError::NoSuchQp(qpn))?;
        if !matches!(qp.state(), QpState::Rts | QpState::Sqd) {
            return Ok(());
        }
        if qp.qp_type.is_reliable_connected() {
            self.enter_error(qpn, None);
            return Ok(());
        }
        if let Some(qp) = self.qps.get_mut(&qpn.value()) {
            qp.attr.qp_state = QpState::Sqe;
            qp.sq_draining = false;
        }
        self.flush_send_queue(qpn);
        Ok(())
    }

    /// Reports `SqDrained` for a QP in SQD whose send queue has nothing in flight any more, if
    /// the move to SQD asked for it. The data path calls this when a send WQE completes.
    pub(crate) fn check_sq_drained(&mut self, qpn: Qpn) {
        let Some(qp) = self.qps.get_mut(&qpn.value()) else {
            return;
        };
        if qp.attr.qp_state != QpState::Sqd || !qp.sq_draining || qp.sq_in_flight() {
            return;
        }
        qp.sq_draining = false;
        if qp.attr.en_sqd_async_notify {
            self.async_events.push_back(AsyncEvent::SqDrained { qpn });
        }
    }

    /// Takes the receive WQE the next inbound message consumes: from the QP's own receive
    /// queue or from its SRQ (reporting `SrqLimitReached` when the limit is crossed).
    #[cfg_attr(not(test), allow(dead_code))] // consumed by the responder
    pub(crate) fn take_recv_wqe(&mut self, qpn: Qpn) -> Option<RecvWqe> {
        let srq = self.qps.get(&qpn.value())?.srq;
        self.take_recv_wqe_from(qpn, srq)
    }

    /// Takes a receive WQE for QP `qpn` from `srq`, or from the QP's own receive queue.
    pub(crate) fn take_recv_wqe_from(
        &mut self,
        qpn: Qpn,
        srq: Option<crate::verbs::SrqHandle>,
    ) -> Option<RecvWqe> {
        match srq {
            Some(srq) => self.take_srq_wqe(srq),
            None => self.qps.get_mut(&qpn.value())?.rq.pop_front(),
        }
    }

    fn enter_error(&mut self, qpn: Qpn, event: Option<AsyncEvent>) {
        let Some(qp) = self.qps.get_mut(&qpn.value()) else {
            return;
        };
        qp.attr.qp_state = QpState::Err;
        qp.sq_draining = false;
        let srq = qp.srq;
        self.placement_update(super::PlacementUpdate::QpGone { qpn: qpn.value() });
        if let Some(e) = event {
            self.async_events.push_back(e);
        }
        self.flush_qp(qpn);
        if srq.is_some() {
            self.async_events
                .push_back(AsyncEvent::QpLastWqeReached { qpn });
        }
    }

    /// Completes every queued send WR, then every queued receive WR, with flush error.
    fn flush_qp(&mut self, qpn: Qpn) {
        self.flush_send_queue(qpn);
        let Some(qp) = self.qps.get_mut(&qpn.value()) else {
            return;
        };
        let mut rq = std::mem::take(&mut qp.rq);
        // A SEND in progress holds the oldest receive WQE it took: flushed first (an XRC
        // target's, taken from an XRC SRQ, to that SRQ's CQ).
        let mut cq = qp.recv_cq;
        let mut delegated = None;
        match std::mem::take(&mut qp.transport.resp.msg) {
            crate::transport::rc::InMessage::Send { wqe, .. } => {
                rq.push_front(wqe);
                if let Some((_, xrc_cq)) = qp.transport.resp.xrc_msg {
                    cq = xrc_cq;
                }
            }
            // Into another HCA's XRC SRQ: its owner flushes the WQE.
            crate::transport::rc::InMessage::Delegated { srqn } => delegated = Some(srqn),
            _ => {}
        }
        qp.transport.resp.xrc_msg = None;
        if let Some(srqn) = delegated {
            self.xrc_delegate_abort(srqn, qpn.value());
        }
        for wqe in rq {
            // A CQ that overran has lost the completion; the CqError event reports it.
            let _ = self.push_completion(
                cq,
                WorkCompletion::flushed(wqe.wr_id, WcOpcode::Recv, qpn),
                false,
            );
        }
    }

    fn flush_send_queue(&mut self, qpn: Qpn) {
        if self.qp(qpn).is_some_and(|q| q.qp_type == QpType::Rd) {
            // Its oldest WQE may be travelling through an EE context.
            self.rd_abort_carried(qpn);
        }
        let Some(qp) = self.qps.get_mut(&qpn.value()) else {
            return;
        };
        let sq = std::mem::take(&mut qp.sq);
        let cq = qp.send_cq;
        for wqe in sq {
            let _ = self.push_completion(
                cq,
                WorkCompletion::flushed(wqe.wr_id, wqe.opcode.wc_opcode(), qpn),
                false,
            );
        }
    }

    // ----- posting ----------------------------------------------------------------------

    /// Posts send WRs (`ibv_post_send`): every WR is validated before any is queued, and the
    /// error names the first bad WR.
    ///
    /// Checked here: the QP state (RTS and SQD queue; SQE and ERR complete the WRs at once
    /// with flush error; RESET, INIT and RTR refuse), queue space, SGE count (and the
    /// device's `max_sge_rd` for RDMA READ), inline consistency and size, message length ≤
    /// the port's `max_msg_sz`, the operation is available on the QP type (UC: SEND and RDMA
    /// WRITE variants; UD: SEND and SEND with immediate, with a valid AH of the QP's PD and
    /// port and a message that fits the path MTU; raw: SEND with an AH of the QP's PD and port,
    /// a message between its header length and the raw maximum, and for raw IPv6 no IBA
    /// transport Next Header when the header is readable), atomics have exactly 8 bytes of
    /// SGE space.
    ///
    /// Not checked here: L_Keys and buffer bounds. The data path checks them when the WR
    /// executes and completes it with `IBV_WC_LOC_PROT_ERR` / `IBV_WC_LOC_LEN_ERR`, as
    /// hardware does.
    pub fn post_send(&mut self, qpn: Qpn, wrs: &[SendWr]) -> Result<(), PostSendError> {
        let qp = self.qp(qpn).ok_or(PostSendError::NoSuchQp(qpn))?;
        let flush = match qp.state() {
            QpState::Rts | QpState::Sqd => false,
            QpState::Sqe | QpState::Err => true,
            state => return Err(PostSendError::InvalidState { state }),
        };
        let max_send_wr = qp.attr.cap.max_send_wr;
        if !flush {
            // Each WR is validated and queued straight into the send queue (no staging
            // vector; the WQE is built in the push, not returned and moved: each move of it
            // is a call to memcpy); a WR that fails takes back the ones queued before it, so
            // that a failed post queues nothing. The queue is lent out of the QP meanwhile
            // (validation reads the QP, never its send queue).
            let v = qpn.value();
            let min_inline = qp.attr.cap.max_inline_data as usize;
            let mut sq = std::mem::take(&mut self.qps.get_mut(&v).expect("looked up above").sq);
            let base = sq.len();
            let mut posted = Ok(());
            // What every WR is checked against, looked up once (the spare buffers are lent
            // out too, for the WRs' heap parts).
            let mut spare = std::mem::take(&mut self.spare);
            let qp = &self.qps[&v];
            let port = self.port(qp.attr.port_num);
            for (index, wr) in wrs.iter().enumerate() {
                if base + index >= max_send_wr as usize {
                    posted = Err(PostSendError::QueueFull { index, max_send_wr });
                    break;
                }
                if let Err(e) = self.queue_send_wr(qp, port, index, wr, &mut sq) {
                    posted = Err(e);
                    break;
                }
                // The payload's heap part is added in place.
                if wr.inline_data.is_some() || wr.sg_list.len() > 1 {
                    if let Some(w) = sq.back_mut() {
                        spare.fill(&mut w.payload, wr, min_inline);
                    }
                }
            }
            self.spare = spare;
            if posted.is_err() {
                sq.truncate(base);
            }
            self.qps.get_mut(&v).expect("looked up above").sq = sq;
            posted?;
            if self.qps[&v].qp_type == QpType::Rd {
                // An RD QP's messages leave through their EE contexts.
                for wr in wrs {
                    if let Some(rd) = wr.rd {
                        self.rd_kick(rd.eecn);
                    }
                }
            } else if !wrs.is_empty() {
                self.schedule_tx(v);
            }
            return Ok(());
        }
        let mut wqes = std::collections::VecDeque::with_capacity(wrs.len());
        let port = self.port(qp.attr.port_num);
        for (index, wr) in wrs.iter().enumerate() {
            self.queue_send_wr(qp, port, index, wr, &mut wqes)?;
        }
        let cq = qp.send_cq;
        for wqe in wqes {
            let _ = self.push_completion(
                cq,
                WorkCompletion::flushed(wqe.wr_id, wqe.opcode.wc_opcode(), qpn),
                false,
            );
        }
        Ok(())
    }

    /// Validates `wr` and pushes its WQE onto `sq` (inlined, so that the WQE is built where the
    /// queue takes it).
    #[inline(always)]
    fn queue_send_wr(
        &self,
        qp: &Qp,
        port: Option<&crate::verbs::device::PortConfig>,
        index: usize,
        wr: &SendWr,
        sq: &mut std::collections::VecDeque<SendWqe>,
    ) -> Result<(), PostSendError> {
        use crate::verbs::types::SendFlags;
        let cap = &qp.attr.cap;
        let opcode = wr.opcode;

        if wr.inline_data.is_some() && !wr.sg_list.is_empty() {
            return Err(PostSendError::InlineWithSgList { index });
        }
        if wr.flags.contains(SendFlags::INLINE) && wr.inline_data.is_none() {
            return Err(PostSendError::InlineFlagWithoutData { index });
        }
        let allowed = match qp.qp_type {
            QpType::Rc | QpType::XrcSend => true,
            // RD has no SEND with invalidate (its opcodes 0x56 / 0x57 are reserved).
            QpType::Rd => !matches!(opcode, WrOpcode::SendWithInv(_)),
            // An XRC target has no send queue.
            QpType::XrcRecv => false,
            QpType::Uc => matches!(
                opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm(_)
                    | WrOpcode::RdmaWrite { .. }
                    | WrOpcode::RdmaWriteWithImm { .. }
            ),
            QpType::Ud => matches!(opcode, WrOpcode::Send | WrOpcode::SendWithImm(_)),
            QpType::RawIpv6 | QpType::RawEthertype => matches!(opcode, WrOpcode::Send),
        };
        if !allowed {
            return Err(PostSendError::OpcodeNotSupported {
                index,
                opcode: opcode.name(),
                qp_type: qp.qp_type,
            });
        }
        if wr.inline_data.is_some() && opcode.writes_local_memory() {
            return Err(PostSendError::InlineNotSupported {
                index,
                opcode: opcode.name(),
            });
        }
        let num_sge = wr.sg_list.len();
        if num_sge > cap.max_send_sge as usize {
            return Err(PostSendError::TooManySge {
                index,
                num_sge,
                max: cap.max_send_sge,
            });
        }
        if matches!(opcode, WrOpcode::RdmaRead { .. }) && num_sge > self.device.max_sge_rd as usize
        {
            return Err(PostSendError::TooManyReadSge {
                index,
                num_sge,
                max: self.device.max_sge_rd,
            });
        }
        if let Some(data) = &wr.inline_data {
            if data.len() > cap.max_inline_data as usize {
                return Err(PostSendError::InlineTooLong {
                    index,
                    len: data.len(),
                    max: cap.max_inline_data,
                });
            }
        }
        let port_num = qp.attr.port_num;
        let max_msg = port.map_or(self.device.max_msg_sz, |p| p.max_msg_sz);
        let len = wr.message_len();
        if len > u64::from(max_msg) {
            return Err(PostSendError::MessageTooLong {
                index,
                len,
                max: max_msg,
            });
        }
        if opcode.is_atomic() && len != 8 {
            return Err(PostSendError::AtomicLength { index, len });
        }
        let rd = if qp.qp_type == QpType::Rd {
            let dest = wr.rd.ok_or(PostSendError::MissingRdDest { index })?;
            if !self.qps.contains_key(&super::rd::eec_key(dest.eecn)) {
                return Err(PostSendError::NoSuchEec {
                    index,
                    eecn: dest.eecn,
                });
            }
            // A Q_Key with the high bit set sends the QP's own (IBA 10.2.5), as for UD.
            let qkey = if dest.remote_qkey & 0x8000_0000 != 0 {
                qp.attr.qkey
            } else {
                dest.remote_qkey
            };
            Some(crate::verbs::wr::RdWqeDest {
                eecn: dest.eecn,
                remote_qpn: dest.remote_qpn,
                qkey,
                src_qpn: qp.qpn,
                resync: false,
            })
        } else {
            None
        };
        let ud = if !qp.qp_type.is_connected() && qp.qp_type != QpType::Rd {
            let dest = wr.ud.ok_or(PostSendError::MissingUdDest { index })?;
            if qp.qp_type.is_raw() {
                self.validate_raw_send(qp, index, len, wr)?;
            }
            let ah = self
                .ahs
                .get(dest.ah.0)
                .ok_or(PostSendError::InvalidAh { index, ah: dest.ah })?;
            if ah.pd != qp.pd {
                return Err(PostSendError::AhPdMismatch { index, ah: dest.ah });
            }
            if ah.attr.port_num != port_num {
                return Err(PostSendError::AhPortMismatch {
                    index,
                    ah_port: ah.attr.port_num,
                    qp_port: port_num,
                });
            }
            if let Some(p) = port.filter(|_| qp.qp_type == QpType::Ud) {
                if len > u64::from(p.active_mtu.bytes()) {
                    return Err(PostSendError::UdMessageTooLong {
                        index,
                        len,
                        mtu: p.active_mtu,
                    });
                }
            }
            Some(UdWqeDest {
                av: ah.attr,
                remote_qpn: dest.remote_qpn,
                remote_qkey: dest.remote_qkey,
            })
        } else {
            None
        };
        // The heap part of the payload (inline bytes, a longer gather list) is the queue's to
        // add, from its spare buffers (`SpareBuffers::fill`).
        let (payload, flags) = match &wr.inline_data {
            Some(_) => (WqePayload::Inline(Vec::new()), wr.flags | SendFlags::INLINE),
            None => match wr.sg_list.as_slice() {
                [one] => (WqePayload::Sge(*one), wr.flags),
                _ => (WqePayload::Sges(Vec::new()), wr.flags),
            },
        };
        sq.push_back(SendWqe {
            wr_id: wr.wr_id,
            opcode,
            flags,
            signaled: qp.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED),
            payload,
            // len <= max_msg_sz, a u32.
            length: len as u32,
            ud,
            xrc_srqn: wr.xrc_remote_srqn & MASK24,
            rd,
            state: WqeState::Posted,
            tx: Default::default(),
        });
        Ok(())
    }

    /// Posts receive WRs (`ibv_post_recv`): all of them or, on error, none. Allowed from INIT
    /// on; in ERR the WRs complete at once with flush error. A QP with an SRQ refuses (post to
    /// the SRQ).
    pub fn post_recv(&mut self, qpn: Qpn, wrs: &[RecvWr]) -> Result<(), PostRecvError> {
        let qp = self.qp(qpn).ok_or(PostRecvError::NoSuchQp(qpn))?;
        if qp.qp_type.is_xrc() {
            return Err(PostRecvError::NoReceiveQueue {
                qpn,
                qp_type: qp.qp_type,
            });
        }
        if qp.srq.is_some() {
            return Err(PostRecvError::UsesSrq(qpn));
        }
        let flush = match qp.state() {
            QpState::Reset => {
                return Err(PostRecvError::InvalidState {
                    state: QpState::Reset,
                })
            }
            QpState::Err => true,
            _ => false,
        };
        let cap = qp.attr.cap;
        for (index, wr) in wrs.iter().enumerate() {
            if !flush && qp.rq.len() + index >= cap.max_recv_wr as usize {
                return Err(PostRecvError::QueueFull {
                    index,
                    max_recv_wr: cap.max_recv_wr,
                });
            }
            if wr.sg_list.len() > cap.max_recv_sge as usize {
                return Err(PostRecvError::TooManySge {
                    index,
                    num_sge: wr.sg_list.len(),
                    max: cap.max_recv_sge,
                });
            }
        }
        if flush {
            let cq = qp.recv_cq;
            for wr in wrs {
                let _ = self.push_completion(
                    cq,
                    WorkCompletion::flushed(wr.wr_id, WcOpcode::Recv, qpn),
                    false,
                );
            }
        } else if let Some(qp) = self.qps.get_mut(&qpn.value()) {
            // A plain loop: `extend` over the mapped iterator costs several times as much per
            // WR (a repost of one consumed WQE per completion is the common case).
            crate::verbs::wr::reserve_recv(&mut qp.rq, wrs.len(), cap.max_recv_wr);
            for wr in wrs {
                qp.rq.push_back(self.spare.recv_wqe(wr));
            }
            // One end-to-end credit per receive WQE (C9-155, C9-157.2.1); the requester may be
            // waiting for them.
            let c = &mut qp.transport.resp.credits;
            c.posted = c.posted.wrapping_add(wrs.len() as u32);
            self.rc_offer_credits(qpn.value(), false);
        }
        Ok(())
    }
}
