//! Per-QP state of the reliable connected service (IBA 9.7): the requester and completer on
//! the send side, the responder on the receive side.

use std::collections::VecDeque;

use softib_wire::{Msn, Psn};

use crate::time::Instant;
use crate::verbs::mr::MrSlice;
use crate::verbs::wr::RecvWqe;

/// Send-side progress of one send WQE, kept beside it on the send queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WqeTx {
    /// True once PSNs are assigned (the first packet was sent).
    pub started: bool,
    /// PSN of the first request packet (READ: also of the first response).
    pub first_psn: Psn,
    /// PSNs the WQE consumes: request packets for SEND/WRITE, response packets for READ,
    /// 1 for atomics.
    pub npsn: u32,
    /// Every request packet has been sent once.
    pub all_sent: bool,
    /// Request packets sent at least once (index of the first never sent).
    pub sent_once: u32,
    /// The message's last packet asked for an ACK when first sent (retries ask the same).
    pub asked_ack: bool,
    /// READ: next response PSN expected; ATOMIC: unused.
    pub resp_next_psn: Psn,
    /// SEND/WRITE acknowledged, or READ/ATOMIC response fully received.
    pub done: bool,
    /// Send sequence number (IBA 9.7.7.1.1): 1 for the first WQE started on the connection,
    /// then +1 per WQE (mod 2^24). Assigned with the PSNs.
    pub ssn: u32,
    /// Receive WQEs the messages up to and including this one consume at the responder
    /// (a running count, mod 2^32): the end-to-end credit position of the WQE.
    pub rwqe_through: u32,
}

impl WqeTx {
    /// PSN of the last packet (or last response packet) of the WQE.
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npsn.saturating_sub(1))
    }

    /// True when `psn` lies in the WQE's PSN range.
    pub fn contains(&self, psn: Psn) -> bool {
        let d = psn.distance(self.first_psn);
        d >= 0 && (d as u32) < self.npsn
    }
}

/// Requester (and completer) state of an RC QP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requester {
    /// Index in the send queue of the WQE whose packets go out next.
    pub cur: usize,
    /// PSN of the next packet of `sq[cur]` (behind `next_psn` while retransmitting).
    pub cur_psn: Psn,
    /// Consecutive retries without forward progress (transport timer or NAK).
    pub retries: u8,
    /// Consecutive RNR retries without forward progress.
    pub rnr_retries: u8,
    /// Transport timer deadline (`None`: not running).
    pub timer: Option<Instant>,
    /// Transmission is held until this time after an RNR NAK.
    pub rnr_wait: Option<Instant>,
    /// READ and ATOMIC WQEs sent but not yet completed.
    pub rd_atomic_outstanding: u32,
    /// Request packets sent since the last one with AckReq.
    pub pkts_since_ack_req: u32,
    /// A retry from this PSN is under way: a repeated NAK for it neither counts nor rewinds
    /// again, until a response shows progress or the transport timer fires; a NAK for a later
    /// PSN (a new gap after the responder took the resent packets) rewinds from there.
    pub retry_from: Option<Psn>,
    /// PSN the last retry resent from. The retry counters count retries of one request
    /// packet (C9-137, C9-142): a retry from a later PSN means the responder moved on, so the
    /// count starts over.
    pub last_retry_psn: Option<Psn>,
    /// End-to-end flow control of the send queue (IBA 9.7.7.2).
    pub credits: SendCredits,
}

/// End-to-end credit state of a send queue (IBA 9.7.7.2.4, 9.7.7.2.5).
///
/// The IBA describes the limit as an LSN (MSN + credits, raised by one for every request that
/// consumes no receive WQE). softib keeps the same limit in a form that needs no adjustment:
/// counts of receive WQEs. `rwqe_limit` is the number of receive WQEs the responder is known to
/// have posted since the connection started (the MSN's messages consumed `C(MSN)` of them, and
/// `credits` more are posted beyond: `C(MSN) + credits`); a WQE that consumes a receive WQE is
/// covered when its running count `rwqe_through` is within that number. READ, WRITE without
/// immediate and ATOMIC consume none and never wait for credits. The limit only grows: every
/// advertisement is a lower bound of a count that never shrinks, so an older or rounded-down
/// one is simply not news (this is how LSN "moving backwards", footnote 11, is tolerated).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendCredits {
    /// The responder sends the "invalid" credit code: no flow control for the rest of the
    /// connection (9.7.7.2.4).
    pub unlimited: bool,
    /// Receive WQEs the responder is known to have posted (running count, mod 2^32).
    pub rwqe_limit: u32,
    /// SSN of the last WQE started (0 before the first).
    pub last_ssn: u32,
    /// Running receive-WQE count of the WQEs started so far.
    pub rwqe_started: u32,
    /// SSN and running receive-WQE count of the last WQE completed and removed from the send
    /// queue (an MSN that names it still has a known credit base).
    pub retired_ssn: u32,
    pub retired_rwqe: u32,
    /// A limited WQE (9.7.7.2.5) sent a packet with AckReq at this PSN and waits for its
    /// acknowledgement before any new packet goes out; the `u32` is the WQE's `rwqe_through`
    /// (credits that cover it end the wait as well).
    pub limited_wait: Option<(Psn, u32)>,
}

