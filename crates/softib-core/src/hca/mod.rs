//! The HCA: the endpoint object that owns every verbs object.
//!
//! [`Hca`] is sans-IO: it never reads a clock, opens a socket or spawns a thread. The verbs
//! here are the control path (objects, QP state machine, posting, polling); the transport data
//! path drives the queued WQEs.
//!
//! # Objects and handles
//!
//! PDs, CQs, SRQs, MRs and AHs are addressed by small `Copy` handles that carry a generation,
//! so a handle to a destroyed object never reaches a newer one. QPs are addressed by their
//! [`Qpn`], allocated upward from `0x11` like rxe (QPN 0 and 1 are the special QPs, 2..=0x10
//! are kept free) and wrapping below 2^24.
//!
//! # Completions on Error
//!
//! When a QP enters ERR (by `modify_qp`, by the transport engine, or on `destroy_qp`) every
//! outstanding send WR and then every outstanding receive WR is completed with
//! `IBV_WC_WR_FLUSH_ERR`, in posting order, whether or not it was signaled. Receive WRs queued
//! on an SRQ belong to the SRQ and are not flushed; instead the QP reports
//! `IBV_EVENT_QP_LAST_WQE_REACHED`. WRs posted while the QP is in ERR complete with
//! `IBV_WC_WR_FLUSH_ERR` at once (send WRs likewise in SQE). Moving to RESET empties the queues
//! without completions.

mod apm;
mod completer;
mod datapath;
mod placement;
mod qp;
mod raw;
mod rd;
mod requester;
mod responder;
mod uc;
mod ud;
mod xrc;
mod xrc_shared;

pub(crate) use datapath::TxHeaders;
pub use datapath::{
    gid_of_ipv4, ipv4_of, mac_for_gid, udp_source_port, Transmitted, MAX_FRAME, MULTICAST_LID_BASE,
    PERMISSIVE_LID,
};
pub use placement::{PlacementSink, PlacementUpdate};
pub use raw::{raw_header_len, raw_max_message};
pub use ud::{
    is_multicast_gid, read_grh_area, GrhAreaInfo, GRH_AREA, GSI_QKEY, GSI_QPN, MCAST_QPN,
};
pub use xrc_shared::{
    delegation_srqn, MemoryXrcShare, Reservation, XrcSrqShare, DELEGATION_HEADER,
};

#[cfg(test)]
mod tests;

use crate::error::{
    AhError, AllocPdError, CqError, CreateAhError, CreateCqError, CreateSrqError, DeallocPdError,
    DeregMrError, DestroyCqError, DestroySrqError, ModifySrqError, PostSrqRecvError,
    QueryPortError, RegMrError, ReregMrError, ResizeCqError, SrqError,
};
use crate::table::Table;
use crate::verbs::ah::{self, Ah, AhAttr};
use crate::verbs::cq::{self, Cq, CqAttr, WorkCompletion};
use crate::verbs::device::{DeviceAttr, HcaConfig, NumberRange, PortAttr, PortConfig};
use crate::verbs::event::AsyncEvent;
use crate::verbs::mr::{
    MrAccessError, MrCheckError, MrInfo, MrMemory, MrRegFailure, MrRereg, MrReregFailure, MrSlice,
    MrTable,
};
use crate::verbs::qp::Qp;
use crate::verbs::srq::{Srq, SrqAttr, SrqAttrMask, SrqInitAttr};
use crate::verbs::types::AccessFlags;
use crate::verbs::wr::{RecvWqe, RecvWr};
use crate::verbs::{AhHandle, CqHandle, MrHandle, PdHandle, SrqHandle};
use std::collections::VecDeque;

/// A protection domain: only a count of the objects that use it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pd {
    pub(crate) users: usize,
}

/// A completion the CQ refused because it overran (the CQ is in error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CqOverrunError;

/// QPs by QPN value: a vector sorted by QPN, so a lookup is a binary search over a few
/// contiguous keys and iteration order is deterministic. The data path looks the same QP up
/// several times per packet: the latest hit, its QPN and position, is tried first.
#[derive(Debug, Clone)]
pub(crate) struct QpMap {
    keys: Vec<u32>,
    pub(crate) qps: Vec<Qp>,
    /// The QPN and index of the latest key found ([`NO_HIT`] when none): compared without a
    /// look at `keys`, and forgotten whenever an insertion or removal moves the indices.
    last: std::cell::Cell<(u32, usize)>,
}

/// [`QpMap::last`] with nothing in it: no key is this large (a QPN has 24 bits, an EE
/// context's key is [`rd::EEC_KEY`] plus 24 bits).
const NO_HIT: (u32, usize) = (u32::MAX, 0);

impl Default for QpMap {
    fn default() -> QpMap {
        QpMap {
            keys: Vec::new(),
            qps: Vec::new(),
            last: std::cell::Cell::new(NO_HIT),
        }
    }
}

