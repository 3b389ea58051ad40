//! XRC domains shared between HCAs: a target QP of one HCA delivering into an XRC SRQ of
//! another.
//!
//! On a host, every process that opens the same file with `ibv_open_xrcd` gets the same XRC
//! domain of the device, and an XRC target QP of any of them delivers into the XRC SRQs of
//! all of them (`ibv_xsrq_pingpong -c N` relies on it). In softib each process is an HCA of
//! its own (a member of the host-wide device, `softib-udp`'s `host`), so a domain that spans
//! processes is split the way hardware splits the work between its transport engine and its
//! DMA engine:
//!
//! - **Domains and SRQs are published** in a table the HCAs share ([`XrcSrqShare`], in
//!   `softib-udp` a region of the host table in shared memory). A domain shared so has a
//!   host-wide id ([`Hca::share_xrcd`]); each XRC SRQ of it is published under its SRQ number
//!   with that id and a *credit count*: the receive WQEs posted to it that no message has
//!   reserved yet. The owner adds to it when receives are posted.
//! - **The target QP does the transport.** A request whose XRCETH names an SRQ of another HCA
//!   published in the target's domain goes through the responder as any XRC request (PSN,
//!   duplicates, opcode sequence, lengths, ACKs and their coalescing). A message's first
//!   packet reserves one credit ([`XrcSrqShare::reserve`]): none left is an RNR NAK, as for an
//!   empty local SRQ. Instead of taking a receive WQE, the responder emits a *delegation* per
//!   packet: the payload and what the owner needs to place it ([`Hca::poll_delegation`]). The
//!   driver carries it to the owner.
//! - **The owner does the memory side** ([`Hca::handle_delegation`]): on a message's first
//!   packet it takes the WQE the reservation stands for, scatters every packet's payload
//!   through it (L_Key checks in the SRQ's PD) and completes it on the SRQ's CQ with the
//!   fields a local XRC receive has (`qp_num` the target QP).
//!
//! Local consumption of a published SRQ (a target QP of the owner's own HCA) reserves a
//! credit the same way, so a reservation always finds its WQE. RDMA WRITE, READ and atomics
//! through a target QP into another HCA's memory are not carried: the target checks their
//! R_Key in no protection domain, which fails (NAK-Remote Access Error); zero-length ones need
//! no memory and pass (C9-88), and a zero-length RDMA WRITE with immediate is delegated like a
//! SEND.
//!
//! What the target cannot know, the owner decides after the ACK has gone: a message longer
//! than the receive WQE completes it with `LocLenErr`, and a scatter entry that fails its
//! L_Key check with `LocProtErr`, while the initiator saw its request acknowledged (a local
//! XRC receive would have NAKed it: docs/deviations.md).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use softib_wire::Position;

use super::Hca;
use crate::error::XrcdError;
use crate::verbs::cq::WorkCompletion;
use crate::verbs::types::{WcOpcode, WcStatus};
use crate::verbs::wr::RecvWqe;
use crate::verbs::{SrqHandle, XrcdHandle};

/// What [`XrcSrqShare::reserve`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// One receive WQE of the SRQ is the message's now: its owner takes it when the message's
    /// first packet reaches it.
    Reserved,
    /// The SRQ is published in the domain, but every WQE posted to it is spoken for: the
    /// responder answers with an RNR NAK.
    Empty,
    /// No SRQ of that number is published in that domain (destroyed, never there, or its
    /// owner gone): an XRCETH violation.
    Unknown,
}

/// The table of XRC SRQs that HCAs sharing XRC domains publish (in `softib-udp`, a region of
/// the host table in shared memory; in tests, a [`MemoryXrcShare`]). Each HCA that shares a
/// domain holds one; an entry is written by the SRQ's owner and reserved from by anyone.
pub trait XrcSrqShare: std::fmt::Debug + Send {
    /// Publishes XRC SRQ `srqn` of shared domain `domain` with `credits` receive WQEs not
    /// reserved. False when the table has no room (the SRQ then serves this HCA's target QPs
    /// only).
    fn publish(&mut self, srqn: u32, domain: u32, credits: u32) -> bool;
    /// Withdraws a published SRQ (destroyed).
    fn withdraw(&mut self, srqn: u32);
    /// `n` receive WQEs were posted to published SRQ `srqn`.
    fn add_credits(&mut self, srqn: u32, n: u32);
    /// True when SRQ `srqn` is published in `domain` (its owner alive).
    fn published(&self, srqn: u32, domain: u32) -> bool;
    /// Reserves one receive WQE of SRQ `srqn` in `domain` for a new message.
    fn reserve(&mut self, srqn: u32, domain: u32) -> Reservation;
}

