//! RC completer (IBA 9.7.6): validates responses against the outstanding WQEs, applies
//! coalesced and implied acknowledgements, places READ response data and atomic results,
//! reacts to each NAK, and completes WQEs in order.
//!
//! Coalescing (behaviours §11): a response with PSN P acknowledges every outstanding SEND /
//! RDMA WRITE older than P unless it sits behind an unanswered READ / ATOMIC, which P then
//! implicitly NAKs (the requester resends from that READ / ATOMIC).
//!
//! End-to-end credits are taken from every positive acknowledgement that is not a ghost from
//! the invalid region — duplicate and unsolicited ones included (C9-144, C9-164), and the
//! initial unsolicited ACK (PSN = first PSN − 1) too — before anything else is done with it.

use softib_wire::aeth::{AethSyndrome, NakCode};
use softib_wire::opcode::Opcode;
use softib_wire::psn::MASK24;
use softib_wire::transport::TransportPacket;
use softib_wire::{Operation, Position, Psn};

use super::Hca;
use crate::time::{transport_deadline, Instant};
use crate::verbs::cq::WorkCompletion;
use crate::verbs::qp::Qp;
use crate::verbs::types::{AccessFlags, QpState, QpType, WcStatus};
use crate::verbs::wr::{SendWqe, Sge, SpareBuffers, WqePayload, WrOpcode};

/// How an acknowledgement relates to the PSN it carries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Upto {
    /// Everything up to and including the PSN (ACK).
    Including,
    /// Everything strictly before the PSN (NAKs, READ responses, atomic ACKs).
    Before,
}

impl Hca {
    pub(crate) fn rc_handle_response(&mut self, now: Instant, qpn: u32, t: &TransportPacket<'_>) {
        self.rc_take_credits(qpn, t);
        let Some(qp) = self.qps.get(&qpn) else {
            return;
        };
        if !matches!(qp.attr.qp_state, QpState::Rts | QpState::Sqd) {
            self.counters.bad_state += 1;
            return;
        }
        let h = &t.headers;
        // An EE context takes only responses addressed to the QP whose message it is sending
        // (o9-79.a1).
        if super::rd::eecn_of_key(qpn).is_some()
            && qp.sq.front().and_then(|w| w.rd).map(|d| d.src_qpn) != Some(h.bth.dest_qp)
        {
            self.counters.rd_qpn_mismatch += 1;
            return;
        }
        let psn = h.bth.psn;
        // A response must name a PSN that is outstanding: in [oldest unacked, next_psn).
        let oldest = qp
            .sq
            .iter()
            .find(|w| w.tx.started && !w.tx.done)
            .map(|w| w.tx.first_psn);
        let in_window =
            oldest.is_some_and(|o| psn.distance(o) >= 0 && psn.distance(qp.transport.next_psn) < 0);
        let Ok(info) = t.info() else {
            return;
        };
        if !in_window {
            // Stale or ghost response (behaviours §19): ignore.
            self.counters.ignored_responses += 1;
            return;
        }
        match info.operation {
            Operation::Acknowledge => {
                let Some(aeth) = h.aeth else {
                    return;
                };
                match AethSyndrome::from_byte(aeth.syndrome) {
                    AethSyndrome::Ack { .. } => {
                        self.rc_ack(now, qpn, psn, Upto::Including);
                    }
                    AethSyndrome::RnrNak { timer } => {
                        self.counters.rcvd_rnr_nak += 1;
                        self.rc_ack(now, qpn, psn, Upto::Before);
                        self.rc_rnr(now, qpn, psn, timer.as_nanos());
                    }
                    AethSyndrome::Nak(NakCode::PsnSequenceError) => {
                        self.rc_ack(now, qpn, psn, Upto::Before);
                        self.rc_retry(now, qpn, psn);
                    }
                    AethSyndrome::Nak(code) => {
                        let status = match code {
                            NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                            NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                            NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                            // Reserved NAK codes are dropped (C9-120).
                            _ => {
                                self.counters.ignored_responses += 1;
                                return;
                            }
                        };
                        self.rc_ack(now, qpn, psn, Upto::Before);
                        self.rc_retire(now, qpn);
                        if let Some(i) = self.wqe_index(qpn, psn) {
                            self.rc_complete_error(qpn, i, status);
                        }
                    }
                    AethSyndrome::Reserved(_) => {
                        self.counters.ignored_responses += 1;
                    }
                }
            }
            Operation::AtomicAcknowledge => {
                let Some(i) = self.wqe_index(qpn, psn) else {
                    return;
                };
                let w = &self.qps[&qpn].sq[i];
                if !w.opcode.is_atomic() || w.tx.done || w.tx.first_psn != psn {
                    self.counters.ignored_responses += 1;
                    return;
                }
                self.rc_ack(now, qpn, psn, Upto::Before);
                let Some(i) = self.wqe_index(qpn, psn) else {
                    return;
                };
                let orig = h
                    .atomic_ack_eth
                    .map(|a| a.orig_remote_data)
                    .unwrap_or_default();
                // softib memory holds 64-bit atomic operands in little-endian byte order.
                if !self.rc_scatter_send_wqe(qpn, i, 0, &orig.to_le_bytes()) {
                    self.rc_complete_error(qpn, i, WcStatus::LocProtErr);
                    return;
                }
                let qp = self.qps.get_mut(&qpn).expect("checked");
                qp.sq[i].tx.done = true;
                let deadline = transport_deadline(now, qp.attr.timeout, self.clock_lag);
                answered(&mut qp.transport.req, psn, deadline);
            }
            Operation::RdmaReadResponse => self.rc_read_response(now, qpn, t, info.position),
            _ => {}
        }
        self.rc_retire(now, qpn);
    }

