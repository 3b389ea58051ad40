//! Errors of the verbs, one enum per verb (or per family of trivially related verbs).
//!
//! Each variant carries the context needed to see what is wrong without a debugger: the
//! object, the offending value and the limit, the QP states and attribute masks involved, the
//! index of the rejected work request. Protocol outcomes (NAKs, completion statuses) are not
//! errors; they are reported through completions and async events.

use crate::verbs::ah::AhAttrError;
use crate::verbs::qp::QpAttrMask;
use crate::verbs::types::{AccessFlags, Gid, Mtu, QpState, QpType};
use crate::verbs::{AhHandle, CqHandle, MrHandle, PdHandle, RddHandle, SrqHandle, XrcdHandle};
use softib_wire::{Eecn, Qpn};

/// `alloc_pd` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllocPdError {
    /// The device limit of protection domains is reached.
    #[error("too many protection domains (device limit {max})")]
    TooManyPds {
        /// `max_pd`.
        max: u32,
    },
}

/// `dealloc_pd` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeallocPdError {
    /// The handle does not name a live PD.
    #[error("no such protection domain {0:?}")]
    NoSuchPd(PdHandle),
    /// Memory regions, QPs, SRQs or AHs still use the PD.
    #[error("protection domain {pd:?} is still used by {users} object(s)")]
    Busy {
        /// The PD.
        pd: PdHandle,
        /// Objects using it.
        users: usize,
    },
}

/// `reg_mr` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegMrError {
    /// The handle does not name a live PD.
    #[error("no such protection domain {0:?}")]
    NoSuchPd(PdHandle),
    /// Remote write or remote atomic access was requested without local write.
    #[error("access {0:?} asks for remote write or atomic access without LOCAL_WRITE")]
    InvalidAccess(AccessFlags),
    /// The region is larger than the device allows.
    #[error("memory region of {len} bytes exceeds max_mr_size {max}")]
    TooLarge {
        /// Requested length.
        len: u64,
        /// `max_mr_size`.
        max: u64,
    },
    /// `addr + length` overflows 64 bits.
    #[error("memory region {addr:#x}+{len} wraps around the 64-bit address space")]
    AddressOverflow {
        /// Requested address.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// The HCA has no room left to place the region.
    #[error("no I/O virtual address range left for a region of {len} bytes")]
    AddressSpaceExhausted {
        /// Length.
        len: u64,
    },
    /// The device limit of memory regions is reached.
    #[error("too many memory regions (device limit {max})")]
    TooManyMrs {
        /// `max_mr`.
        max: u32,
    },
}

/// `rereg_mr` failed; the region is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReregMrError {
    /// The handle does not name a live region.
    #[error("no such memory region {0:?}")]
    NoSuchMr(MrHandle),
    /// The new PD, access or memory is refused as a registration would refuse it.
    #[error(transparent)]
    Reg(#[from] RegMrError),
}

/// `dereg_mr` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeregMrError {
    /// The handle does not name a live region.
    #[error("no such memory region {0:?}")]
    NoSuchMr(MrHandle),
}

/// `create_cq` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CreateCqError {
    /// `cqe` is 0 or larger than the device allows.
    #[error("cqe {cqe} is out of range 1..={max}")]
    InvalidCqe {
        /// Requested entries.
        cqe: u32,
        /// `max_cqe`.
        max: u32,
    },
    /// The device limit of CQs is reached.
    #[error("too many completion queues (device limit {max})")]
    TooManyCqs {
        /// `max_cq`.
        max: u32,
    },
}

/// `destroy_cq` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DestroyCqError {
    /// The handle does not name a live CQ.
    #[error("no such completion queue {0:?}")]
    NoSuchCq(CqHandle),
    /// QPs still use the CQ.
    #[error("completion queue {cq:?} is still used by {users} queue(s) of QPs")]
    Busy {
        /// The CQ.
        cq: CqHandle,
        /// Work queues (send or receive side of a QP) using it.
        users: usize,
    },
}

