//! RC requester (IBA 9.7.3): turns send WQEs into request packets, assigns PSNs, sets AckReq,
//! keeps the PSN and READ/ATOMIC windows, runs the transport and RNR timers, and rewinds for
//! retransmission (go-back-N from the first unacknowledged PSN).
//!
//! Responses first: a QP with responses owed (responder side) sends those before new requests.
//!
//! End-to-end credits (IBA 9.7.7.2.4, 9.7.7.2.5): every WQE gets a send sequence number (SSN)
//! when it starts. A WQE that consumes a receive WQE at the responder (SEND, WRITE with
//! immediate) and has no credit is *limited* (C9-159, C9-162): a SEND sends one packet with
//! AckReq and the send queue waits for its acknowledgement (C9-163); a WRITE with immediate
//! sends the whole message, AckReq on the last packet, and waits (o9-99). READ, WRITE and
//! ATOMIC need no credit and go out in order; nothing is ever sent out of order to get round
//! a limited WQE (C9-160), and retransmissions are never held back by credits. Until the first
//! acknowledgement tells otherwise the send queue has no credits (C9-156); a responder that
//! sends the "invalid" credit code (Linux rxe, QPs on an SRQ) lifts flow control for the rest
//! of the connection (9.7.7.2.4).

use softib_wire::atomic_eth::AtomicEth;
use softib_wire::bth::Bth;
use softib_wire::deth::Deth;
use softib_wire::ieth::Ieth;
use softib_wire::immdt::ImmDt;
use softib_wire::opcode::Opcode;
use softib_wire::psn::MASK24;
use softib_wire::rdeth::Rdeth;
use softib_wire::reth::Reth;
use softib_wire::transport::{TransportHeaders, TransportPacket};
use softib_wire::xrceth::Xrceth;
use softib_wire::{Psn, Service, XrcSrqn};

use super::Hca;
use crate::time::{transport_deadline, Instant};
use crate::verbs::cq::WorkCompletion;
use crate::verbs::event::QpErrorCause;
use crate::verbs::types::{AccessFlags, QpState, QpType, SendFlags, WcStatus};
use crate::verbs::wr::{SendWqe, WqePayload, WqeState, WrOpcode};

/// A request packet with AckReq set at least this often inside long messages.
pub const ACK_REQ_EVERY: u32 = 64;
/// The last packet of a message asks for an ACK when the message is the last one currently
/// posted, or when at least this many packets went out without one. IBA requires only that a
/// response be guaranteed (C9-60); coalescing ACKs over several small messages halves the
/// packets a stream of small SENDs costs. (Linux rxe sets AckReq on every message.)
pub const ACK_REQ_MESSAGES_EVERY: u32 = 16;
/// P_Key sent in every BTH (the default partition, full member).
pub const DEFAULT_PKEY: u16 = 0xffff;

/// Pad bytes (BTH:PadCnt of them) of outgoing packets.
pub(crate) static ZERO_PAD: [u8; 3] = [0; 3];

/// Packets a message of `len` bytes takes at path MTU `mtu` (at least one).
#[inline]
pub(crate) fn packets_for(len: u32, mtu: u32) -> u32 {
    // Most messages fit one packet: no division for them.
    if len <= mtu {
        return 1;
    }
    len.div_ceil(mtu)
}

/// True for the operations whose request consumes a receive WQE at the responder, and so an
/// end-to-end credit (C9-157.2.1).
pub(crate) fn consumes_rwqe(op: &WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::Send
            | WrOpcode::SendWithImm(_)
            | WrOpcode::SendWithInv(_)
            | WrOpcode::RdmaWriteWithImm { .. }
    )
}

/// Where the payload of a request packet comes from.
pub(crate) enum PayloadPlan {
    None,
    /// Bytes `[offset, offset + len)` of the WQE's message.
    Message {
        offset: u32,
        len: u32,
    },
}

/// What [`Hca::rc_next_packet`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tx {
    /// No packet.
    Nothing,
    /// A packet is in the output buffer.
    Sent,
    /// A packet is in the output buffer, and the QP is back on the transmit list if it has
    /// more and its timer re-armed (the express path does both with the QP in hand).
    SentListed,
}

impl Tx {
    fn sent(sent: bool) -> Tx {
        if sent {
            Tx::Sent
        } else {
            Tx::Nothing
        }
    }
}

impl Hca {
    /// True when the QP could send a packet at `now`.
    pub(crate) fn rc_has_tx_work(&self, qpn: u32, now: Instant) -> bool {
        let Some(qp) = self.qps.get(&qpn) else {
            return false;
        };
        if !qp.transport.resp.responses.is_empty()
            && matches!(qp.attr.qp_state, QpState::Rtr | QpState::Rts | QpState::Sqd)
        {
            return true;
        }
        if qp.attr.qp_state != QpState::Rts {
            return false;
        }
        let r = &qp.transport.req;
        if r.rnr_wait.is_some_and(|t| t > now) {
            return false;
        }
        r.cur < qp.sq.len() && self.rc_can_start(qpn)
    }

    /// Cheap over-approximation of [`Hca::rc_has_tx_work`]: responses owed, or send WQEs not
    /// yet (fully) sent, whatever the windows, credits and timers say.
    #[inline]
    pub(crate) fn rc_may_have_tx_work(&self, qpn: u32) -> bool {
        let Some(qp) = self.qps.get(&qpn) else {
            return false;
        };
        match qp.attr.qp_state {
            QpState::Rts => {
                !qp.transport.resp.responses.is_empty() || qp.transport.req.cur < qp.sq.len()
            }
            QpState::Rtr | QpState::Sqd => !qp.transport.resp.responses.is_empty(),
            _ => false,
        }
    }

