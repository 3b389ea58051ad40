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
    /// A retry from this PSN is under way: NAKs and implied NAKs at or after it (stale
    /// responses of the stream sent before the rewind) neither count nor rewind again, until
    /// a response shows progress or the transport timer fires.
    pub retry_from: Option<Psn>,
    /// PSN the last retry resent from. The retry counters count retries of one request
    /// packet (C9-137, C9-142): a retry from a later PSN means the responder moved on, so the
    /// count starts over.
    pub last_retry_psn: Option<Psn>,
}

/// A response the responder owes, in PSN order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// ACK, RNR NAK or NAK-PSN sequence error (`syndrome` is the AETH syndrome byte).
    Ack { psn: Psn, syndrome: u8, msn: Msn },
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
        /// False for the answer to a duplicate READ (it holds no new responder resource).
        fresh: bool,
    },
    /// ATOMIC acknowledgement carrying the original remote data (`fresh` as for READ).
    Atomic {
        psn: Psn,
        orig: u64,
        msn: Msn,
        fresh: bool,
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
}
