//! UC requester and responder (IBA 9.8.2).
//!
//! # Requester
//!
//! A UC send queue runs its WQEs one after the other: SEND (with immediate) and RDMA WRITE
//! (with immediate), segmented by the path MTU into FIRST / MIDDLE / LAST or ONLY packets with
//! the RC requester's own packet builder (`requester::request_packet`, in the UC opcode
//! class). The first packet carries `sq_psn` (C9-173), every further one the previous PSN + 1
//! mod 2^24 (C9-172, C9-175), and PSNs move only while the QP sends (RTS, and SQD to finish a
//! message under way; C9-174). Nothing asks for or waits for an acknowledgement, nothing is
//! retried and no timer runs. A WQE completes when its last packet has been handed to the wire
//! (C9-180): in softib's sans-IO engine, when [`Hca::poll_transmit`] returns it; a local error
//! (an L_Key that does not cover the gather list) completes it in error and moves the QP to
//! ERR.
//!
//! # Responder
//!
//! ```text
//!                  FIRST/ONLY (any PSN, C9-184): ePSN := PSN
//!        +-------------------------------------------------------------+
//!        |                                                             |
//!        v      FIRST, valid        +--------------+  MIDDLE, PSN = ePSN, valid
//!   +---------+ ------------------> |  in message  | <------------+
//!   | between |                     | (SEND: its   | -------------+
//!   | messages| <------------------ |  receive WQE;|
//!   +---------+  LAST, valid:       |  WRITE: its  |
//!     |  ^  ^    complete (SEND,    |  checked     |
//!     |  |  |    WRITE with imm.)   |  range)      |
//!     |  |  |                       +--------------+
//!     |  |  |                         |  |  |
//!     |  |  +-------------------------+  |  +-- FIRST/ONLY (C9-186, C9-189): the message
//!     |  |   MIDDLE/LAST with PSN != ePSN    |    is dropped, the packet starts a new one
//!     |  |   (C9-183, C9-186), or invalid    |
//!     |  |   opcode sequence (C9-188), or    |
//!     |  |   any failed check: the message   |
//!     |  |   is dropped silently             |
//!     |  +----------------------------------- +
//!     |
//!     +-- ONLY, valid: complete; MIDDLE/LAST: dropped (C9-187 rules (1), (5); C9-188)
//! ```
//!
//! Every packet first passes the header checks of [`Hca::handle_frame`] (C9-165: parse, ICRC,
//! destination QP, service class, P_Key, connection). Then, in this order (Figure 117 is not
//! in the seeds; the order is that of 9.8.1 — PSN, opcode sequence, operation, resources,
//! R_Key — with the length checks of 9.8.2.2.5 before the R_Key, as Linux rxe does):
//!
//! 1. the QP accepts requests (RTR, RTS, SQD; C9-182), else dropped (`bad_state`);
//! 2. PSN (C9-183..C9-186): a FIRST / ONLY is accepted whatever its PSN and its PSN becomes the
//!    ePSN (a message in progress is dropped); a MIDDLE / LAST whose PSN is not the ePSN is
//!    dropped with the message in progress (`uc_out_of_order`);
//! 3. opcode sequence (C9-187, C9-188): a MIDDLE / LAST must continue a message of the same
//!    operation (`uc_opcode_seq_err`);
//! 4. operation (C9-168, C9-190): RDMA WRITE needs remote write access on the QP
//!    (`uc_op_not_supported`); reserved UC opcodes never parse (`malformed`);
//! 5. resources (C9-169): a receive WQE for a SEND (at its FIRST / ONLY) and for an RDMA WRITE
//!    with immediate (at its LAST / ONLY), from the QP's receive queue or its SRQ
//!    (`uc_no_recv_wqe`, never an RNR NAK);
//! 6. payload length and PadCnt by position (C9-195..C9-199, `uc_length_err`), then for a
//!    SEND room in the receive buffer (C9-194, `uc_recv_overflow`);
//! 7. R_Key (C9-192.2.1, C9-193): an RDMA WRITE with a nonzero RETH:DMALen needs a valid
//!    R_Key of the QP's PD with remote write access covering `[VA, VA + DMALen)`; every packet
//!    must stay inside DMALen and the LAST end exactly at it (`uc_rkey_violation`,
//!    `uc_length_err`). A zero-length WRITE is not checked, with or without immediate.
//!
//! Nothing is ever sent back. A dropped message never completes a receive WQE: the WQE a
//! dropped SEND had taken goes back to the head of its receive queue (or SRQ) and the next
//! message overwrites whatever the dropped one had placed in it. Only a local error (the
//! receive WQE's own buffer fails its L_Key check) completes the WQE, in error.