    /// Whether `sq[cur]` may (continue to) be transmitted: a limited WQE waiting for its
    /// acknowledgement, fences, READ/ATOMIC depth, PSN window.
    #[inline]
    fn rc_can_start(&self, qpn: u32) -> bool {
        let Some(qp) = self.qps.get(&qpn) else {
            return false;
        };
        let r = &qp.transport.req;
        let Some(w) = qp.sq.get(r.cur) else {
            return false;
        };
        // A packet never sent before waits while a limited WQE waits for its acknowledgement
        // (C9-162, C9-163); retransmissions do not (credits restrict new messages only).
        let rd_atomic = matches!(w.opcode, WrOpcode::RdmaRead { .. }) || w.opcode.is_atomic();
        let new_packet = !w.tx.started
            || (!rd_atomic && r.cur_psn.distance(w.tx.first_psn) >= w.tx.sent_once as i32);
        let c = &r.credits;
        if new_packet
            && c.limited_wait
                .is_some_and(|(_, through)| !c.covers(through))
        {
            return false;
        }
        if w.tx.started {
            return true;
        }
        // Fence: wait until every earlier READ / ATOMIC has completed.
        if w.flags.contains(SendFlags::FENCE) && r.rd_atomic_outstanding > 0 {
            return false;
        }
        // max_rd_atomic 0 is treated as 1, so that READ/ATOMIC work cannot stall forever.
        if rd_atomic && r.rd_atomic_outstanding >= u32::from(qp.attr.max_rd_atomic.max(1)) {
            return false;
        }
        let mtu = qp.attr.path_mtu.bytes();
        let npsn = wqe_npsn(w, mtu);
        let oldest = oldest_unacked(&qp.sq);
        let outstanding = match oldest {
            // Unsigned modulo 2^24: a window of exactly 2^23 PSNs must not fold to -2^23.
            Some(p) => qp.transport.next_psn.sub(p.value()).value(),
            None => 0,
        };
        outstanding == 0 || outstanding + npsn <= self.max_unacked_psns
    }

    /// Sends one packet of the QP (a response if one is owed, else a request); returns true
    /// when a frame was written to `out`.
    #[inline(always)]
    pub(crate) fn rc_next_packet(
        &mut self,
        now: Instant,
        qpn: u32,
        out: &mut Vec<u8>,
        batch: Option<&mut super::datapath::DatagramBatch<'_>>,
    ) -> Tx {
        let Some(qp) = self.qps.get(&qpn) else {
            return Tx::Nothing;
        };
        let state = qp.attr.qp_state;
        if !qp.transport.resp.responses.is_empty()
            && matches!(state, QpState::Rtr | QpState::Rts | QpState::Sqd)
        {
            if self.express {
                if let Some(tx) = self.rc_express_response(qpn, out, batch) {
                    return tx;
                }
            }
            return Tx::sent(self.rc_next_response(qpn, out));
        }
        if state != QpState::Rts || qp.transport.req.rnr_wait.is_some_and(|t| t > now) {
            return Tx::Nothing;
        }
        if self.express {
            if let Some(tx) = self.rc_express_next_request(now, qpn, out, batch) {
                return tx;
            }
        }
        if !self.rc_can_start(qpn) {
            return Tx::Nothing;
        }
        Tx::sent(self.rc_next_request(now, qpn, out))
    }