/// `resize_cq` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResizeCqError {
    /// The handle does not name a live CQ.
    #[error("no such completion queue {0:?}")]
    NoSuchCq(CqHandle),
    /// `cqe` is 0 or larger than the device allows.
    #[error("cqe {cqe} is out of range 1..={max}")]
    InvalidCqe {
        /// Requested entries.
        cqe: u32,
        /// `max_cqe`.
        max: u32,
    },
    /// More completions are queued than the new size holds.
    #[error("cqe {cqe} cannot hold the {queued} completions queued")]
    TooSmall {
        /// Requested entries.
        cqe: u32,
        /// Completions queued now.
        queued: u32,
    },
}

/// `poll_cq`, `req_notify_cq` or `query_cq` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CqError {
    /// The handle does not name a live CQ.
    #[error("no such completion queue {0:?}")]
    NoSuchCq(CqHandle),
    /// The CQ overran and every queued completion has been polled.
    #[error("completion queue {0:?} overran and is in error")]
    Overrun(CqHandle),
}

/// `create_srq` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CreateSrqError {
    /// The handle does not name a live PD.
    #[error("no such protection domain {0:?}")]
    NoSuchPd(PdHandle),
    /// `max_wr` is 0 or above the device limit.
    #[error("SRQ max_wr {max_wr} is out of range 1..={max}")]
    InvalidMaxWr {
        /// Requested.
        max_wr: u32,
        /// `max_srq_wr`.
        max: u32,
    },
    /// `max_sge` is above the device limit.
    #[error("SRQ max_sge {max_sge} exceeds the device limit {max}")]
    InvalidMaxSge {
        /// Requested.
        max_sge: u32,
        /// `max_srq_sge`.
        max: u32,
    },
    /// The device limit of SRQs is reached.
    #[error("too many shared receive queues (device limit {max})")]
    TooManySrqs {
        /// `max_srq`.
        max: u32,
    },
    /// The XRC domain of an XRC SRQ does not exist.
    #[error("no such XRC domain {0:?}")]
    NoSuchXrcd(XrcdHandle),
    /// The CQ of an XRC SRQ does not exist.
    #[error("no such completion queue {0:?}")]
    NoSuchCq(CqHandle),
}

/// `alloc_rdd` / `dealloc_rdd` / `create_rd_qp` / `create_eec` / `destroy_eec` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RdError {
    /// The handle does not name a live RDD.
    #[error("no such reliable datagram domain {0:?}")]
    NoSuchRdd(RddHandle),
    /// RD QPs or EE contexts still belong to the domain.
    #[error("reliable datagram domain {rdd:?} still holds {users} RD QP(s) and EE context(s)")]
    Busy {
        /// The domain.
        rdd: RddHandle,
        /// RD QPs and EE contexts in it.
        users: usize,
    },
    /// The device limit of RDDs or EE contexts is reached.
    #[error("too many {what} (device limit {max})")]
    TooMany {
        /// "reliable datagram domains" or "EE contexts".
        what: &'static str,
        /// The limit.
        max: u32,
    },
    /// No EE context has this number.
    #[error("no such EE context {0}")]
    NoSuchEec(Eecn),
    /// `create_rd_qp` was given another QP type.
    #[error("create_rd_qp makes RD QPs, not {0}")]
    NotRd(QpType),
    /// The QP could not be created.
    #[error(transparent)]
    CreateQp(#[from] CreateQpError),
}

/// `alloc_xrcd` / `dealloc_xrcd` / `open_xrc_tgt_qp` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum XrcdError {
    /// The handle does not name a live XRC domain.
    #[error("no such XRC domain {0:?}")]
    NoSuchXrcd(XrcdHandle),
    /// The device limit of XRC domains is reached.
    #[error("too many XRC domains (device limit {max})")]
    TooManyXrcds {
        /// `max_xrcds`.
        max: u32,
    },
    /// XRC SRQs or XRC target QPs still belong to the domain.
    #[error("XRC domain {xrcd:?} still holds {users} XRC SRQ(s) and target QP(s)")]
    Busy {
        /// The domain.
        xrcd: XrcdHandle,
        /// SRQs and target QPs in it.
        users: usize,
    },
    /// No XRC target QP of the domain has this number (`ibv_open_qp`).
    #[error("no XRC target QP {qpn} in XRC domain {xrcd:?}")]
    NoSuchTgtQp {
        /// The domain.
        xrcd: XrcdHandle,
        /// The QP number asked for.
        qpn: Qpn,
    },
}