use softib_wire::transport::TransportPacket;
use softib_wire::{Operation, Position, Qpn, Service};

use super::requester::{packets_for, request_packet, DEFAULT_PKEY};
use super::Hca;
use crate::transport::rc::InMessage;
use crate::verbs::cq::WorkCompletion;
use crate::verbs::mr::MrSlice;
use crate::verbs::types::{AccessFlags, QpState, WcOpcode, WcStatus};
use crate::verbs::wr::{RecvWqe, WqeState};

/// Largest RETH:DMALen an RDMA WRITE may carry (2^31, as for RC).
const MAX_DMA_LEN: u32 = 1 << 31;

/// Why the UC responder drops a packet; each reason has its counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UcDrop {
    OutOfOrder,
    OpcodeSeq,
    NotSupported,
    Length,
    RecvOverflow,
    NoRecvWqe,
    RKey,
}

impl Hca {
    /// True when the UC QP has a packet to send: a WQE queued in RTS, or the rest of a
    /// message already under way in SQD.
    pub(crate) fn uc_has_tx_work(&self, qpn: u32) -> bool {
        let Some(qp) = self.qps.get(&qpn) else {
            return false;
        };
        match qp.sq.front() {
            Some(w) => match qp.attr.qp_state {
                QpState::Rts => true,
                QpState::Sqd => w.tx.started,
                _ => false,
            },
            None => false,
        }
    }

    /// Builds the next request packet of UC QP `qpn` into `out`; completes the WQE when this
    /// was its last packet (C9-180). Returns true when a frame was written.
    pub(crate) fn uc_next_packet(&mut self, qpn: u32, out: &mut Vec<u8>) -> bool {
        if !self.uc_has_tx_work(qpn) {
            return false;
        }
        let qp = self.qps.get_mut(&qpn).expect("checked");
        let mtu = qp.attr.path_mtu.bytes();
        let psn = qp.transport.next_psn;
        let dest_qp = Qpn::new(qp.attr.dest_qp_num);
        let w = qp.sq.front_mut().expect("checked");
        if !w.tx.started {
            w.tx.started = true;
            w.tx.first_psn = psn;
            w.tx.npsn = packets_for(w.length, mtu);
            w.state = WqeState::InProgress;
        }
        let idx = w.tx.sent_once;
        let (mut headers, plan, last) = request_packet(w, idx, psn, mtu, Service::Uc);
        headers.bth.dest_qp = dest_qp;
        headers.bth.pkey = DEFAULT_PKEY;
        headers.bth.mig_req = super::apm::mig_req(&qp.attr);
        w.tx.sent_once = idx + 1;
        w.tx.all_sent = last;
        // Every request packet takes the next PSN (C9-175).
        qp.transport.next_psn = psn.next();

        match self.build_request(qpn, 0, plan, headers, None, out) {
            Ok(true) => {}
            Ok(false) => {
                // The QP has no usable address: nothing can be sent, the WQE fails locally.
                self.rc_complete_error(qpn, 0, WcStatus::LocQpOpErr);
                return false;
            }
            Err(status) => {
                self.rc_complete_error(qpn, 0, status);
                return false;
            }
        }
        if last {
            self.uc_complete_send(qpn);
        }
        true
    }

    /// The head WQE's last packet went to the wire: it is complete (C9-180).
    fn uc_complete_send(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let Some(w) = qp.sq.pop_front() else {
            return;
        };
        let (wr_id, opcode, length, signaled) = (w.wr_id, w.opcode, w.length, w.signaled);
        self.spare.recycle(w.payload);
        let cq = qp.send_cq;
        let qpn_w = Qpn::new(qpn);
        if signaled {
            let wc = WorkCompletion::new(wr_id, WcStatus::Success, opcode.wc_opcode(), qpn_w)
                .with_byte_len(length);
            if !self.complete_or_error(qpn_w, cq, wc, false) {
                return;
            }
        }
        self.check_sq_drained(qpn_w);
    }