    /// The common request in fewer steps: a new RC SEND or RDMA WRITE (with or without
    /// immediate data) of one packet, its payload inline or in one SGE, with credit and room
    /// in the PSN window, or a new RDMA READ of one response packet or ATOMIC within the READ /
    /// ATOMIC depth, towards an IPv4 address whose headers the QP has cached. Its frame
    /// and every state change are those of [`Hca::rc_next_request`] for the same WQE (the
    /// tests run workloads both ways and compare). `None`, with nothing changed, for anything
    /// else: the general path takes it.
    ///
    /// With a datagram batch lent ([`Hca::poll_transmit_batched`]) the packets go into it as
    /// datagrams, and the QP sends as many such requests in a row as it has ready and the
    /// batch has room for: what is the same for all of them (the QP's look-up, its port and
    /// headers, the transmit list and the timer) is done once. The packets and state changes
    /// are those of as many calls one after the other.
    #[inline]
    fn rc_express_next_request(
        &mut self,
        now: Instant,
        qpn: u32,
        out: &mut Vec<u8>,
        batch: Option<&mut super::datapath::DatagramBatch<'_>>,
    ) -> Option<Tx> {
        let qp = self.qps.get_mut(&qpn)?;
        if qp.qp_type != QpType::Rc {
            return None;
        }
        let mtu = qp.attr.path_mtu.bytes();
        // The first WQE's kind before anything is looked up for the run (a long message
        // goes to the general path at once).
        if !qp
            .sq
            .get(qp.transport.req.cur)
            .is_some_and(|w| express_kind(w, mtu))
        {
            return None;
        }
        let port = crate::verbs::ah::port_config(&self.ports, qp.attr.port_num.max(1))?;
        let (socket, sport) = super::datapath::express_sport(self.udp_socket_port, qpn);
        let (template, prefix) =
            qp.transport
                .tx_headers
                .as_mut()?
                .datagram_parts(port, &qp.attr.ah_attr, sport)?;
        // A driver whose socket writes the IP and UDP headers lends its batch: datagrams
        // alone go into it.
        let mut batch = batch.filter(|_| socket);
        let dst = match batch {
            Some(_) => Some(template.v4_destination()?),
            None => None,
        };
        let mut sent = 0usize;
        let mut placeable = false;
        // The oldest unacknowledged PSN before the next WQE starts: looked up for the first;
        // within a run nothing is acknowledged, so after a packet it is the run's first PSN.
        let mut oldest = oldest_unacked(&qp.sq);
        loop {
            let r = &qp.transport.req;
            let cur = r.cur;
            // The WQE and the one behind it, from one look into the queue.
            let mut run = qp.sq.range_mut(cur..);
            let Some(w) = run.next() else {
                break;
            };
            let after = run.next().map(|n| After {
                unstarted: (!n.tx.started).then(|| (wqe_npsn(n, mtu), consumes_rwqe(&n.opcode))),
                done: n.tx.done,
                resume: n.tx.started.then(|| rewind_point(n)),
            });
            if !express_kind(w, mtu) || r.credits.limited_wait.is_some() {
                break;
            }
            if w.flags.contains(SendFlags::FENCE) && r.rd_atomic_outstanding > 0 {
                break;
            }
            // The extension headers, serialized, and the opcode.
            let mut ext = [0u8; softib_wire::roce::EXPRESS_EXT_MAX];
            let (opcode, ext_len, consumes) = match w.opcode {
                WrOpcode::Send => (Opcode::RC_SEND_ONLY, 0, true),
                WrOpcode::SendWithImm(imm) => {
                    let _ = ImmDt { imm }.emit(&mut ext);
                    (
                        Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                        softib_wire::immdt::LEN,
                        true,
                    )
                }
                WrOpcode::RdmaWrite { remote } | WrOpcode::RdmaWriteWithImm { remote, .. } => {
                    let reth = Reth {
                        va: remote.addr,
                        rkey: remote.rkey,
                        dma_len: w.length,
                    };
                    let _ = reth.emit(&mut ext);
                    match w.opcode {
                        WrOpcode::RdmaWriteWithImm { imm, .. } => {
                            let _ = ImmDt { imm }.emit(&mut ext[softib_wire::reth::LEN..]);
                            (
                                Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                                softib_wire::reth::LEN + softib_wire::immdt::LEN,
                                true,
                            )
                        }
                        _ => (Opcode::RC_RDMA_WRITE_ONLY, softib_wire::reth::LEN, false),
                    }
                }
                // READ / ATOMIC depth ([`Hca::rc_can_start`]).
                WrOpcode::RdmaRead { .. }
                | WrOpcode::AtomicCmpSwp { .. }
                | WrOpcode::AtomicFetchAdd { .. }
                    if r.rd_atomic_outstanding >= u32::from(qp.attr.max_rd_atomic.max(1)) =>
                {
                    break;
                }
                WrOpcode::RdmaRead { remote } => {
                    let reth = Reth {
                        va: remote.addr,
                        rkey: remote.rkey,
                        dma_len: w.length,
                    };
                    let _ = reth.emit(&mut ext);
                    (Opcode::RC_RDMA_READ_REQUEST, softib_wire::reth::LEN, false)
                }
                WrOpcode::AtomicCmpSwp { .. } | WrOpcode::AtomicFetchAdd { .. } => {
                    let Some((opcode, a)) = atomic_request(&w.opcode) else {
                        break;
                    };
                    let _ = a.emit(&mut ext);
                    (opcode, softib_wire::atomic_eth::LEN, false)
                }
                _ => break,
            };
            // A READ or ATOMIC request carries no payload, always asks for its
            // acknowledgement (its response) and is never solicited (`request_headers`).
            let rd_atomic = matches!(
                opcode,
                Opcode::RC_RDMA_READ_REQUEST | Opcode::RC_COMPARE_SWAP | Opcode::RC_FETCH_ADD
            );
            let c = &r.credits;
            let rwqe_started = c.rwqe_started.wrapping_add(u32::from(consumes));
            if consumes && !c.covers(rwqe_started) {
                break;
            }
            // PSN window ([`Hca::rc_can_start`]), with the oldest unacknowledged PSN before
            // this WQE starts.
            let psn = qp.transport.next_psn;
            let next_psn = psn.next();
            if let Some(p) = oldest {
                if psn.sub(p.value()).value() + 1 > self.max_unacked_psns {
                    break;
                }
            }
            // The payload.
            let payload: &[u8] = match &w.payload {
                _ if rd_atomic || w.length == 0 => &[],
                WqePayload::Inline(v) => {
                    let Some(v) = v.get(..w.length as usize) else {
                        break;
                    };
                    v
                }
                WqePayload::Sge(s) if u64::from(s.length) >= u64::from(w.length) => {
                    let Some(b) = self.mrs.local_bytes(
                        qp.pd,
                        s.lkey,
                        s.addr,
                        u64::from(w.length),
                        AccessFlags::empty(),
                    ) else {
                        break;
                    };
                    b
                }
                WqePayload::Sge(_) | WqePayload::Sges(_) => break,
            };
            let ident = self.ip_ident.wrapping_add(1);
            let wire_ident = if socket { 0 } else { ident };
            // AckReq, as [`Hca::rc_next_request`] decides it for the last packet of a new WQE.
            let pkts_since_ack_req = r.pkts_since_ack_req + 1;
            let ack_req = rd_atomic
                || last_packet_asks(LastPacket {
                    last_posted: after.is_none(),
                    repeats_ask: false,
                    pkts_since_ack_req,
                    in_flight: next_psn.sub(oldest.unwrap_or(psn).value()).value(),
                    max_unacked: self.max_unacked_psns,
                    next: after.and_then(|a| a.unstarted),
                    next_has_credit: c.covers(rwqe_started.wrapping_add(1)),
                });
            let bth = Bth {
                opcode,
                solicited: w.flags.contains(SendFlags::SOLICITED) && !rd_atomic,
                mig_req: super::apm::mig_req(&qp.attr),
                pkey: DEFAULT_PKEY,
                dest_qp: softib_wire::Qpn::new(qp.attr.dest_qp_num),
                ack_req,
                psn,
                ..Bth::default()
            };
            if !super::datapath::write_express(
                template,
                prefix,
                batch.as_deref_mut(),
                wire_ident,
                bth.to_bytes(),
                &ext[..ext_len],
                payload,
                out,
            ) {
                break;
            }
            // The packet is out: the state moves as the general path moves it.
            self.ip_ident = ident;
            self.counters.express_requests += 1;
            // A same-host sender may place an RDMA WRITE Only itself when nothing before it
            // is unacknowledged: the responder then expects exactly this PSN, with no NAK
            // pending (`placement`).
            placeable = opcode == Opcode::RC_RDMA_WRITE_ONLY && oldest.is_none();
            w.tx.started = true;
            w.tx.first_psn = psn;
            w.tx.npsn = 1;
            w.tx.resp_next_psn = psn;
            w.state = WqeState::InProgress;
            qp.transport.next_psn = next_psn;
            let r = &mut qp.transport.req;
            r.rd_atomic_outstanding += u32::from(rd_atomic);
            let c = &mut r.credits;
            c.last_ssn = c.last_ssn.wrapping_add(1) & MASK24;
            c.rwqe_started = rwqe_started;
            w.tx.ssn = c.last_ssn;
            w.tx.rwqe_through = rwqe_started;
            r.pkts_since_ack_req = if ack_req { 0 } else { pkts_since_ack_req };
            w.tx.asked_ack = ack_req;
            w.tx.sent_once = 1;
            w.tx.all_sent = true;
            r.cur = cur + 1;
            r.cur_psn = match after {
                // WQEs already answered are passed over (as `rc_next_request` does).
                Some(After { done: true, .. }) => {
                    r.cur += 1;
                    while qp.sq.get(r.cur).is_some_and(|n| n.tx.done) {
                        r.cur += 1;
                    }
                    match qp.sq.get(r.cur) {
                        Some(n) if n.tx.started => rewind_point(n),
                        _ => next_psn,
                    }
                }
                Some(After {
                    resume: Some(p), ..
                }) => p,
                _ => next_psn,
            };
            sent += 1;
            oldest = oldest.or(Some(psn));
            // One frame at a time; a batch takes datagrams while it has room, up to a
            // placeable one (its driver looks at `tx_placeable` for the last packet).
            match batch.as_deref() {
                Some(b) if !placeable && b.starts.len() < b.room => {}
                _ => break,
            }
        }
        if sent == 0 {
            return None;
        }
        self.tx_placeable = placeable;
        if let Some(b) = batch {
            b.dst = dst;
        }
        // `poll_transmit` counts one packet.
        self.counters.sent_pkts += sent as u64 - 1;
        let r = &mut qp.transport.req;
        if r.timer.is_none() {
            r.timer = transport_deadline(now, qp.attr.timeout, self.clock_lag);
        }
        // What `poll_transmit` does after a packet, with the QP in hand: back on the list
        // while anything is left to send (as `rc_may_have_tx_work`; the QP is in RTS), and
        // the timer.
        if !qp.transport.resp.responses.is_empty() || r.cur < qp.sq.len() {
            super::datapath::schedule(qp, &mut self.tx_ready, qpn);
        }
        super::datapath::rearm(qp, &mut self.timers, qpn);
        Some(Tx::SentListed)
    }