    /// The common READ response and ATOMIC ACK in fewer steps: on an RC QP in RTS or SQD with
    /// no limited WQE waiting, response `t` answering the READ or ATOMIC at the head of the
    /// send queue: the READ response packet it expects next, of the length its position asks
    /// (`rc_read_response`'s checks), or an ATOMIC's ACK; `data` (the READ packet's payload,
    /// the ATOMIC's original value as it is stored) fits the WQE's one scatter entry where it
    /// goes and passes its L_Key check. Its effects are those of [`Hca::rc_handle_response`]
    /// for the same packet (credits taken, the data placed, the WQE done and retired after
    /// its last packet; nothing for the coalescing rules to do, as nothing older is
    /// outstanding; the tests run workloads both ways and compare). False, with nothing
    /// changed, for anything else.
    #[inline]
    pub(crate) fn rc_express_rd_atomic_response(
        &mut self,
        now: Instant,
        qpn: u32,
        t: &TransportPacket<'_>,
        data: &[u8],
    ) -> bool {
        let psn = t.headers.bth.psn;
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        if qp.qp_type != QpType::Rc
            || !matches!(qp.attr.qp_state, QpState::Rts | QpState::Sqd)
            || qp.transport.req.credits.limited_wait.is_some()
        {
            return false;
        }
        let Some(w) = qp.sq.front() else {
            return false;
        };
        if !w.tx.started || w.tx.done {
            return false;
        }
        // The oldest outstanding WQE (so the response is in the window and acknowledges
        // nothing older): a READ expecting this packet next, or an ATOMIC. Where the data
        // goes in the WQE's buffer, and whether the WQE is then done.
        let op = t.headers.bth.opcode;
        let (offset, ends) = match w.opcode {
            // The common READ, its only packet, all of it: what the next arm finds for it, in
            // fewer steps.
            WrOpcode::RdmaRead { .. }
                if op == Opcode::RC_RDMA_READ_RESPONSE_ONLY
                    && w.tx.first_psn == psn
                    && w.tx.resp_next_psn == psn =>
            {
                if data.len() as u64 != u64::from(w.length) {
                    return false;
                }
                (0, true)
            }
            WrOpcode::RdmaRead { .. } if w.tx.resp_next_psn == psn => {
                // (A FIRST acknowledges what is older: nothing, at the head of the queue.)
                let ends = match op {
                    Opcode::RC_RDMA_READ_RESPONSE_ONLY | Opcode::RC_RDMA_READ_RESPONSE_LAST => true,
                    Opcode::RC_RDMA_READ_RESPONSE_FIRST | Opcode::RC_RDMA_READ_RESPONSE_MIDDLE => {
                        false
                    }
                    _ => return false,
                };
                let mtu = qp.attr.path_mtu.bytes();
                let Some(offset) = read_response_offset(w, psn, mtu, ends, data.len()) else {
                    return false;
                };
                (offset as usize, ends)
            }
            WrOpcode::AtomicCmpSwp { .. } | WrOpcode::AtomicFetchAdd { .. }
                if op == Opcode::RC_ATOMIC_ACKNOWLEDGE && w.tx.first_psn == psn =>
            {
                (0, true)
            }
            _ => return false,
        };
        let dst = match &w.payload {
            _ if data.is_empty() => None,
            WqePayload::Sge(s) if s.length as usize >= offset + data.len() => {
                Some((s.lkey, s.addr + offset as u64))
            }
            _ => return false,
        };
        if let Some((lkey, addr)) = dst {
            match self.mrs.bytes_mut(
                qp.pd,
                lkey,
                addr,
                data.len() as u64,
                AccessFlags::LOCAL_WRITE,
                false,
            ) {
                Some(bytes) => super::place(bytes, data),
                None => return false,
            }
        }
        // Placed: the state moves as the general path moves it.
        self.rc_take_credits(qpn, t);
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return true;
        };
        if let Some(w) = qp.sq.front_mut() {
            if matches!(w.opcode, WrOpcode::RdmaRead { .. }) {
                w.tx.resp_next_psn = psn.next();
            }
            w.tx.done = ends;
        }
        let deadline = transport_deadline(now, qp.attr.timeout, self.clock_lag);
        answered(&mut qp.transport.req, psn, deadline);
        // (A WQE not done leaves nothing to retire.)
        if ends {
            self.rc_retire(now, qpn);
        }
        true
    }

    /// Takes the end-to-end credits of a response (9.7.7.2.4): the "invalid" code lifts flow
    /// control for the rest of the connection; a credit count raises the limit to the receive
    /// WQEs the AETH's MSN consumed plus the count. The MSN must name the last WQE completed
    /// or one started since (the SSNs the requester knows); anything else is stale or bogus.
    /// Responses from the invalid PSN region ahead of the requester are ghosts (C9-136). The
    /// QP may still be in RTR: credits can arrive before the send queue starts (C9-155).
    fn rc_take_credits(&mut self, qpn: u32, t: &TransportPacket<'_>) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        if !matches!(qp.attr.qp_state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            return;
        }
        let Some(aeth) = t.headers.aeth else {
            return;
        };
        let AethSyndrome::Ack { credits } = AethSyndrome::from_byte(aeth.syndrome) else {
            return;
        };
        // In RTR the first PSN of the send queue is not set yet, and nothing has been sent.
        let sending = qp.attr.qp_state != QpState::Rtr;
        if sending && t.headers.bth.psn.distance(qp.transport.next_psn) >= 0 {
            return;
        }
        let c = &mut qp.transport.req.credits;
        let before = (c.unlimited, c.rwqe_limit);
        match credits.credits() {
            None => c.unlimited = true,
            Some(n) => {
                let msn = aeth.msn.value();
                let base = if msn == c.retired_ssn {
                    Some(c.retired_rwqe)
                } else {
                    qp.sq.front().filter(|f| f.tx.started).and_then(|f| {
                        let i = msn.wrapping_sub(f.tx.ssn) & MASK24;
                        qp.sq
                            .get(i as usize)
                            .filter(|w| w.tx.started && w.tx.ssn == msn)
                            .map(|w| w.tx.rwqe_through)
                    })
                };
                let Some(base) = base else {
                    return;
                };
                let limit = base.wrapping_add(n);
                if limit.wrapping_sub(c.rwqe_limit) as i32 > 0 {
                    c.rwqe_limit = limit;
                }
            }
        }
        if c.limited_wait.is_some_and(|(_, through)| c.covers(through)) {
            c.limited_wait = None;
        }
        if (c.unlimited, c.rwqe_limit) != before {
            self.schedule_tx(qpn);
        }
    }

    /// Index in the send queue of the started WQE whose PSN range holds `psn`.
    fn wqe_index(&self, qpn: u32, psn: Psn) -> Option<usize> {
        self.qps
            .get(&qpn)?
            .sq
            .iter()
            .position(|w| w.tx.started && w.tx.contains(psn))
    }

    fn rc_read_response(&mut self, now: Instant, qpn: u32, t: &TransportPacket<'_>, pos: Position) {
        let psn = t.headers.bth.psn;
        let Some(i) = self.wqe_index(qpn, psn) else {
            self.counters.ignored_responses += 1;
            return;
        };
        let qp = &self.qps[&qpn];
        let w = &qp.sq[i];
        if !matches!(w.opcode, WrOpcode::RdmaRead { .. }) || w.tx.done {
            self.counters.ignored_responses += 1;
            return;
        }
        let expected = w.tx.resp_next_psn;
        let d = psn.distance(expected);
        if d < 0 {
            // A duplicate of a response already placed.
            self.counters.ignored_responses += 1;
            return;
        }
        if d > 0 {
            // Response packets were lost: resend the READ for what is missing.
            self.rc_ack(now, qpn, w.tx.first_psn, Upto::Before);
            self.rc_retry(now, qpn, expected);
            return;
        }
        let mtu = qp.attr.path_mtu.bytes();
        // A retried READ restarts with FIRST / ONLY at the PSN it asked for (subset rule), and
        // late packets of the original stream may still arrive: data is placed by PSN offset.
        let starts = matches!(pos, Position::First | Position::Only);
        let ends = matches!(pos, Position::Last | Position::Only);
        let Some(offset) = read_response_offset(w, psn, mtu, ends, t.payload.len()) else {
            self.rc_complete_error(qpn, i, WcStatus::BadRespErr);
            return;
        };
        if starts {
            // The first (or only) READ response implicitly acknowledges earlier requests.
            self.rc_ack(now, qpn, psn, Upto::Before);
        }
        let Some(i) = self.wqe_index(qpn, psn) else {
            return;
        };
        if !self.rc_scatter_send_wqe(qpn, i, offset, t.payload) {
            self.rc_complete_error(qpn, i, WcStatus::LocProtErr);
            return;
        }
        let qp = self.qps.get_mut(&qpn).expect("checked");
        let w = &mut qp.sq[i];
        w.tx.resp_next_psn = psn.next();
        if ends {
            w.tx.done = true;
        }
        let deadline = transport_deadline(now, qp.attr.timeout, self.clock_lag);
        answered(&mut qp.transport.req, psn, deadline);
    }

    /// Places `data` at byte `offset` of the message buffer of send WQE `i` (READ data, atomic
    /// result), checking LOCAL_WRITE on every L_Key touched.
    fn rc_scatter_send_wqe(&mut self, qpn: u32, i: usize, offset: u32, data: &[u8]) -> bool {
        let pd = self.wqe_pd(qpn, i);
        let qp = self.qps.get_mut(&qpn).expect("checked");
        let payload = &mut qp.sq[i].payload;
        // One entry is copied out; a longer list is lent out of the WQE while the scatter
        // borrows the HCA mutably, and put back.
        match payload {
            WqePayload::Inline(_) => data.is_empty(),
            WqePayload::Sge(s) => {
                let s = *s;
                self.scatter(pd, std::slice::from_ref(&s), u64::from(offset), data)
            }
            WqePayload::Sges(v) => {
                let sges = std::mem::take(v);
                let ok = self.scatter(pd, &sges, u64::from(offset), data);
                if let Some(w) = self.qps.get_mut(&qpn).and_then(|q| q.sq.get_mut(i)) {
                    w.payload = WqePayload::Sges(sges);
                }
                ok
            }
        }
    }

    /// Copies `data` into the buffer described by `sges`, starting `offset` bytes in.
    pub(crate) fn scatter(
        &mut self,
        pd: crate::verbs::PdHandle,
        sges: &[crate::verbs::wr::Sge],
        offset: u64,
        mut data: &[u8],
    ) -> bool {
        let mut skip = offset;
        for s in sges {
            if data.is_empty() {
                break;
            }
            let sl = u64::from(s.length);
            if skip >= sl {
                skip -= sl;
                continue;
            }
            let take = ((sl - skip) as usize).min(data.len());
            let Ok(slice) = self.check_local(
                pd,
                s.lkey,
                s.addr + skip,
                take as u64,
                AccessFlags::LOCAL_WRITE,
            ) else {
                return false;
            };
            let Some(dst) = self.mr_slice_mut(&slice) else {
                return false;
            };
            super::place(dst, &data[..take]);
            data = &data[take..];
            skip = 0;
        }
        data.is_empty()
    }

    /// Applies an acknowledgement of PSN `psn` to the outstanding WQEs (coalescing rules).
    fn rc_ack(&mut self, now: Instant, qpn: u32, psn: Psn, upto: Upto) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let mut progress = false;
        let mut implied_nak = None;
        for w in qp.sq.iter_mut() {
            if !w.tx.started {
                break;
            }
            if w.tx.done {
                continue;
            }
            let d = psn.distance(w.tx.last_psn());
            let covered = match upto {
                Upto::Including => d >= 0,
                Upto::Before => d > 0,
            };
            if !covered {
                break;
            }
            if matches!(w.opcode, WrOpcode::RdmaRead { .. }) || w.opcode.is_atomic() {
                // An unanswered READ / ATOMIC passed over: implied NAK, retried from where the
                // READ's responses stopped (the point every retry path names).
                implied_nak = Some(super::requester::rewind_point(w));
                break;
            }
            w.tx.done = true;
            progress = true;
        }
        // The packet a limited WQE waits on is acknowledged: the send queue goes on.
        let c = &mut qp.transport.req.credits;
        let released = c.limited_wait.is_some_and(|(x, _)| {
            let d = psn.distance(x);
            d > 0 || (d == 0 && upto == Upto::Including)
        });
        if released {
            c.limited_wait = None;
        }
        if progress {
            let r = &mut qp.transport.req;
            r.retry_from = None;
            r.retries = 0;
            r.rnr_retries = 0;
            r.timer = transport_deadline(now, qp.attr.timeout, self.clock_lag);
        }
        if released {
            self.schedule_tx(qpn);
        }
        if let Some(p) = implied_nak {
            self.rc_retry(now, qpn, p);
        }
    }

    /// Retransmits from `psn` after a NAK-PSN sequence error or an implied NAK, counting the
    /// retry against `retry_cnt`.
    fn rc_retry(&mut self, now: Instant, qpn: u32, psn: Psn) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let r = &mut qp.transport.req;
        if r.retry_from == Some(psn) {
            // Already resending from this PSN: a repeated NAK neither counts nor rewinds.
            return;
        }
        // A NAK for a later PSN than the retry under way is no stale response: the responder
        // NAKs once and then stays silent until its expected PSN arrives (C9-80), so it took
        // the resent packets up to `psn` and found a new gap there. It rewinds at once, even
        // inside one multi-packet WQE (Linux rxe ignores it until that WQE completes and
        // recovers by its transport timer instead; docs/deviations.md).
        if r.last_retry_psn.is_some_and(|p| psn.distance(p) > 0) {
            r.retries = 0;
        }
        r.last_retry_psn = Some(psn);
        // With an armed alternate path, exhaustion migrates and reloads the counter (o9-82).
        if r.retries >= qp.attr.retry_cnt && !self.migrate_on_retry_exhaustion(qpn) {
            self.counters.retry_exceeded += 1;
            self.rc_retire(now, qpn);
            if let Some(i) = self.qps[&qpn].sq.iter().position(|w| !w.tx.done) {
                self.rc_complete_error(qpn, i, WcStatus::RetryExcErr);
            }
            return;
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let r = &mut qp.transport.req;
        r.retries += 1;
        r.retry_from = Some(psn);
        r.timer = transport_deadline(now, qp.attr.timeout, self.clock_lag);
        self.counters.retry_naks += 1;
        self.rc_rewind(qpn, psn);
        self.schedule_tx(qpn);
    }

    /// RNR NAK for `psn`: wait the responder's RNR time, then resend from `psn`.
    fn rc_rnr(&mut self, now: Instant, qpn: u32, psn: Psn, wait_ns: u64) {
        self.rc_retire(now, qpn);
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let limit = qp.attr.rnr_retry;
        let r = &mut qp.transport.req;
        // rnr_retry 7 means retry forever (IBA; rxe agrees).
        if limit != 7 && r.rnr_retries >= limit {
            self.counters.rnr_retry_exceeded += 1;
            if let Some(i) = self.wqe_index(qpn, psn) {
                self.rc_complete_error(qpn, i, WcStatus::RnrRetryExcErr);
            }
            return;
        }
        r.rnr_retries = r.rnr_retries.saturating_add(1);
        // At least the interval the responder asked for (C9-130), also on a lagging clock.
        let wait = core::time::Duration::from_nanos(wait_ns).saturating_add(self.clock_lag);
        r.rnr_wait = Some(now.saturating_add(wait));
        r.timer = None;
        self.rc_rewind(qpn, psn);
    }

    /// Completes, in order, every finished WQE at the head of the send queue.
    pub(crate) fn rc_retire(&mut self, now: Instant, qpn: u32) {
        let mut retired = false;
        loop {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                return;
            };
            let Some(w) = qp.sq.front() else {
                break;
            };
            if !w.tx.done {
                break;
            }
            // The common run with the QP in hand: done WQEs that complete nothing and hold no
            // READ / ATOMIC slot leave only their credit position behind.
            if retires_quietly(w) {
                retire_quiet_run(qp, &mut self.spare);
                retired = true;
                continue;
            }
            // What the completion needs is read in place: the WQE is large, and moving it
            // out of the queue costs a copy.
            let (ssn, rwqe_through, signaled, rd) = (w.tx.ssn, w.tx.rwqe_through, w.signaled, w.rd);
            let wc = signaled.then(|| {
                let byte_len = match w.opcode {
                    WrOpcode::AtomicCmpSwp { .. } | WrOpcode::AtomicFetchAdd { .. } => 8,
                    _ => w.length,
                };
                WorkCompletion::new(
                    w.wr_id,
                    WcStatus::Success,
                    w.opcode.wc_opcode(),
                    softib_wire::Qpn::new(qpn),
                )
                .with_byte_len(byte_len)
            });
            // A READ / ATOMIC stops counting against max_rd_atomic when it retires, in order,
            // not when its response arrives: an answered ATOMIC behind a READ still being
            // retried keeps its slot, so the requester never has more READ / ATOMIC requests
            // unretired than the responder keeps for duplicates (max_dest_rd_atomic), and the
            // retried READ is still in the responder's history when it asks again (as rxe,
            // which returns the slot when the WQE completes).
            if matches!(w.opcode, WrOpcode::RdmaRead { .. }) || w.opcode.is_atomic() {
                let r = &mut qp.transport.req;
                r.rd_atomic_outstanding = r.rd_atomic_outstanding.saturating_sub(1);
            }
            if let Some(w) = qp.sq.pop_front() {
                self.spare.recycle(w.payload);
            }
            qp.transport.req.cur = qp.transport.req.cur.saturating_sub(1);
            let c = &mut qp.transport.req.credits;
            c.retired_ssn = ssn;
            c.retired_rwqe = rwqe_through;
            retired = true;
            if let Some(mut wc) = wc {
                // An EE context's WQE completes on the RD QP that posted it.
                let Some((cq, owner)) = self.send_completion_target(qpn, rd) else {
                    continue;
                };
                wc.qp_num = owner;
                if !self.complete_or_error(owner, cq, wc, false) {
                    return;
                }
            }
        }
        if retired {
            if let Some(qp) = self.qps.get_mut(&qpn) {
                let outstanding = super::requester::oldest_unacked(&qp.sq).is_some();
                if !outstanding {
                    qp.transport.req.timer = None;
                } else if qp.transport.req.timer.is_none() {
                    qp.transport.req.timer =
                        transport_deadline(now, qp.attr.timeout, self.clock_lag);
                }
            }
            match super::rd::eecn_of_key(qpn) {
                // The EE context is free for its next message.
                Some(eecn) => self.rd_kick(eecn),
                None => self.check_sq_drained(softib_wire::Qpn::new(qpn)),
            }
            self.schedule_tx(qpn);
        }
    }
}