    /// A UC request packet that passed the header checks of [`Hca::handle_frame`].
    pub(crate) fn uc_handle_request(&mut self, qpn: u32, t: &TransportPacket<'_>) {
        let Ok(info) = t.info() else {
            return;
        };
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        // ePSN and message state change only while the QP receives (C9-182).
        if !matches!(qp.attr.qp_state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            self.counters.bad_state += 1;
            return;
        }
        let (op, pos) = (info.operation, info.position);
        let psn = t.headers.bth.psn;
        let starts = matches!(pos, Position::First | Position::Only);
        let in_order = psn == qp.transport.expected_psn;
        if !in_order {
            // o9-131: a PSN that is not the ePSN means packets (and so messages) were lost.
            self.counters.uc_psn_gaps += 1;
        }
        if starts {
            // A FIRST / ONLY starts a new message whatever the ePSN (C9-184); a message in
            // progress is dropped, whether the new one broke the PSN sequence (C9-186) or the
            // opcode sequence (C9-189).
            if !matches!(qp.transport.resp.msg, InMessage::None) {
                if in_order {
                    self.counters.uc_opcode_seq_err += 1;
                }
                self.uc_abandon(qpn);
            }
            let qp = self.qps.get_mut(&qpn).expect("checked");
            qp.transport.expected_psn = psn;
        } else {
            if !in_order {
                // C9-183, C9-186: the message in progress is dropped with this packet.
                self.uc_drop(qpn, psn, false, UcDrop::OutOfOrder);
                return;
            }
            // C9-187 rules (2)-(5): only MIDDLE / LAST of the same operation continue a
            // message; with none in progress they are dropped (C9-188).
            let continues = matches!(
                (&qp.transport.resp.msg, op),
                (InMessage::Send { .. }, Operation::Send)
                    | (InMessage::Write { .. }, Operation::RdmaWrite)
            );
            if !continues {
                self.uc_drop(qpn, psn, false, UcDrop::OpcodeSeq);
                return;
            }
        }
        if let Err(why) = self.uc_execute(qpn, t, op, pos) {
            self.uc_drop(qpn, psn, starts, why);
        }
    }

    /// Validates and executes a UC request packet that is in sequence (its PSN is the ePSN,
    /// or it starts a message). On `Err` nothing was completed, `resp.msg` still holds the
    /// message in progress (if any) and the caller drops it.
    fn uc_execute(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        op: Operation,
        pos: Position,
    ) -> Result<(), UcDrop> {
        let qp = &self.qps[&qpn];
        if op == Operation::RdmaWrite
            && !qp.attr.qp_access_flags.contains(AccessFlags::REMOTE_WRITE)
        {
            return Err(UcDrop::NotSupported);
        }
        match op {
            Operation::Send => self.uc_exec_send(qpn, t, pos),
            Operation::RdmaWrite => self.uc_exec_write(qpn, t, pos),
            // The UC opcode table holds only SEND and RDMA WRITE.
            _ => Err(UcDrop::NotSupported),
        }
    }

    /// Payload length and PadCnt by position (C9-195..C9-199).
    fn uc_length_ok(&self, qpn: u32, t: &TransportPacket<'_>, pos: Position) -> bool {
        let mtu = self.qps[&qpn].attr.path_mtu.bytes() as usize;
        let len = t.payload.len();
        match pos {
            // C9-195, C9-199.
            Position::First | Position::Middle => len == mtu && t.headers.bth.pad_cnt == 0,
            // C9-197.
            Position::Last => (1..=mtu).contains(&len),
            // C9-196.
            Position::Only => len <= mtu,
        }
    }