    fn rc_next_request(&mut self, now: Instant, qpn: u32, out: &mut Vec<u8>) -> bool {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return false;
        };
        let mtu = qp.attr.path_mtu.bytes();
        let cur = qp.transport.req.cur;
        let next_psn = qp.transport.next_psn;
        let last_posted = cur + 1 == qp.sq.len();
        let oldest_unacked = oldest_unacked(&qp.sq);
        let next = next_unstarted(&qp.sq, cur, mtu);
        let Some(w) = qp.sq.get_mut(cur) else {
            return false;
        };
        let consumes = consumes_rwqe(&w.opcode);
        if !w.tx.started {
            w.tx.started = true;
            w.tx.first_psn = next_psn;
            w.tx.npsn = wqe_npsn(w, mtu);
            w.tx.resp_next_psn = next_psn;
            w.state = WqeState::InProgress;
            qp.transport.next_psn = next_psn.add(w.tx.npsn);
            qp.transport.req.cur_psn = next_psn;
            if matches!(w.opcode, WrOpcode::RdmaRead { .. }) || w.opcode.is_atomic() {
                qp.transport.req.rd_atomic_outstanding += 1;
            }
            // SSN and credit position (9.7.7.1.1, 9.7.7.2.4).
            let c = &mut qp.transport.req.credits;
            c.last_ssn = c.last_ssn.wrapping_add(1) & MASK24;
            c.rwqe_started = c.rwqe_started.wrapping_add(u32::from(consumes));
            w.tx.ssn = c.last_ssn;
            w.tx.rwqe_through = c.rwqe_started;
        }
        let psn = qp.transport.req.cur_psn;
        let idx = psn.distance(w.tx.first_psn).max(0) as u32;
        let service = match qp.qp_type {
            QpType::XrcSend => Service::Xrc,
            QpType::Rd => Service::Rd,
            _ => Service::Rc,
        };
        let (mut headers, plan, last) = request_packet(w, idx, psn, mtu, service);
        headers.bth.dest_qp = softib_wire::Qpn::new(qp.attr.dest_qp_num);
        if let Some(rd) = w.rd {
            // An EE context's message: to the WR's QP, through the remote EE context, with
            // the WR's Q_Key and the sending QP.
            headers.bth.dest_qp = rd.remote_qpn;
            headers.rdeth = Some(Rdeth {
                resv8: 0,
                eecn: softib_wire::Eecn::new(qp.attr.dest_qp_num),
            });
            headers.deth = Some(Deth {
                qkey: rd.qkey,
                resv8: 0,
                src_qp: rd.src_qpn,
            });
        }
        headers.bth.pkey = DEFAULT_PKEY;
        headers.bth.mig_req = super::apm::mig_req(&qp.attr);
        let r = &mut qp.transport.req;
        r.pkts_since_ack_req += 1;
        let resend = idx < w.tx.sent_once;
        // A limited WQE (no credit, C9-159): a SEND sends this one packet with AckReq and
        // waits (C9-163); a WRITE with immediate sends the whole message with AckReq on the
        // last packet and waits (C9-162, o9-99).
        let limited = !resend && consumes && !r.credits.covers(w.tx.rwqe_through);
        let is_send = !matches!(w.opcode, WrOpcode::RdmaWriteWithImm { .. });
        let limited_stop = limited && (is_send || last);
        let ask = if last {
            let oldest = oldest_unacked.unwrap_or(w.tx.first_psn);
            last_packet_asks(LastPacket {
                last_posted,
                repeats_ask: resend && w.tx.asked_ack,
                pkts_since_ack_req: r.pkts_since_ack_req,
                in_flight: qp.transport.next_psn.sub(oldest.value()).value(),
                max_unacked: self.max_unacked_psns,
                next,
                next_has_credit: r.credits.covers(r.credits.rwqe_started.wrapping_add(1)),
            })
        } else {
            r.pkts_since_ack_req >= ACK_REQ_EVERY
        };
        // A retransmitted packet that a limited WQE is waiting on asks again.
        let waited_on = r.credits.limited_wait.is_some_and(|(p, _)| p == psn);
        if ask || limited_stop || waited_on {
            headers.bth.ack_req = true;
        }
        if limited_stop {
            r.credits.limited_wait = Some((psn, w.tx.rwqe_through));
        }
        if headers.bth.ack_req {
            r.pkts_since_ack_req = 0;
        }
        if last && !resend {
            w.tx.asked_ack = headers.bth.ack_req;
        }
        if idx < w.tx.sent_once {
            self.counters.retransmitted_pkts += 1;
        } else {
            w.tx.sent_once = idx + 1;
        }
        // Advance to the next packet / WQE.
        let is_read = matches!(w.opcode, WrOpcode::RdmaRead { .. });
        if last || is_read || w.opcode.is_atomic() {
            w.tx.all_sent = true;
            r.cur += 1;
            // After a rewind, WQEs already answered (a READ whose data arrived while an
            // earlier WQE was being retried) are not sent again.
            while qp.sq.get(r.cur).is_some_and(|n| n.tx.done) {
                r.cur += 1;
            }
            r.cur_psn = match qp.sq.get(r.cur) {
                Some(n) if n.tx.started => rewind_point(n),
                _ => qp.transport.next_psn,
            };
        } else {
            r.cur_psn = psn.next();
        }
        if r.timer.is_none() {
            r.timer = transport_deadline(now, qp.attr.timeout, self.clock_lag);
        }
        match self.build_request(qpn, cur, plan, headers, None, out) {
            Ok(built) => built,
            Err(status) => {
                self.rc_complete_error(qpn, cur, status);
                false
            }
        }
    }

    /// Writes the request packet with `headers` of send WQE `cur` of `qpn` into `out`, its
    /// payload as `plan` says, towards the QP's own address vector (RC, UC) or towards `to`
    /// (port and address vector of a UD WQE). When the payload lies in one place (inline data, or
    /// within one SGE) the frame is built straight from it; otherwise it is gathered into the
    /// scratch buffer first. `Ok(false)` when the QP has no usable address;
    /// `Err(IBV_WC_LOC_PROT_ERR)` when the gather list fails its L_Key checks.
    pub(crate) fn build_request(
        &mut self,
        qpn: u32,
        cur: usize,
        plan: PayloadPlan,
        mut headers: TransportHeaders,
        to: Option<(u8, crate::verbs::ah::AhAttr)>,
        out: &mut Vec<u8>,
    ) -> Result<bool, WcStatus> {
        let pd = self.wqe_pd(qpn, cur);
        if let PayloadPlan::Message { offset, len } = plan {
            let qp = &self.qps[&qpn];
            match self.contiguous_payload(pd, &qp.sq[cur].payload, offset, len) {
                Some(Ok(bytes)) => {
                    let ident = self.ip_ident.wrapping_add(1);
                    let pad = softib_wire::transport::pad_for(bytes.len());
                    headers.bth.pad_cnt = pad as u8;
                    let direct = TransportPacket {
                        headers,
                        payload: bytes,
                        pad: &ZERO_PAD[..pad],
                    };
                    let (built, current) = match &to {
                        Some((port, av)) => {
                            (self.frame_into(*port, av, ident, qpn, &direct, out), true)
                        }
                        None => self.frame_into_qp(qp, ident, &direct, out),
                    };
                    self.ip_ident = ident;
                    if !current {
                        self.refresh_tx_headers(qpn);
                    }
                    return Ok(built);
                }
                Some(Err(())) => return Err(WcStatus::LocProtErr),
                None => {}
            }
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let ok = match plan {
            PayloadPlan::None => true,
            PayloadPlan::Message { offset, len } => {
                let w = &self.qps[&qpn].sq[cur];
                self.gather(pd, &w.payload, offset, len, &mut scratch)
            }
        };
        if !ok {
            self.scratch = scratch;
            return Err(WcStatus::LocProtErr);
        }
        let pad = softib_wire::transport::pad_for(scratch.len());
        headers.bth.pad_cnt = pad as u8;
        let t = TransportPacket {
            headers,
            payload: &scratch,
            pad: &ZERO_PAD[..pad],
        };
        let built = match to {
            Some((port, av)) => self.build_frame_to(port, &av, qpn, &t, out),
            None => self.build_frame(qpn, &t, out),
        };
        self.scratch = scratch;
        Ok(built)
    }

    /// Bytes `[offset, offset + len)` of a WQE's message when they lie in one place: inline
    /// data, or a single SGE (its L_Key checked). `Some(Err(()))` on a protection error, `None`
    /// when the range spans SGEs and must be gathered.
    pub(crate) fn contiguous_payload<'a>(
        &'a self,
        pd: crate::verbs::PdHandle,
        payload: &'a WqePayload,
        offset: u32,
        len: u32,
    ) -> Option<Result<&'a [u8], ()>> {
        let (offset, len) = (u64::from(offset), u64::from(len));
        if let WqePayload::Inline(v) = payload {
            return Some(v.get(offset as usize..(offset + len) as usize).ok_or(()));
        }
        if len == 0 {
            return Some(Ok(&[]));
        }
        let mut skip = offset;
        for s in payload.sges() {
            let sl = u64::from(s.length);
            if skip >= sl {
                skip -= sl;
                continue;
            }
            if sl - skip < len {
                return None;
            }
            let bytes = self
                .check_local(pd, s.lkey, s.addr + skip, len, AccessFlags::empty())
                .ok()
                .and_then(|slice| self.mr_slice(&slice));
            return Some(bytes.ok_or(()));
        }
        // The message is shorter than the range: a protection error, as `gather` reports.
        Some(Err(()))
    }

    /// Copies bytes `[offset, offset + len)` of a WQE's message into `dst`, checking every
    /// L_Key touched. False on a protection error.
    #[inline(always)]
    pub(crate) fn gather(
        &self,
        pd: crate::verbs::PdHandle,
        payload: &WqePayload,
        offset: u32,
        len: u32,
        dst: &mut Vec<u8>,
    ) -> bool {
        let (offset, len) = (u64::from(offset), u64::from(len));
        match payload {
            WqePayload::Inline(v) => match v.get(offset as usize..(offset + len) as usize) {
                Some(b) => {
                    dst.extend_from_slice(b);
                    true
                }
                None => false,
            },
            WqePayload::Sge(_) | WqePayload::Sges(_) => {
                let sges = payload.sges();
                let mut skip = offset;
                let mut want = len;
                for s in sges {
                    if want == 0 {
                        break;
                    }
                    let sl = u64::from(s.length);
                    if skip >= sl {
                        skip -= sl;
                        continue;
                    }
                    let take = (sl - skip).min(want);
                    let Ok(slice) =
                        self.check_local(pd, s.lkey, s.addr + skip, take, AccessFlags::empty())
                    else {
                        return false;
                    };
                    let Some(bytes) = self.mr_slice(&slice) else {
                        return false;
                    };
                    dst.extend_from_slice(bytes);
                    want -= take;
                    skip = 0;
                }
                want == 0
            }
        }
    }

    /// Rewinds the requester to retransmit from the oldest unfinished WQE (go-back-N).
    pub(crate) fn rc_rewind(&mut self, qpn: u32, from: Psn) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let Some(i) = qp.sq.iter().position(|w| !w.tx.done) else {
            return;
        };
        let w = &qp.sq[i];
        if !w.tx.started {
            return;
        }
        let r = &mut qp.transport.req;
        r.cur = i;
        r.cur_psn = if matches!(w.opcode, WrOpcode::RdmaRead { .. }) || w.opcode.is_atomic() {
            rewind_point(w)
        } else if w.tx.contains(from) {
            from
        } else {
            w.tx.first_psn
        };
        r.pkts_since_ack_req = 0;
    }

    /// A transport or RNR timer fired.
    pub(crate) fn rc_timeout(&mut self, now: Instant, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        if !matches!(qp.attr.qp_state, QpState::Rts | QpState::Sqd) {
            qp.transport.req.timer = None;
            qp.transport.req.rnr_wait = None;
            return;
        }
        let r = &mut qp.transport.req;
        if r.rnr_wait.is_some_and(|t| t <= now) {
            r.rnr_wait = None;
        }
        if r.timer.is_none_or(|t| t > now) {
            return;
        }
        r.timer = None;
        let outstanding = qp.sq.iter().any(|w| w.tx.started && !w.tx.done);
        if !outstanding {
            return;
        }
        // Where the retry resumes: a READ partly answered resumes at its next response PSN
        // (`rewind_point`), the point the NAK-driven retries (`rc_retry`: sequence NAKs,
        // implied NAKs, missing READ responses) name too. Comparing like with like matters:
        // were two paths to name different points for the same missing response, they would
        // alternate, each look like forward progress to the other, and the counter would
        // never run out (seen: a READ retried forever).
        let from = qp
            .sq
            .iter()
            .find(|w| !w.tx.done)
            .map(rewind_point)
            .unwrap_or_default();
        if r.last_retry_psn.is_some_and(|p| from.distance(p) > 0) {
            r.retries = 0;
        }
        r.last_retry_psn = Some(from);
        // retry_cnt 0..=7 retries; IBA gives no infinite value for the transport retry count
        // (rxe also treats 7 as a count). With an armed alternate path, exhaustion migrates
        // and reloads the counter (o9-86).
        if r.retries >= qp.attr.retry_cnt && !self.migrate_on_retry_exhaustion(qpn) {
            self.counters.retry_exceeded += 1;
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
        r.retry_from = None;
        self.counters.retry_timeouts += 1;
        self.rc_rewind(qpn, from);
        if let Some(qp) = self.qps.get_mut(&qpn) {
            qp.transport.req.timer = transport_deadline(now, qp.attr.timeout, self.clock_lag);
        }
    }

    /// Completes `sq[i]` in error (after completing the successful ones before it, which
    /// the caller has done) and moves the QP to ERR, flushing the rest.
    pub(crate) fn rc_complete_error(&mut self, qpn: u32, i: usize, status: WcStatus) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        // Earlier WQEs not yet done are flushed with the rest; this one carries the error.
        let Some(w) = qp.sq.get(i) else {
            return;
        };
        let rd = w.rd;
        let mut wc = WorkCompletion::new(w.wr_id, status, w.opcode.wc_opcode(), qpn_of(qpn))
            .with_byte_len(0);
        // An EE context's RESYNC takes the PSN after the highest the message used (o9-35.a1):
        // the last response PSN a READ or ATOMIC reserved, the highest packet sent of others.
        let resync_psn = if !w.tx.started {
            qp.transport.next_psn
        } else if matches!(w.opcode, WrOpcode::RdmaRead { .. }) || w.opcode.is_atomic() {
            w.tx.first_psn.add(w.tx.npsn)
        } else {
            w.tx.first_psn
                .add(w.tx.sent_once.clamp(1, w.tx.npsn.max(1)))
        };
        // Remove the failed WQE so the flush does not report it twice; earlier unfinished
        // WQEs (only possible for coalesced errors) are flushed.
        let _ = qp.sq.remove(i);
        qp.transport.req = Default::default();
        if let Some(eecn) = super::rd::eecn_of_key(qpn) {
            self.rd_message_failed(eecn, rd, wc, resync_psn);
            return;
        }
        let cq = qp.send_cq;
        wc.qp_num = qpn_of(qpn);
        let _ = self.push_completion(cq, wc, false);
        let cause = match status {
            WcStatus::RemAccessErr => QpErrorCause::AccessViolation,
            WcStatus::RemInvReqErr => QpErrorCause::InvalidRequest,
            _ => QpErrorCause::CompletionError,
        };
        let _ = self.set_qp_error(qpn_of(qpn), cause);
    }
}