/// Where READ response packet `psn` of `w` (`len` bytes; the response's last or only packet
/// when `ends`) goes in its buffer: PSN k of the response at k path MTUs. First and middle
/// packets carry exactly one MTU, the last (or only) the rest; `None` for a packet whose
/// length its position does not allow.
#[inline(always)]
fn read_response_offset(w: &SendWqe, psn: Psn, mtu: u32, ends: bool, len: usize) -> Option<u32> {
    let offset = (psn.distance(w.tx.first_psn) as u32).saturating_mul(mtu);
    let remaining = w.length - offset.min(w.length);
    let len = len as u32;
    let fits = if ends {
        len == remaining
    } else {
        len == mtu && remaining > mtu
    };
    fits.then_some(offset)
}

/// A READ or ATOMIC answered at `psn`: forward progress, so the retry counters start over
/// (C9-137, C9-142), a retry that asked up to `psn` is over, and the transport timer runs
/// again from now (`deadline`).
#[inline(always)]
fn answered(r: &mut crate::transport::rc::Requester, psn: Psn, deadline: Option<Instant>) {
    r.retries = 0;
    r.rnr_retries = 0;
    if r.retry_from.is_some_and(|p| psn.distance(p) >= 0) {
        r.retry_from = None;
    }
    r.timer = deadline;
}

