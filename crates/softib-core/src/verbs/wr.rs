//! Work requests (`struct ibv_send_wr`, `struct ibv_recv_wr`) and the queued work queue
//! elements built from them.
//!
//! Memory is addressed the way hardware addresses it: a scatter/gather element names an I/O
//! virtual address inside a memory region and the region's L_Key. The keys and bounds are
//! **not** checked when a WR is posted; the data path checks them when the WR executes and
//! completes it with `IBV_WC_LOC_PROT_ERR` / `IBV_WC_LOC_LEN_ERR` as hardware does.

use super::ah::AhAttr;
use super::types::{SendFlags, WcOpcode};
use super::AhHandle;
use softib_wire::Qpn;

/// Scatter/gather element (`struct ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// I/O virtual address inside the memory region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

impl Sge {
    /// An SGE.
    pub const fn new(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge { addr, length, lkey }
    }
}

/// A remote buffer of an RDMA operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RemoteAddr {
    /// Remote I/O virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RemoteAddr {
    /// A remote buffer.
    pub const fn new(addr: u64, rkey: u32) -> RemoteAddr {
        RemoteAddr { addr, rkey }
    }
}

/// Send WR operation with its operation-specific data (`enum ibv_wr_opcode` + the unions of
/// `struct ibv_send_wr`).
///
/// Immediate data is the 32-bit value as carried in the ImmDt header (libibverbs' `__be32`
/// `imm_data` read as a big-endian number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// SEND (`IBV_WR_SEND`).
    Send,
    /// SEND with immediate (`IBV_WR_SEND_WITH_IMM`).
    SendWithImm(u32),
    /// SEND with invalidate of the given R_Key at the responder (`IBV_WR_SEND_WITH_INV`).
    SendWithInv(u32),
    /// RDMA WRITE (`IBV_WR_RDMA_WRITE`).
    RdmaWrite {
        /// Destination buffer.
        remote: RemoteAddr,
    },
    /// RDMA WRITE with immediate (`IBV_WR_RDMA_WRITE_WITH_IMM`).
    RdmaWriteWithImm {
        /// Destination buffer.
        remote: RemoteAddr,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ (`IBV_WR_RDMA_READ`).
    RdmaRead {
        /// Source buffer.
        remote: RemoteAddr,
    },
    /// Atomic compare and swap of 8 bytes (`IBV_WR_ATOMIC_CMP_AND_SWP`).
    AtomicCmpSwp {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value compared with the remote value.
        compare: u64,
        /// Value stored when the comparison succeeds.
        swap: u64,
    },
    /// Atomic fetch and add of 8 bytes (`IBV_WR_ATOMIC_FETCH_AND_ADD`).
    AtomicFetchAdd {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value added.
        add: u64,
    },
}

impl WrOpcode {
    /// libibverbs `enum ibv_wr_opcode` value.
    pub const fn raw(&self) -> u32 {
        match self {
            WrOpcode::RdmaWrite { .. } => 0,
            WrOpcode::RdmaWriteWithImm { .. } => 1,
            WrOpcode::Send => 2,
            WrOpcode::SendWithImm(_) => 3,
            WrOpcode::RdmaRead { .. } => 4,
            WrOpcode::AtomicCmpSwp { .. } => 5,
            WrOpcode::AtomicFetchAdd { .. } => 6,
            WrOpcode::SendWithInv(_) => 9,
        }
    }