/// `modify_srq` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModifySrqError {
    /// The handle does not name a live SRQ.
    #[error("no such shared receive queue {0:?}")]
    NoSuchSrq(SrqHandle),
    /// The new `max_wr` is 0 or above the device limit.
    #[error("SRQ max_wr {max_wr} is out of range 1..={max}")]
    InvalidMaxWr {
        /// Requested.
        max_wr: u32,
        /// `max_srq_wr`.
        max: u32,
    },
    /// The new `max_wr` is smaller than the WRs already queued.
    #[error("SRQ max_wr {max_wr} is below the {outstanding} WRs already posted")]
    MaxWrBelowOutstanding {
        /// Requested.
        max_wr: u32,
        /// Queued WRs.
        outstanding: usize,
    },
    /// The limit exceeds `max_wr`.
    #[error("SRQ limit {limit} exceeds max_wr {max_wr}")]
    LimitTooLarge {
        /// Requested limit.
        limit: u32,
        /// The SRQ's `max_wr` after this modify.
        max_wr: u32,
    },
}

/// `destroy_srq` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DestroySrqError {
    /// The handle does not name a live SRQ.
    #[error("no such shared receive queue {0:?}")]
    NoSuchSrq(SrqHandle),
    /// QPs are still attached.
    #[error("shared receive queue {srq:?} is still used by {users} QP(s)")]
    Busy {
        /// The SRQ.
        srq: SrqHandle,
        /// QPs attached.
        users: usize,
    },
}

/// `post_srq_recv` failed; nothing was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostSrqRecvError {
    /// The handle does not name a live SRQ.
    #[error("no such shared receive queue {0:?}")]
    NoSuchSrq(SrqHandle),
    /// WR `index` does not fit.
    #[error("WR {index}: the SRQ is full (max_wr {max_wr})")]
    QueueFull {
        /// Index of the WR in the list.
        index: usize,
        /// SRQ size.
        max_wr: u32,
    },
    /// WR `index` has too many SGEs.
    #[error("WR {index}: {num_sge} SGEs exceed the SRQ's max_sge {max}")]
    TooManySge {
        /// Index of the WR in the list.
        index: usize,
        /// SGEs in the WR.
        num_sge: usize,
        /// `max_sge`.
        max: u32,
    },
}

/// `query_srq` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SrqError {
    /// The handle does not name a live SRQ.
    #[error("no such shared receive queue {0:?}")]
    NoSuchSrq(SrqHandle),
}

/// `query_port` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryPortError {
    /// The port does not exist.
    #[error("port {port} does not exist (the HCA has {num_ports} port(s))")]
    InvalidPort {
        /// Requested port.
        port: u8,
        /// Ports of the HCA.
        num_ports: u8,
    },
}

/// `create_ah` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CreateAhError {
    /// The handle does not name a live PD.
    #[error("no such protection domain {0:?}")]
    NoSuchPd(PdHandle),
    /// The address vector is unusable.
    #[error("invalid address vector: {0}")]
    InvalidAttr(#[from] AhAttrError),
    /// The device limit of AHs is reached.
    #[error("too many address handles (device limit {max})")]
    TooManyAhs {
        /// `max_ah`.
        max: u32,
    },
}

/// `destroy_ah` / `query_ah` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AhError {
    /// The handle does not name a live AH.
    #[error("no such address handle {0:?}")]
    NoSuchAh(AhHandle),
}