    fn uc_exec_send(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        pos: Position,
    ) -> Result<(), UcDrop> {
        let qpn_w = Qpn::new(qpn);
        let (mut wqe, offset) = if matches!(pos, Position::First | Position::Only) {
            match self.take_recv_wqe(qpn_w) {
                Some(w) => (w, 0u64),
                None => return Err(UcDrop::NoRecvWqe),
            }
        } else {
            let qp = self.qps.get_mut(&qpn).expect("checked");
            match std::mem::take(&mut qp.transport.resp.msg) {
                InMessage::Send { wqe, offset } => (wqe, offset),
                other => {
                    qp.transport.resp.msg = other;
                    return Err(UcDrop::OpcodeSeq);
                }
            }
        };
        if !self.uc_length_ok(qpn, t, pos) {
            // The WQE stays with the message, which the caller drops (returning the WQE).
            let qp = self.qps.get_mut(&qpn).expect("checked");
            qp.transport.resp.msg = InMessage::Send { wqe, offset };
            return Err(UcDrop::Length);
        }
        let end = offset + t.payload.len() as u64;
        if end > wqe.length {
            // C9-194: the message does not fit; the WQE stays with the message, which the
            // caller drops (and so returns the WQE to its queue).
            let qp = self.qps.get_mut(&qpn).expect("checked");
            qp.transport.resp.msg = InMessage::Send { wqe, offset };
            return Err(UcDrop::RecvOverflow);
        }
        let qp = &self.qps[&qpn];
        let (pd, recv_cq) = (qp.pd, qp.recv_cq);
        let sges = std::mem::take(&mut wqe.sg_list);
        let ok = self.scatter(pd, &sges, offset, t.payload);
        wqe.sg_list = sges;
        if !ok {
            // A local error: the receive WQE's own buffer is bad. It completes in error (it
            // could never take a message) and the message is dropped.
            self.counters.uc_local_err += 1;
            self.counters.uc_msgs_dropped += 1;
            let qp = self.qps.get_mut(&qpn).expect("checked");
            qp.transport.expected_psn = t.headers.bth.psn.next();
            let wc = WorkCompletion::new(wqe.wr_id, WcStatus::LocProtErr, WcOpcode::Recv, qpn_w)
                .with_byte_len(0);
            let _ = self.complete_or_error(qpn_w, recv_cq, wc, false);
            return Ok(());
        }
        let h = &t.headers;
        let qp = self.qps.get_mut(&qpn).expect("checked");
        qp.transport.expected_psn = h.bth.psn.next();
        if matches!(pos, Position::Last | Position::Only) {
            qp.transport.resp.msg = InMessage::None;
            let mut wc = WorkCompletion::new(wqe.wr_id, WcStatus::Success, WcOpcode::Recv, qpn_w)
                .with_byte_len(end as u32);
            if let Some(imm) = h.immdt {
                wc = wc.with_imm(imm.imm);
            }
            self.spare.recycle_recv(wqe.sg_list);
            let _ = self.complete_or_error(qpn_w, recv_cq, wc, h.bth.solicited);
        } else {
            qp.transport.resp.msg = InMessage::Send { wqe, offset: end };
        }
        Ok(())
    }

    fn uc_exec_write(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        pos: Position,
    ) -> Result<(), UcDrop> {
        let qpn_w = Qpn::new(qpn);
        let h = &t.headers;
        let ends = matches!(pos, Position::Last | Position::Only);
        // Resources first (C9-169 before C9-170): a WRITE with immediate consumes a receive
        // WQE, found before the R_Key is looked at and before any byte is placed.
        let wqe = if ends && h.immdt.is_some() {
            match self.take_recv_wqe(qpn_w) {
                Some(w) => Some(w),
                None => return Err(UcDrop::NoRecvWqe),
            }
        } else {
            None
        };
        let placed = if self.uc_length_ok(qpn, t, pos) {
            self.uc_place_write(qpn, t, pos)
        } else {
            Err(UcDrop::Length)
        };
        let end = match placed {
            Ok(end) => end,
            Err(why) => {
                if let Some(w) = wqe {
                    self.uc_return_recv_wqe(qpn, w);
                }
                return Err(why);
            }
        };
        let qp = self.qps.get_mut(&qpn).expect("checked");
        qp.transport.expected_psn = h.bth.psn.next();
        if let (Some(w), Some(imm)) = (wqe, h.immdt) {
            let recv_cq = qp.recv_cq;
            let wc =
                WorkCompletion::new(w.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm, qpn_w)
                    .with_byte_len(end as u32)
                    .with_imm(imm.imm);
            self.spare.recycle_recv(w.sg_list);
            let _ = self.complete_or_error(qpn_w, recv_cq, wc, h.bth.solicited);
        }
        Ok(())
    }