/// An [`XrcSrqShare`] in memory: clones share one table (the HCAs of one test, or of a
/// simulation).
#[derive(Debug, Clone, Default)]
pub struct MemoryXrcShare(Arc<Mutex<BTreeMap<u32, (u32, u32)>>>);

impl MemoryXrcShare {
    /// An empty table.
    pub fn new() -> MemoryXrcShare {
        MemoryXrcShare::default()
    }

    /// The credits of SRQ `srqn`, if it is published.
    pub fn credits(&self, srqn: u32) -> Option<u32> {
        self.table().get(&srqn).map(|&(_, c)| c)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, (u32, u32)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl XrcSrqShare for MemoryXrcShare {
    fn publish(&mut self, srqn: u32, domain: u32, credits: u32) -> bool {
        self.table().insert(srqn, (domain, credits));
        true
    }

    fn withdraw(&mut self, srqn: u32) {
        self.table().remove(&srqn);
    }

    fn add_credits(&mut self, srqn: u32, n: u32) {
        if let Some((_, c)) = self.table().get_mut(&srqn) {
            *c = c.saturating_add(n);
        }
    }

    fn published(&self, srqn: u32, domain: u32) -> bool {
        self.table().get(&srqn).is_some_and(|&(d, _)| d == domain)
    }

    fn reserve(&mut self, srqn: u32, domain: u32) -> Reservation {
        match self.table().get_mut(&srqn) {
            Some((d, _)) if *d != domain => Reservation::Unknown,
            Some((_, 0)) => Reservation::Empty,
            Some((_, c)) => {
                *c -= 1;
                Reservation::Reserved
            }
            None => Reservation::Unknown,
        }
    }
}

/// The HCA's share, if a driver set one (a cloned HCA has none: the table is the original's).
#[derive(Debug, Default)]
pub(crate) struct ShareSlot(pub(crate) Option<Box<dyn XrcSrqShare>>);

impl Clone for ShareSlot {
    fn clone(&self) -> ShareSlot {
        ShareSlot(None)
    }
}

/// Bytes in front of a delegation's payload.
pub const DELEGATION_HEADER: usize = 24;
/// The first byte of every delegation.
const MARK: u8 = 0xD7;
/// Kinds (byte 1): a packet's payload, or the end of a message the target gave up.
const KIND_DATA: u8 = 1;
const KIND_ABORT: u8 = 2;
/// Flags (byte 3).
const F_SOLICITED: u8 = 1;
const F_IMM: u8 = 2;
const F_INVALIDATE: u8 = 4;
const F_WRITE_IMM: u8 = 8;
/// Largest payload a delegation carries (one packet at the largest path MTU).
const MAX_PAYLOAD: usize = 4096;

/// The SRQ number a delegation names (its owner is the HCA that holds that number), if
/// `bytes` is a well-formed delegation's start.
pub fn delegation_srqn(bytes: &[u8]) -> Option<u32> {
    if bytes.len() < DELEGATION_HEADER || bytes[0] != MARK {
        return None;
    }
    Some(u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]))
}

/// A delegation's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    kind: u8,
    pos: Position,
    flags: u8,
    srqn: u32,
    /// The target QP the message came through (its completion's `qp_num`).
    tqpn: u32,
    imm: u32,
    rkey: u32,
    psn: u32,
}

impl Header {
    fn emit(&self, out: &mut Vec<u8>) {
        let pos = match self.pos {
            Position::First => 0,
            Position::Middle => 1,
            Position::Last => 2,
            Position::Only => 3,
        };
        out.extend_from_slice(&[MARK, self.kind, pos, self.flags]);
        for w in [self.srqn, self.tqpn, self.imm, self.rkey, self.psn] {
            out.extend_from_slice(&w.to_be_bytes());
        }
    }

    fn parse(b: &[u8]) -> Option<(Header, &[u8])> {
        let srqn = delegation_srqn(b)?;
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let pos = match b[2] {
            0 => Position::First,
            1 => Position::Middle,
            2 => Position::Last,
            3 => Position::Only,
            _ => return None,
        };
        let payload = &b[DELEGATION_HEADER..];
        if !matches!(b[1], KIND_DATA | KIND_ABORT) || payload.len() > MAX_PAYLOAD {
            return None;
        }
        Some((
            Header {
                kind: b[1],
                pos,
                flags: b[3],
                srqn,
                tqpn: word(8) & 0x00ff_ffff,
                imm: word(12),
                rkey: word(16),
                psn: word(20),
            },
            payload,
        ))
    }
}