/// `create_qp` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CreateQpError {
    /// The handle does not name a live PD.
    #[error("no such protection domain {0:?}")]
    NoSuchPd(PdHandle),
    /// A CQ handle does not name a live CQ.
    #[error("no such completion queue {0:?}")]
    NoSuchCq(CqHandle),
    /// The SRQ handle does not name a live SRQ.
    #[error("no such shared receive queue {0:?}")]
    NoSuchSrq(SrqHandle),
    /// Raw QPs cannot use an SRQ.
    #[error("{qp_type} QPs cannot use a shared receive queue")]
    SrqNotSupported {
        /// The QP type.
        qp_type: QpType,
    },
    /// A raw datagram QP on an HCA without an InfiniBand port (raw datagrams follow an LRH,
    /// which RoCE does not have).
    #[error("{qp_type} QPs need a native InfiniBand port; this HCA has none")]
    RawQpNeedsInfiniBand {
        /// The QP type.
        qp_type: QpType,
    },
    /// A capability exceeds the device limit.
    #[error("cap.{field} = {value} exceeds the device limit {max}")]
    CapTooLarge {
        /// Field of `QpCap`.
        field: &'static str,
        /// Requested.
        value: u32,
        /// Device limit.
        max: u32,
    },
    /// The device limit of QPs is reached.
    #[error("too many queue pairs (device limit {max})")]
    TooManyQps {
        /// `max_qp`.
        max: u32,
    },
    /// The general services QP (QP1) is a UD QP; another type was requested for it.
    #[error("QP1 (GSI) must be a UD QP, not {qp_type}")]
    GsiNotUd {
        /// The QP type requested.
        qp_type: QpType,
    },
    /// QP1 already exists on this HCA.
    #[error("QP1 (GSI) already exists")]
    GsiExists,
    /// RD QPs belong to a reliable datagram domain: they are created with `create_rd_qp`.
    #[error("RD QPs are created in a reliable datagram domain (create_rd_qp)")]
    RdNeedsRdd,
    /// XRC target QPs belong to an XRC domain, not a protection domain: they are created with
    /// `create_xrc_tgt_qp`.
    #[error("XRC_RECV QPs are created in an XRC domain (create_xrc_tgt_qp)")]
    XrcTgtNeedsXrcd,
    /// The XRC domain of an XRC target QP does not exist.
    #[error("no such XRC domain {0:?}")]
    NoSuchXrcd(XrcdHandle),
}

/// `attach_mcast` / `detach_mcast` failed; no attachment changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McastError {
    /// No QP has this number.
    #[error("no such QP {0}")]
    NoSuchQp(Qpn),
    /// Only UD QPs join multicast groups (`ibv_attach_mcast`: EINVAL).
    #[error("QP {qpn} is a {qp_type} QP: only UD QPs attach to multicast groups")]
    NotUd {
        /// The QP.
        qpn: Qpn,
        /// Its type.
        qp_type: QpType,
    },
    /// The GID is not a multicast GID (`ff00::/8`, or IPv4-mapped `224.0.0.0/4`).
    #[error("GID {0} is not a multicast GID")]
    NotMulticastGid(Gid),
    /// On an InfiniBand port a multicast LID is 0xC000..=0xFFFE.
    #[error("LID {0:#06x} is not a multicast LID (0xc000..=0xfffe)")]
    NotMulticastLid(u16),
    /// On an InfiniBand port a multicast address is an MGID and its MLID (IBA 10.5): the group
    /// already has local members under another MLID (`ibv_attach_mcast`: EINVAL).
    #[error("multicast group {gid} has MLID {mlid:#06x}, not {lid:#06x}")]
    MlidMismatch {
        /// The group.
        gid: Gid,
        /// The MLID the group's local members were attached with.
        mlid: u16,
        /// The MLID requested.
        lid: u16,
    },
    /// `detach_mcast` of a group the QP is not attached to.
    #[error("QP {qpn} is not attached to multicast group {gid}")]
    NotAttached {
        /// The QP.
        qpn: Qpn,
        /// The group.
        gid: Gid,
    },
    /// The group already has the device's `max_mcast_qp_attach` QPs.
    #[error("multicast group {gid} already has {max} QPs attached (device limit)")]
    GroupFull {
        /// The group.
        gid: Gid,
        /// `max_mcast_qp_attach`.
        max: u32,
    },
    /// The HCA already has the device's `max_mcast_grp` groups.
    #[error("too many multicast groups (device limit {max})")]
    TooManyGroups {
        /// `max_mcast_grp`.
        max: u32,
    },
}

