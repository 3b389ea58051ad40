//! RC responder (IBA 9.7.4, 9.7.5): PSN classification (new / duplicate / invalid), opcode
//! sequence, length, R_Key and resource checks, execution of SEND, RDMA WRITE, RDMA READ and
//! ATOMIC, duplicate handling, and the responses (ACK, NAK, RNR NAK, READ responses, atomic
//! ACKs) in PSN order.
//!
//! Duplicates are answered in PSN order, earliest first: one that arrives while a READ
//! response for a later PSN streams stops that response (C9-110).
//! [`Hca::inject_responder_fault`] arms one-shot local errors for duplicate answers, to show
//! the silent drops the IBA demands for them (C9-106, o9-68).
//!
//! NAKs of error classes that end the connection (invalid request, remote access error, remote
//! operational error, and for XRC an XRCETH violation: invalid RD request) are sent first and
//! then move the QP to ERR, as Linux rxe does.
//!
//! The same responder serves XRC targets: a request's receive WQE, completion CQ and
//! protection domain come from the XRC SRQ its XRCETH names ([`RecvTarget`], `xrc.rs`), and
//! the responses carry XRC opcodes.
//!
//! End-to-end credits (IBA 9.7.7.2): a receive queue not attached to an SRQ generates them
//! (C9-150.2.1). Every AETH of a positive acknowledgement (ACK, READ response, ATOMIC ACK,
//! duplicate or unsolicited) carries the receive WQEs posted beyond those its MSN's messages
//! consumed, Table 52 encoded and rounded down (C9-157.2.1, C9-158.2.1, C9-161); the count is
//! taken when the packet is built, so it is as fresh as it can be. When receives are posted
//! while the requester has used every credit it was told about, an unsolicited ACK (a copy of
//! the latest positive acknowledgement with the current MSN, C9-152) carries the news. QPs on
//! an SRQ send the "invalid" code 0b11111.

use softib_wire::aeth::{Aeth, CreditCode};
use softib_wire::atomic_ack_eth::AtomicAckEth;
use softib_wire::bth::Bth;
use softib_wire::opcode::Opcode;
use softib_wire::transport::{TransportHeaders, TransportPacket};
use softib_wire::{Operation, Position, Psn};

use super::requester::{packets_for, DEFAULT_PKEY};
use super::Hca;
use crate::error::QpError;
use crate::time::Instant;
use crate::transport::rc::{InMessage, RdAtomicResource, ResponderFault, Response};
use crate::verbs::cq::WorkCompletion;
use crate::verbs::event::QpErrorCause;
use crate::verbs::mr::MrSlice;
use crate::verbs::types::{AccessFlags, QpState, QpType, WcOpcode, WcStatus};
use crate::verbs::wr::Sge;

/// AETH syndrome of an ACK that carries no credit information: the credit code 0b11111
/// ("invalid"), which QPs attached to an SRQ send and which Linux rxe sends on every ACK.
pub const SYNDROME_ACK_NO_CREDITS: u8 = 0x1f;
/// AETH syndrome class of a positive ACK as queued; the credit bits are set when it is built.
const SYNDROME_ACK: u8 = 0x00;
/// Bits 7:5 of the AETH syndrome, and their value for an RNR NAK.
const SYNDROME_CLASS: u8 = 0xe0;
const SYNDROME_RNR_NAK: u8 = 0x20;
const NAK_PSN_SEQ: u8 = 0x60;
const NAK_INVALID_REQUEST: u8 = 0x61;
const NAK_REMOTE_ACCESS: u8 = 0x62;
const NAK_REMOTE_OP: u8 = 0x63;
const NAK_INVALID_RD_REQUEST: u8 = 0x64;
/// Largest RDMA READ / WRITE length (C9-94).
const MAX_DMA_LEN: u32 = 1 << 31;

/// Where the receive side of a request lands: the QP it is for (`qpn`, which completions
/// name), the receive queue that supplies its receive WQE (`srq`, or that QP's own when
/// `None`), the CQ of that WQE's completion, and the protection domain its buffers and R_Keys
/// are checked in. An RC QP gives its own; an XRC target takes them from the XRC SRQ the
/// request's XRCETH names; an EE context from the RD QP BTH:DestQP names (`rd.rs`).
///
/// `remote` is the SRQ number when the XRCETH names an XRC SRQ another HCA publishes in the
/// target's shared domain (`xrc_shared.rs`): its receive WQEs are the owner's, and the
/// protection domain is none of this HCA's (every R_Key check of a non-empty range fails).
#[derive(Debug, Clone, Copy)]
pub(super) struct RecvTarget {
    pub(super) qpn: u32,
    pub(super) pd: crate::verbs::PdHandle,
    pub(super) srq: Option<crate::verbs::SrqHandle>,
    pub(super) cq: crate::verbs::CqHandle,
    pub(super) remote: Option<u32>,
}

/// Why a new request is refused.
enum Refusal {
    /// NAK with `syndrome`, then the QP enters ERR with `cause`.
    Fatal(u8, QpErrorCause),
    /// RNR NAK: no receive WQE.
    Rnr,
}

impl Hca {
    pub(crate) fn rc_handle_request(&mut self, now: Instant, qpn: u32, t: &TransportPacket<'_>) {
        self.rc_request(now, qpn, &t.headers.bth, Some(t), None);
    }

    /// The common request in fewer steps: on an RC QP without an SRQ, a new SEND or RDMA
    /// WRITE of one packet (with or without immediate data) at ePSN, between messages, whose
    /// receive WQE (if it takes one) is queued with one scatter entry that holds the payload,
    /// and whose checks all pass. Its effects are those of [`Hca::rc_handle_request`] for the
    /// same packet (the tests run workloads both ways and compare). False, with nothing
    /// changed, for anything else: the general path takes it.
    #[inline]
    pub(crate) fn rc_express_handle_request(
        &mut self,
        qpn: u32,
        bth: &Bth,
        reth: Option<softib_wire::reth::Reth>,
        immdt: Option<softib_wire::immdt::ImmDt>,
        payload: &[u8],
    ) -> bool {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        if qp.qp_type != QpType::Rc
            || qp.srq.is_some()
            || !matches!(qp.attr.qp_state, QpState::Rtr | QpState::Rts | QpState::Sqd)
            || bth.psn != qp.transport.expected_psn
            || !matches!(qp.transport.resp.msg, InMessage::None)
            || payload.len() > qp.attr.path_mtu.bytes() as usize
        {
            return false;
        }
        let (write, imm) = match bth.opcode {
            Opcode::RC_SEND_ONLY => (false, None),
            Opcode::RC_SEND_ONLY_WITH_IMMEDIATE => (false, immdt),
            Opcode::RC_RDMA_WRITE_ONLY => (true, None),
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => (true, immdt),
            _ => return false,
        };
        let len = payload.len();
        let consumes = !write || imm.is_some();
        // The receive WQE, and where the payload goes.
        let wqe = match (consumes, qp.rq.front()) {
            (false, _) => None,
            (true, Some(w)) => Some(w),
            (true, None) => return false,
        };
        let (key, addr, needed, remote) = if write {
            let Some(reth) = reth else {
                return false;
            };
            if !qp.attr.qp_access_flags.contains(AccessFlags::REMOTE_WRITE)
                || reth.dma_len as usize != len
                || reth.dma_len > MAX_DMA_LEN
            {
                return false;
            }
            (reth.rkey, reth.va, AccessFlags::REMOTE_WRITE, true)
        } else {
            let Some(w) = wqe else {
                return false;
            };
            let sge = match &*w.sg_list {
                [one] if u64::from(one.length) >= len as u64 => *one,
                [] if len == 0 => Sge::default(),
                _ => return false,
            };
            if len as u64 > w.length {
                return false;
            }
            (sge.lkey, sge.addr, AccessFlags::LOCAL_WRITE, false)
        };
        if len > 0 {
            // Placed by a same-host sender: checked all the same, not copied again.
            let placed = remote && self.placed_by_sender;
            match self
                .mrs
                .bytes_mut(qp.pd, key, addr, len as u64, needed, remote)
            {
                Some(bytes) if !placed => super::place(bytes, payload),
                Some(_) => {}
                None => return false,
            }
        }
        // Placed: the state moves as the general path moves it. Of the receive WQE only its
        // identifier is still needed (it is not moved out of the queue).
        self.counters.express_requests += 1;
        let wr_id = wqe.map(|w| w.wr_id);
        if consumes {
            qp.rq.pop_front();
        }
        let (recv_cq, qpn_w) = (qp.recv_cq, qp.qpn);
        qp.transport.expected_psn = qp.transport.expected_psn.next();
        let r = &mut qp.transport.resp;
        r.nak_seq_outstanding = false;
        r.msn = r.msn.add(1);
        r.xrc_msg = None;
        if wr_id.is_some() {
            r.credits.consumed = r.credits.consumed.wrapping_add(1);
        }
        // The ACK and the transmit list with the QP in hand (no look-up of it again).
        ack_request_to(qp, bth.psn, bth.ack_req, 0);
        super::datapath::schedule(qp, &mut self.tx_ready, qpn);
        if let Some(wr_id) = wr_id {
            let opcode = if write {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            };
            let mut wc = WorkCompletion::new(wr_id, WcStatus::Success, opcode, qpn_w)
                .with_byte_len(len as u32);
            if let Some(imm) = imm {
                wc = wc.with_imm(imm.imm);
            }
            if !self.complete_or_error(qpn_w, recv_cq, wc, bth.solicited) {
                // The CQ overran and the QP is in ERR: its timers stop, as after any frame.
                self.rearm_timer(qpn);
            }
        }
        true
    }