impl SendCredits {
    /// True when a WQE whose running receive-WQE count is `rwqe_through` has a credit.
    pub fn covers(&self, rwqe_through: u32) -> bool {
        self.unlimited || self.rwqe_limit.wrapping_sub(rwqe_through) as i32 >= 0
    }
}

/// A response the responder owes, in PSN order.
///
/// `base` on the variants whose AETH can carry credits is the number of receive WQEs the
/// messages up to `msn` consumed; the credit field is filled in when the packet is built, from
/// the receive WQEs posted by then (9.7.7.2.3: credits are relative to the MSN of the same
/// AETH).
///
/// `to` is, for an EE context, the requesting RD QP the response is addressed to (BTH:DestQP:
/// the source QP of the request it answers); 0 for QPs, which answer their connection's QP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// ACK (syndrome class 0b00: its credit bits are replaced when the packet is built), RNR
    /// NAK or NAK-PSN sequence error (`syndrome` is the AETH syndrome byte).
    Ack {
        psn: Psn,
        syndrome: u8,
        msn: Msn,
        base: u32,
        to: u32,
    },
    /// A NAK after which the QP enters ERR (invalid request, remote access or operational
    /// error): sent first, then the QP moves to ERR with `cause`.
    Nak {
        psn: Psn,
        syndrome: u8,
        msn: Msn,
        cause: crate::verbs::event::QpErrorCause,
    },
    /// RDMA READ response: packets from `next_psn` on, reading `len - sent` more bytes at
    /// `slice.offset + sent`; `first_psn` is the PSN of the (possibly duplicate) request.
    Read {
        first_psn: Psn,
        next_psn: Psn,
        slice: MrSlice,
        len: u32,
        sent: u32,
        msn: Msn,
        base: u32,
        /// False for the answer to a duplicate READ (it holds no new responder resource).
        fresh: bool,
        to: u32,
    },
    /// ATOMIC acknowledgement carrying the original remote data (`fresh` as for READ).
    Atomic {
        psn: Psn,
        orig: u64,
        msn: Msn,
        base: u32,
        fresh: bool,
        to: u32,
    },
}

/// A READ or ATOMIC the responder executed, remembered for duplicates (its depth is
/// `max_dest_rd_atomic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdAtomicResource {
    /// The PSN run reserved for the response and the data range of the request.
    Read {
        first_psn: Psn,
        npsn: u32,
        va: u64,
        rkey: u32,
        len: u32,
    },
    /// The PSN of the atomic and the original value it returned.
    Atomic { psn: Psn, orig: u64 },
}

/// The message the responder is in the middle of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum InMessage {
    /// Between messages: the next packet must be FIRST or ONLY.
    #[default]
    None,
    /// A SEND: the receive WQE it lands in and the bytes placed so far.
    Send { wqe: RecvWqe, offset: u64 },
    /// An RDMA WRITE: the checked target range and the bytes placed so far.
    Write { slice: MrSlice, offset: u64 },
    /// An XRC target's SEND into SRQ `srqn` of another HCA: its packets are delegated to
    /// the SRQ's owner, which holds the receive WQE (`hca/xrc_shared.rs`).
    Delegated { srqn: u32 },
}

/// Responder state of an RC QP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Responder {
    /// Message sequence number: messages completed so far (mod 2^24).
    pub msn: Msn,
    pub msg: InMessage,
    /// A NAK-PSN sequence error is outstanding: drop out-of-sequence packets silently.
    pub nak_seq_outstanding: bool,
    /// READ / ATOMIC results kept for duplicates, oldest first.
    pub resources: VecDeque<RdAtomicResource>,
    /// Responses owed, in PSN order.
    pub responses: VecDeque<Response>,
    /// End-to-end credits this receive queue generates (IBA 9.7.7.2.3).
    pub credits: RecvCredits,
    /// One-shot faults armed with `Hca::inject_responder_fault`.
    pub faults: ArmedFaults,
    /// XRC target: the SRQ the message in progress (`msg`) is being received through and its
    /// CQ. Every packet of a message names the same SRQ; a SEND in progress that is flushed
    /// completes there.
    pub xrc_msg: Option<(crate::verbs::SrqHandle, crate::verbs::CqHandle)>,
    /// EE context: what it keeps of the RD QPs it serves (allocated when it first receives,
    /// so that QPs do not carry it).
    pub rd: Option<Box<RdResponder>>,
}