/// What a delegated packet carries besides its payload ([`Hca::xrc_delegate`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Delegated {
    pub(crate) srqn: u32,
    pub(crate) tqpn: u32,
    pub(crate) pos: Position,
    pub(crate) psn: u32,
    pub(crate) solicited: bool,
    pub(crate) imm: Option<u32>,
    pub(crate) invalidate: Option<u32>,
    /// An RDMA WRITE with immediate (zero-length), not a SEND.
    pub(crate) write_imm: bool,
}

/// The owner's state of a delegated message in progress, per target QP.
#[derive(Debug, Clone)]
pub(crate) struct Inbound {
    srq: SrqHandle,
    /// The receive WQE; `None` once the message failed (its remaining packets are dropped).
    wqe: Option<RecvWqe>,
    offset: u64,
}

impl Hca {
    /// Has this HCA publish the XRC SRQs of shared domains in `share` and reserve receive
    /// WQEs of other HCAs' SRQs there (the UDP driver gives it the host table's; see the
    /// module documentation). Domains shared before are not published again.
    pub fn set_xrc_share(&mut self, share: Box<dyn XrcSrqShare>) {
        self.xrc_share.0 = Some(share);
    }

    /// Makes `xrcd` the share of host-wide XRC domain `id` (`ibv_open_xrcd` of a file that
    /// processes share): its XRC SRQs, those that exist and those to come, are published in
    /// the share under `id`, and its target QPs deliver into the SRQs other HCAs publish
    /// under `id`.
    pub fn share_xrcd(&mut self, xrcd: XrcdHandle, id: u32) -> Result<(), XrcdError> {
        let d = self
            .xrcds
            .get_mut(xrcd.0)
            .ok_or(XrcdError::NoSuchXrcd(xrcd))?;
        d.share = Some(id);
        let srqs: Vec<SrqHandle> = self
            .srqs_by_num
            .values()
            .copied()
            .filter(|s| {
                self.srqs
                    .get(s.0)
                    .and_then(|s| s.xrc)
                    .is_some_and(|x| x.xrcd == xrcd && x.published.is_none())
            })
            .collect();
        for srq in srqs {
            self.xrc_publish(srq, id);
        }
        Ok(())
    }

    /// The host-wide id of `xrcd`, if it is shared ([`Hca::share_xrcd`]).
    pub fn xrcd_share_id(&self, xrcd: XrcdHandle) -> Option<u32> {
        self.xrcds.get(xrcd.0).and_then(|d| d.share)
    }

    /// Publishes XRC SRQ `srq` under domain `id`, with its queued WQEs as credits.
    pub(crate) fn xrc_publish(&mut self, srq: SrqHandle, id: u32) {
        let Some(share) = self.xrc_share.0.as_mut() else {
            return;
        };
        let Some(s) = self.srqs.get_mut(srq.0) else {
            return;
        };
        let credits = s.queue.len() as u32;
        if share.publish(s.srqn, id, credits) {
            if let Some(x) = s.xrc.as_mut() {
                x.published = Some(id);
            }
        }
    }

    /// Reserves a WQE of the published SRQ `srqn` of domain `domain` (own or another HCA's).
    #[cold]
    pub(crate) fn xrc_reserve(&mut self, srqn: u32, domain: u32) -> Reservation {
        match self.xrc_share.0.as_mut() {
            Some(s) => s.reserve(srqn, domain),
            None => Reservation::Unknown,
        }
    }

    /// True when another HCA publishes SRQ `srqn` in shared domain `xrcd` (a target QP's).
    #[cold]
    pub(crate) fn xrc_remote_srq(&self, xrcd: Option<XrcdHandle>, srqn: u32) -> bool {
        let Some(id) = xrcd.and_then(|x| self.xrcds.get(x.0)).and_then(|d| d.share) else {
            return false;
        };
        if self.srqs_by_num.contains_key(&srqn) {
            // Ours, and not in the domain (or the look-up would have found it): not a remote
            // SRQ either.
            return false;
        }
        self.xrc_share
            .0
            .as_ref()
            .is_some_and(|s| s.published(srqn, id))
    }