    /// The common RDMA READ request in fewer steps: on an RC QP, a new READ at ePSN between
    /// messages, with room among the READs and ATOMICs in progress, whose R_Key grants it.
    /// Its effects are those of [`Hca::rc_handle_request`] for the same packet (the response
    /// queued, the resource kept for duplicates, ePSN past its response PSNs; the tests run
    /// workloads both ways and compare). False, with nothing changed, for anything else.
    #[inline]
    pub(crate) fn rc_express_read_request(
        &mut self,
        qpn: u32,
        bth: &Bth,
        reth: softib_wire::reth::Reth,
    ) -> bool {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        if !express_rd_atomic(qp, bth, AccessFlags::REMOTE_READ) || reth.dma_len > MAX_DMA_LEN {
            return false;
        }
        let Ok(slice) = self.mrs.check_remote(
            qp.pd,
            reth.rkey,
            reth.va,
            u64::from(reth.dma_len),
            AccessFlags::REMOTE_READ,
        ) else {
            return false;
        };
        // Checked: the state moves as `rc_request` and `rc_exec_read` move it.
        self.counters.express_requests += 1;
        qp.transport.resp.nak_seq_outstanding = false;
        queue_read(qp, bth.psn, &reth, slice, 0);
        super::datapath::schedule(qp, &mut self.tx_ready, qpn);
        true
    }

    /// The common ATOMIC request (COMPARE_SWAP or FETCH_ADD, `bth.opcode`) in fewer steps: on
    /// an RC QP, a new one at ePSN between messages, with room among the READs and ATOMICs
    /// in progress, aligned, whose R_Key grants it. Its effects are those of
    /// [`Hca::rc_handle_request`] for the same packet (the operation done, its ACK queued, the
    /// result kept for duplicates; the tests run workloads both ways and compare). False,
    /// with nothing changed, for anything else.
    #[inline]
    pub(crate) fn rc_express_atomic_request(
        &mut self,
        qpn: u32,
        bth: &Bth,
        a: softib_wire::atomic_eth::AtomicEth,
    ) -> bool {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        if !express_rd_atomic(qp, bth, AccessFlags::REMOTE_ATOMIC) || a.va % 8 != 0 {
            return false;
        }
        let Some(mem) =
            self.mrs
                .bytes_mut(qp.pd, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC, true)
        else {
            return false;
        };
        let Ok(b) = <[u8; 8]>::try_from(&*mem) else {
            return false;
        };
        // Checked: the operation and the state as `rc_request` and `rc_exec_atomic` do them
        // (operands in little-endian byte order, as there).
        let orig = u64::from_le_bytes(b);
        let is_cas = bth.opcode == Opcode::RC_COMPARE_SWAP;
        mem.copy_from_slice(&atomic_result(is_cas, orig, &a).to_le_bytes());
        self.counters.express_requests += 1;
        qp.transport.resp.nak_seq_outstanding = false;
        queue_atomic(qp, bth.psn, orig, 0);
        super::datapath::schedule(qp, &mut self.tx_ready, qpn);
        true
    }

    /// A request whose BTH:OpCode is a reserved RC code (9.7.4.1.4, C9-84). It is classified
    /// by PSN like any request: at ePSN it is an invalid request (NAK-Invalid Request, after
    /// everything received before it); as a duplicate there is nothing to answer and it is
    /// dropped silently (C9-115); ahead of ePSN it is a PSN sequence error. For an EE context
    /// (a reserved RD opcode), `rd_src` is the requesting QP its DETH names.
    pub(crate) fn rc_handle_reserved_opcode(
        &mut self,
        now: Instant,
        qpn: u32,
        bth: &Bth,
        rd_src: Option<u32>,
    ) {
        self.rc_request(now, qpn, bth, None, rd_src);
    }