/// `modify_qp` failed; the QP is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModifyQpError {
    /// No QP has this number.
    #[error("no such QP {0}")]
    NoSuchQp(Qpn),
    /// No EE context has this number.
    #[error("no such EE context {0}")]
    NoSuchEec(Eecn),
    /// The state transition is illegal for an EE context.
    #[error("an EE context cannot move from {cur_state} to {next_state}")]
    InvalidEecTransition {
        /// Current state.
        cur_state: QpState,
        /// Requested state.
        next_state: QpState,
    },
    /// `cur_qp_state` (with `CUR_STATE`) is not the QP's state.
    #[error("cur_qp_state {claimed} does not match the QP state {actual}")]
    BadCurrentState {
        /// `cur_qp_state`.
        claimed: QpState,
        /// The real state.
        actual: QpState,
    },
    /// The state transition is illegal for this QP type.
    #[error("{qp_type} QP cannot move from {cur_state} to {next_state}")]
    InvalidTransition {
        /// Current state.
        cur_state: QpState,
        /// Requested state.
        next_state: QpState,
        /// QP type.
        qp_type: QpType,
    },
    /// Required attributes are missing from the mask.
    #[error("{cur_state} -> {next_state} needs attributes {missing} (required: {required})")]
    MissingAttributes {
        /// Current state.
        cur_state: QpState,
        /// Requested state.
        next_state: QpState,
        /// Required attributes not in the mask.
        missing: QpAttrMask,
        /// Every required attribute.
        required: QpAttrMask,
    },
    /// The mask has attributes the transition does not accept.
    #[error(
        "{cur_state} -> {next_state} does not accept attributes {invalid} (allowed: {allowed})"
    )]
    AttributesNotAllowed {
        /// Current state.
        cur_state: QpState,
        /// Requested state.
        next_state: QpState,
        /// Attributes in the mask that are not allowed.
        invalid: QpAttrMask,
        /// Every allowed attribute.
        allowed: QpAttrMask,
    },
    /// The port does not exist (`attr` is `PORT` or `ALT_PATH`).
    #[error("{attr}: port {port} does not exist (the HCA has {num_ports} port(s))")]
    InvalidPort {
        /// Attribute at fault.
        attr: QpAttrMask,
        /// Requested port.
        port: u8,
        /// Ports of the HCA.
        num_ports: u8,
    },
    /// The P_Key index is past the port's table (`attr` is `PKEY_INDEX` or `ALT_PATH`).
    #[error("{attr}: pkey_index {index} is out of range for port {port} (P_Key table has {table_len} entries)")]
    PkeyIndexOutOfRange {
        /// Attribute at fault.
        attr: QpAttrMask,
        /// Requested index.
        index: u16,
        /// Port.
        port: u8,
        /// Table length.
        table_len: usize,
    },
    /// `path_mig_state` asks for re-arming, but the QP has no alternate path (load one with
    /// `IBV_QP_ALT_PATH`, in this call or before).
    #[error("IBV_QP_PATH_MIG_STATE: {requested:?} needs an alternate path (IBV_QP_ALT_PATH)")]
    NoAlternatePath {
        /// The state asked for.
        requested: crate::verbs::types::PathMigState,
    },
    /// The address vector is unusable (`attr` is `AV` or `ALT_PATH`).
    #[error("{attr}: {source}")]
    InvalidAddressVector {
        /// Attribute at fault.
        attr: QpAttrMask,
        /// What is wrong.
        source: AhAttrError,
    },
    /// The address vector's port differs from the QP's port.
    #[error("{attr}: address vector port {av_port} differs from the QP port {qp_port}")]
    AddressVectorPortMismatch {
        /// Attribute at fault.
        attr: QpAttrMask,
        /// Port of the address vector.
        av_port: u8,
        /// Port of the QP (or of the alternate path).
        qp_port: u8,
    },
    /// The path MTU exceeds the port's active MTU.
    #[error("path_mtu {requested} exceeds the active MTU {active} of port {port}")]
    PathMtuTooLarge {
        /// Requested.
        requested: Mtu,
        /// Active MTU.
        active: Mtu,
        /// Port.
        port: u8,
    },
    /// A 5-bit timeout exponent is above 31 (`attr` is `TIMEOUT` or `ALT_PATH`).
    #[error("{attr}: timeout {value} is out of range 0..=31")]
    TimeoutOutOfRange {
        /// Attribute at fault.
        attr: QpAttrMask,
        /// Value.
        value: u8,
    },
    /// `retry_cnt` above 7.
    #[error("retry_cnt {0} is out of range 0..=7")]
    RetryCountOutOfRange(u8),
    /// `rnr_retry` above 7.
    #[error("rnr_retry {0} is out of range 0..=7")]
    RnrRetryOutOfRange(u8),
    /// `min_rnr_timer` above 31.
    #[error("min_rnr_timer {0} is out of range 0..=31")]
    MinRnrTimerOutOfRange(u8),
    /// `max_rd_atomic` above the device's `max_qp_init_rd_atom`.
    #[error("max_rd_atomic {requested} exceeds the device limit {max}")]
    MaxRdAtomicTooLarge {
        /// Requested.
        requested: u8,
        /// `max_qp_init_rd_atom`.
        max: u32,
    },
    /// `max_dest_rd_atomic` above the device's `max_qp_rd_atom`.
    #[error("max_dest_rd_atomic {requested} exceeds the device limit {max}")]
    MaxDestRdAtomicTooLarge {
        /// Requested.
        requested: u8,
        /// `max_qp_rd_atom`.
        max: u32,
    },
    /// `dest_qp_num` does not fit 24 bits.
    #[error("dest_qp_num {0:#x} does not fit 24 bits")]
    DestQpnOutOfRange(u32),
    /// `qp_access_flags` has bits that are not access rights.
    #[error("qp_access_flags {0:#x} has unknown bits")]
    InvalidAccessFlags(u32),
    /// A raw datagram QP was bound to a port whose link layer is not InfiniBand (raw
    /// datagrams live behind an LRH, which RoCE does not have).
    #[error("port {port} is not an InfiniBand port: {qp_type} QPs need a native IB link layer")]
    RawQpNeedsInfiniBand {
        /// QP type.
        qp_type: QpType,
        /// Port.
        port: u8,
    },
}