impl QpMap {
    #[inline]
    fn position(&self, qpn: u32) -> Result<usize, usize> {
        let (key, at) = self.last.get();
        if key == qpn {
            return Ok(at);
        }
        let found = self.keys.binary_search(&qpn);
        if let Ok(i) = found {
            self.last.set((qpn, i));
        }
        found
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(crate) fn contains_key(&self, qpn: &u32) -> bool {
        self.position(*qpn).is_ok()
    }

    #[inline]
    pub(crate) fn get(&self, qpn: &u32) -> Option<&Qp> {
        let i = self.position(*qpn).ok()?;
        self.qps.get(i)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, qpn: &u32) -> Option<&mut Qp> {
        let i = self.position(*qpn).ok()?;
        self.qps.get_mut(i)
    }

    /// Inserts or replaces the QP numbered `qpn`.
    pub(crate) fn insert(&mut self, qpn: u32, qp: Qp) {
        match self.position(qpn) {
            Ok(i) => self.qps[i] = qp,
            Err(i) => {
                self.keys.insert(i, qpn);
                self.qps.insert(i, qp);
                self.last.set(NO_HIT);
            }
        }
    }

    /// Keys below `key` (the map is sorted).
    pub(crate) fn count_below(&self, key: u32) -> usize {
        self.keys.partition_point(|&k| k < key)
    }

    pub(crate) fn remove(&mut self, qpn: &u32) -> Option<Qp> {
        let i = self.position(*qpn).ok()?;
        self.keys.remove(i);
        self.last.set(NO_HIT);
        Some(self.qps.remove(i))
    }
}

impl std::ops::Index<&u32> for QpMap {
    type Output = Qp;

    fn index(&self, qpn: &u32) -> &Qp {
        self.get(qpn).expect("no QP with this QPN")
    }
}

/// An InfiniBand host channel adapter: device attributes, ports and every verbs object.
///
/// The object tables are `pub(crate)` so the transport modules of this crate can work on the
/// queued WQEs directly.
#[derive(Debug, Clone)]
pub struct Hca {
    /// Where placement updates go ([`Hca::set_placement_sink`]).
    pub(crate) placement: placement::SinkSlot,
    /// The last packet written may be placed by its sender ([`Hca::tx_placeable`]).
    pub(crate) tx_placeable: bool,
    /// The frame being handled was placed by its sender ([`Hca::set_placed_by_sender`]).
    pub(crate) placed_by_sender: bool,
    pub(crate) device: DeviceAttr,
    pub(crate) ports: Vec<PortConfig>,
    pub(crate) pds: Table<Pd>,
    pub(crate) mrs: MrTable,
    pub(crate) cqs: Table<Cq>,
    pub(crate) srqs: Table<Srq>,
    pub(crate) ahs: Table<Ah>,
    pub(crate) xrcds: Table<xrc::Xrcd>,
    pub(crate) rdds: Table<rd::Rdd>,
    /// EE context number the next EEC is given (from 1 upward, wrapping below 2^24).
    pub(crate) next_eecn: u32,
    /// SRQs by SRQ number (an XRCETH names an XRC SRQ so).
    pub(crate) srqs_by_num: std::collections::BTreeMap<u32, SrqHandle>,
    /// SRQ number the next SRQ is given (upward from [`first_srqn`], wrapping below 2^24).
    pub(crate) next_srqn: u32,
    /// QPs by QPN value.
    pub(crate) qps: QpMap,
    pub(crate) next_qpn: u32,
    /// Where QPNs, SRQ numbers and EECNs come from ([`HcaConfig::numbers`]).
    pub(crate) numbers: Numbers,
    pub(crate) async_events: VecDeque<AsyncEvent>,
    pub(crate) completion_events: VecDeque<CqHandle>,
    /// Data-path counters.
    pub(crate) counters: crate::transport::Counters,
    /// QPs that may have a packet to send, in round-robin order.
    pub(crate) tx_ready: VecDeque<u32>,
    /// (deadline, QPN) of every armed QP timer.
    pub(crate) timers: std::collections::BTreeSet<(crate::time::Instant, u32)>,
    /// IPv4 identification of the next packet.
    pub(crate) ip_ident: u16,
    /// Reused buffer for gathering payloads.
    pub(crate) scratch: Vec<u8>,
    /// Heap buffers of retired WQEs (inline bytes, gather and scatter lists), for the next
    /// posts.
    pub(crate) spare: crate::verbs::wr::SpareBuffers,
    /// Requester PSN window (1 ..= 2^23).
    pub(crate) max_unacked_psns: u32,
    /// Multicast groups by MGID: the MLID and the QPNs attached, in attach order.
    pub(crate) mcast: std::collections::BTreeMap<crate::verbs::types::Gid, ud::McastGroup>,
    /// UDP source port of every packet, with IPv4 identification 0 (see
    /// [`HcaConfig::udp_socket_port`]); `None` numbers headers as rxe does.
    pub(crate) udp_socket_port: Option<u16>,
    /// Whether common requests take the requester's express path (see
    /// [`Hca::set_express_path`]).
    pub(crate) express: bool,
    /// How far the `now` a caller passes may lag true time ([`Hca::set_clock_lag`]).
    pub(crate) clock_lag: core::time::Duration,
    /// The QP, P_Key and addresses of the last packet the express path took, which passed the
    /// P_Key and connection checks: the next packet alike skips them. Those checks read only
    /// the QP's attributes and the ports (fixed from [`Hca::new`]), so it is forgotten
    /// whenever a QP's attributes change ([`Hca::modify_qp`], a path migration) or a QP goes.
    pub(crate) express_from: Option<ExpressFrom>,
    /// The table of XRC SRQs shared with other HCAs ([`Hca::set_xrc_share`]).
    pub(crate) xrc_share: xrc_shared::ShareSlot,
    /// Delegations for other HCAs' XRC SRQs, oldest first ([`Hca::poll_delegation`]), and
    /// buffers of ones taken.
    pub(crate) xrc_out: VecDeque<Vec<u8>>,
    pub(crate) xrc_spare: Vec<Vec<u8>>,
    /// Delegated messages under way into this HCA's XRC SRQs, by target QPN.
    pub(crate) xrc_in: std::collections::BTreeMap<u32, xrc_shared::Inbound>,
}

/// What [`Hca::express_from`] remembers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExpressFrom {
    pub(crate) qpn: u32,
    pub(crate) pkey: u16,
    pub(crate) src: [u8; 4],
    pub(crate) dst: [u8; 4],
}