fn qpn_of(q: u32) -> softib_wire::Qpn {
    softib_wire::Qpn::new(q)
}

/// First PSN of the oldest started, unacknowledged WQE of a send queue. Retired WQEs leave
/// the queue, so this is almost always its head. WQEs start in queue order (at `cur`, which
/// a rewind moves back only to a started WQE), so the started ones are a prefix of the queue
/// (`rc_ack` relies on it too): the search ends at the first WQE not started, and a queue of
/// unstarted WQEs behind no outstanding one costs one look at its head.
#[inline]
pub(crate) fn oldest_unacked(sq: &std::collections::VecDeque<SendWqe>) -> Option<Psn> {
    match sq.front() {
        Some(w) if w.tx.started && !w.tx.done => Some(w.tx.first_psn),
        Some(w) if w.tx.started => sq
            .iter()
            .take_while(|w| w.tx.started)
            .find(|w| !w.tx.done)
            .map(|w| w.tx.first_psn),
        _ => None,
    }
}

/// PSNs a WQE consumes at path MTU `mtu`.
#[inline]
pub(crate) fn wqe_npsn(w: &SendWqe, mtu: u32) -> u32 {
    match w.opcode {
        WrOpcode::AtomicCmpSwp { .. } | WrOpcode::AtomicFetchAdd { .. } => 1,
        _ => packets_for(w.length, mtu),
    }
}