    /// libibverbs name, e.g. "IBV_WR_RDMA_READ".
    pub const fn name(&self) -> &'static str {
        match self {
            WrOpcode::RdmaWrite { .. } => "IBV_WR_RDMA_WRITE",
            WrOpcode::RdmaWriteWithImm { .. } => "IBV_WR_RDMA_WRITE_WITH_IMM",
            WrOpcode::Send => "IBV_WR_SEND",
            WrOpcode::SendWithImm(_) => "IBV_WR_SEND_WITH_IMM",
            WrOpcode::RdmaRead { .. } => "IBV_WR_RDMA_READ",
            WrOpcode::AtomicCmpSwp { .. } => "IBV_WR_ATOMIC_CMP_AND_SWP",
            WrOpcode::AtomicFetchAdd { .. } => "IBV_WR_ATOMIC_FETCH_AND_ADD",
            WrOpcode::SendWithInv(_) => "IBV_WR_SEND_WITH_INV",
        }
    }

    /// The opcode its completion reports.
    pub const fn wc_opcode(&self) -> WcOpcode {
        match self {
            WrOpcode::Send | WrOpcode::SendWithImm(_) | WrOpcode::SendWithInv(_) => WcOpcode::Send,
            WrOpcode::RdmaWrite { .. } | WrOpcode::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead { .. } => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpSwp { .. } => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }

    /// SEND variants (consume a receive WR at the responder).
    pub const fn is_send(&self) -> bool {
        matches!(
            self,
            WrOpcode::Send | WrOpcode::SendWithImm(_) | WrOpcode::SendWithInv(_)
        )
    }

    /// RDMA WRITE variants.
    pub const fn is_write(&self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaWrite { .. } | WrOpcode::RdmaWriteWithImm { .. }
        )
    }

    /// Atomic operations.
    pub const fn is_atomic(&self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpSwp { .. } | WrOpcode::AtomicFetchAdd { .. }
        )
    }

    /// Operations whose response data the HCA writes into local memory (RDMA READ, atomics):
    /// their SGEs need `LOCAL_WRITE`.
    pub const fn writes_local_memory(&self) -> bool {
        matches!(self, WrOpcode::RdmaRead { .. }) || self.is_atomic()
    }

    /// The immediate data, if the operation carries one.
    pub const fn imm_data(&self) -> Option<u32> {
        match self {
            WrOpcode::SendWithImm(imm) | WrOpcode::RdmaWriteWithImm { imm, .. } => Some(*imm),
            _ => None,
        }
    }
}

/// UD destination of a send WR (`wr.ud` of `struct ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// Address handle of the destination port.
    pub ah: AhHandle,
    /// Destination QP.
    pub remote_qpn: Qpn,
    /// Q_Key to send (if its high bit is set the QP's own Q_Key is used, IBA 10.2.5).
    pub remote_qkey: u32,
}

/// RD destination of a send WR: the EE context to send through, the remote RD QP and the
/// Q_Key it must hold (if its high bit is set the QP's own Q_Key is sent, as for UD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdDest {
    /// The local EE context.
    pub eecn: softib_wire::Eecn,
    /// Destination QP behind the EE context's remote end.
    pub remote_qpn: Qpn,
    /// Q_Key to send.
    pub remote_qkey: u32,
}

/// The RD destination of a queued WQE, resolved at post time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdWqeDest {
    /// The local EE context.
    pub eecn: softib_wire::Eecn,
    /// Destination QP.
    pub remote_qpn: Qpn,
    /// The Q_Key the DETH carries.
    pub qkey: u32,
    /// The sending RD QP (DETH:SrcQP); its CQ takes the completion.
    pub src_qpn: Qpn,
    /// This WQE is the RESYNC an EE context sends after aborting a message (no completion).
    pub resync: bool,
}

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned untouched in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Gather list (RDMA READ / atomics: scatter list for the response).
    pub sg_list: Vec<Sge>,
    /// Inline payload: the bytes travel inside the WR and no memory region is read. When set,
    /// `sg_list` must be empty; [`SendFlags::INLINE`] is implied.
    pub inline_data: Option<Vec<u8>>,
    /// Send flags.
    pub flags: SendFlags,
    /// Destination of a UD send.
    pub ud: Option<UdDest>,
    /// XRC SRQ number of the remote node that receives the message (`qp_type.xrc.remote_srqn`
    /// of `struct ibv_send_wr`); used by XRC initiator QPs only, which carry it in the XRCETH
    /// of every request packet (24 bits).
    pub xrc_remote_srqn: u32,
    /// Destination of an RD send.
    pub rd: Option<RdDest>,
}

impl SendWr {
    /// A WR with no data and no flags.
    pub fn new(wr_id: u64, opcode: WrOpcode) -> SendWr {
        SendWr {
            wr_id,
            opcode,
            sg_list: Vec::new(),
            inline_data: None,
            flags: SendFlags::empty(),
            ud: None,
            xrc_remote_srqn: 0,
            rd: None,
        }
    }

    /// Appends one SGE.
    pub fn with_sge(mut self, sge: Sge) -> SendWr {
        self.sg_list.push(sge);
        self
    }

    /// Replaces the gather list.
    pub fn with_sg_list(mut self, sg_list: Vec<Sge>) -> SendWr {
        self.sg_list = sg_list;
        self
    }