impl Hca {
    /// A new HCA with no objects.
    pub fn new(config: HcaConfig) -> Hca {
        let mut device = config.device;
        device.phys_port_cnt = u8::try_from(config.ports.len()).unwrap_or(u8::MAX);
        let numbers = Numbers::of(config.numbers, device.node_guid);
        // A range smaller than the limits bounds them (a free number always exists).
        device.max_qp = device.max_qp.min(Numbers::span(&numbers.qpns));
        device.max_srq = device.max_srq.min(Numbers::span(&numbers.srqns));
        Hca {
            placement: placement::SinkSlot::default(),
            tx_placeable: false,
            placed_by_sender: false,
            device,
            ports: config.ports,
            pds: Table::default(),
            mrs: MrTable::new(config.mr_iova_base),
            cqs: Table::default(),
            srqs: Table::default(),
            ahs: Table::default(),
            xrcds: Table::default(),
            rdds: Table::default(),
            next_eecn: numbers.eecns.start,
            srqs_by_num: Default::default(),
            next_srqn: numbers.srqns.start,
            qps: QpMap::default(),
            next_qpn: numbers.qpns.start,
            numbers,
            async_events: VecDeque::new(),
            counters: Default::default(),
            tx_ready: VecDeque::new(),
            timers: Default::default(),
            ip_ident: 0,
            scratch: Vec::new(),
            spare: Default::default(),
            max_unacked_psns: config.max_unacked_psns.clamp(1, 1 << 23),
            completion_events: VecDeque::new(),
            mcast: Default::default(),
            udp_socket_port: config.udp_socket_port,
            express: true,
            clock_lag: core::time::Duration::ZERO,
            express_from: None,
            xrc_share: Default::default(),
            xrc_out: VecDeque::new(),
            xrc_spare: Vec::new(),
            xrc_in: Default::default(),
        }
    }

    // ----- device and ports -------------------------------------------------------------

    /// How many QPs (and EE contexts) the HCA holds.
    pub fn qp_count(&self) -> usize {
        self.qps.len()
    }

    /// Device attributes (`ibv_query_device`).
    pub fn query_device(&self) -> &DeviceAttr {
        &self.device
    }

    /// Attributes of port `port_num` (1-based) (`ibv_query_port`).
    pub fn query_port(&self, port_num: u8) -> Result<PortAttr, QueryPortError> {
        self.port(port_num)
            .map(PortAttr::from_config)
            .ok_or(QueryPortError::InvalidPort {
                port: port_num,
                num_ports: self.device.phys_port_cnt,
            })
    }

    pub(crate) fn port(&self, port_num: u8) -> Option<&PortConfig> {
        ah::port_config(&self.ports, port_num)
    }

    // ----- protection domains -----------------------------------------------------------

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> Result<PdHandle, AllocPdError> {
        if self.pds.len() >= self.device.max_pd as usize {
            return Err(AllocPdError::TooManyPds {
                max: self.device.max_pd,
            });
        }
        Ok(PdHandle(self.pds.insert(Pd::default())))
    }