/// `query_qp` / `destroy_qp` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QpError {
    /// No QP has this number.
    #[error("no such QP {0}")]
    NoSuchQp(Qpn),
}

/// `post_send` failed; no WR of the list was queued.
///
/// Only what can be known without touching memory is checked at post time. Local keys and
/// bounds are checked when the WR executes, and failures complete the WR with
/// `IBV_WC_LOC_PROT_ERR` / `IBV_WC_LOC_LEN_ERR`, as hardware does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostSendError {
    /// No QP has this number.
    #[error("no such QP {0}")]
    NoSuchQp(Qpn),
    /// The QP state does not accept send WRs (RESET, INIT, RTR).
    #[error("QP state {state} does not accept send WRs")]
    InvalidState {
        /// The state.
        state: QpState,
    },
    /// WR `index` does not fit the send queue.
    #[error("WR {index}: the send queue is full (max_send_wr {max_send_wr})")]
    QueueFull {
        /// Index of the WR in the list.
        index: usize,
        /// Queue size.
        max_send_wr: u32,
    },
    /// WR `index` has more SGEs than the QP allows.
    #[error("WR {index}: {num_sge} SGEs exceed max_send_sge {max}")]
    TooManySge {
        /// Index of the WR in the list.
        index: usize,
        /// SGEs in the WR.
        num_sge: usize,
        /// `max_send_sge`.
        max: u32,
    },
    /// RDMA READ WR `index` has more SGEs than the device allows for reads.
    #[error("WR {index}: {num_sge} SGEs exceed the device max_sge_rd {max}")]
    TooManyReadSge {
        /// Index of the WR in the list.
        index: usize,
        /// SGEs in the WR.
        num_sge: usize,
        /// `max_sge_rd`.
        max: u32,
    },
    /// Inline payload of WR `index` exceeds the QP's inline capacity.
    #[error("WR {index}: inline payload of {len} bytes exceeds max_inline_data {max}")]
    InlineTooLong {
        /// Index of the WR in the list.
        index: usize,
        /// Payload length.
        len: usize,
        /// `max_inline_data`.
        max: u32,
    },
    /// WR `index` has both inline data and an SGE list.
    #[error("WR {index}: inline data and a gather list are mutually exclusive")]
    InlineWithSgList {
        /// Index of the WR in the list.
        index: usize,
    },
    /// WR `index` has the INLINE flag but no inline data.
    #[error("WR {index}: SendFlags::INLINE is set but the WR has no inline data")]
    InlineFlagWithoutData {
        /// Index of the WR in the list.
        index: usize,
    },
    /// WR `index` is an RDMA READ or atomic with inline data (its SGEs receive data).
    #[error("WR {index}: {opcode} cannot carry inline data")]
    InlineNotSupported {
        /// Index of the WR in the list.
        index: usize,
        /// Operation name.
        opcode: &'static str,
    },
    /// The message of WR `index` is longer than the port allows.
    #[error("WR {index}: message of {len} bytes exceeds max_msg_sz {max}")]
    MessageTooLong {
        /// Index of the WR in the list.
        index: usize,
        /// Message length.
        len: u64,
        /// `max_msg_sz`.
        max: u32,
    },
    /// The operation of WR `index` is not available on this QP type.
    #[error("WR {index}: {opcode} is not supported on {qp_type} QPs")]
    OpcodeNotSupported {
        /// Index of the WR in the list.
        index: usize,
        /// Operation name.
        opcode: &'static str,
        /// QP type.
        qp_type: QpType,
    },
    /// Atomic WR `index` does not have exactly 8 bytes of SGE space.
    #[error("WR {index}: atomic operations need a total SGE length of 8, not {len}")]
    AtomicLength {
        /// Index of the WR in the list.
        index: usize,
        /// Total SGE length.
        len: u64,
    },
    /// RD WR `index` has no RD destination.
    #[error("WR {index}: an RD send needs an EE context, remote QPN and Q_Key")]
    MissingRdDest {
        /// Index of the WR in the list.
        index: usize,
    },
    /// The EE context of RD WR `index` does not exist.
    #[error("WR {index}: no such EE context {eecn}")]
    NoSuchEec {
        /// Index of the WR in the list.
        index: usize,
        /// The EECN.
        eecn: Eecn,
    },
    /// Datagram WR `index` has no UD destination.
    #[error("WR {index}: a UD send needs an address handle, remote QPN and Q_Key")]
    MissingUdDest {
        /// Index of the WR in the list.
        index: usize,
    },
    /// The AH of WR `index` does not exist.
    #[error("WR {index}: no such address handle {ah:?}")]
    InvalidAh {
        /// Index of the WR in the list.
        index: usize,
        /// The handle.
        ah: AhHandle,
    },
    /// The AH of WR `index` belongs to another PD than the QP.
    #[error("WR {index}: address handle {ah:?} belongs to another protection domain")]
    AhPdMismatch {
        /// Index of the WR in the list.
        index: usize,
        /// The handle.
        ah: AhHandle,
    },
    /// The AH of WR `index` uses another port than the QP.
    #[error("WR {index}: address handle port {ah_port} differs from the QP port {qp_port}")]
    AhPortMismatch {
        /// Index of the WR in the list.
        index: usize,
        /// AH port.
        ah_port: u8,
        /// QP port.
        qp_port: u8,
    },
    /// The UD message of WR `index` does not fit one packet.
    #[error("WR {index}: UD message of {len} bytes exceeds the path MTU {mtu}")]
    UdMessageTooLong {
        /// Index of the WR in the list.
        index: usize,
        /// Message length.
        len: u64,
        /// MTU.
        mtu: Mtu,
    },
    /// The raw datagram of WR `index` is shorter than the header it must start with (the
    /// 40-byte IPv6 header of a raw IPv6 QP, the 4-byte RWH of a raw EtherType QP).
    #[error("WR {index}: raw datagram of {len} bytes is shorter than its {header}-byte header")]
    RawDatagramTooShort {
        /// Index of the WR in the list.
        index: usize,
        /// Message length.
        len: u64,
        /// Header length.
        header: u32,
    },
    /// The raw datagram of WR `index` (padded to whole words) does not fit the largest raw
    /// packet of the port (LRH:PktLen of at most active MTU + 124 bytes, o9-148).
    #[error("WR {index}: raw datagram of {len} bytes exceeds the raw maximum of {max} bytes")]
    RawDatagramTooLong {
        /// Index of the WR in the list.
        index: usize,
        /// Message length.
        len: u64,
        /// Largest raw datagram (header included).
        max: u32,
    },
    /// The raw IPv6 datagram of WR `index` names an IBA transport header as its IPv6 Next
    /// Header (0x1B), which a CA never sends (C9-208).
    #[error("WR {index}: a raw IPv6 datagram must not carry an IBA transport header (next header {next_header:#04x}, C9-208)")]
    RawIpv6IbaNextHeader {
        /// Index of the WR in the list.
        index: usize,
        /// The Next Header value.
        next_header: u8,
    },
}

