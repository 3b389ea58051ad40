//! Completion queues and work completions.
//!
//! A CQ holds up to its capacity of [`WorkCompletion`]s in FIFO order. The capacity is the
//! requested `cqe` rounded the way rxe rounds it: up to the next power of two minus one
//! (`cqe = 10` gives 15, `cqe = 16` gives 31), so it is never smaller than requested.
//!
//! Overrun is an error (IBA: a CQ overrun is an affiliated CQ error): the completion that does not fit is refused, the CQ
//! enters the error state and stays there, every later completion is refused too, and the HCA
//! queues one `IBV_EVENT_CQ_ERR` async event. Completions already queued can still be polled.
//!
//! `req_notify_cq` arms the CQ once; the next completion that matches (any completion, or with
//! `solicited_only` a solicited one or any completion in error) queues a completion event and
//! disarms it.

use super::types::{WcFlags, WcOpcode, WcStatus};

use softib_wire::Qpn;

/// A work completion (`struct ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WorkCompletion {
    /// The completed WR's identifier.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Operation (for flushed WRs: the operation of the WR).
    pub opcode: WcOpcode,
    /// Vendor syndrome (softib: 0, or the AETH syndrome of a NAK that failed the WR).
    pub vendor_err: u32,
    /// Bytes transferred (receives: bytes placed, including a UD GRH).
    pub byte_len: u32,
    /// Immediate data, when `wc_flags` has `WITH_IMM`.
    pub imm_data: Option<u32>,
    /// The R_Key invalidated by a SEND with invalidate, when `wc_flags` has `WITH_INV`.
    pub invalidated_rkey: Option<u32>,
    /// Local QP.
    pub qp_num: Qpn,
    /// Remote QP (UD receives).
    pub src_qp: Qpn,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index (GSI only in libibverbs; kept for completeness).
    pub pkey_index: u16,
    /// Source LID of a receive.
    pub slid: u16,
    /// Service level of a receive.
    pub sl: u8,
    /// Destination LID path bits of a receive.
    pub dlid_path_bits: u8,
    /// The network header a UD receive over RoCEv2 came with: IBA Annex A17.4.5.1 has the
    /// completion of a UD receive say whether the frame was IPv4 or IPv6, which tells where
    /// the sender's address lies in the GRH area. `None` for every other completion.
    pub network_hdr: Option<NetworkHdr>,
}

/// The L3 header of a received RoCEv2 packet ([`WorkCompletion::network_hdr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetworkHdr {
    /// IPv4: the GRH area holds 20 undefined bytes, then the IPv4 header.
    Ipv4,
    /// IPv6: the GRH area holds the IPv6 header.
    Ipv6,
}

impl WorkCompletion {
    /// A successful or failed completion with only the basic fields set.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: Qpn) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            qp_num,
            ..WorkCompletion::default()
        }
    }

    /// A completion with status `IBV_WC_WR_FLUSH_ERR`.
    pub fn flushed(wr_id: u64, opcode: WcOpcode, qp_num: Qpn) -> WorkCompletion {
        WorkCompletion::new(wr_id, WcStatus::WrFlushErr, opcode, qp_num)
    }

    /// Sets the byte count.
    pub fn with_byte_len(mut self, byte_len: u32) -> WorkCompletion {
        self.byte_len = byte_len;
        self
    }

    /// Sets the immediate data and the `WITH_IMM` flag.
    pub fn with_imm(mut self, imm: u32) -> WorkCompletion {
        self.imm_data = Some(imm);
        self.wc_flags |= WcFlags::WITH_IMM;
        self
    }

    /// Sets the invalidated R_Key and the `WITH_INV` flag.
    pub fn with_invalidated_rkey(mut self, rkey: u32) -> WorkCompletion {
        self.invalidated_rkey = Some(rkey);
        self.wc_flags |= WcFlags::WITH_INV;
        self
    }
}

/// Static and dynamic state of a CQ (`query_cq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqAttr {
    /// Capacity.
    pub cqe: u32,
    /// Completions waiting to be polled.
    pub len: u32,
    /// True after an overrun.
    pub overrun: bool,
    /// Armed notification, if any.
    pub notify: Option<CqNotify>,
}

/// Which completions a `req_notify_cq` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CqNotify {
    /// The next completion.
    NextCompletion,
    /// The next solicited completion (or the next completion in error).
    Solicited,
}

/// A completion refused because the CQ is full or already in error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CqOverrun {
    /// This push moved the CQ into error (the caller reports `CqError` once).
    pub(crate) entered_error: bool,
}

/// The capacity a request for `cqe` entries gets.
pub(crate) fn rounded_capacity(cqe: u32) -> u32 {
    let slots = u64::from(cqe) + 1;
    let rounded = slots.next_power_of_two() - 1;
    u32::try_from(rounded).unwrap_or(u32::MAX)
}

/// The completions a CQ holds, oldest first: a ring whose storage doubles when it fills, so
/// that a large CQ that is mostly empty costs little, and whose push (a store and two
/// additions, the growth out of line) is inlined where `VecDeque`'s was a call.
#[derive(Debug, Clone, Default)]
struct Ring {
    slots: Vec<WorkCompletion>,
    /// Index of the oldest completion.
    head: usize,
    len: usize,
}