    /// Carries `data` inline.
    pub fn with_inline(mut self, data: Vec<u8>) -> SendWr {
        self.inline_data = Some(data);
        self.flags |= SendFlags::INLINE;
        self
    }

    /// Adds flags.
    pub fn with_flags(mut self, flags: SendFlags) -> SendWr {
        self.flags |= flags;
        self
    }

    /// Requests a completion ([`SendFlags::SIGNALED`]).
    pub fn signaled(self) -> SendWr {
        self.with_flags(SendFlags::SIGNALED)
    }

    /// Sets the UD destination.
    pub fn with_ud(mut self, ah: AhHandle, remote_qpn: Qpn, remote_qkey: u32) -> SendWr {
        self.ud = Some(UdDest {
            ah,
            remote_qpn,
            remote_qkey,
        });
        self
    }

    /// Sets the RD destination (RD QPs).
    pub fn with_rd(mut self, eecn: softib_wire::Eecn, remote_qpn: Qpn, remote_qkey: u32) -> SendWr {
        self.rd = Some(RdDest {
            eecn,
            remote_qpn,
            remote_qkey,
        });
        self
    }

    /// Sets the XRC SRQ number the message is for (XRC initiator QPs).
    pub fn with_xrc_srqn(mut self, srqn: u32) -> SendWr {
        self.xrc_remote_srqn = srqn;
        self
    }

    /// Message length: the inline payload length, or the sum of the SGE lengths (saturating).
    #[inline]
    pub fn message_len(&self) -> u64 {
        match (&self.inline_data, self.sg_list.as_slice()) {
            (Some(d), _) => d.len() as u64,
            // The common WR: one entry, no sum to run.
            (None, [one]) => u64::from(one.length),
            (None, sges) => sges.iter().map(|s| u64::from(s.length)).sum(),
        }
    }
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecvWr {
    /// Caller's identifier, returned untouched in the completion.
    pub wr_id: u64,
    /// Scatter list.
    pub sg_list: Vec<Sge>,
}

impl RecvWr {
    /// A receive WR.
    pub fn new(wr_id: u64, sg_list: Vec<Sge>) -> RecvWr {
        RecvWr { wr_id, sg_list }
    }

    /// Total buffer length (sum of the SGE lengths).
    pub fn buffer_len(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// Where the bytes of a queued send come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WqePayload {
    /// A single gather entry, kept inline (the common case: no allocation per WR).
    Sge(Sge),
    /// Gather list, read from memory regions when the WR executes.
    Sges(Vec<Sge>),
    /// Inline bytes copied at post time.
    Inline(Vec<u8>),
}

impl WqePayload {
    /// The gather entries (none for inline data).
    pub fn sges(&self) -> &[Sge] {
        match self {
            WqePayload::Sge(s) => std::slice::from_ref(s),
            WqePayload::Sges(v) => v,
            WqePayload::Inline(_) => &[],
        }
    }
}

/// Heap buffers of retired WQEs (inline bytes; gather lists of send WQEs, scatter lists of
/// receive WQEs with two or more entries) kept for the next WQEs: on the steady path, posting
/// and completing such a WQE allocates nothing. One set serves every QP and SRQ of the HCA (a
/// QP pays nothing for it), at most `KEEP` of each kind.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpareBuffers {
    bytes: Vec<Vec<u8>>,
    sges: Vec<Vec<Sge>>,
}

impl SpareBuffers {
    /// Most buffers of each kind kept.
    const KEEP: usize = 1024;

    /// Gives `payload` (built by the post without its heap part) the bytes or gather list of
    /// `wr`, in a spare buffer when there is one. `min_inline` is the capacity a new inline
    /// buffer starts with (the QP's `max_inline_data`), so that a reused one never grows.
    #[inline]
    pub(crate) fn fill(&mut self, payload: &mut WqePayload, wr: &SendWr, min_inline: usize) {
        match payload {
            WqePayload::Sge(_) => {}
            WqePayload::Inline(v) => {
                let data = wr.inline_data.as_deref().unwrap_or_default();
                if !data.is_empty() {
                    *v = self
                        .bytes
                        .pop()
                        .unwrap_or_else(|| Vec::with_capacity(min_inline.max(data.len())));
                    v.extend_from_slice(data);
                }
            }
            WqePayload::Sges(v) => {
                if !wr.sg_list.is_empty() {
                    *v = self.sges.pop().unwrap_or_default();
                    v.extend_from_slice(&wr.sg_list);
                }
            }
        }
    }