/// A done WQE whose retirement completes nothing and returns no READ / ATOMIC slot.
#[inline(always)]
fn retires_quietly(w: &SendWqe) -> bool {
    w.tx.done
        && !w.signaled
        && !matches!(w.opcode, WrOpcode::RdmaRead { .. })
        && !w.opcode.is_atomic()
}

/// Retires the run of WQEs at the front of `qp`'s send queue that [`retires_quietly`]: off
/// the queue, their heap parts back to `spare`, the credit position that of the last.
#[inline(never)]
fn retire_quiet_run(qp: &mut Qp, spare: &mut SpareBuffers) {
    // One pass finds the run, gives back the heap parts (most payloads have none) and notes
    // the last one's credit position; the WQEs are then dropped where they lie, not moved
    // out of the queue one by one.
    let mut quiet = 0;
    let mut last = None;
    for w in qp.sq.iter_mut() {
        if !retires_quietly(w) {
            break;
        }
        if !matches!(w.payload, WqePayload::Sge(_)) {
            spare.recycle(std::mem::replace(
                &mut w.payload,
                WqePayload::Sge(Sge::default()),
            ));
        }
        last = Some((w.tx.ssn, w.tx.rwqe_through));
        quiet += 1;
    }
    let Some((ssn, rwqe_through)) = last else {
        return;
    };
    qp.sq.drain(..quiet);
    let r = &mut qp.transport.req;
    r.cur = r.cur.saturating_sub(quiet);
    r.credits.retired_ssn = ssn;
    r.credits.retired_rwqe = rwqe_through;
}