impl Ring {
    #[inline(always)]
    fn push(&mut self, wc: WorkCompletion) {
        if self.len == self.slots.len() {
            self.grow();
        }
        let mut at = self.head + self.len;
        if at >= self.slots.len() {
            at -= self.slots.len();
        }
        self.slots[at] = wc;
        self.len += 1;
    }

    /// Doubles the full storage (16 slots at first), the completions moved to its start in
    /// order.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let n = (2 * self.slots.len()).max(16);
        let mut slots = Vec::with_capacity(n);
        let (tail, front) = self.slots.split_at(self.head);
        slots.extend_from_slice(front);
        slots.extend_from_slice(tail);
        slots.resize(n, WorkCompletion::default());
        self.slots = slots;
        self.head = 0;
    }

    /// True if a queued completion satisfies `f`.
    fn any(&self, mut f: impl FnMut(&WorkCompletion) -> bool) -> bool {
        (0..self.len).any(|i| {
            let mut at = self.head + i;
            if at >= self.slots.len() {
                at -= self.slots.len();
            }
            f(&self.slots[at])
        })
    }

    #[inline(always)]
    fn pop(&mut self) -> Option<WorkCompletion> {
        if self.len == 0 {
            return None;
        }
        let wc = self.slots[self.head];
        self.head += 1;
        if self.head == self.slots.len() {
            self.head = 0;
        }
        self.len -= 1;
        Some(wc)
    }

    fn len(&self) -> usize {
        self.len
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Cq {
    pub(crate) capacity: u32,
    entries: Ring,
    notify: Option<CqNotify>,
    overrun: bool,
    /// QPs using this CQ (send or receive side; a QP using it for both counts twice).
    pub(crate) users: usize,
}

impl Cq {
    pub(crate) fn new(capacity: u32) -> Cq {
        Cq {
            capacity,
            entries: Ring::default(),
            notify: None,
            overrun: false,
            users: 0,
        }
    }

    /// Queues a completion. `Ok(true)` when it fires the armed notification (the caller queues
    /// a completion event).
    #[inline(always)]
    pub(crate) fn push(&mut self, wc: WorkCompletion, solicited: bool) -> Result<bool, CqOverrun> {
        if self.overrun {
            return Err(CqOverrun {
                entered_error: false,
            });
        }
        if self.entries.len() >= self.capacity as usize {
            self.overrun = true;
            return Err(CqOverrun {
                entered_error: true,
            });
        }
        self.entries.push(wc);
        let fire = match self.notify {
            Some(CqNotify::NextCompletion) => true,
            Some(CqNotify::Solicited) => solicited || !wc.status.is_success(),
            None => false,
        };
        if fire {
            self.notify = None;
        }
        Ok(fire)
    }

    #[inline]
    pub(crate) fn pop(&mut self) -> Option<WorkCompletion> {
        self.entries.pop()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }

    /// Removes the queued completions `drop` picks, keeping the others in order; returns how
    /// many went. The notification and the overrun state stay as they are.
    pub(crate) fn remove_where(&mut self, mut drop: impl FnMut(&WorkCompletion) -> bool) -> usize {
        let n = self.entries.len();
        let mut removed = 0;
        // Each completion is taken from the front once and the kept ones go back at the end:
        // after n turns they are in their old order.
        for _ in 0..n {
            let Some(wc) = self.entries.pop() else { break };
            if drop(&wc) {
                removed += 1;
            } else {
                self.entries.push(wc);
            }
        }
        removed
    }

    /// True if a queued completion satisfies `f`.
    pub(crate) fn any(&self, f: impl FnMut(&WorkCompletion) -> bool) -> bool {
        self.entries.any(f)
    }

    pub(crate) fn overrun(&self) -> bool {
        self.overrun
    }

    pub(crate) fn arm(&mut self, solicited_only: bool) {
        // A request for "next completion" widens an earlier "solicited" request, never the
        // other way round.
        self.notify = match (self.notify, solicited_only) {
            (Some(CqNotify::NextCompletion), _) | (_, false) => Some(CqNotify::NextCompletion),
            _ => Some(CqNotify::Solicited),
        };
    }

    pub(crate) fn attr(&self) -> CqAttr {
        CqAttr {
            cqe: self.capacity,
            len: self.entries.len() as u32,
            overrun: self.overrun,
            notify: self.notify,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion::new(id, WcStatus::Success, WcOpcode::Send, Qpn::new(0x11))
    }

    /// The ring against `VecDeque`: pushes and pops in random runs, across its wrap and its
    /// growth, give the same completions in the same order.
    #[test]
    fn ring_keeps_fifo_order_across_wrap_and_growth() {
        let mut ring = Ring::default();
        let mut model = std::collections::VecDeque::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut id = 0;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Pushes outnumber pops early on (growth), then balance (wrap).
            let push = x % 100 < if model.len() < 300 { 60 } else { 45 };
            if push {
                ring.push(wc(id));
                model.push_back(wc(id));
                id += 1;
            } else {
                assert_eq!(ring.pop(), model.pop_front());
            }
            assert_eq!(ring.len(), model.len());
        }
        while let Some(w) = model.pop_front() {
            assert_eq!(ring.pop(), Some(w));
        }
        assert_eq!(ring.pop(), None);
    }

    #[test]
    fn remove_where_keeps_the_rest_in_order() {
        let mut c = Cq::new(rounded_capacity(20));
        for i in 0..20u64 {
            let mut w = wc(i);
            w.qp_num = Qpn::new(if i % 3 == 0 { 0x22 } else { 0x11 });
            c.push(w, false).unwrap();
            // Wrap the ring: take the first few as they come.
            if i < 4 {
                assert_eq!(c.pop().map(|w| w.wr_id), Some(i));
            }
        }
        c.arm(false);
        assert_eq!(c.remove_where(|w| w.qp_num == Qpn::new(0x22)), 5);
        let left: Vec<u64> = std::iter::from_fn(|| c.pop()).map(|w| w.wr_id).collect();
        let want: Vec<u64> = (4..20).filter(|i| i % 3 != 0).collect();
        assert_eq!(left, want);
        assert_eq!(c.attr().notify, Some(CqNotify::NextCompletion));
        assert_eq!(c.remove_where(|_| true), 0);
    }

    #[test]
    fn a_large_cq_stores_only_what_it_holds() {
        let max = crate::verbs::device::MAX_CQE;
        let mut cq = Cq::new(rounded_capacity(max));
        assert_eq!(cq.capacity, max);
        assert_eq!(
            cq.entries.slots.capacity(),
            0,
            "nothing before the first completion"
        );
        for i in 0..100 {
            assert_eq!(cq.push(wc(i), false), Ok(false));
        }
        assert!(cq.entries.slots.len() <= 128, "{}", cq.entries.slots.len());
    }

    #[test]
    fn capacity_rounding() {
        assert_eq!(rounded_capacity(1), 1);
        assert_eq!(rounded_capacity(2), 3);
        assert_eq!(rounded_capacity(10), 15);
        assert_eq!(rounded_capacity(15), 15);
        assert_eq!(rounded_capacity(16), 31);
        assert_eq!(rounded_capacity(32767), 32767);
        assert_eq!(rounded_capacity(262_144), 524_287);
        assert_eq!(rounded_capacity(4_194_303), 4_194_303);
        assert_eq!(rounded_capacity(u32::MAX), u32::MAX);
    }

    #[test]
    fn fifo_and_overrun() {
        let mut cq = Cq::new(3);
        for i in 0..3 {
            assert_eq!(cq.push(wc(i), false), Ok(false));
        }
        assert_eq!(
            cq.push(wc(3), false),
            Err(CqOverrun {
                entered_error: true
            })
        );
        assert!(cq.overrun());
        // Polling does not clear the error; later pushes are refused without a second event.
        assert_eq!(cq.pop().map(|w| w.wr_id), Some(0));
        assert_eq!(
            cq.push(wc(4), false),
            Err(CqOverrun {
                entered_error: false
            })
        );
        assert_eq!(cq.pop().map(|w| w.wr_id), Some(1));
        assert_eq!(cq.pop().map(|w| w.wr_id), Some(2));
        assert_eq!(cq.pop(), None);
        assert!(cq.is_empty());
    }

    #[test]
    fn notification() {
        let mut cq = Cq::new(15);
        assert_eq!(cq.push(wc(0), false), Ok(false));
        cq.arm(true);
        assert_eq!(cq.attr().notify, Some(CqNotify::Solicited));
        // Unsolicited success does not fire a solicited-only request.
        assert_eq!(cq.push(wc(1), false), Ok(false));
        assert_eq!(cq.push(wc(2), true), Ok(true));
        // Disarmed after firing.
        assert_eq!(cq.push(wc(3), true), Ok(false));
        cq.arm(true);
        let mut err = wc(4);
        err.status = WcStatus::WrFlushErr;
        assert_eq!(cq.push(err, false), Ok(true));
        cq.arm(false);
        assert_eq!(cq.push(wc(5), false), Ok(true));
        // "Next" is not narrowed by a later "solicited".
        cq.arm(false);
        cq.arm(true);
        assert_eq!(cq.attr().notify, Some(CqNotify::NextCompletion));
        assert_eq!(cq.attr().len, 6);
    }

    #[test]
    fn completion_builders() {
        let w = wc(1).with_imm(0xdead_beef);
        assert_eq!(w.imm_data, Some(0xdead_beef));
        assert!(w.wc_flags.contains(WcFlags::WITH_IMM));
        let w = wc(1).with_invalidated_rkey(0x100);
        assert_eq!(w.invalidated_rkey, Some(0x100));
        assert!(w.wc_flags.contains(WcFlags::WITH_INV));
        let f = WorkCompletion::flushed(9, WcOpcode::Recv, Qpn::new(0x12));
        assert_eq!(f.status, WcStatus::WrFlushErr);
        assert_eq!(f.byte_len, 0);
    }
}