    /// PSN classification and dispatch of a request; `t` is `None` for a reserved opcode.
    /// An EE context's request names its QPs in BTH:DestQP and DETH:SrcQP (`rd_src` when
    /// there is no parsed packet); responses go to the source QP.
    fn rc_request(
        &mut self,
        _now: Instant,
        qpn: u32,
        bth: &Bth,
        t: Option<&TransportPacket<'_>>,
        rd_src: Option<u32>,
    ) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        if !matches!(qp.attr.qp_state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            self.counters.bad_state += 1;
            return;
        }
        let psn = bth.psn;
        let epsn = qp.transport.expected_psn;
        let d = psn.distance(epsn);
        let rd = qp.qp_type == QpType::Rd;
        let src = t
            .and_then(|t| t.headers.deth)
            .map(|d| d.src_qp.value())
            .or(rd_src)
            .unwrap_or(0);
        let ids = (bth.dest_qp.value(), src);
        if bth.opcode == Opcode::RD_RESYNC {
            self.rd_resync(qpn, psn, ids);
            return;
        }
        // An EE context answers the QP that asked (0 for a QP: its connection's).
        let to = if rd { src } else { 0 };
        if d > 0 {
            // Invalid (ahead of ePSN): one NAK-PSN sequence error, then silence (9.7.4.1.2).
            self.counters.rcvd_seq_err += 1;
            let resp = &mut qp.transport.resp;
            if resp.nak_seq_outstanding {
                self.counters.out_of_seq_dropped += 1;
            } else {
                resp.nak_seq_outstanding = true;
                let msn = resp.msn;
                let base = resp.credits.consumed;
                resp.responses.push_back(Response::Ack {
                    psn: epsn,
                    syndrome: NAK_PSN_SEQ,
                    msn,
                    base,
                    to,
                });
                self.counters.nak_sent += 1;
                self.schedule_tx(qpn);
            }
            return;
        }
        if d < 0 {
            self.counters.duplicate_request += 1;
            let last = qp.transport.resp.rd.as_ref().map(|d| d.last);
            if rd && last != Some(ids) {
                // Not from the QPs of the latest new request: ignored (o9-38.a1).
                self.counters.rd_qpn_mismatch += 1;
                return;
            }
            if let Some(t) = t {
                self.rc_duplicate(qpn, t);
            }
            return;
        }
        qp.transport.resp.nak_seq_outstanding = false;
        if rd {
            let r = qp.transport.resp.rd.get_or_insert_with(Default::default);
            let pos = t.and_then(|t| t.info().ok()).map(|i| i.position);
            let continues = matches!(pos, Some(Position::Middle | Position::Last));
            if continues && r.first.is_some_and(|f| f != ids) {
                // A MIDDLE or LAST of another message than the latest FIRST's: ignored, and
                // ePSN stays (o9-38.a1).
                self.counters.rd_qpn_mismatch += 1;
                return;
            }
            if pos == Some(Position::First) {
                r.first = Some(ids);
            }
            r.last = ids;
        }
        let result = match t {
            Some(t) => self.rc_execute(qpn, t),
            None => Err(invalid()),
        };
        match result {
            Ok(()) => {}
            Err(Refusal::Rnr) => {
                let qp = self.qps.get_mut(&qpn).expect("checked");
                let syndrome = 0x20 | (qp.attr.min_rnr_timer & 0x1f);
                let r = &mut qp.transport.resp;
                let (msn, base) = (r.msn, r.credits.consumed);
                r.responses.push_back(Response::Ack {
                    psn,
                    syndrome,
                    msn,
                    base,
                    to,
                });
                self.counters.rnr_nak_sent += 1;
            }
            Err(Refusal::Fatal(syndrome, cause)) => {
                let qp = self.qps.get_mut(&qpn).expect("checked");
                let msn = qp.transport.resp.msn;
                // A SEND in progress ends here: the receive WQE it took completes with flush
                // error now (the QP enters ERR once the NAK is sent and flushes the rest).
                self.abort_in_message(qpn, WcStatus::WrFlushErr);
                let qp = self.qps.get_mut(&qpn).expect("checked");
                let r = &mut qp.transport.resp;
                if qp.qp_type == QpType::Rd {
                    // An EE context serves other QPs: the NAK ends this message only, and the
                    // requester resynchronises (o9-38.a2).
                    let base = r.credits.consumed;
                    r.responses.push_back(Response::Ack {
                        psn,
                        syndrome,
                        msn,
                        base,
                        to,
                    });
                } else {
                    r.responses.push_back(Response::Nak {
                        psn,
                        syndrome,
                        msn,
                        cause,
                    });
                }
                self.counters.nak_sent += 1;
            }
        }
        self.schedule_tx(qpn);
    }

    /// Ends the message the responder of `qpn` is in the middle of, if any: a SEND's receive
    /// WQE completes with `status` on its CQ (an XRC SRQ's, an RD destination QP's, or the
    /// QP's own).
    fn abort_in_message(&mut self, qpn: u32, status: WcStatus) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let r = &mut qp.transport.resp;
        let rd_msg = r.rd.as_mut().and_then(|d| d.msg.take());
        let (cq, owner) = match (rd_msg, r.xrc_msg) {
            (Some((dest, cq)), _) => (cq, softib_wire::Qpn::new(dest)),
            (None, Some((_, cq))) => (cq, qp.qpn),
            (None, None) => (qp.recv_cq, qp.qpn),
        };
        r.xrc_msg = None;
        match std::mem::take(&mut r.msg) {
            InMessage::Send { wqe, .. } => {
                let wc =
                    WorkCompletion::new(wqe.wr_id, status, WcOpcode::Recv, owner).with_byte_len(0);
                let _ = self.push_completion(cq, wc, false);
            }
            // The owner of the SRQ holds the WQE: it completes it with flush error.
            InMessage::Delegated { srqn } => self.xrc_delegate_abort(srqn, qpn),
            _ => {}
        }
    }

    /// An RD RESYNC at `psn` from the QPs `ids` (destination, source) reached EE context
    /// `qpn` (o9-38.a2): whatever its QPNs and the opcode sequence, if `psn` is at or after
    /// ePSN the EEC expects `psn` + 1 next and any message in progress is aborted (a partly
    /// filled receive WQE completes with `IBV_WC_REM_ABORT_ERR`); an older one is a duplicate
    /// and ePSN stays. Either way the RESYNC is acknowledged with its own PSN, to its source
    /// QP.
    fn rd_resync(&mut self, qpn: u32, psn: Psn, ids: (u32, u32)) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let epsn = qp.transport.expected_psn;
        if psn.distance(epsn) >= 0 {
            qp.transport.expected_psn = psn.next();
            let r = &mut qp.transport.resp;
            r.nak_seq_outstanding = false;
            r.msn = r.msn.add(1);
            let d = r.rd.get_or_insert_with(Default::default);
            d.last = ids;
            d.first = None;
            self.abort_in_message(qpn, WcStatus::RemAbortErr);
        } else {
            self.counters.duplicate_request += 1;
        }
        let r = &mut self.qps.get_mut(&qpn).expect("checked").transport.resp;
        let (msn, base) = (r.msn, r.credits.consumed);
        r.responses.push_back(Response::Ack {
            psn,
            syndrome: SYNDROME_ACK,
            msn,
            base,
            to: ids.1,
        });
        self.schedule_tx(qpn);
    }

    /// Validates and executes a new request (PSN = ePSN).
    fn rc_execute(&mut self, qpn: u32, t: &TransportPacket<'_>) -> Result<(), Refusal> {
        let h = &t.headers;
        let info = t.info().map_err(|_| invalid())?;
        let qp = &self.qps[&qpn];
        let rd = qp.qp_type == QpType::Rd;
        let Some(target) = self.recv_target(qp, t) else {
            if rd {
                self.counters.rd_bad_dest += 1;
            } else {
                self.counters.xrc_bad_srq += 1;
            }
            return Err(Refusal::Fatal(
                NAK_INVALID_RD_REQUEST,
                QpErrorCause::InvalidRequest,
            ));
        };
        let mtu = qp.attr.path_mtu.bytes() as usize;
        let pd = target.pd;
        // The access rights are the receiving QP's (an EE context has none of its own).
        let access = if rd {
            self.qps[&target.qpn].attr.qp_access_flags
        } else {
            qp.attr.qp_access_flags
        };
        let len = t.payload.len();
        let (op, pos) = (info.operation, info.position);

        // Opcode sequence (9.7.4.1.3): inside a message only its MIDDLE / LAST may follow;
        // between messages MIDDLE / LAST are illegal.
        let seq_ok = matches!(
            (&qp.transport.resp.msg, op, pos),
            (InMessage::None, _, Position::First | Position::Only)
                | (
                    InMessage::Send { .. } | InMessage::Delegated { .. },
                    Operation::Send,
                    Position::Middle | Position::Last
                )
                | (
                    InMessage::Write { .. },
                    Operation::RdmaWrite,
                    Position::Middle | Position::Last
                )
        );
        if !seq_ok {
            return Err(invalid());
        }
        // An XRC message arrives whole through one SRQ.
        let xrc = qp.qp_type == QpType::XrcRecv;
        if xrc && matches!(pos, Position::Middle | Position::Last) {
            let same = match (&qp.transport.resp.msg, target.remote) {
                (InMessage::Delegated { srqn }, remote) => remote == Some(*srqn),
                (_, Some(_)) => false,
                _ => qp.transport.resp.xrc_msg.map(|(srq, _)| srq) == target.srq,
            };
            if !same {
                self.counters.xrc_bad_srq += 1;
                return Err(Refusal::Fatal(
                    NAK_INVALID_RD_REQUEST,
                    QpErrorCause::InvalidRequest,
                ));
            }
        }
        // Payload lengths by position (C9-92..94 family; tables.md §6a).
        let len_ok = match (op, pos) {
            (Operation::Send | Operation::RdmaWrite, Position::First | Position::Middle) => {
                len == mtu && h.bth.pad_cnt == 0
            }
            (Operation::Send | Operation::RdmaWrite, Position::Last) => (1..=mtu).contains(&len),
            (Operation::Send | Operation::RdmaWrite, Position::Only) => len <= mtu,
            _ => true,
        };
        if !len_ok {
            return Err(invalid());
        }
        if xrc && matches!(pos, Position::First) {
            if let Some(srq) = target.srq {
                let qp = self.qps.get_mut(&qpn).expect("checked");
                qp.transport.resp.xrc_msg = Some((srq, target.cq));
            }
        }
        if rd && matches!(pos, Position::First | Position::Only) {
            // The RD QP this message is for (a MIDDLE or LAST of another message was ignored
            // before, in `rc_request`).
            let r = &mut self.qps.get_mut(&qpn).expect("checked").transport.resp;
            if let Some(d) = r.rd.as_mut() {
                d.msg = Some((target.qpn, target.cq));
            }
        }
        match op {
            Operation::Send => match target.remote {
                None => self.rc_exec_send(qpn, t, pos, target),
                Some(srqn) => self.xrc_delegate_send(qpn, t, pos, srqn),
            },
            Operation::RdmaWrite => {
                if !access.contains(AccessFlags::REMOTE_WRITE) {
                    return Err(Refusal::Fatal(
                        NAK_INVALID_REQUEST,
                        QpErrorCause::InvalidRequest,
                    ));
                }
                self.rc_exec_write(qpn, t, pos, target)
            }
            Operation::RdmaReadRequest => {
                if !access.contains(AccessFlags::REMOTE_READ) {
                    return Err(invalid());
                }
                self.rc_exec_read(qpn, t, pd)
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                if !access.contains(AccessFlags::REMOTE_ATOMIC) {
                    return Err(invalid());
                }
                self.rc_exec_atomic(qpn, t, pd)
            }
            // FLUSH and ATOMIC WRITE (IBA 1.5) are not supported: invalid request.
            _ => Err(invalid()),
        }
    }

    /// The receive side of request `t` at QP `qpn` (see [`RecvTarget`]); `None` for an XRC
    /// target when the XRCETH names no XRC SRQ of its domain.
    #[inline]
    fn recv_target(
        &self,
        qp: &crate::verbs::qp::Qp,
        t: &TransportPacket<'_>,
    ) -> Option<RecvTarget> {
        match qp.qp_type {
            QpType::XrcRecv => {
                let srqn = t.headers.xrceth?.xrcsrq.value();
                match self.xrc_target(qp, srqn) {
                    Some(x) => Some(RecvTarget {
                        qpn: qp.qpn.value(),
                        pd: x.pd,
                        srq: Some(x.srq),
                        cq: x.cq,
                        remote: None,
                    }),
                    // Another HCA's SRQ of the shared domain.
                    None => self.xrc_remote_srq(qp.xrcd, srqn).then(|| RecvTarget {
                        qpn: qp.qpn.value(),
                        pd: crate::verbs::PdHandle(crate::table::Key::NONE),
                        srq: None,
                        cq: crate::verbs::CqHandle(crate::table::Key::NONE),
                        remote: Some(srqn),
                    }),
                }
            }
            // Only EE contexts take RD packets.
            QpType::Rd => self.rd_target(qp, t),
            _ => Some(RecvTarget {
                qpn: qp.qpn.value(),
                pd: qp.pd,
                srq: qp.srq,
                cq: qp.recv_cq,
                remote: None,
            }),
        }
    }

    /// [`Hca::rc_exec_send`] for a SEND into another HCA's XRC SRQ `srqn` (`xrc_shared.rs`):
    /// the message's first packet reserves one of the SRQ's receive WQEs (none: RNR NAK; the
    /// SRQ gone: NAK-Invalid RD Request), and each packet is delegated to the SRQ's owner,
    /// which places it. The transport moves as for a local SEND.
    #[cold]
    fn xrc_delegate_send(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        pos: Position,
        srqn: u32,
    ) -> Result<(), Refusal> {
        let starts = matches!(pos, Position::First | Position::Only);
        let ends = matches!(pos, Position::Last | Position::Only);
        if starts {
            self.xrc_reserve_for(qpn, srqn)?;
        } else {
            let qp = self.qps.get_mut(&qpn).expect("checked");
            match std::mem::take(&mut qp.transport.resp.msg) {
                InMessage::Delegated { srqn: s } if s == srqn => {}
                _ => return Err(invalid()),
            }
        }
        let h = &t.headers;
        self.xrc_delegate(
            super::xrc_shared::Delegated {
                srqn,
                tqpn: qpn,
                pos,
                psn: h.bth.psn.value(),
                solicited: h.bth.solicited,
                imm: h.immdt.map(|i| i.imm),
                invalidate: h.ieth.map(|i| i.rkey),
                write_imm: false,
            },
            t.payload,
        );
        self.xrc_delegated_packet(qpn, ends, InMessage::Delegated { srqn });
        self.rc_ack_request(qpn, h.bth.psn, h.bth.ack_req);
        Ok(())
    }

    /// A zero-length RDMA WRITE with immediate `imm` into another HCA's XRC SRQ `srqn`: it
    /// places nothing (C9-88) and consumes a receive WQE of the SRQ, reserved and delegated
    /// as a SEND's ([`Hca::xrc_delegate_send`]). Longer WRITEs failed their R_Key check.
    #[cold]
    fn xrc_delegate_write_imm(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        srqn: u32,
        imm: u32,
    ) -> Result<(), Refusal> {
        self.xrc_reserve_for(qpn, srqn)?;
        let h = &t.headers;
        self.xrc_delegate(
            super::xrc_shared::Delegated {
                srqn,
                tqpn: qpn,
                pos: Position::Only,
                psn: h.bth.psn.value(),
                solicited: h.bth.solicited,
                imm: Some(imm),
                invalidate: None,
                write_imm: true,
            },
            &[],
        );
        self.xrc_delegated_packet(qpn, true, InMessage::None);
        self.rc_ack_request(qpn, h.bth.psn, h.bth.ack_req);
        Ok(())
    }

    /// Reserves a receive WQE of SRQ `srqn` in the shared domain of target QP `qpn` for a new
    /// message.
    fn xrc_reserve_for(&mut self, qpn: u32, srqn: u32) -> Result<(), Refusal> {
        let domain = self.qps[&qpn]
            .xrcd
            .and_then(|x| self.xrcds.get(x.0))
            .and_then(|d| d.share);
        match domain.map(|d| self.xrc_reserve(srqn, d)) {
            Some(super::xrc_shared::Reservation::Reserved) => Ok(()),
            Some(super::xrc_shared::Reservation::Empty) => Err(Refusal::Rnr),
            _ => {
                // Withdrawn since the look-up: an XRCETH violation.
                self.counters.xrc_bad_srq += 1;
                Err(Refusal::Fatal(
                    NAK_INVALID_RD_REQUEST,
                    QpErrorCause::InvalidRequest,
                ))
            }
        }
    }

    /// The responder's state after a delegated packet: ePSN past it; at the message's end the
    /// MSN counts it and the responder is between messages, else it is in `msg`.
    fn xrc_delegated_packet(&mut self, qpn: u32, ends: bool, msg: InMessage) {
        let qp = self.qps.get_mut(&qpn).expect("checked");
        qp.transport.expected_psn = qp.transport.expected_psn.next();
        let r = &mut qp.transport.resp;
        if ends {
            r.msn = r.msn.add(1);
            r.msg = InMessage::None;
            r.xrc_msg = None;
            r.credits.consumed = r.credits.consumed.wrapping_add(1);
        } else {
            r.msg = msg;
        }
    }

    // One caller: inlined into the request path (a call of its own costs the common SEND
    // a few dozen instructions).
    #[inline(always)]
    fn rc_exec_send(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        pos: Position,
        target: RecvTarget,
    ) -> Result<(), Refusal> {
        // Completions name the QP the message is for (for RD, not the EE context).
        let qpn_w = softib_wire::Qpn::new(target.qpn);
        let src_qp = t.headers.deth.map(|d| d.src_qp);
        let starts = matches!(pos, Position::First | Position::Only);
        let (mut wqe, offset) = if starts {
            match self.take_recv_wqe_from(qpn_w, target.srq) {
                Some(w) => (w, 0u64),
                None => return Err(Refusal::Rnr),
            }
        } else {
            let qp = self.qps.get_mut(&qpn).expect("checked");
            match std::mem::take(&mut qp.transport.resp.msg) {
                InMessage::Send { wqe, offset } => (wqe, offset),
                _ => return Err(invalid()),
            }
        };
        let (pd, recv_cq) = (target.pd, target.cq);
        let end = offset + t.payload.len() as u64;
        if end > wqe.length {
            // Message longer than the receive buffer: the receive WQE completes with a local
            // length error and the requester gets NAK-Invalid Request.
            let wc = WorkCompletion::new(wqe.wr_id, WcStatus::LocLenErr, WcOpcode::Recv, qpn_w)
                .with_byte_len(0);
            let _ = self.push_completion(recv_cq, wc, false);
            return Err(invalid());
        }
        let sges = std::mem::take(&mut wqe.sg_list);
        let ok = self.scatter(pd, &sges, offset, t.payload);
        wqe.sg_list = sges;
        if !ok {
            let wc = WorkCompletion::new(wqe.wr_id, WcStatus::LocProtErr, WcOpcode::Recv, qpn_w)
                .with_byte_len(0);
            let _ = self.push_completion(recv_cq, wc, false);
            return Err(Refusal::Fatal(NAK_REMOTE_OP, QpErrorCause::CompletionError));
        }
        let h = &t.headers;
        let ends = matches!(pos, Position::Last | Position::Only);
        let qp = self.qps.get_mut(&qpn).expect("checked");
        qp.transport.expected_psn = qp.transport.expected_psn.next();
        if ends {
            let r = &mut qp.transport.resp;
            r.msn = r.msn.add(1);
            r.msg = InMessage::None;
            r.xrc_msg = None;
            if let Some(d) = r.rd.as_mut() {
                d.msg = None;
            }
            // The message is complete: its receive WQE is no longer a credit (C9-157.2.1).
            r.credits.consumed = r.credits.consumed.wrapping_add(1);
            let mut wc = WorkCompletion::new(wqe.wr_id, WcStatus::Success, WcOpcode::Recv, qpn_w)
                .with_byte_len(end as u32);
            self.spare.recycle_recv(wqe.sg_list);
            if let Some(src) = src_qp {
                wc.src_qp = src;
            }
            if let Some(imm) = h.immdt {
                wc = wc.with_imm(imm.imm);
            }
            if let Some(ieth) = h.ieth {
                wc = wc.with_invalidated_rkey(ieth.rkey);
                self.invalidate_rkey(pd, ieth.rkey);
            }
            self.rc_ack_request(qpn, h.bth.psn, h.bth.ack_req);
            let _ = self.complete_or_error(qpn_w, recv_cq, wc, h.bth.solicited);
        } else {
            qp.transport.resp.msg = InMessage::Send { wqe, offset: end };
            self.rc_ack_request(qpn, h.bth.psn, h.bth.ack_req);
        }
        Ok(())
    }

    fn rc_exec_write(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        pos: Position,
        target: RecvTarget,
    ) -> Result<(), Refusal> {
        let pd = target.pd;
        let qpn_w = softib_wire::Qpn::new(target.qpn);
        let h = &t.headers;
        let starts = matches!(pos, Position::First | Position::Only);
        let ends = matches!(pos, Position::Last | Position::Only);
        let (slice, offset) = if starts {
            let reth = h.reth.ok_or_else(invalid)?;
            // Zero-length WRITEs skip the R_Key check (C9-88).
            let slice = self.rc_check_reth(pd, &reth, AccessFlags::REMOTE_WRITE)?;
            (slice, 0u64)
        } else {
            let qp = self.qps.get_mut(&qpn).expect("checked");
            match std::mem::take(&mut qp.transport.resp.msg) {
                InMessage::Write { slice, offset } => (slice, offset),
                _ => return Err(invalid()),
            }
        };
        let end = offset + t.payload.len() as u64;
        // The packets of a WRITE must stay inside its DMA length (checked per packet).
        if end > slice.len as u64 || (ends && end != slice.len as u64) {
            return Err(Refusal::Fatal(
                NAK_REMOTE_ACCESS,
                QpErrorCause::AccessViolation,
            ));
        }
        if let (Some(srqn), Some(imm)) = (target.remote, h.immdt) {
            // Zero-length (a longer one failed its R_Key check): the owner's WQE.
            return self.xrc_delegate_write_imm(qpn, t, srqn, imm.imm);
        }
        // WRITE with immediate consumes a receive WQE: check for one before placing data.
        let wqe = if h.immdt.is_some() {
            match self.take_recv_wqe_from(qpn_w, target.srq) {
                Some(w) => Some(w),
                None => {
                    // Keep the message state so the retried LAST packet finds it.
                    let qp = self.qps.get_mut(&qpn).expect("checked");
                    if !starts {
                        qp.transport.resp.msg = InMessage::Write { slice, offset };
                    }
                    return Err(Refusal::Rnr);
                }
            }
        } else {
            None
        };
        if !t.payload.is_empty() {
            let sub = MrSlice {
                mr: slice.mr,
                offset: slice.offset + offset as usize,
                len: t.payload.len(),
            };
            let placed = self.placed_by_sender;
            match self.mr_slice_mut(&sub) {
                Some(_) if placed => {}
                Some(dst) => super::place(dst, t.payload),
                None => {
                    return Err(Refusal::Fatal(
                        NAK_REMOTE_ACCESS,
                        QpErrorCause::AccessViolation,
                    ))
                }
            }
        }
        let qp = self.qps.get_mut(&qpn).expect("checked");
        qp.transport.expected_psn = qp.transport.expected_psn.next();
        let recv_cq = target.cq;
        if ends {
            let r = &mut qp.transport.resp;
            r.msn = r.msn.add(1);
            r.msg = InMessage::None;
            r.xrc_msg = None;
            if wqe.is_some() {
                // WRITE with immediate consumed a receive WQE; plain WRITEs leave the credit
                // count alone (C9-157.2.1).
                r.credits.consumed = r.credits.consumed.wrapping_add(1);
            }
            self.rc_ack_request(qpn, h.bth.psn, h.bth.ack_req);
            if let (Some(w), Some(imm)) = (wqe, h.immdt) {
                let wc = WorkCompletion::new(
                    w.wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    qpn_w,
                )
                .with_byte_len(end as u32)
                .with_imm(imm.imm);
                self.spare.recycle_recv(w.sg_list);
                let wc = match h.deth {
                    Some(d) => WorkCompletion {
                        src_qp: d.src_qp,
                        ..wc
                    },
                    None => wc,
                };
                let _ = self.complete_or_error(qpn_w, recv_cq, wc, h.bth.solicited);
            }
        } else {
            qp.transport.resp.msg = InMessage::Write { slice, offset: end };
            self.rc_ack_request(qpn, h.bth.psn, h.bth.ack_req);
        }
        Ok(())
    }

    fn rc_exec_read(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        pd: crate::verbs::PdHandle,
    ) -> Result<(), Refusal> {
        let reth = t.headers.reth.ok_or_else(invalid)?;
        if reth.dma_len > MAX_DMA_LEN {
            return Err(invalid());
        }
        self.rc_check_rd_atomic_room(qpn)?;
        let slice = self.rc_check_reth(pd, &reth, AccessFlags::REMOTE_READ)?;
        let qp = self.qps.get_mut(&qpn).expect("checked");
        let to = rd_to(qp);
        queue_read(qp, t.headers.bth.psn, &reth, slice, to);
        Ok(())
    }

    fn rc_exec_atomic(
        &mut self,
        qpn: u32,
        t: &TransportPacket<'_>,
        pd: crate::verbs::PdHandle,
    ) -> Result<(), Refusal> {
        let a = t.headers.atomic_eth.ok_or_else(invalid)?;
        if a.va % 8 != 0 {
            // Misaligned atomic: invalid request.
            return Err(invalid());
        }
        self.rc_check_rd_atomic_room(qpn)?;
        let slice = self
            .check_remote(pd, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC)
            .map_err(|_| Refusal::Fatal(NAK_REMOTE_ACCESS, QpErrorCause::AccessViolation))?;
        let is_cas = t
            .info()
            .is_ok_and(|i| i.operation == Operation::CompareSwap);
        let Some(mem) = self.mr_slice_mut(&slice) else {
            return Err(Refusal::Fatal(
                NAK_REMOTE_ACCESS,
                QpErrorCause::AccessViolation,
            ));
        };
        let mut b = [0u8; 8];
        b.copy_from_slice(mem);
        // softib memory holds 64-bit atomic operands in little-endian byte order.
        let orig = u64::from_le_bytes(b);
        mem.copy_from_slice(&atomic_result(is_cas, orig, &a).to_le_bytes());
        let qp = self.qps.get_mut(&qpn).expect("checked");
        let to = rd_to(qp);
        queue_atomic(qp, t.headers.bth.psn, orig, to);
        Ok(())
    }

    /// The R_Key check of a RETH: DMA length at most 2^31 (else invalid request, C9-94), then
    /// key, bounds, access and PD (else remote access error). Zero-length accesses pass with any
    /// key (C9-88).
    fn rc_check_reth(
        &self,
        pd: crate::verbs::PdHandle,
        reth: &softib_wire::reth::Reth,
        access: AccessFlags,
    ) -> Result<MrSlice, Refusal> {
        if reth.dma_len > MAX_DMA_LEN {
            return Err(invalid());
        }
        self.check_remote(pd, reth.rkey, reth.va, u64::from(reth.dma_len), access)
            .map_err(|_| Refusal::Fatal(NAK_REMOTE_ACCESS, QpErrorCause::AccessViolation))
    }

    /// More READ / ATOMIC requests in progress than `max_dest_rd_atomic` is an invalid request.
    fn rc_check_rd_atomic_room(&self, qpn: u32) -> Result<(), Refusal> {
        let qp = &self.qps[&qpn];
        let busy = qp
            .transport
            .resp
            .responses
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Response::Read { fresh: true, .. } | Response::Atomic { fresh: true, .. }
                )
            })
            .count();
        if busy >= usize::from(qp.attr.max_dest_rd_atomic.max(1)) {
            return Err(invalid());
        }
        Ok(())
    }

    /// Schedules (or coalesces into the pending one) an ACK for request `psn`.
    fn rc_ack_request(&mut self, qpn: u32, psn: Psn, ack_req: bool) {
        ack_request(self.qps.get_mut(&qpn).expect("checked"), psn, ack_req);
    }

    /// Duplicate request (PSN behind ePSN): never re-executed, answered per 9.7.5.1.4 in PSN
    /// order (C9-110, see [`Hca::rc_queue_duplicate_answer`]); errors while answering are
    /// silent (C9-106, C9-108, o9-67, o9-68, C9-115).
    fn rc_duplicate(&mut self, qpn: u32, t: &TransportPacket<'_>) {
        let Ok(info) = t.info() else {
            return;
        };
        let psn = t.headers.bth.psn;
        let Some(RecvTarget { pd, .. }) = self.recv_target(&self.qps[&qpn], t) else {
            // An XRCETH violation (for an EE context, a destination QP that no longer
            // qualifies) on a duplicate: dropped, never NAKed (C9-115).
            if self.qps[&qpn].qp_type == QpType::Rd {
                self.counters.rd_bad_dest += 1;
            } else {
                self.counters.xrc_bad_srq += 1;
            }
            return;
        };
        let qp = &self.qps[&qpn];
        let to = rd_to(qp);
        let answer = match info.operation {
            Operation::Send | Operation::RdmaWrite => {
                let qp = self.qps.get_mut(&qpn).expect("checked");
                let r = &mut qp.transport.resp;
                if r.faults.take(ResponderFault::DuplicateAckError) {
                    // An error while answering a duplicate SEND / WRITE: dropped (C9-106).
                    return;
                }
                // ACK with the PSN of the most recent completed new request; credits ride on
                // duplicate ACKs too (the requester takes them, C9-144).
                Response::Ack {
                    psn: qp.transport.expected_psn.sub(1),
                    syndrome: SYNDROME_ACK,
                    msn: r.msn,
                    base: r.credits.consumed,
                    to,
                }
            }
            Operation::RdmaReadRequest => {
                let Some(reth) = t.headers.reth else {
                    return;
                };
                // Valid duplicate READ: inside the PSN run of an earlier READ and asking for a
                // subset of its data.
                let found = qp.transport.resp.resources.iter().find_map(|r| match *r {
                    RdAtomicResource::Read {
                        first_psn,
                        npsn,
                        va,
                        rkey,
                        len,
                    } => {
                        let d = psn.distance(first_psn);
                        let inside = d >= 0 && (d as u32) < npsn;
                        let subset = reth.rkey == rkey
                            && reth.va >= va
                            && reth.va.checked_add(u64::from(reth.dma_len))
                                <= va.checked_add(u64::from(len));
                        (inside && subset).then_some(())
                    }
                    _ => None,
                });
                if found.is_none() {
                    return;
                }
                // Errors while answering a duplicate are silent (C9-108, C9-115).
                let Ok(slice) = self.rc_check_reth(pd, &reth, AccessFlags::REMOTE_READ) else {
                    return;
                };
                let r = &self.qps[&qpn].transport.resp;
                Response::Read {
                    first_psn: psn,
                    next_psn: psn,
                    slice,
                    len: reth.dma_len,
                    sent: 0,
                    msn: r.msn,
                    base: r.credits.consumed,
                    fresh: false,
                    to,
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                // Replay the saved result, never re-execute (o9-66); unknown PSN: drop (o9-67).
                let saved = qp.transport.resp.resources.iter().find_map(|r| match *r {
                    RdAtomicResource::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                let Some(orig) = saved else {
                    return;
                };
                let qp = self.qps.get_mut(&qpn).expect("checked");
                let r = &mut qp.transport.resp;
                if r.faults.take(ResponderFault::AtomicReplayUnavailable) {
                    // The saved result cannot be reproduced: dropped (o9-68).
                    return;
                }
                Response::Atomic {
                    psn,
                    orig,
                    msn: r.msn,
                    base: r.credits.consumed,
                    fresh: false,
                    to,
                }
            }
            _ => return,
        };
        self.rc_queue_duplicate_answer(qpn, psn, answer);
        self.schedule_tx(qpn);
    }

    /// Queues `answer`, the response to a valid duplicate request at `dup_psn`, so that
    /// responses go out in PSN order, earliest first (C9-110, C9-104):
    ///
    /// * a READ response part-way through its packets (the response being answered) whose
    ///   next packet is logically after `dup_psn` is stopped: its remaining packets are
    ///   dropped and not resumed. The requester resends whatever stays unacknowledged — it
    ///   resends from its oldest unacknowledged PSN, and softib's requester resumes a READ
    ///   from its first missing response PSN, which the subset rule answers (C9-107);
    /// * `answer` goes in front of every queued response whose PSN is logically after its
    ///   own (a duplicate READ / ATOMIC is answered at the duplicate's PSN, a duplicate SEND /
    ///   WRITE at the latest completed request's, C9-105). Responses not yet begun are kept:
    ///   the acknowledgements of new requests, and NAKs with their state, go out as before.
    fn rc_queue_duplicate_answer(&mut self, qpn: u32, dup_psn: Psn, answer: Response) {
        let qp = self.qps.get_mut(&qpn).expect("checked");
        let queue = &mut qp.transport.resp.responses;
        if let Some(Response::Read {
            first_psn,
            next_psn,
            ..
        }) = queue.front()
        {
            if next_psn != first_psn && next_psn.distance(dup_psn) > 0 {
                queue.pop_front();
            }
        }
        let at = response_psn(&answer);
        let i = queue
            .iter()
            .position(|r| response_psn(r).distance(at) > 0)
            .unwrap_or(queue.len());
        queue.insert(i, answer);
    }

    /// Arms a one-shot responder fault on RC QP `qpn` (see [`ResponderFault`]): the next
    /// duplicate request the fault applies to meets a local error while it is answered, and
    /// the responder reacts as the IBA demands — it drops the duplicate silently, sends
    /// neither ACK nor NAK, and stays in its state (C9-106, o9-68). Meant for tests and for
    /// studies that use softib as a fault-injecting reference; a fault armed on a QP of
    /// another service is never consumed, and one armed on a QP that is reset is forgotten.
    pub fn inject_responder_fault(
        &mut self,
        qpn: softib_wire::Qpn,
        fault: ResponderFault,
    ) -> Result<(), QpError> {
        let qp = self
            .qps
            .get_mut(&qpn.value())
            .ok_or(QpError::NoSuchQp(qpn))?;
        qp.transport.resp.faults.arm(fault);
        Ok(())
    }

    /// Builds the next response packet of the QP into `out`.
    pub(crate) fn rc_next_response(&mut self, qpn: u32, out: &mut Vec<u8>) -> bool {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        let mtu = qp.attr.path_mtu.bytes();
        let rd = qp.qp_type == QpType::Rd;
        // An EE context answers the requesting QP, through the remote EE context.
        let (dest_qp, rdeth) = if rd {
            let eecn = softib_wire::Eecn::new(qp.attr.dest_qp_num);
            let to = match qp.transport.resp.responses.front() {
                Some(
                    Response::Ack { to, .. }
                    | Response::Read { to, .. }
                    | Response::Atomic { to, .. },
                ) => *to,
                _ => rd_to(qp),
            };
            (
                softib_wire::Qpn::new(to),
                Some(softib_wire::rdeth::Rdeth { resv8: 0, eecn }),
            )
        } else {
            (softib_wire::Qpn::new(qp.attr.dest_qp_num), None)
        };
        let mig_req = super::apm::mig_req(&qp.attr);
        // A receive queue of its own generates credits; an SRQ (an XRC target's too) does not.
        let generates_credits = qp.qp_type == QpType::Rc && qp.srq.is_none();
        let service = match qp.qp_type {
            QpType::XrcRecv => softib_wire::Service::Xrc,
            QpType::Rd => softib_wire::Service::Rd,
            _ => softib_wire::Service::Rc,
        };
        let resp = &mut qp.transport.resp;
        let credits = resp.credits;
        // The receive WQEs the packet's credit field advertises in all (see `rc_advertise`).
        let mut advertised = None;
        // The syndrome of a positive acknowledgement whose MSN's messages consumed `base`
        // receive WQEs: the Table 52 code of the credits beyond them, rounded down
        // (C9-158.2.1), or "invalid" on an SRQ (C9-150.2.1).
        let mut positive = |base: u32| -> u8 {
            if rd {
                // RD defines no end-to-end credits: the credit bits are zero (o9-72).
                return SYNDROME_ACK;
            }
            if !generates_credits {
                return SYNDROME_ACK_NO_CREDITS;
            }
            let code = CreditCode::encode_floor(credits.available(base));
            advertised = Some(base.wrapping_add(code.credits().unwrap_or(0)));
            code.code()
        };
        let Some(front) = resp.responses.front_mut() else {
            return false;
        };
        let mut h = TransportHeaders::new(Bth {
            dest_qp,
            pkey: DEFAULT_PKEY,
            ..Bth::default()
        });
        let mut read_part = None;
        let mut fatal = None;
        let mut rnr_nak = false;
        let done = match front {
            Response::Ack {
                psn,
                syndrome,
                msn,
                base,
                ..
            } => {
                h.bth.opcode = Opcode::RC_ACKNOWLEDGE;
                h.bth.psn = *psn;
                let syndrome = if *syndrome == SYNDROME_ACK {
                    positive(*base)
                } else {
                    rnr_nak = *syndrome & SYNDROME_CLASS == SYNDROME_RNR_NAK;
                    *syndrome
                };
                h.aeth = Some(Aeth {
                    syndrome,
                    msn: *msn,
                });
                true
            }
            Response::Nak {
                psn,
                syndrome,
                msn,
                cause,
            } => {
                h.bth.opcode = Opcode::RC_ACKNOWLEDGE;
                h.bth.psn = *psn;
                h.aeth = Some(Aeth {
                    syndrome: *syndrome,
                    msn: *msn,
                });
                fatal = Some(*cause);
                true
            }
            Response::Atomic {
                psn,
                orig,
                msn,
                base,
                ..
            } => {
                h.bth.opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
                h.bth.psn = *psn;
                h.aeth = Some(Aeth {
                    syndrome: positive(*base),
                    msn: *msn,
                });
                h.atomic_ack_eth = Some(AtomicAckEth {
                    orig_remote_data: *orig,
                });
                true
            }
            Response::Read {
                first_psn,
                next_psn,
                slice,
                len,
                sent,
                msn,
                base,
                fresh,
                ..
            } => {
                let p = read_packet(*first_psn, *next_psn, slice, *len, *sent, mtu);
                h.bth.opcode = p.opcode;
                h.bth.psn = *next_psn;
                if p.aeth {
                    h.aeth = Some(Aeth {
                        syndrome: positive(*base),
                        msn: *msn,
                    });
                }
                read_part = Some((p.part, *msn, *fresh));
                *sent += p.part.len as u32;
                *next_psn = next_psn.next();
                p.last
            }
        };
        if done {
            resp.responses.pop_front();
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        if let Some((part, msn, fresh)) = read_part {
            match self.mr_slice(&part) {
                Some(b) => scratch.extend_from_slice(b),
                None if part.len == 0 => {}
                None if !fresh => {
                    // The answer to a duplicate READ fails part-way: it ends here, silently
                    // (C9-109; no NAK for an error on a duplicate, C9-115).
                    if !done {
                        self.qps
                            .get_mut(&qpn)
                            .expect("checked")
                            .transport
                            .resp
                            .responses
                            .pop_front();
                    }
                    self.scratch = scratch;
                    return false;
                }
                None => {
                    // The region went away under a READ: answer with a remote access NAK. An
                    // EE context's READ response ends there, and the EE context lives on (the
                    // requester resynchronises); a QP enters ERR.
                    if rd {
                        if !done {
                            self.qps
                                .get_mut(&qpn)
                                .expect("checked")
                                .transport
                                .resp
                                .responses
                                .pop_front();
                        }
                    } else {
                        fatal = Some(QpErrorCause::AccessViolation);
                    }
                    h = TransportHeaders::new(Bth {
                        opcode: Opcode::RC_ACKNOWLEDGE,
                        dest_qp,
                        pkey: DEFAULT_PKEY,
                        psn: h.bth.psn,
                        ..Bth::default()
                    });
                    h.aeth = Some(Aeth {
                        syndrome: NAK_REMOTE_ACCESS,
                        msn,
                    });
                }
            }
        }
        let psn = h.bth.psn;
        h.bth.mig_req = mig_req;
        h.bth.opcode = super::requester::in_class(h.bth.opcode, service);
        h.rdeth = rdeth;
        let t = TransportPacket::new(h, &scratch);
        let built = self.build_frame(qpn, &t, out);
        self.scratch = scratch;
        if built && fatal.is_none() {
            if let Some(limit) = advertised {
                self.rc_advertise(qpn, psn, limit);
            }
            if rnr_nak {
                let qp = self.qps.get_mut(&qpn).expect("checked");
                qp.transport.resp.credits.requester_waits = true;
            }
        }
        if let Some(cause) = fatal {
            let _ = self.set_qp_error(softib_wire::Qpn::new(qpn), cause);
        }
        built
    }

    /// The common response in fewer steps: a positive ACK, an ATOMIC ACK, or the next packet
    /// of a READ response, of an RC QP towards an IPv4 address whose headers the
    /// QP has cached, written as the requester's express path writes its requests (into the
    /// datagram batch when one is lent, else as a frame; a READ's data straight from its
    /// region). Its bytes and every state change are those of [`Hca::rc_next_response`] for
    /// the same response (the equivalence tests compare); `None`, with nothing changed, for
    /// any other response.
    #[inline]
    pub(crate) fn rc_express_response(
        &mut self,
        qpn: u32,
        out: &mut Vec<u8>,
        batch: Option<&mut super::datapath::DatagramBatch<'_>>,
    ) -> Option<super::requester::Tx> {
        let qp = self.qps.get_mut(&qpn)?;
        if qp.qp_type != QpType::Rc {
            return None;
        }
        /// What a response carries besides its AETH: a READ response packet's data (and
        /// whether it is the response's last), an ATOMIC ACK's original value.
        enum Express {
            Read(MrSlice, bool),
            Atomic(u64),
        }
        let mtu = qp.attr.path_mtu.bytes();
        // The opcode, the PSN, whether an AETH goes (with the MSN and the credit base).
        let (opcode, psn, aeth, msn, base, extra) = match qp.transport.resp.responses.front() {
            Some(&Response::Ack {
                psn,
                syndrome: SYNDROME_ACK,
                msn,
                base,
                ..
            }) => (Opcode::RC_ACKNOWLEDGE, psn, true, msn, base, None),
            Some(&Response::Atomic {
                psn,
                orig,
                msn,
                base,
                ..
            }) => (
                Opcode::RC_ATOMIC_ACKNOWLEDGE,
                psn,
                true,
                msn,
                base,
                Some(Express::Atomic(orig)),
            ),
            // The next packet of a READ response, as `rc_next_response` sends it.
            Some(&Response::Read {
                first_psn,
                next_psn,
                slice,
                len,
                sent,
                msn,
                base,
                ..
            }) => {
                let p = read_packet(first_psn, next_psn, &slice, len, sent, mtu);
                (
                    p.opcode,
                    next_psn,
                    p.aeth,
                    msn,
                    base,
                    Some(Express::Read(p.part, p.last)),
                )
            }
            _ => return None,
        };
        // The data, as `rc_next_response` takes it (a region gone is its NAK to send).
        let payload: &[u8] = match extra {
            Some(Express::Read(part, _)) => match self.mrs.slice(&part) {
                Some(b) => b,
                None if part.len == 0 => &[],
                None => return None,
            },
            _ => &[],
        };
        let port = crate::verbs::ah::port_config(&self.ports, qp.attr.port_num.max(1))?;
        let (socket, sport) = super::datapath::express_sport(self.udp_socket_port, qpn);
        let mig_req = super::apm::mig_req(&qp.attr);
        let dest_qp = softib_wire::Qpn::new(qp.attr.dest_qp_num);
        let own_rq = qp.srq.is_none();
        let (template, prefix) =
            qp.transport
                .tx_headers
                .as_mut()?
                .datagram_parts(port, &qp.attr.ah_attr, sport)?;
        // The credit field as `rc_next_response`'s `positive` fills it.
        let credits = &mut qp.transport.resp.credits;
        let (syndrome, advertised) = if !aeth {
            (0, None)
        } else if own_rq {
            let code = CreditCode::encode_floor(credits.available(base));
            (
                code.code(),
                Some(base.wrapping_add(code.credits().unwrap_or(0))),
            )
        } else {
            (SYNDROME_ACK_NO_CREDITS, None)
        };
        let bth = Bth {
            opcode,
            mig_req,
            pkey: DEFAULT_PKEY,
            dest_qp,
            psn,
            ..Bth::default()
        };
        // The AETH, and an ATOMIC ACK's AtomicAckETH behind it.
        const AETH: usize = softib_wire::aeth::LEN;
        let mut ext = [0u8; AETH + softib_wire::atomic_ack_eth::LEN];
        let _ = Aeth { syndrome, msn }.emit(&mut ext);
        let ext_len = match extra {
            Some(Express::Atomic(orig)) => {
                let _ = AtomicAckEth {
                    orig_remote_data: orig,
                }
                .emit(&mut ext[AETH..]);
                ext.len()
            }
            _ if aeth => AETH,
            _ => 0,
        };
        let ident = self.ip_ident.wrapping_add(1);
        let wire_ident = if socket { 0 } else { ident };
        let mut batch = batch.filter(|_| socket);
        let dst = match batch {
            Some(_) => Some(template.v4_destination()?),
            None => None,
        };
        let b = batch.as_deref_mut();
        if !super::datapath::write_express(
            template,
            prefix,
            b,
            wire_ident,
            bth.to_bytes(),
            &ext[..ext_len],
            payload,
            out,
        ) {
            return None;
        }
        if let Some(b) = batch {
            b.dst = dst;
        }
        // The packet is out: the state moves as `rc_next_response` and `rc_advertise` move it.
        self.ip_ident = ident;
        if let Some(limit) = advertised {
            credits.advertised_at(psn, limit);
        }
        let resp = &mut qp.transport.resp;
        match (extra, resp.responses.front_mut()) {
            // A READ response goes on from its next packet.
            (Some(Express::Read(part, false)), Some(Response::Read { sent, next_psn, .. })) => {
                *sent += part.len as u32;
                *next_psn = next_psn.next();
            }
            _ => {
                resp.responses.pop_front();
            }
        }
        Some(super::requester::Tx::Sent)
    }

    /// A positive acknowledgement at `psn` went out advertising `limit` receive WQEs in all.
    fn rc_advertise(&mut self, qpn: u32, psn: Psn, limit: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            qp.transport.resp.credits.advertised_at(psn, limit);
        }
    }

    /// Receive WQEs were posted, or the QP entered RTR (`initial`, C9-155): when the requester
    /// may be waiting for credits and there are new ones, schedule an unsolicited ACK
    /// (9.7.7.2.1) — the latest positive acknowledgement's PSN (initially the first expected
    /// PSN − 1), the current MSN (C9-152), and the credits, filled in when it is sent.
    ///
    /// The requester may be waiting when it has used every credit it was told about and
    /// either has nothing yet (the move to RTR, with receives posted in INIT) or was refused
    /// with an RNR NAK since the latest positive acknowledgement. Otherwise its own requests
    /// bring the credits back: a send queue without credits still sends a limited first
    /// packet with AckReq (C9-163), whose ACK carries them. Nothing is scheduled when a
    /// response that carries credits is owed anyway.
    pub(crate) fn rc_offer_credits(&mut self, qpn: u32, initial: bool) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        if qp.qp_type != QpType::Rc
            || qp.srq.is_some()
            || !matches!(qp.attr.qp_state, QpState::Rtr | QpState::Rts | QpState::Sqd)
        {
            return;
        }
        let r = &mut qp.transport.resp;
        let c = r.credits;
        // Receive WQEs the requester's messages hold as far as the responder knows: those of
        // completed messages and the one a SEND in progress landed in.
        let held = c
            .consumed
            .wrapping_add(u32::from(matches!(r.msg, InMessage::Send { .. })));
        if c.advertised.wrapping_sub(held) as i32 > 0 {
            // Credits it was told about are left: not waiting (the common case, decided
            // before any scan).
            return;
        }
        // One pass over the owed responses: one that carries credits anyway ends it here.
        let mut rnr_owed = false;
        for x in &r.responses {
            match x {
                Response::Ack { syndrome, .. } if *syndrome == SYNDROME_ACK => return,
                Response::Read { .. } | Response::Atomic { .. } => return,
                Response::Ack { syndrome, .. } => {
                    rnr_owed |= *syndrome & SYNDROME_CLASS == SYNDROME_RNR_NAK;
                }
                Response::Nak { .. } => {}
            }
        }
        let starved = initial || c.requester_waits || rnr_owed;
        let code = CreditCode::encode_floor(c.available(c.consumed));
        let limit = c.consumed.wrapping_add(code.credits().unwrap_or(0));
        let news = limit.wrapping_sub(c.advertised) as i32 > 0;
        if !(starved && news) {
            return;
        }
        r.responses.push_back(Response::Ack {
            psn: c.ack_psn,
            syndrome: SYNDROME_ACK,
            msn: r.msn,
            base: c.consumed,
            to: 0,
        });
        self.schedule_tx(qpn);
    }

    /// Invalidates the memory region whose R_Key is `rkey` in `pd` (SEND with invalidate).
    fn invalidate_rkey(&mut self, pd: crate::verbs::PdHandle, rkey: u32) {
        if self.mrs.invalidate_rkey(pd, rkey) {
            self.placement_update(super::PlacementUpdate::RegionGone { rkey });
        }
    }
}

/// Asks for the ACK of a request the responder executed at `psn`: a newer ACK replaces one
/// queued and not yet sent (coalescing), else one is queued when the request asked for it.
fn ack_request(qp: &mut crate::verbs::qp::Qp, psn: Psn, ack_req: bool) {
    let to = rd_to(qp);
    ack_request_to(qp, psn, ack_req, to);
}

/// [`ack_request`] with the QP the ACK goes to (`to`, 0 but for an EE context) known: the
/// express path's, for an RC QP.
#[inline(always)]
fn ack_request_to(qp: &mut crate::verbs::qp::Qp, psn: Psn, ack_req: bool, to: u32) {
    let r = &mut qp.transport.resp;
    let msn = r.msn;
    let base = r.credits.consumed;
    if let Some(Response::Ack {
        psn: p,
        syndrome: SYNDROME_ACK,
        msn: m,
        base: b,
        ..
    }) = r.responses.back_mut().filter(|x| {
        // (An EE context's ACK for another requesting QP is not coalesced.)
        matches!(x, Response::Ack { to: t, .. } if *t == to)
    }) {
        // Coalesce: a newer ACK replaces one not yet sent (9.7.5.1.2), an unsolicited
        // one included.
        *p = psn;
        *m = msn;
        *b = base;
        return;
    }
    if ack_req {
        r.responses.push_back(Response::Ack {
            psn,
            syndrome: SYNDROME_ACK,
            msn,
            base,
            to,
        });
    }
}

/// The QP an EE context's response to its latest new request goes to (0 for a QP).
fn rd_to(qp: &crate::verbs::qp::Qp) -> u32 {
    match (&qp.transport.resp.rd, qp.qp_type) {
        (Some(d), QpType::Rd) => d.last.1,
        _ => 0,
    }
}

fn invalid() -> Refusal {
    Refusal::Fatal(NAK_INVALID_REQUEST, QpErrorCause::InvalidRequest)
}

/// The PSN of the packet a queued response sends next.
fn response_psn(r: &Response) -> Psn {
    match *r {
        Response::Ack { psn, .. } | Response::Nak { psn, .. } | Response::Atomic { psn, .. } => psn,
        Response::Read { next_psn, .. } => next_psn,
    }
}

/// What the express READ and ATOMIC requests share: an RC QP that takes requests, the
/// packet at ePSN between messages, the QP granting `access`, and room among the READs and
/// ATOMICs in progress (fewer responses queued than may be in progress: those in progress
/// are among the queued ones, which `rc_check_rd_atomic_room` counts).
#[inline(always)]
fn express_rd_atomic(qp: &crate::verbs::qp::Qp, bth: &Bth, access: AccessFlags) -> bool {
    qp.qp_type == QpType::Rc
        && matches!(qp.attr.qp_state, QpState::Rtr | QpState::Rts | QpState::Sqd)
        && bth.psn == qp.transport.expected_psn
        && matches!(qp.transport.resp.msg, InMessage::None)
        && qp.attr.qp_access_flags.contains(access)
        && qp.transport.resp.responses.len() < usize::from(qp.attr.max_dest_rd_atomic.max(1))
}

/// The next packet of a READ response (`Response::Read`'s fields): its opcode, whether it
/// carries an AETH (the first and the last do), whether it is the last, and its bytes of the
/// region, one path MTU at most.
struct ReadPacket {
    opcode: Opcode,
    aeth: bool,
    last: bool,
    part: MrSlice,
}

#[inline(always)]
fn read_packet(
    first_psn: Psn,
    next_psn: Psn,
    slice: &MrSlice,
    len: u32,
    sent: u32,
    mtu: u32,
) -> ReadPacket {
    let first = next_psn == first_psn;
    let plen = (len - sent).min(mtu);
    let last = sent + plen >= len;
    ReadPacket {
        opcode: match (first, last) {
            (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
            (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        },
        aeth: first || last,
        last,
        part: MrSlice {
            mr: slice.mr,
            offset: slice.offset + sent as usize,
            len: plen as usize,
        },
    }
}

/// A new READ at `psn` executed (its R_Key checked, `slice` the bytes it grants): its
/// response queued and the request kept ([`queue_rd_atomic`]), ePSN past its response
/// packets, one PSN each.
#[inline(always)]
fn queue_read(
    qp: &mut crate::verbs::qp::Qp,
    psn: Psn,
    reth: &softib_wire::reth::Reth,
    slice: MrSlice,
    to: u32,
) {
    let npsn = packets_for(reth.dma_len, qp.attr.path_mtu.bytes());
    queue_rd_atomic(qp, psn.add(npsn), |msn, base| {
        (
            Response::Read {
                first_psn: psn,
                next_psn: psn,
                slice,
                len: reth.dma_len,
                sent: 0,
                msn,
                base,
                fresh: true,
                to,
            },
            RdAtomicResource::Read {
                first_psn: psn,
                npsn,
                va: reth.va,
                rkey: reth.rkey,
                len: reth.dma_len,
            },
        )
    });
}

/// A new ATOMIC at `psn` done, the operand's value before it `orig`: its ACK queued and the
/// result kept ([`queue_rd_atomic`]), ePSN past it.
#[inline(always)]
fn queue_atomic(qp: &mut crate::verbs::qp::Qp, psn: Psn, orig: u64, to: u32) {
    queue_rd_atomic(qp, psn.next(), |msn, base| {
        (
            Response::Atomic {
                psn,
                orig,
                msn,
                base,
                fresh: true,
                to,
            },
            RdAtomicResource::Atomic { psn, orig },
        )
    });
}

/// What a new READ or ATOMIC leaves in the responder: the MSN advanced, the response `make`
/// builds for it (from the new MSN and the receive WQEs consumed so far) queued (to QP `to`
/// for an EE context), the request kept for duplicates, ePSN `epsn`.
#[inline(always)]
fn queue_rd_atomic(
    qp: &mut crate::verbs::qp::Qp,
    epsn: Psn,
    make: impl FnOnce(softib_wire::Msn, u32) -> (Response, RdAtomicResource),
) {
    let r = &mut qp.transport.resp;
    r.msn = r.msn.add(1);
    let (response, kept) = make(r.msn, r.credits.consumed);
    r.responses.push_back(response);
    remember(r, qp.attr.max_dest_rd_atomic, kept);
    qp.transport.expected_psn = epsn;
}

/// What an ATOMIC leaves in the operand that held `orig`: COMPARE_SWAP (`is_cas`) the swap
/// value when the compare value matches, else `orig`; FETCH_ADD the sum (modulo 2^64).
#[inline(always)]
fn atomic_result(is_cas: bool, orig: u64, a: &softib_wire::atomic_eth::AtomicEth) -> u64 {
    if !is_cas {
        orig.wrapping_add(a.swap_add)
    } else if orig == a.compare {
        a.swap_add
    } else {
        orig
    }
}

/// Keeps a READ / ATOMIC for duplicates, at most `depth` of them (oldest dropped).
fn remember(r: &mut crate::transport::rc::Responder, depth: u8, res: RdAtomicResource) {
    r.resources.push_back(res);
    while r.resources.len() > usize::from(depth.max(1)) {
        r.resources.pop_front();
    }
}