/// The WQE after `cur` when it has not started: its PSNs at path MTU `mtu` and whether it
/// consumes a receive WQE (and so needs a credit).
#[inline(always)]
fn next_unstarted(
    sq: &std::collections::VecDeque<SendWqe>,
    cur: usize,
    mtu: u32,
) -> Option<(u32, bool)> {
    sq.get(cur + 1)
        .filter(|n| !n.tx.started)
        .map(|n| (wqe_npsn(n, mtu), consumes_rwqe(&n.opcode)))
}

/// A WQE of the kind the requester's express path sends: a SEND or RDMA WRITE (with or
/// without immediate data) not yet started, of one packet at path MTU `mtu`, an RDMA READ
/// not yet started whose response is one packet, or an ATOMIC not yet started.
#[inline(always)]
fn express_kind(w: &SendWqe, mtu: u32) -> bool {
    !w.tx.started
        && w.length <= mtu
        && matches!(
            w.opcode,
            WrOpcode::Send
                | WrOpcode::SendWithImm(_)
                | WrOpcode::RdmaWrite { .. }
                | WrOpcode::RdmaWriteWithImm { .. }
                | WrOpcode::RdmaRead { .. }
                | WrOpcode::AtomicCmpSwp { .. }
                | WrOpcode::AtomicFetchAdd { .. }
        )
}