    /// The receive WQE of `wr`, its scatter list in a spare buffer when it needs one.
    #[inline]
    pub(crate) fn recv_wqe(&mut self, wr: &RecvWr) -> RecvWqe {
        match wr.sg_list[..] {
            [_, _, ..] => {
                let mut v = self.sges.pop().unwrap_or_default();
                v.extend_from_slice(&wr.sg_list);
                RecvWqe {
                    wr_id: wr.wr_id,
                    sg_list: SgList::Many(v),
                    length: wr.buffer_len(),
                }
            }
            _ => RecvWqe::from(wr),
        }
    }

    /// Takes back the scatter list of a completed receive WQE.
    #[inline(always)]
    pub(crate) fn recycle_recv(&mut self, sg_list: SgList) {
        if let SgList::Many(v) = sg_list {
            self.recycle(WqePayload::Sges(v));
        }
    }

    /// Takes back the heap part of a retired WQE's payload.
    #[inline(always)]
    pub(crate) fn recycle(&mut self, payload: WqePayload) {
        let keep = Self::KEEP;
        match payload {
            WqePayload::Sge(_) => {}
            WqePayload::Inline(mut v) => {
                if v.capacity() > 0 && self.bytes.len() < keep {
                    v.clear();
                    self.bytes.push(v);
                }
            }
            WqePayload::Sges(mut v) => {
                if v.capacity() > 0 && self.sges.len() < keep {
                    v.clear();
                    self.sges.push(v);
                }
            }
        }
    }
}

/// The UD destination resolved at post time: the address vector is copied from the AH, so
/// destroying the AH later does not affect queued WRs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdWqeDest {
    /// Address vector.
    pub av: AhAttr,
    /// Destination QP.
    pub remote_qpn: Qpn,
    /// Q_Key from the WR.
    pub remote_qkey: u32,
}

/// Progress of a queued send WQE through the data path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WqeState {
    /// Queued, no packet sent yet.
    #[default]
    Posted,
    /// The requester has started sending it (it counts as in flight for SQ drain).
    InProgress,
}

/// A validated send WR on a send queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWqe {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags ([`SendFlags::INLINE`] set for inline payloads).
    pub flags: SendFlags,
    /// Whether a successful completion is generated (`SIGNALED` or the QP's `sq_sig_all`).
    pub signaled: bool,
    /// Payload source.
    pub payload: WqePayload,
    /// Message length in bytes.
    pub length: u32,
    /// UD destination.
    pub ud: Option<UdWqeDest>,
    /// XRC SRQ number of the destination (XRC initiator QPs), 24 bits.
    pub xrc_srqn: u32,
    /// RD destination (RD QPs, and the WQE an EE context carries for one).
    pub rd: Option<RdWqeDest>,
    /// Data path progress.
    pub state: WqeState,
    /// Send-side progress kept by the RC requester.
    pub(crate) tx: crate::transport::rc::WqeTx,
}

/// The scatter list of a queued receive WR: no entry or one entry kept inline (the common
/// case: no allocation per WR), or several on the heap. Dereferences to `[Sge]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SgList {
    /// No scatter entries (a zero-length receive buffer).
    #[default]
    Empty,
    /// A single scatter entry.
    One(Sge),
    /// Two or more scatter entries.
    Many(Vec<Sge>),
}

impl SgList {
    /// The list holding the entries of `sges`.
    #[inline]
    pub fn from_slice(sges: &[Sge]) -> SgList {
        match sges {
            [] => SgList::Empty,
            [one] => SgList::One(*one),
            many => SgList::Many(many.to_vec()),
        }
    }
}

impl std::ops::Deref for SgList {
    type Target = [Sge];

    #[inline]
    fn deref(&self) -> &[Sge] {
        match self {
            SgList::Empty => &[],
            SgList::One(s) => std::slice::from_ref(s),
            SgList::Many(v) => v,
        }
    }
}

/// Receive WQEs a queue's storage is made for at once, when its first WQE is posted (up to the
/// queue's size): see [`reserve_recv`].
const RECV_STORAGE_UP_FRONT: usize = 16_384;