    /// Checks an RDMA WRITE packet against its target range and places its payload; updates
    /// the message state (`Write` while more packets are due, `None` after the LAST / ONLY)
    /// and returns the bytes placed so far in the message.
    fn uc_place_write(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        pos: Position,
    ) -> Result<u64, UcDrop> {
        let h = &t.headers;
        let starts = matches!(pos, Position::First | Position::Only);
        let ends = matches!(pos, Position::Last | Position::Only);
        let qp = self.qps.get_mut(&qpn).expect("checked");
        let pd = qp.pd;
        let (slice, offset) = if starts {
            // FIRST / ONLY WRITE opcodes always carry a RETH (the parser checks the layout).
            let Some(reth) = h.reth else {
                return Err(UcDrop::Length);
            };
            if reth.dma_len > MAX_DMA_LEN {
                return Err(UcDrop::Length);
            }
            // C9-192.2.1; a zero-length WRITE is not checked at all (C9-193): the empty
            // range passes with any R_Key.
            let slice = self
                .check_remote(
                    pd,
                    reth.rkey,
                    reth.va,
                    u64::from(reth.dma_len),
                    AccessFlags::REMOTE_WRITE,
                )
                .map_err(|_| UcDrop::RKey)?;
            (slice, 0u64)
        } else {
            match qp.transport.resp.msg {
                InMessage::Write { slice, offset } => (slice, offset),
                _ => return Err(UcDrop::OpcodeSeq),
            }
        };
        let end = offset + t.payload.len() as u64;
        // Each packet stays inside the DMA length, and the LAST ends exactly at it (per packet
        // from its payload length, C9-192.2.1; the sum check of 9.7.4.1.6 as for RC).
        if end > slice.len as u64 || (ends && end != slice.len as u64) {
            return Err(UcDrop::Length);
        }
        if !t.payload.is_empty() {
            let sub = MrSlice {
                mr: slice.mr,
                offset: slice.offset + offset as usize,
                len: t.payload.len(),
            };
            match self.mr_slice_mut(&sub) {
                Some(dst) => super::place(dst, t.payload),
                // The region went away between packets: an R_Key violation now.
                None => return Err(UcDrop::RKey),
            }
        }
        let qp = self.qps.get_mut(&qpn).expect("checked");
        qp.transport.resp.msg = if ends {
            InMessage::None
        } else {
            InMessage::Write { slice, offset: end }
        };
        Ok(end)
    }

    /// Drops the packet at `psn` for `why`, and with it the message in progress (C9-186,
    /// C9-188, 9.9.3: invalid UC requests are dropped silently). `starts`: the packet was a
    /// FIRST / ONLY, so its own message is lost too. The ePSN moves past the packet (the next
    /// one in sequence would be PSN + 1), so the gap counter counts gaps, not the packets
    /// dropped while waiting for the next FIRST / ONLY.
    fn uc_drop(&mut self, qpn: u32, psn: softib_wire::Psn, starts: bool, why: UcDrop) {
        let c = &mut self.counters;
        match why {
            UcDrop::OutOfOrder => c.uc_out_of_order += 1,
            UcDrop::OpcodeSeq => c.uc_opcode_seq_err += 1,
            UcDrop::NotSupported => c.uc_op_not_supported += 1,
            UcDrop::Length => c.uc_length_err += 1,
            UcDrop::RecvOverflow => c.uc_recv_overflow += 1,
            UcDrop::NoRecvWqe => c.uc_no_recv_wqe += 1,
            UcDrop::RKey => c.uc_rkey_violation += 1,
        }
        let abandoned = self.uc_abandon(qpn);
        if starts && !abandoned {
            self.counters.uc_msgs_dropped += 1;
        }
        if let Some(qp) = self.qps.get_mut(&qpn) {
            qp.transport.expected_psn = psn.next();
        }
    }

    /// Drops the message in progress, if any (counted in `uc_msgs_dropped`): a SEND's receive
    /// WQE goes back to the head of its queue, for the next message to overwrite. Returns
    /// whether there was one.
    fn uc_abandon(&mut self, qpn: u32) -> bool {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        match std::mem::take(&mut qp.transport.resp.msg) {
            InMessage::None => false,
            // (Only an XRC target delegates.)
            InMessage::Write { .. } | InMessage::Delegated { .. } => {
                self.counters.uc_msgs_dropped += 1;
                true
            }
            InMessage::Send { wqe, .. } => {
                self.counters.uc_msgs_dropped += 1;
                self.uc_return_recv_wqe(qpn, wqe);
                true
            }
        }
    }

    /// Puts a receive WQE taken for a message that was dropped back at the head of the QP's
    /// receive queue or SRQ, where it came from.
    fn uc_return_recv_wqe(&mut self, qpn: u32, wqe: RecvWqe) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        match qp.srq {
            Some(srq) => {
                if let Some(s) = self.srqs.get_mut(srq.0) {
                    s.queue.push_front(wqe);
                }
            }
            None => qp.rq.push_front(wqe),
        }
    }
}