/// The RC opcode and AtomicETH of an ATOMIC WR: COMPARE_SWAP carries the swap and compare
/// values, FETCH_ADD the addend (and a compare field of zero); `None` for any other WR.
#[inline(always)]
fn atomic_request(op: &WrOpcode) -> Option<(Opcode, AtomicEth)> {
    match *op {
        WrOpcode::AtomicCmpSwp {
            remote_addr,
            rkey,
            compare,
            swap,
        } => Some((
            Opcode::RC_COMPARE_SWAP,
            AtomicEth {
                va: remote_addr,
                rkey,
                swap_add: swap,
                compare,
            },
        )),
        WrOpcode::AtomicFetchAdd {
            remote_addr,
            rkey,
            add,
        } => Some((
            Opcode::RC_FETCH_ADD,
            AtomicEth {
                va: remote_addr,
                rkey,
                swap_add: add,
                compare: 0,
            },
        )),
        _ => None,
    }
}

/// What the requester's express path needs of the WQE behind the one it sends.
#[derive(Clone, Copy)]
struct After {
    /// Its PSNs and whether it consumes a receive WQE, when it has not started
    /// ([`next_unstarted`]).
    unstarted: Option<(u32, bool)>,
    /// It is done (answered while an earlier WQE was being retried).
    done: bool,
    /// Where its retransmission resumes, when it has started ([`rewind_point`]).
    resume: Option<Psn>,
}

/// What decides AckReq on the last packet of a message ([`last_packet_asks`]).
struct LastPacket {
    /// Nothing else is queued behind the WQE.
    last_posted: bool,
    /// A retry repeats a packet that asked.
    repeats_ask: bool,
    /// Packets sent without AckReq, this one included.
    pkts_since_ack_req: u32,
    /// PSNs outstanding once this packet is sent.
    in_flight: u32,
    /// The requester's PSN window.
    max_unacked: u32,
    /// The next WQE, when it has not started ([`next_unstarted`]).
    next: Option<(u32, bool)>,
    /// Whether the next receive WQE the requester would consume has a credit.
    next_has_credit: bool,
}

/// AckReq on the last packet of a message: when nothing else is queued behind, when a retry
/// repeats a packet that asked, every [`ACK_REQ_MESSAGES_EVERY`] packets, and when the next
/// WQE will not fit in the PSN window or will have no credit (a requester that stops always
/// has an ACK coming, and one that runs out of credits hears of new ones soon). One rule for
/// the general path and the express path.
#[inline(always)]
fn last_packet_asks(p: LastPacket) -> bool {
    let next_blocked = p
        .next
        .is_some_and(|(npsn, _)| p.in_flight + npsn > p.max_unacked);
    let next_limited = p.next.is_some_and(|(_, consumes)| consumes) && !p.next_has_credit;
    p.last_posted
        || p.repeats_ask
        || p.pkts_since_ack_req >= ACK_REQ_MESSAGES_EVERY
        || next_blocked
        || next_limited
}