impl PostSendError {
    /// Index of the rejected WR, `None` when the whole list was refused (unknown QP, state).
    pub fn index(&self) -> Option<usize> {
        match *self {
            PostSendError::NoSuchQp(_) | PostSendError::InvalidState { .. } => None,
            PostSendError::QueueFull { index, .. }
            | PostSendError::TooManySge { index, .. }
            | PostSendError::TooManyReadSge { index, .. }
            | PostSendError::InlineTooLong { index, .. }
            | PostSendError::InlineWithSgList { index }
            | PostSendError::InlineFlagWithoutData { index }
            | PostSendError::InlineNotSupported { index, .. }
            | PostSendError::MessageTooLong { index, .. }
            | PostSendError::OpcodeNotSupported { index, .. }
            | PostSendError::AtomicLength { index, .. }
            | PostSendError::MissingUdDest { index }
            | PostSendError::MissingRdDest { index }
            | PostSendError::NoSuchEec { index, .. }
            | PostSendError::InvalidAh { index, .. }
            | PostSendError::AhPdMismatch { index, .. }
            | PostSendError::AhPortMismatch { index, .. }
            | PostSendError::UdMessageTooLong { index, .. }
            | PostSendError::RawDatagramTooShort { index, .. }
            | PostSendError::RawDatagramTooLong { index, .. }
            | PostSendError::RawIpv6IbaNextHeader { index, .. } => Some(index),
        }
    }
}