/// Makes room in a receive queue (or SRQ) of `max_wr` entries for `more` WQEs. The first time
/// the queue needs storage it gets all of it, up to [`RECV_STORAGE_UP_FRONT`] entries, written
/// through once, as hardware and rxe allocate a queue when it is made: a queue grown a step at a
/// time touched a fresh page in the middle of a message every few posts (UCX's UD transport
/// posts one or two receives per message for its first few hundred: a page fault each, some
/// 7 us in a VM). A QP that never posts a receive keeps no storage.
pub(crate) fn reserve_recv(q: &mut std::collections::VecDeque<RecvWqe>, more: usize, max_wr: u32) {
    let need = q.len() + more;
    if need <= q.capacity() {
        return;
    }
    if q.capacity() > 0 {
        q.reserve(more);
        return;
    }
    let target = need.max((max_wr as usize).min(RECV_STORAGE_UP_FRONT));
    let mut v: Vec<RecvWqe> = Vec::with_capacity(target);
    v.extend(q.drain(..));
    let len = v.len();
    v.resize_with(target, RecvWqe::default);
    v.truncate(len);
    // Reuses the vector's storage (no copy, no allocation).
    *q = std::collections::VecDeque::from(v);
}

/// A receive WR on a receive queue or SRQ.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecvWqe {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Scatter list.
    pub sg_list: SgList,
    /// Total buffer length.
    pub length: u64,
}

impl From<&RecvWr> for RecvWqe {
    #[inline]
    fn from(wr: &RecvWr) -> RecvWqe {
        match wr.sg_list[..] {
            // The common case, without the general list's match and sum.
            [one] => RecvWqe {
                wr_id: wr.wr_id,
                sg_list: SgList::One(one),
                length: u64::from(one.length),
            },
            _ => RecvWqe {
                wr_id: wr.wr_id,
                sg_list: SgList::from_slice(&wr.sg_list),
                length: wr.buffer_len(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcode_values_match_libibverbs() {
        let r = RemoteAddr::new(0x1000, 7);
        let cases = [
            (WrOpcode::RdmaWrite { remote: r }, 0, WcOpcode::RdmaWrite),
            (
                WrOpcode::RdmaWriteWithImm { remote: r, imm: 1 },
                1,
                WcOpcode::RdmaWrite,
            ),
            (WrOpcode::Send, 2, WcOpcode::Send),
            (WrOpcode::SendWithImm(5), 3, WcOpcode::Send),
            (WrOpcode::RdmaRead { remote: r }, 4, WcOpcode::RdmaRead),
            (
                WrOpcode::AtomicCmpSwp {
                    remote_addr: 8,
                    rkey: 1,
                    compare: 0,
                    swap: 1,
                },
                5,
                WcOpcode::CompSwap,
            ),
            (
                WrOpcode::AtomicFetchAdd {
                    remote_addr: 8,
                    rkey: 1,
                    add: 1,
                },
                6,
                WcOpcode::FetchAdd,
            ),
            (WrOpcode::SendWithInv(0x100), 9, WcOpcode::Send),
        ];
        for (op, raw, wc) in cases {
            assert_eq!(op.raw(), raw, "{}", op.name());
            assert_eq!(op.wc_opcode(), wc);
            assert!(op.name().starts_with("IBV_WR_"));
        }
        assert!(WrOpcode::RdmaRead { remote: r }.writes_local_memory());
        assert!(!WrOpcode::Send.writes_local_memory());
        assert_eq!(WrOpcode::SendWithImm(9).imm_data(), Some(9));
        assert_eq!(WrOpcode::SendWithInv(9).imm_data(), None);
    }

    #[test]
    fn builders_and_lengths() {
        let wr = SendWr::new(1, WrOpcode::Send)
            .with_sge(Sge::new(0, u32::MAX, 1))
            .with_sge(Sge::new(0, u32::MAX, 1))
            .signaled();
        assert_eq!(wr.message_len(), 2 * u64::from(u32::MAX));
        assert!(wr.flags.contains(SendFlags::SIGNALED));
        let wr = SendWr::new(2, WrOpcode::Send).with_inline(vec![1, 2, 3]);
        assert_eq!(wr.message_len(), 3);
        assert!(wr.flags.contains(SendFlags::INLINE));
        let r = RecvWr::new(3, vec![Sge::new(0, 10, 1), Sge::new(0, 5, 1)]);
        assert_eq!(r.buffer_len(), 15);
        assert_eq!(RecvWqe::from(&r).length, 15);
    }
}