/// Where retransmission of a started WQE resumes: READ from the first response not yet
/// received, others from their first PSN.
pub(super) fn rewind_point(w: &SendWqe) -> Psn {
    if matches!(w.opcode, WrOpcode::RdmaRead { .. }) {
        w.tx.resp_next_psn
    } else {
        w.tx.first_psn
    }
}

/// `op`, an RC opcode, in the opcode class of `service`: the low five bits of BTH:OpCode name
/// the same operation and position for RC, UC and XRC (IBA Table 38), only bits 7:5 differ.
#[inline(always)]
pub(crate) fn in_class(op: Opcode, service: Service) -> Opcode {
    match service {
        Service::Uc => Opcode(op.0 | Opcode::UC_SEND_FIRST.0),
        Service::Xrc => Opcode(op.0 | Opcode::XRC_SEND_FIRST.0),
        Service::Rd => Opcode(op.0 | Opcode::RD_SEND_FIRST.0),
        _ => op,
    }
}

/// The headers of request packet `idx` of `w` (PSN `psn`) for a connection of `service` (RC,
/// UC or XRC: segmentation and headers are the same, only the opcode class differs, and XRC
/// adds the XRCETH naming the destination SRQ to every packet), its payload plan and whether
/// it is the last packet of the message. (The headers are returned by value: they are built
/// once, in the caller's frame, not initialised there and then overwritten.)
#[inline(always)]
pub(crate) fn request_packet(
    w: &SendWqe,
    idx: u32,
    psn: Psn,
    mtu: u32,
    service: Service,
) -> (TransportHeaders, PayloadPlan, bool) {
    let mut h = TransportHeaders::new(Bth {
        psn,
        ..Bth::default()
    });
    let (mut plan, mut last) = request_headers(w, idx, mtu, &mut h);
    if w.rd.is_some_and(|d| d.resync) {
        // RD RESYNC (0x55): operation 0x15 of the RD class, one packet, acknowledged.
        h.bth.opcode = Opcode(Opcode::RD_RESYNC.0 & 0x1f);
        h.bth.ack_req = true;
        h.bth.solicited = false;
        (plan, last) = (PayloadPlan::None, true);
    }
    h.bth.opcode = in_class(h.bth.opcode, service);
    if service == Service::Xrc {
        h.xrceth = Some(Xrceth {
            resv8: 0,
            xrcsrq: XrcSrqn::new(w.xrc_srqn),
        });
    }
    (h, plan, last)
}

/// [`request_packet`] on headers `h` that hold only the PSN, with RC opcodes.
#[inline(always)]
fn request_headers(
    w: &SendWqe,
    idx: u32,
    mtu: u32,
    h: &mut TransportHeaders,
) -> (PayloadPlan, bool) {
    let n = w.tx.npsn;
    let first = idx == 0;
    let last = idx + 1 >= n;
    let offset = idx * mtu;
    let len = w.length.saturating_sub(offset).min(mtu);
    let solicited = w.flags.contains(SendFlags::SOLICITED);
    let op = |first_op: Opcode, middle: Opcode, last_op: Opcode, only: Opcode| match (first, last) {
        (true, true) => only,
        (true, false) => first_op,
        (false, true) => last_op,
        (false, false) => middle,
    };
    let plan = PayloadPlan::Message { offset, len };
    let opcode = match w.opcode {
        WrOpcode::Send => op(
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST,
            Opcode::RC_SEND_ONLY,
        ),
        WrOpcode::SendWithImm(imm) => {
            if last {
                h.immdt = Some(ImmDt { imm });
            }
            op(
                Opcode::RC_SEND_FIRST,
                Opcode::RC_SEND_MIDDLE,
                Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
                Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            )
        }
        WrOpcode::SendWithInv(rkey) => {
            if last {
                h.ieth = Some(Ieth { rkey });
            }
            op(
                Opcode::RC_SEND_FIRST,
                Opcode::RC_SEND_MIDDLE,
                Opcode::RC_SEND_LAST_WITH_INVALIDATE,
                Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
            )
        }
        WrOpcode::RdmaWrite { remote } | WrOpcode::RdmaWriteWithImm { remote, .. } => {
            if first {
                h.reth = Some(Reth {
                    va: remote.addr,
                    rkey: remote.rkey,
                    dma_len: w.length,
                });
            }
            if let WrOpcode::RdmaWriteWithImm { imm, .. } = w.opcode {
                if last {
                    h.immdt = Some(ImmDt { imm });
                }
                op(
                    Opcode::RC_RDMA_WRITE_FIRST,
                    Opcode::RC_RDMA_WRITE_MIDDLE,
                    Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                    Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                )
            } else {
                op(
                    Opcode::RC_RDMA_WRITE_FIRST,
                    Opcode::RC_RDMA_WRITE_MIDDLE,
                    Opcode::RC_RDMA_WRITE_LAST,
                    Opcode::RC_RDMA_WRITE_ONLY,
                )
            }
        }
        WrOpcode::RdmaRead { remote } => {
            // A retried READ asks only for what has not arrived yet (the subset rule of
            // duplicate READs lets the responder serve it).
            let done = u64::from(idx) * u64::from(mtu);
            let done = done.min(u64::from(w.length)) as u32;
            h.reth = Some(Reth {
                va: remote.addr + u64::from(done),
                rkey: remote.rkey,
                dma_len: w.length - done,
            });
            h.bth.opcode = Opcode::RC_RDMA_READ_REQUEST;
            h.bth.ack_req = true;
            return (PayloadPlan::None, true);
        }
        WrOpcode::AtomicCmpSwp { .. } | WrOpcode::AtomicFetchAdd { .. } => {
            if let Some((opcode, a)) = atomic_request(&w.opcode) {
                h.atomic_eth = Some(a);
                h.bth.opcode = opcode;
            }
            h.bth.ack_req = true;
            return (PayloadPlan::None, true);
        }
    };
    h.bth.opcode = opcode;
    h.bth.solicited = solicited && last;
    (plan, last)
}