    /// Queues a delegation of `payload` for the owner of SRQ `d.srqn`.
    pub(crate) fn xrc_delegate(&mut self, d: Delegated, payload: &[u8]) {
        let mut flags = 0;
        if d.solicited {
            flags |= F_SOLICITED;
        }
        if d.imm.is_some() {
            flags |= F_IMM;
        }
        if d.invalidate.is_some() {
            flags |= F_INVALIDATE;
        }
        if d.write_imm {
            flags |= F_WRITE_IMM;
        }
        let h = Header {
            kind: KIND_DATA,
            pos: d.pos,
            flags,
            srqn: d.srqn,
            tqpn: d.tqpn,
            imm: d.imm.unwrap_or(0),
            rkey: d.invalidate.unwrap_or(0),
            psn: d.psn,
        };
        self.xrc_queue(h, payload);
        self.counters.xrc_delegated += 1;
    }

    /// Queues the end of target QP `tqpn`'s message into SRQ `srqn`, which the target gave up
    /// (the receive WQE completes with flush error at the owner).
    pub(crate) fn xrc_delegate_abort(&mut self, srqn: u32, tqpn: u32) {
        let h = Header {
            kind: KIND_ABORT,
            pos: Position::Last,
            flags: 0,
            srqn,
            tqpn,
            imm: 0,
            rkey: 0,
            psn: 0,
        };
        self.xrc_queue(h, &[]);
        self.counters.xrc_delegated += 1;
    }

    fn xrc_queue(&mut self, h: Header, payload: &[u8]) {
        let mut b = self.xrc_spare.pop().unwrap_or_default();
        b.clear();
        h.emit(&mut b);
        b.extend_from_slice(payload);
        self.xrc_out.push_back(b);
    }

    /// True when delegations wait for [`Hca::poll_delegation`].
    #[inline(always)]
    pub fn has_delegations(&self) -> bool {
        !self.xrc_out.is_empty()
    }

    /// The oldest delegation waiting, into `out` (replacing what it held): the driver hands it
    /// to the HCA that owns SRQ [`delegation_srqn`]`(out)`, which takes it with
    /// [`Hca::handle_delegation`]. Delegations of one target QP must reach their owner in
    /// the order they are polled. False when none waits.
    pub fn poll_delegation(&mut self, out: &mut Vec<u8>) -> bool {
        let Some(b) = self.xrc_out.pop_front() else {
            return false;
        };
        let old = std::mem::replace(out, b);
        if self.xrc_spare.len() < 64 {
            self.xrc_spare.push(old);
        }
        true
    }