    /// Frees a protection domain; fails while MRs, QPs, SRQs or AHs use it.
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), DeallocPdError> {
        let p = self.pds.get(pd.0).ok_or(DeallocPdError::NoSuchPd(pd))?;
        if p.users > 0 {
            return Err(DeallocPdError::Busy { pd, users: p.users });
        }
        self.pds.remove(pd.0);
        Ok(())
    }

    fn pd_use(&mut self, pd: PdHandle, delta: isize) {
        if let Some(p) = self.pds.get_mut(pd.0) {
            p.users = p.users.saturating_add_signed(delta);
        }
    }

    // ----- memory regions ---------------------------------------------------------------

    /// Registers `data` as a memory region of `pd` (`ibv_reg_mr`). The region owns the bytes.
    /// `iova` is the first I/O virtual address; `None` lets the HCA assign a page-aligned
    /// range disjoint from every region it placed before.
    pub fn reg_mr(
        &mut self,
        pd: PdHandle,
        data: Vec<u8>,
        access: AccessFlags,
        iova: Option<u64>,
    ) -> Result<MrInfo, RegMrError> {
        self.reg_mr_memory(pd, MrMemory::Owned(data), access, iova)
    }

    /// Registers memory the driver lends (the application's own buffer, see
    /// [`ExternalMemory`](crate::verbs::mr::ExternalMemory)) as a memory region of `pd`; the
    /// data path reads and writes it in place. Same checks and results as [`Hca::reg_mr`].
    pub fn reg_mr_memory(
        &mut self,
        pd: PdHandle,
        data: MrMemory,
        access: AccessFlags,
        iova: Option<u64>,
    ) -> Result<MrInfo, RegMrError> {
        if self.pds.get(pd.0).is_none() {
            return Err(RegMrError::NoSuchPd(pd));
        }
        let len = data.len() as u64;
        // Lent memory is the application's: a same-host sender may place into it.
        let lent_at = match &data {
            MrMemory::External(e) => Some(e.bytes().as_ptr() as u64),
            MrMemory::Owned(_) => None,
        };
        if len > self.device.max_mr_size {
            return Err(RegMrError::TooLarge {
                len,
                max: self.device.max_mr_size,
            });
        }
        if self.mrs.len() >= self.device.max_mr as usize {
            return Err(RegMrError::TooManyMrs {
                max: self.device.max_mr,
            });
        }
        let info = self
            .mrs
            .register(pd, data, access, iova)
            .map_err(|e| match e {
                MrRegFailure::InvalidAccess => RegMrError::InvalidAccess(access),
                MrRegFailure::AddressOverflow => RegMrError::AddressOverflow {
                    addr: iova.unwrap_or(0),
                    len,
                },
                MrRegFailure::AddressSpaceExhausted => RegMrError::AddressSpaceExhausted { len },
                MrRegFailure::TooManyMrs => RegMrError::TooManyMrs {
                    max: self.device.max_mr,
                },
            })?;
        self.pd_use(pd, 1);
        self.placement_region(&info, lent_at);
        Ok(info)
    }

    /// Re-registers a memory region (`ibv_rereg_mr`): into `change.pd`, with `change.access`,
    /// over `change.memory` (and its first I/O virtual address, `None` to let the HCA assign
    /// one), each when given; the rest stays. The same checks as [`Hca::reg_mr`] apply to the
    /// result (a live PD, LOCAL_WRITE with remote write or atomic access, the size and address
    /// range), and on any failure the region is unchanged.
    ///
    /// The region keeps its L_Key and R_Key (as rxe's re-registration does) but gets a new
    /// handle, which this returns: the old handle, and every range the data path checked
    /// through it (the rest of a multi-packet RDMA WRITE, a READ response being sent), no
    /// longer reaches the region, so no byte moves under the old PD, rights or translation
    /// after the call. An R_Key invalidated before is valid again.
    pub fn rereg_mr(&mut self, mr: MrHandle, change: MrRereg) -> Result<MrInfo, ReregMrError> {
        let old = self.mrs.info(mr).ok_or(ReregMrError::NoSuchMr(mr))?;
        let pd = change.pd.unwrap_or(old.pd);
        if self.pds.get(pd.0).is_none() {
            return Err(RegMrError::NoSuchPd(pd).into());
        }
        let access = change.access.unwrap_or(old.access);
        let iova = change.memory.as_ref().and_then(|(_, iova)| *iova);
        if let Some((data, _)) = &change.memory {
            let len = data.len() as u64;
            if len > self.device.max_mr_size {
                return Err(RegMrError::TooLarge {
                    len,
                    max: self.device.max_mr_size,
                }
                .into());
            }
        }
        let new_len = change
            .memory
            .as_ref()
            .map_or(old.length, |(d, _)| d.len() as u64);
        // Same-host senders stop placing into the region before it changes (the withdrawal
        // waits for a placement in progress); it is published again as it is afterwards.
        self.placement_update(PlacementUpdate::RegionGone { rkey: old.rkey });
        match self.mrs.rereg(mr, pd, access, change.memory) {
            Ok(info) => {
                if pd != old.pd {
                    self.pd_use(old.pd, -1);
                    self.pd_use(pd, 1);
                }
                let lent_at = self.mr_lent_at(info.handle);
                self.placement_region(&info, lent_at);
                Ok(info)
            }
            Err(e) => {
                let lent_at = self.mr_lent_at(mr);
                self.placement_region(&old, lent_at);
                Err(match e {
                    MrReregFailure::NoSuchMr => ReregMrError::NoSuchMr(mr),
                    MrReregFailure::Reg(MrRegFailure::InvalidAccess) => {
                        RegMrError::InvalidAccess(access).into()
                    }
                    MrReregFailure::Reg(MrRegFailure::AddressOverflow) => {
                        RegMrError::AddressOverflow {
                            addr: iova.unwrap_or(0),
                            len: new_len,
                        }
                        .into()
                    }
                    MrReregFailure::Reg(MrRegFailure::AddressSpaceExhausted) => {
                        RegMrError::AddressSpaceExhausted { len: new_len }.into()
                    }
                    MrReregFailure::Reg(MrRegFailure::TooManyMrs) => RegMrError::TooManyMrs {
                        max: self.device.max_mr,
                    }
                    .into(),
                })
            }
        }
    }

    /// Where the bytes of a region lent by the driver are in this process (`None` for a region
    /// that owns its bytes, or no region).
    fn mr_lent_at(&self, mr: MrHandle) -> Option<u64> {
        match &self.mrs.get(mr)?.data {
            MrMemory::External(e) => Some(e.bytes().as_ptr() as u64),
            MrMemory::Owned(_) => None,
        }
    }

    /// Deregisters a memory region and drops its bytes.
    pub fn dereg_mr(&mut self, mr: MrHandle) -> Result<(), DeregMrError> {
        if let Some(info) = self.mrs.info(mr) {
            self.placement_update(PlacementUpdate::RegionGone { rkey: info.rkey });
        }
        let pd = self.mrs.remove(mr).ok_or(DeregMrError::NoSuchMr(mr))?;
        self.pd_use(pd, -1);
        Ok(())
    }

    /// Address, length, keys and access of a memory region.
    pub fn query_mr(&self, mr: MrHandle) -> Result<MrInfo, MrAccessError> {
        self.mrs.info(mr).ok_or(MrAccessError::NoSuchMr(mr))
    }

    /// The bytes of a memory region.
    #[inline]
    pub fn mr_bytes(&self, mr: MrHandle) -> Result<&[u8], MrAccessError> {
        self.mrs
            .get(mr)
            .map(|m| &m.data[..])
            .ok_or(MrAccessError::NoSuchMr(mr))
    }

    /// The bytes of a memory region, writable.
    #[inline]
    pub fn mr_bytes_mut(&mut self, mr: MrHandle) -> Result<&mut [u8], MrAccessError> {
        self.mrs
            .get_mut(mr)
            .map(|m| &mut m.data[..])
            .ok_or(MrAccessError::NoSuchMr(mr))
    }

    /// Copies `data` into the region at byte `offset`.
    pub fn mr_write(
        &mut self,
        mr: MrHandle,
        offset: usize,
        data: &[u8],
    ) -> Result<(), MrAccessError> {
        let bytes = self.mr_bytes_mut(mr)?;
        let mr_len = bytes.len();
        let dst = offset
            .checked_add(data.len())
            .and_then(|end| bytes.get_mut(offset..end))
            .ok_or(MrAccessError::OutOfBounds {
                offset,
                len: data.len(),
                mr_len,
            })?;
        dst.copy_from_slice(data);
        Ok(())
    }

    /// Copies `buf.len()` bytes of the region from byte `offset` into `buf`.
    pub fn mr_read(
        &self,
        mr: MrHandle,
        offset: usize,
        buf: &mut [u8],
    ) -> Result<(), MrAccessError> {
        let bytes = self.mr_bytes(mr)?;
        let src = offset
            .checked_add(buf.len())
            .and_then(|end| bytes.get(offset..end))
            .ok_or(MrAccessError::OutOfBounds {
                offset,
                len: buf.len(),
                mr_len: bytes.len(),
            })?;
        buf.copy_from_slice(src);
        Ok(())
    }

    /// Protection check of a local access through an L_Key, as the data path runs it when a
    /// WR executes: key valid, region in `pd`, `needed` rights granted (`LOCAL_WRITE` when the
    /// HCA writes local memory, nothing for reads), and `[addr, addr + len)` inside the region
    /// (overflow-safe). A zero-length access is valid with any key.
    #[inline]
    pub fn check_local(
        &self,
        pd: PdHandle,
        lkey: u32,
        addr: u64,
        len: u64,
        needed: AccessFlags,
    ) -> Result<MrSlice, MrCheckError> {
        self.mrs.check_local(pd, lkey, addr, len, needed)
    }

    /// Protection check of a remote access through an R_Key (`needed` is `REMOTE_READ`,
    /// `REMOTE_WRITE` or `REMOTE_ATOMIC`). A zero-length access is valid with any key.
    #[inline]
    pub fn check_remote(
        &self,
        pd: PdHandle,
        rkey: u32,
        va: u64,
        len: u64,
        needed: AccessFlags,
    ) -> Result<MrSlice, MrCheckError> {
        self.mrs.check_remote(pd, rkey, va, len, needed)
    }

    /// The bytes a successful check granted (`None` if the region was deregistered since).
    #[inline]
    pub fn mr_slice(&self, s: &MrSlice) -> Option<&[u8]> {
        self.mrs.slice(s)
    }

    /// The bytes a successful check granted, writable.
    #[inline]
    pub fn mr_slice_mut(&mut self, s: &MrSlice) -> Option<&mut [u8]> {
        self.mrs.slice_mut(s)
    }

    // ----- completion queues ------------------------------------------------------------

    /// Creates a CQ of at least `cqe` entries (`ibv_create_cq`); the capacity is `cqe` rounded
    /// up to a power of two minus one, as rxe does (see [`Hca::query_cq`]).
    pub fn create_cq(&mut self, cqe: u32) -> Result<CqHandle, CreateCqError> {
        let max = self.device.max_cqe;
        if cqe == 0 || cqe > max {
            return Err(CreateCqError::InvalidCqe { cqe, max });
        }
        if self.cqs.len() >= self.device.max_cq as usize {
            return Err(CreateCqError::TooManyCqs {
                max: self.device.max_cq,
            });
        }
        Ok(CqHandle(
            self.cqs.insert(Cq::new(cq::rounded_capacity(cqe))),
        ))
    }

    /// Resizes a CQ (`ibv_resize_cq`): the new capacity is `cqe` rounded as at creation; the
    /// queued completions, the armed notification and the error state are kept. Fails when
    /// the new capacity cannot hold the completions queued now. Returns the new capacity.
    pub fn resize_cq(&mut self, cq: CqHandle, cqe: u32) -> Result<u32, ResizeCqError> {
        let max = self.device.max_cqe;
        if cqe == 0 || cqe > max {
            return Err(ResizeCqError::InvalidCqe { cqe, max });
        }
        let c = self.cqs.get_mut(cq.0).ok_or(ResizeCqError::NoSuchCq(cq))?;
        let capacity = cq::rounded_capacity(cqe);
        let queued = c.attr().len;
        if queued > capacity {
            return Err(ResizeCqError::TooSmall { cqe, queued });
        }
        c.capacity = capacity;
        Ok(capacity)
    }

    /// Destroys a CQ; fails while QPs use it. Pending completion events for it are dropped.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), DestroyCqError> {
        let c = self.cqs.get(cq.0).ok_or(DestroyCqError::NoSuchCq(cq))?;
        if c.users > 0 {
            return Err(DestroyCqError::Busy { cq, users: c.users });
        }
        self.cqs.remove(cq.0);
        self.completion_events.retain(|&c| c != cq);
        Ok(())
    }

    /// Capacity, fill level, overrun flag and armed notification of a CQ.
    pub fn query_cq(&self, cq: CqHandle) -> Result<CqAttr, CqError> {
        self.cqs
            .get(cq.0)
            .map(Cq::attr)
            .ok_or(CqError::NoSuchCq(cq))
    }

    /// Takes up to `max` completions, oldest first (`ibv_poll_cq`). After an overrun the
    /// completions queued before it are still returned; once they are gone, polling fails
    /// with [`CqError::Overrun`].
    pub fn poll_cq(&mut self, cq: CqHandle, max: usize) -> Result<Vec<WorkCompletion>, CqError> {
        let c = self.cqs.get_mut(cq.0).ok_or(CqError::NoSuchCq(cq))?;
        if c.is_empty() && c.overrun() && max > 0 {
            return Err(CqError::Overrun(cq));
        }
        let mut out = Vec::new();
        while out.len() < max {
            match c.pop() {
                Some(wc) => out.push(wc),
                None => break,
            }
        }
        Ok(out)
    }

    /// Like [`Hca::poll_cq`] but fills `out` and returns how many entries were written.
    #[inline]
    pub fn poll_cq_into(
        &mut self,
        cq: CqHandle,
        out: &mut [WorkCompletion],
    ) -> Result<usize, CqError> {
        let c = self.cqs.get_mut(cq.0).ok_or(CqError::NoSuchCq(cq))?;
        if c.is_empty() && c.overrun() && !out.is_empty() {
            return Err(CqError::Overrun(cq));
        }
        let mut n = 0;
        for slot in out.iter_mut() {
            match c.pop() {
                Some(wc) => {
                    *slot = wc;
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }

    /// Arms the CQ (`ibv_req_notify_cq`): the next completion (with `solicited_only`, the next
    /// solicited or unsuccessful completion) queues one completion event.
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<(), CqError> {
        self.cqs
            .get_mut(cq.0)
            .ok_or(CqError::NoSuchCq(cq))?
            .arm(solicited_only);
        Ok(())
    }

    /// The next completion event: a CQ whose armed notification fired
    /// (`ibv_get_cq_event`).
    pub fn poll_completion_event(&mut self) -> Option<CqHandle> {
        self.completion_events.pop_front()
    }

    /// The next asynchronous event (`ibv_get_async_event`).
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.async_events.pop_front()
    }

    /// Queues a completion on `cq`, firing its notification if armed. On overrun the
    /// completion is lost, the CQ enters error and (the first time) a `CqError` async event
    /// is queued.
    #[inline(always)]
    pub(crate) fn push_completion(
        &mut self,
        cq: CqHandle,
        wc: WorkCompletion,
        solicited: bool,
    ) -> Result<(), CqOverrunError> {
        let Some(c) = self.cqs.get_mut(cq.0) else {
            // QPs keep their CQs alive (destroy_cq is refused while they are used).
            debug_assert!(false, "completion for a destroyed CQ {cq:?}");
            return Err(CqOverrunError);
        };
        match c.push(wc, solicited) {
            Ok(true) => {
                self.completion_events.push_back(cq);
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(o) => {
                if o.entered_error {
                    self.async_events.push_back(AsyncEvent::CqError { cq });
                }
                Err(CqOverrunError)
            }
        }
    }

    // ----- shared receive queues --------------------------------------------------------

    /// Creates an SRQ (`ibv_create_srq`). The initial limit is ignored (disarmed).
    pub fn create_srq(
        &mut self,
        pd: PdHandle,
        init: &SrqInitAttr,
    ) -> Result<SrqHandle, CreateSrqError> {
        self.check_srq_init(pd, init)?;
        Ok(self.insert_srq(Srq::new(pd, init.max_wr, init.max_sge)))
    }

    /// The checks of a new SRQ: PD, sizes, device limit.
    fn check_srq_init(&self, pd: PdHandle, init: &SrqInitAttr) -> Result<(), CreateSrqError> {
        if self.pds.get(pd.0).is_none() {
            return Err(CreateSrqError::NoSuchPd(pd));
        }
        let d = &self.device;
        if init.max_wr == 0 || init.max_wr > d.max_srq_wr {
            return Err(CreateSrqError::InvalidMaxWr {
                max_wr: init.max_wr,
                max: d.max_srq_wr,
            });
        }
        if init.max_sge > d.max_srq_sge {
            return Err(CreateSrqError::InvalidMaxSge {
                max_sge: init.max_sge,
                max: d.max_srq_sge,
            });
        }
        if self.srqs.len() >= d.max_srq as usize {
            return Err(CreateSrqError::TooManySrqs { max: d.max_srq });
        }
        Ok(())
    }

    /// Numbers and stores a new SRQ (its PD counts one more user).
    fn insert_srq(&mut self, mut srq: Srq) -> SrqHandle {
        // The next free number at or after the cursor, round the HCA's range (the caller
        // checked `max_srq` against the range's size, so one is free).
        let by_num = &self.srqs_by_num;
        srq.srqn = self
            .numbers
            .srqns
            .next_free(&mut self.next_srqn, |n| by_num.contains_key(&n))
            .unwrap_or(self.numbers.srqns.first);
        let (pd, srqn) = (srq.pd, srq.srqn);
        let h = SrqHandle(self.srqs.insert(srq));
        self.srqs_by_num.insert(srqn, h);
        self.pd_use(pd, 1);
        h
    }

    /// The SRQ number (`ibv_get_srq_num`): what an XRC initiator puts in the XRCETH to reach
    /// an XRC SRQ.
    pub fn srq_num(&self, srq: SrqHandle) -> Result<u32, SrqError> {
        self.srqs
            .get(srq.0)
            .map(|s| s.srqn)
            .ok_or(SrqError::NoSuchSrq(srq))
    }

    /// Resizes the SRQ and/or arms its limit (`ibv_modify_srq`). A failed modify changes
    /// nothing.
    pub fn modify_srq(
        &mut self,
        srq: SrqHandle,
        attr: &SrqAttr,
        mask: SrqAttrMask,
    ) -> Result<(), ModifySrqError> {
        let max_srq_wr = self.device.max_srq_wr;
        let s = self
            .srqs
            .get_mut(srq.0)
            .ok_or(ModifySrqError::NoSuchSrq(srq))?;
        let mut max_wr = s.max_wr;
        if mask.contains(SrqAttrMask::MAX_WR) {
            if attr.max_wr == 0 || attr.max_wr > max_srq_wr {
                return Err(ModifySrqError::InvalidMaxWr {
                    max_wr: attr.max_wr,
                    max: max_srq_wr,
                });
            }
            if (attr.max_wr as usize) < s.queue.len() {
                return Err(ModifySrqError::MaxWrBelowOutstanding {
                    max_wr: attr.max_wr,
                    outstanding: s.queue.len(),
                });
            }
            max_wr = attr.max_wr;
        }
        let limit = if mask.contains(SrqAttrMask::LIMIT) {
            attr.srq_limit
        } else {
            s.limit
        };
        if limit > max_wr {
            return Err(ModifySrqError::LimitTooLarge { limit, max_wr });
        }
        s.max_wr = max_wr;
        s.limit = limit;
        Ok(())
    }

    /// Attributes of an SRQ (`ibv_query_srq`); the limit reads 0 when disarmed.
    pub fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr, SrqError> {
        self.srqs
            .get(srq.0)
            .map(Srq::attr)
            .ok_or(SrqError::NoSuchSrq(srq))
    }

    /// Destroys an SRQ; fails while QPs are attached. Its queued WRs are dropped.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), DestroySrqError> {
        let s = self
            .srqs
            .get(srq.0)
            .ok_or(DestroySrqError::NoSuchSrq(srq))?;
        if s.users > 0 {
            return Err(DestroySrqError::Busy {
                srq,
                users: s.users,
            });
        }
        let (pd, srqn, xrc) = (s.pd, s.srqn, s.xrc);
        self.srqs.remove(srq.0);
        self.srqs_by_num.remove(&srqn);
        self.pd_use(pd, -1);
        if xrc.is_some_and(|x| x.published.is_some()) {
            if let Some(share) = self.xrc_share.0.as_mut() {
                share.withdraw(srqn);
            }
            self.xrc_forget_inbound(srq);
        }
        if let Some(x) = xrc {
            if let Some(c) = self.cqs.get_mut(x.cq.0) {
                c.users = c.users.saturating_sub(1);
            }
            if let Some(d) = self.xrcds.get_mut(x.xrcd.0) {
                d.users = d.users.saturating_sub(1);
            }
        }
        Ok(())
    }

    /// Posts receive WRs to an SRQ (`ibv_post_srq_recv`): all of them or, on error, none.
    pub fn post_srq_recv(
        &mut self,
        srq: SrqHandle,
        wrs: &[RecvWr],
    ) -> Result<(), PostSrqRecvError> {
        let s = self
            .srqs
            .get_mut(srq.0)
            .ok_or(PostSrqRecvError::NoSuchSrq(srq))?;
        for (index, wr) in wrs.iter().enumerate() {
            if s.queue.len() + index >= s.max_wr as usize {
                return Err(PostSrqRecvError::QueueFull {
                    index,
                    max_wr: s.max_wr,
                });
            }
            if wr.sg_list.len() > s.max_sge as usize {
                return Err(PostSrqRecvError::TooManySge {
                    index,
                    num_sge: wr.sg_list.len(),
                    max: s.max_sge,
                });
            }
        }
        crate::verbs::wr::reserve_recv(&mut s.queue, wrs.len(), s.max_wr);
        for wr in wrs {
            s.queue.push_back(self.spare.recv_wqe(wr));
        }
        if s.xrc.is_some_and(|x| x.published.is_some()) {
            // Credits for the target QPs of other HCAs of the shared domain.
            let (srqn, n) = (s.srqn, wrs.len() as u32);
            if let Some(share) = self.xrc_share.0.as_mut() {
                share.add_credits(srqn, n);
            }
        }
        Ok(())
    }

    /// Takes the oldest WQE of an SRQ for the data path, queuing `SrqLimitReached` when this
    /// drops the WQE count below the armed limit. An XRC SRQ published to other HCAs gives
    /// only a WQE no other HCA's message has reserved: it reserves one first (none left:
    /// `None`, an RNR as for an empty SRQ).
    pub(crate) fn take_srq_wqe(&mut self, srq: SrqHandle) -> Option<RecvWqe> {
        let s = self.srqs.get(srq.0)?;
        if let Some(domain) = s.xrc.and_then(|x| x.published) {
            let srqn = s.srqn;
            if self.xrc_reserve(srqn, domain) != Reservation::Reserved {
                return None;
            }
            let w = self.pop_srq_wqe(srq);
            if w.is_none() {
                // Never so (a credit stands for a queued WQE): given back all the same.
                if let Some(share) = self.xrc_share.0.as_mut() {
                    share.add_credits(srqn, 1);
                }
            }
            return w;
        }
        self.pop_srq_wqe(srq)
    }

    /// Takes the oldest WQE of an SRQ (reserved already, or of an SRQ nobody else reserves
    /// from), queuing `SrqLimitReached` when this drops the WQE count below the armed limit.
    pub(crate) fn pop_srq_wqe(&mut self, srq: SrqHandle) -> Option<RecvWqe> {
        let (wqe, fired) = self.srqs.get_mut(srq.0)?.pop();
        if fired {
            self.async_events
                .push_back(AsyncEvent::SrqLimitReached { srq });
        }
        wqe
    }

    // ----- address handles --------------------------------------------------------------

    /// Creates an address handle (`ibv_create_ah`) after checking the address vector against
    /// the ports (port exists, GID index in range, GRH present on RoCE ports, SL ≤ 15).
    pub fn create_ah(&mut self, pd: PdHandle, attr: &AhAttr) -> Result<AhHandle, CreateAhError> {
        if self.pds.get(pd.0).is_none() {
            return Err(CreateAhError::NoSuchPd(pd));
        }
        ah::validate_ah_attr(attr, &self.ports)?;
        if self.ahs.len() >= self.device.max_ah as usize {
            return Err(CreateAhError::TooManyAhs {
                max: self.device.max_ah,
            });
        }
        let h = AhHandle(self.ahs.insert(Ah { pd, attr: *attr }));
        self.pd_use(pd, 1);
        Ok(h)
    }

    /// The address vector of an AH.
    pub fn query_ah(&self, ah: AhHandle) -> Result<AhAttr, AhError> {
        self.ahs
            .get(ah.0)
            .map(|a| a.attr)
            .ok_or(AhError::NoSuchAh(ah))
    }

    /// Destroys an AH. Send WRs already posted keep the address vector they resolved.
    pub fn destroy_ah(&mut self, ah: AhHandle) -> Result<(), AhError> {
        let a = self.ahs.remove(ah.0).ok_or(AhError::NoSuchAh(ah))?;
        self.pd_use(a.pd, -1);
        Ok(())
    }
}

/// The first SRQ number of the HCA whose node GUID is `node_guid`, when no number range is
/// configured: the GUID's low byte (for a UDP device, the last byte of its IPv4 address) times
/// 2^16, plus 1. SRQ numbers then differ between softib devices that do not share a host-wide
/// device (whose members number in their slots' ranges), so an XRCETH that names an SRQ of
/// another device names no SRQ here and draws NAK-Invalid RD Request instead of landing in an
/// SRQ of the same number.
fn first_srqn(node_guid: u64) -> u32 {
    ((node_guid as u32 & 0xff) << 16) | 1
}

/// The ranges QPNs, SRQ numbers and EECNs are given from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Numbers {
    pub(crate) qpns: NumberRange,
    pub(crate) srqns: NumberRange,
    pub(crate) eecns: NumberRange,
}