/// `post_recv` failed; no WR of the list was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostRecvError {
    /// No QP has this number.
    #[error("no such QP {0}")]
    NoSuchQp(Qpn),
    /// The QP is in RESET.
    #[error("QP state {state} does not accept receive WRs")]
    InvalidState {
        /// The state.
        state: QpState,
    },
    /// The QP receives through an SRQ; post to the SRQ instead.
    #[error("QP {0} uses a shared receive queue")]
    UsesSrq(Qpn),
    /// XRC QPs have no receive queue: an XRC initiator receives nothing, an XRC target
    /// receives into the XRC SRQs of its domain.
    #[error("QP {qpn} is an {qp_type} QP, which has no receive queue")]
    NoReceiveQueue {
        /// The QP.
        qpn: Qpn,
        /// Its type.
        qp_type: QpType,
    },
    /// WR `index` does not fit the receive queue.
    #[error("WR {index}: the receive queue is full (max_recv_wr {max_recv_wr})")]
    QueueFull {
        /// Index of the WR in the list.
        index: usize,
        /// Queue size.
        max_recv_wr: u32,
    },
    /// WR `index` has more SGEs than the QP allows.
    #[error("WR {index}: {num_sge} SGEs exceed max_recv_sge {max}")]
    TooManySge {
        /// Index of the WR in the list.
        index: usize,
        /// SGEs in the WR.
        num_sge: usize,
        /// `max_recv_sge`.
        max: u32,
    },
}

impl PostRecvError {
    /// Index of the rejected WR, `None` when the whole list was refused.
    pub fn index(&self) -> Option<usize> {
        match *self {
            PostRecvError::QueueFull { index, .. } | PostRecvError::TooManySge { index, .. } => {
                Some(index)
            }
            PostRecvError::NoSuchQp(_)
            | PostRecvError::InvalidState { .. }
            | PostRecvError::UsesSrq(_)
            | PostRecvError::NoReceiveQueue { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_context() {
        let e = ModifyQpError::MissingAttributes {
            cur_state: QpState::Reset,
            next_state: QpState::Init,
            missing: QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS,
            required: QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
        };
        assert_eq!(
            e.to_string(),
            "IBV_QPS_RESET -> IBV_QPS_INIT needs attributes ACCESS_FLAGS | PKEY_INDEX \
             (required: ACCESS_FLAGS | PKEY_INDEX | PORT)"
        );
        let e = PostSendError::OpcodeNotSupported {
            index: 2,
            opcode: "IBV_WR_RDMA_READ",
            qp_type: QpType::Uc,
        };
        assert_eq!(
            e.to_string(),
            "WR 2: IBV_WR_RDMA_READ is not supported on UC QPs"
        );
        assert_eq!(e.index(), Some(2));
        assert_eq!(
            PostSendError::InvalidState {
                state: QpState::Init
            }
            .index(),
            None
        );
        let e = ModifyQpError::InvalidAddressVector {
            attr: QpAttrMask::AV,
            source: AhAttrError::GrhRequired { port: 1 },
        };
        assert_eq!(
            e.to_string(),
            "AV: port 1 is a RoCE port: the address vector needs a GRH"
        );
    }
}