    /// Takes a delegation another HCA's target QP emitted for an XRC SRQ of this one (see the
    /// module documentation). Its bytes are untrusted: anything malformed, for no published
    /// XRC SRQ of this HCA, or out of its message's order is dropped and counted
    /// (`xrc_delegations_dropped`).
    pub fn handle_delegation(&mut self, bytes: &[u8]) {
        let Some((h, payload)) = Header::parse(bytes) else {
            self.counters.xrc_delegations_dropped += 1;
            return;
        };
        self.counters.xrc_delegations_in += 1;
        let srq = self.srqs_by_num.get(&h.srqn).copied();
        let found = srq.and_then(|srq| {
            let s = self.srqs.get(srq.0)?;
            let x = s.xrc.filter(|x| x.published.is_some())?;
            Some((srq, s.pd, x.cq))
        });
        let Some((srq, pd, cq)) = found else {
            // The SRQ went (destroyed with messages under way): what it reserved goes too.
            self.xrc_in.remove(&h.tqpn);
            self.counters.xrc_delegations_dropped += 1;
            return;
        };
        let tqpn = softib_wire::Qpn::new(h.tqpn);
        if h.kind == KIND_ABORT {
            if let Some(Inbound { wqe: Some(w), .. }) = self.xrc_in.remove(&h.tqpn) {
                let wc = WorkCompletion::new(w.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, tqpn)
                    .with_byte_len(0);
                let _ = self.push_completion(cq, wc, false);
            }
            return;
        }
        let starts = matches!(h.pos, Position::First | Position::Only);
        let mut m = if starts {
            if let Some(Inbound { wqe: Some(w), .. }) = self.xrc_in.remove(&h.tqpn) {
                // A message of this target QP was under way and never ended (its target was
                // reset): its WQE is done with, as a flushed one.
                let wc = WorkCompletion::new(w.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, tqpn)
                    .with_byte_len(0);
                let _ = self.push_completion(cq, wc, false);
            }
            // The WQE the reservation stands for.
            match self.pop_srq_wqe(srq) {
                Some(w) => Inbound {
                    srq,
                    wqe: Some(w),
                    offset: 0,
                },
                None => {
                    self.counters.xrc_delegations_dropped += 1;
                    return;
                }
            }
        } else {
            match self.xrc_in.remove(&h.tqpn) {
                Some(m) if m.srq == srq => m,
                _ => {
                    self.counters.xrc_delegations_dropped += 1;
                    return;
                }
            }
        };
        let ends = matches!(h.pos, Position::Last | Position::Only);
        let write_imm = h.flags & F_WRITE_IMM != 0;
        let Some(mut wqe) = m.wqe.take() else {
            // The message failed on an earlier packet: the rest is dropped.
            if !ends {
                self.xrc_in.insert(h.tqpn, m);
            }
            return;
        };
        let end = m.offset + payload.len() as u64;
        let opcode = if write_imm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        };
        let status = if write_imm && !payload.is_empty() {
            // A WRITE places nothing through an SRQ's WQE: malformed.
            Some(WcStatus::LocProtErr)
        } else if !write_imm && end > wqe.length {
            Some(WcStatus::LocLenErr)
        } else {
            let sges = std::mem::take(&mut wqe.sg_list);
            let ok = self.scatter(pd, &sges, m.offset, payload);
            wqe.sg_list = sges;
            (!ok).then_some(WcStatus::LocProtErr)
        };
        if let Some(status) = status {
            // The WQE completes in error; the message's remaining packets are dropped.
            let wc = WorkCompletion::new(wqe.wr_id, status, opcode, tqpn).with_byte_len(0);
            self.spare.recycle_recv(wqe.sg_list);
            let _ = self.push_completion(cq, wc, false);
            if !ends {
                m.wqe = None;
                self.xrc_in.insert(h.tqpn, m);
            }
            return;
        }
        if !ends {
            m.offset = end;
            m.wqe = Some(wqe);
            self.xrc_in.insert(h.tqpn, m);
            return;
        }
        let mut wc = WorkCompletion::new(wqe.wr_id, WcStatus::Success, opcode, tqpn)
            .with_byte_len(end as u32);
        self.spare.recycle_recv(wqe.sg_list);
        if h.flags & F_IMM != 0 {
            wc = wc.with_imm(h.imm);
        }
        if h.flags & F_INVALIDATE != 0 {
            wc = wc.with_invalidated_rkey(h.rkey);
            if self.mrs.invalidate_rkey(pd, h.rkey) {
                self.placement_update(super::PlacementUpdate::RegionGone { rkey: h.rkey });
            }
        }
        // A CQ that overran has lost the completion (its CqError event says so); the target
        // QP is another HCA's and is not moved to ERR.
        let _ = self.push_completion(cq, wc, h.flags & F_SOLICITED != 0);
    }

    /// Forgets the owner's messages under way into `srq` (destroyed).
    pub(crate) fn xrc_forget_inbound(&mut self, srq: SrqHandle) {
        self.xrc_in.retain(|_, m| m.srq != srq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_bad_input() {
        let h = Header {
            kind: KIND_DATA,
            pos: Position::Middle,
            flags: F_IMM | F_SOLICITED,
            srqn: 0x02_0011,
            tqpn: 0x01_0012,
            imm: 0xdead_beef,
            rkey: 7,
            psn: 99,
        };
        let mut b = Vec::new();
        h.emit(&mut b);
        b.extend_from_slice(b"abc");
        assert_eq!(delegation_srqn(&b), Some(0x02_0011));
        let (g, payload) = Header::parse(&b).unwrap();
        assert_eq!((g, payload), (h, &b"abc"[..]));
        // Too short, a wrong mark, a bad position or kind, a payload beyond one packet.
        assert!(Header::parse(&b[..DELEGATION_HEADER - 1]).is_none());
        for (at, v) in [(0, 0u8), (1, 9), (2, 4)] {
            let mut c = b.clone();
            c[at] = v;
            assert!(Header::parse(&c).is_none(), "byte {at} = {v}");
        }
        let mut big = b[..DELEGATION_HEADER].to_vec();
        big.resize(DELEGATION_HEADER + MAX_PAYLOAD + 1, 0);
        assert!(Header::parse(&big).is_none());
    }

    #[test]
    fn memory_share_reserves_what_was_posted() {
        let mut s = MemoryXrcShare::new();
        assert_eq!(s.reserve(5, 1), Reservation::Unknown);
        assert!(s.publish(5, 1, 1));
        assert!(s.published(5, 1) && !s.published(5, 2));
        assert_eq!(s.reserve(5, 2), Reservation::Unknown);
        assert_eq!(s.reserve(5, 1), Reservation::Reserved);
        assert_eq!(s.reserve(5, 1), Reservation::Empty);
        s.add_credits(5, 2);
        assert_eq!(s.credits(5), Some(2));
        s.withdraw(5);
        assert_eq!(s.reserve(5, 1), Reservation::Unknown);
    }
}