impl Numbers {
    /// A configured range for all three, or: QPNs from 0x11 (rxe's first) to 2^24 - 2 (2^24 - 1
    /// is the multicast QPN), SRQ numbers over the whole 24-bit space from [`first_srqn`],
    /// EECNs from 1.
    fn of(range: Option<NumberRange>, node_guid: u64) -> Numbers {
        if let Some(r) = range {
            return Numbers {
                qpns: r,
                srqns: r,
                eecns: r,
            };
        }
        let mask = softib_wire::psn::MASK24;
        Numbers {
            qpns: NumberRange {
                first: qp::MIN_QPN,
                last: mask - 1,
                start: qp::MIN_QPN,
            },
            srqns: NumberRange {
                first: 1,
                last: mask,
                start: first_srqn(node_guid),
            },
            eecns: NumberRange {
                first: 1,
                last: mask,
                start: 1,
            },
        }
    }

    /// How many numbers each range holds.
    pub(crate) fn span(r: &NumberRange) -> u32 {
        r.last.saturating_sub(r.first).saturating_add(1)
    }
}

/// Copies `src` into application memory the way a DMA engine writes it: every byte once,
/// the last byte after all the others.
///
/// Applications poll the last byte of an RDMA WRITE's target (perftest's latency tests,
/// riostream) and, once it changes, write into the same buffer. `copy_from_slice` may store
/// a byte twice: glibc's memcpy for 64 to 128 bytes stores two overlapping vectors, and for
/// exactly 64 bytes both cover the whole buffer, so a store the application made after it saw
/// the last byte could be overwritten by the second vector. Here the last byte is stored
/// alone, after a release fence that keeps it behind the rest.
#[inline(always)]
pub(crate) fn place(dst: &mut [u8], src: &[u8]) {
    let Some((last, head)) = src.split_last() else {
        return;
    };
    let n = head.len();
    dst[..n].copy_from_slice(head);
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    // `dst` is as long as `src`. The fence is a compiler barrier too: the copy above is
    // neither merged with this store nor moved behind it.
    dst[n] = *last;
}

#[cfg(test)]
mod place_tests {
    #[test]
    fn place_copies_every_length() {
        for n in 0..300usize {
            let src: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
            let mut dst = vec![0u8; n];
            super::place(&mut dst, &src);
            assert_eq!(dst, src, "length {n}");
        }
    }
}