/// The responder state an EE context keeps beside an RC QP's (`Responder::rd`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RdResponder {
    /// The message in progress: its destination QPN and that QP's receive CQ.
    pub msg: Option<(u32, crate::verbs::CqHandle)>,
    /// The (destination, source) QPNs of the latest new request: its responses go to the
    /// source, and duplicates must name both (o9-38.a1).
    pub last: (u32, u32),
    /// The (destination, source) QPNs of the most recent new FIRST packet, which MIDDLE and
    /// LAST packets must name (o9-38.a1).
    pub first: Option<(u32, u32)>,
}

/// A local error the RC responder can be told to meet, so that the behaviour the IBA demands
/// for it can be observed: softib never meets these errors on its own (its saved atomic
/// results and duplicate acknowledgements cannot fail), but a hardware responder can, and a
/// reference implementation used to inject faults needs to show the required reaction.
///
/// A fault is armed on one QP with `Hca::inject_responder_fault` and is one-shot: the next
/// duplicate request it applies to meets it and consumes it; other requests are unaffected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResponderFault {
    /// An error while answering the next duplicate SEND or RDMA WRITE: the duplicate is
    /// dropped silently, with no ACK and no NAK (C9-106).
    DuplicateAckError,
    /// The saved original data of an atomic cannot be read back for the next duplicate
    /// ATOMIC that has a saved result: the duplicate is dropped silently (o9-68). The result
    /// itself is kept, so a later retry of the same atomic is answered.
    AtomicReplayUnavailable,
}

/// The responder faults armed on a QP (each at most once; arming one twice is the same as
/// once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArmedFaults {
    /// [`ResponderFault::DuplicateAckError`] is armed.
    pub duplicate_ack_error: bool,
    /// [`ResponderFault::AtomicReplayUnavailable`] is armed.
    pub atomic_replay_unavailable: bool,
}

impl ArmedFaults {
    /// Arms `fault`.
    pub fn arm(&mut self, fault: ResponderFault) {
        match fault {
            ResponderFault::DuplicateAckError => self.duplicate_ack_error = true,
            ResponderFault::AtomicReplayUnavailable => self.atomic_replay_unavailable = true,
        }
    }

    /// Consumes `fault`: true when it was armed (it is disarmed now).
    pub fn take(&mut self, fault: ResponderFault) -> bool {
        let armed = match fault {
            ResponderFault::DuplicateAckError => &mut self.duplicate_ack_error,
            ResponderFault::AtomicReplayUnavailable => &mut self.atomic_replay_unavailable,
        };
        std::mem::take(armed)
    }
}

/// End-to-end credit bookkeeping of a receive queue that is not attached to an SRQ
/// (IBA 9.7.7.2.3, C9-157.2.1). Counts run mod 2^32 from the move out of RESET (C9-155).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvCredits {
    /// Receive WQEs posted.
    pub posted: u32,
    /// Receive WQEs consumed by the messages completed so far (those the MSN counts).
    pub consumed: u32,
    /// The largest `consumed + credits` any AETH sent so far advertised: the receive WQEs the
    /// requester may know about.
    pub advertised: u32,
    /// PSN of the latest positive acknowledgement sent (initially the first expected PSN − 1,
    /// 9.7.7.2.2); an unsolicited ACK repeats it.
    pub ack_psn: Psn,
    /// An RNR NAK went out after the latest positive acknowledgement: the requester is
    /// waiting for receive WQEs, and posting some is news worth an unsolicited ACK.
    pub requester_waits: bool,
}

impl RecvCredits {
    /// Credits relative to an MSN whose messages consumed `base` receive WQEs: every receive
    /// WQE posted beyond them (C9-161), including one a message in progress holds.
    pub fn available(&self, base: u32) -> u32 {
        self.posted.wrapping_sub(base)
    }

    /// A positive acknowledgement at `psn` went out advertising `limit` receive WQEs in all.
    pub fn advertised_at(&mut self, psn: Psn, limit: u32) {
        self.ack_psn = psn;
        self.requester_waits = false;
        if limit.wrapping_sub(self.advertised) as i32 > 0 {
            self.advertised = limit;
        }
    }
}
