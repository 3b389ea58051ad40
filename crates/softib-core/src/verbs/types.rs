//! Verbs enumerations and flag sets, with the numeric values of libibverbs (`verbs.h`).
//!
//! Each enum offers `raw()` (the libibverbs value) and `from_raw()` (the reverse, `None` for a
//! value libibverbs does not define), so a C ABI layer can translate without tables of its own.

use bitflags::bitflags;
use core::fmt;

/// Path MTU (IBA 9.7.5.1 / `enum ibv_mtu`): the largest transport payload of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    /// 256 bytes (`IBV_MTU_256` = 1).
    Mtu256,
    /// 512 bytes (`IBV_MTU_512` = 2).
    Mtu512,
    /// 1024 bytes (`IBV_MTU_1024` = 3).
    Mtu1024,
    /// 2048 bytes (`IBV_MTU_2048` = 4).
    Mtu2048,
    /// 4096 bytes (`IBV_MTU_4096` = 5).
    Mtu4096,
}

impl Mtu {
    /// Every MTU, smallest first.
    pub const ALL: [Mtu; 5] = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ];

    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        match self {
            Mtu::Mtu256 => 256,
            Mtu::Mtu512 => 512,
            Mtu::Mtu1024 => 1024,
            Mtu::Mtu2048 => 2048,
            Mtu::Mtu4096 => 4096,
        }
    }

    /// The IBA / libibverbs encoding, 1..=5.
    pub const fn raw(self) -> u8 {
        match self {
            Mtu::Mtu256 => 1,
            Mtu::Mtu512 => 2,
            Mtu::Mtu1024 => 3,
            Mtu::Mtu2048 => 4,
            Mtu::Mtu4096 => 5,
        }
    }

    /// Decodes the IBA encoding.
    pub const fn from_raw(v: u8) -> Option<Mtu> {
        match v {
            1 => Some(Mtu::Mtu256),
            2 => Some(Mtu::Mtu512),
            3 => Some(Mtu::Mtu1024),
            4 => Some(Mtu::Mtu2048),
            5 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }

    /// The MTU of exactly `bytes` bytes.
    pub const fn from_bytes(bytes: u32) -> Option<Mtu> {
        match bytes {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }

    /// The largest IB MTU that fits a RoCE link of `netdev_mtu` bytes, the way Linux rxe picks its
    /// active MTU (netdev MTU minus 80 bytes of Ethernet/IP/UDP/BTH/ICRC overhead); `None` when
    /// not even 256 bytes fit.
    pub const fn for_roce_link(netdev_mtu: u32) -> Option<Mtu> {
        let room = netdev_mtu.saturating_sub(80);
        if room >= 4096 {
            Some(Mtu::Mtu4096)
        } else if room >= 2048 {
            Some(Mtu::Mtu2048)
        } else if room >= 1024 {
            Some(Mtu::Mtu1024)
        } else if room >= 512 {
            Some(Mtu::Mtu512)
        } else if room >= 256 {
            Some(Mtu::Mtu256)
        } else {
            None
        }
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

bitflags! {
    /// Memory and QP access rights (`enum ibv_access_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// The HCA may write local memory (receives, RDMA READ responses, atomic results).
        const LOCAL_WRITE = 1;
        /// Remote peers may RDMA WRITE.
        const REMOTE_WRITE = 1 << 1;
        /// Remote peers may RDMA READ.
        const REMOTE_READ = 1 << 2;
        /// Remote peers may perform atomics.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound to the region.
        const MW_BIND = 1 << 4;
    }
}

impl AccessFlags {
    /// The remote rights.
    pub const REMOTE: AccessFlags = AccessFlags::REMOTE_WRITE
        .union(AccessFlags::REMOTE_READ)
        .union(AccessFlags::REMOTE_ATOMIC);
}

bitflags! {
    /// Per-WR send flags (`enum ibv_send_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READ / atomic WRs to complete before starting this one.
        const FENCE = 1;
        /// Generate a completion even if the QP was created without `sq_sig_all`.
        const SIGNALED = 1 << 1;
        /// Set the Solicited Event bit of the last packet.
        const SOLICITED = 1 << 2;
        /// The payload is carried in the WR itself (see `SendWr::inline_data`).
        const INLINE = 1 << 3;
    }
}

/// Transport service of a QP (`enum ib_qp_type` / `enum ibv_qp_type` values).
///
/// softib implements RC, UC, UD, the two raw datagram services, both halves of XRC and RD
/// (whose data path is being built, docs/rd.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpType {
    /// Reliable Connected (`IBV_QPT_RC` = 2).
    Rc,
    /// Unreliable Connected (`IBV_QPT_UC` = 3).
    Uc,
    /// Unreliable Datagram (`IBV_QPT_UD` = 4).
    Ud,
    /// Raw IPv6 datagram (`IB_QPT_RAW_IPV6` = 5 in the kernel; libibverbs has no user value).
    RawIpv6,
    /// Raw EtherType datagram (`IB_QPT_RAW_ETHERTYPE` = 6 in the kernel).
    RawEthertype,
    /// XRC initiator: the send half of an XRC connection (`IBV_QPT_XRC_SEND` = 9). It has a
    /// send queue and no receive queue; each send WR names the XRC SRQ of the target node
    /// that receives it.
    XrcSend,
    /// XRC target: the receive half of an XRC connection (`IBV_QPT_XRC_RECV` = 10). It
    /// belongs to an XRC domain, has neither queue nor CQ, and places each request into the
    /// XRC SRQ its XRCETH names.
    XrcRecv,
    /// Reliable Datagram: a QP of a reliable datagram domain that sends through, and receives
    /// from, the EE contexts of its domain. Linux has no RD QP type; 7 is the unused slot of
    /// `enum ib_qp_type` between the raw types and `IB_QPT_RAW_PACKET`.
    Rd,
}

impl QpType {
    /// Every QP type softib implements.
    pub const ALL: [QpType; 8] = [
        QpType::Rc,
        QpType::Uc,
        QpType::Ud,
        QpType::RawIpv6,
        QpType::RawEthertype,
        QpType::XrcSend,
        QpType::XrcRecv,
        QpType::Rd,
    ];

    /// Kernel `enum ib_qp_type` value (equal to libibverbs' for RC, UC and UD).
    pub const fn raw(self) -> u32 {
        match self {
            QpType::Rc => 2,
            QpType::Uc => 3,
            QpType::Ud => 4,
            QpType::RawIpv6 => 5,
            QpType::RawEthertype => 6,
            QpType::XrcSend => 9,
            QpType::XrcRecv => 10,
            QpType::Rd => 7,
        }
    }

    /// Decodes a kernel `enum ib_qp_type` value.
    pub const fn from_raw(v: u32) -> Option<QpType> {
        match v {
            2 => Some(QpType::Rc),
            3 => Some(QpType::Uc),
            4 => Some(QpType::Ud),
            5 => Some(QpType::RawIpv6),
            6 => Some(QpType::RawEthertype),
            7 => Some(QpType::Rd),
            9 => Some(QpType::XrcSend),
            10 => Some(QpType::XrcRecv),
            _ => None,
        }
    }

    /// Connected services (a QP talks to exactly one remote QP).
    pub const fn is_connected(self) -> bool {
        matches!(
            self,
            QpType::Rc | QpType::Uc | QpType::XrcSend | QpType::XrcRecv
        )
    }

    /// The reliable connected services, RC and the two halves of XRC: one requester /
    /// completer / responder engine (IBA 9.7) serves them all.
    pub const fn is_reliable_connected(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }

    /// The halves of XRC.
    pub const fn is_xrc(self) -> bool {
        matches!(self, QpType::XrcSend | QpType::XrcRecv)
    }

    /// Raw datagram services.
    pub const fn is_raw(self) -> bool {
        matches!(self, QpType::RawIpv6 | QpType::RawEthertype)
    }

    /// Short name: "RC", "UC", "UD", "RAW_IPV6", "RAW_ETHERTYPE", "XRC_SEND", "XRC_RECV", "RD".
    pub const fn name(self) -> &'static str {
        match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
            QpType::RawIpv6 => "RAW_IPV6",
            QpType::RawEthertype => "RAW_ETHERTYPE",
            QpType::XrcSend => "XRC_SEND",
            QpType::XrcRecv => "XRC_RECV",
            QpType::Rd => "RD",
        }
    }
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// QP state (IBA 10.3.1, `enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum QpState {
    /// Reset (`IBV_QPS_RESET` = 0).
    #[default]
    Reset,
    /// Initialized (`IBV_QPS_INIT` = 1).
    Init,
    /// Ready To Receive (`IBV_QPS_RTR` = 2).
    Rtr,
    /// Ready To Send (`IBV_QPS_RTS` = 3).
    Rts,
    /// Send Queue Drain (`IBV_QPS_SQD` = 4).
    Sqd,
    /// Send Queue Error (`IBV_QPS_SQE` = 5).
    Sqe,
    /// Error (`IBV_QPS_ERR` = 6).
    Err,
}

impl QpState {
    /// Every state, in libibverbs order.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];

    /// libibverbs value.
    pub const fn raw(self) -> u32 {
        self as u32
    }

    /// Decodes a libibverbs value.
    pub const fn from_raw(v: u32) -> Option<QpState> {
        match v {
            0 => Some(QpState::Reset),
            1 => Some(QpState::Init),
            2 => Some(QpState::Rtr),
            3 => Some(QpState::Rts),
            4 => Some(QpState::Sqd),
            5 => Some(QpState::Sqe),
            6 => Some(QpState::Err),
            _ => None,
        }
    }

    /// libibverbs name, e.g. "IBV_QPS_RTS".
    pub const fn name(self) -> &'static str {
        match self {
            QpState::Reset => "IBV_QPS_RESET",
            QpState::Init => "IBV_QPS_INIT",
            QpState::Rtr => "IBV_QPS_RTR",
            QpState::Rts => "IBV_QPS_RTS",
            QpState::Sqd => "IBV_QPS_SQD",
            QpState::Sqe => "IBV_QPS_SQE",
            QpState::Err => "IBV_QPS_ERR",
        }
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Automatic path migration state (`enum ibv_mig_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PathMigState {
    /// `IBV_MIG_MIGRATED` = 0.
    #[default]
    Migrated,
    /// `IBV_MIG_REARM` = 1.
    Rearm,
    /// `IBV_MIG_ARMED` = 2.
    Armed,
}

impl PathMigState {
    /// libibverbs value.
    pub const fn raw(self) -> u32 {
        self as u32
    }

    /// Decodes a libibverbs value.
    pub const fn from_raw(v: u32) -> Option<PathMigState> {
        match v {
            0 => Some(PathMigState::Migrated),
            1 => Some(PathMigState::Rearm),
            2 => Some(PathMigState::Armed),
            _ => None,
        }
    }
}

macro_rules! wc_status {
    ($( $(#[$m:meta])* $variant:ident = $value:literal, $name:literal; )*) => {
        /// Work completion status (`enum ibv_wc_status`), with the libibverbs numbering.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum WcStatus {
            $( $(#[$m])* $variant = $value, )*
        }

        impl WcStatus {
            /// Every status, in numeric order.
            pub const ALL: &'static [WcStatus] = &[$(WcStatus::$variant),*];

            /// libibverbs value.
            pub const fn raw(self) -> u32 {
                self as u32
            }

            /// Decodes a libibverbs value.
            pub const fn from_raw(v: u32) -> Option<WcStatus> {
                match v {
                    $( $value => Some(WcStatus::$variant), )*
                    _ => None,
                }
            }

            /// The libibverbs constant name, e.g. "IBV_WC_LOC_PROT_ERR".
            pub const fn name(self) -> &'static str {
                match self {
                    $( WcStatus::$variant => $name, )*
                }
            }
        }
    };
}

wc_status! {
    /// The operation completed successfully.
    #[default]
    Success = 0, "IBV_WC_SUCCESS";
    /// Local length error: the message exceeds the receive buffer or the port's max message.
    LocLenErr = 1, "IBV_WC_LOC_LEN_ERR";
    /// Local QP operation error: an internal QP consistency error.
    LocQpOpErr = 2, "IBV_WC_LOC_QP_OP_ERR";
    /// Local EE context operation error (RD only).
    LocEecOpErr = 3, "IBV_WC_LOC_EEC_OP_ERR";
    /// Local protection error: bad L_Key, PD mismatch or missing local access right.
    LocProtErr = 4, "IBV_WC_LOC_PROT_ERR";
    /// The WR was flushed because the QP is in the Error state (or its SQ in SQE).
    WrFlushErr = 5, "IBV_WC_WR_FLUSH_ERR";
    /// Memory window bind error.
    MwBindErr = 6, "IBV_WC_MW_BIND_ERR";
    /// Bad response: an unexpected transport opcode in a response.
    BadRespErr = 7, "IBV_WC_BAD_RESP_ERR";
    /// Local access error: protection error on data written by an RDMA READ response or atomic.
    LocAccessErr = 8, "IBV_WC_LOC_ACCESS_ERR";
    /// Remote invalid request: the responder NAKed with Invalid Request.
    RemInvReqErr = 9, "IBV_WC_REM_INV_REQ_ERR";
    /// Remote access error: the responder NAKed with Remote Access Error.
    RemAccessErr = 10, "IBV_WC_REM_ACCESS_ERR";
    /// Remote operational error: the responder NAKed with Remote Operational Error.
    RemOpErr = 11, "IBV_WC_REM_OP_ERR";
    /// Transport retry counter exceeded.
    RetryExcErr = 12, "IBV_WC_RETRY_EXC_ERR";
    /// RNR retry counter exceeded.
    RnrRetryExcErr = 13, "IBV_WC_RNR_RETRY_EXC_ERR";
    /// Local RDD violation (RD only).
    LocRddViolErr = 14, "IBV_WC_LOC_RDD_VIOL_ERR";
    /// Remote invalid RD request (RD only).
    RemInvRdReqErr = 15, "IBV_WC_REM_INV_RD_REQ_ERR";
    /// Remote aborted error.
    RemAbortErr = 16, "IBV_WC_REM_ABORT_ERR";
    /// Invalid EE context number (RD only).
    InvEecnErr = 17, "IBV_WC_INV_EECN_ERR";
    /// Invalid EE context state (RD only).
    InvEecStateErr = 18, "IBV_WC_INV_EEC_STATE_ERR";
    /// Fatal error.
    FatalErr = 19, "IBV_WC_FATAL_ERR";
    /// Response timeout error.
    RespTimeoutErr = 20, "IBV_WC_RESP_TIMEOUT_ERR";
    /// General error.
    GeneralErr = 21, "IBV_WC_GENERAL_ERR";
    /// Tag matching error.
    TmErr = 22, "IBV_WC_TM_ERR";
    /// Tag matching rendezvous incomplete.
    TmRndvIncomplete = 23, "IBV_WC_TM_RNDV_INCOMPLETE";
}

impl WcStatus {
    /// True for [`WcStatus::Success`].
    pub const fn is_success(self) -> bool {
        matches!(self, WcStatus::Success)
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Operation a work completion reports (`enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcOpcode {
    /// `IBV_WC_SEND` = 0 (SEND, SEND with immediate, SEND with invalidate).
    #[default]
    Send,
    /// `IBV_WC_RDMA_WRITE` = 1.
    RdmaWrite,
    /// `IBV_WC_RDMA_READ` = 2.
    RdmaRead,
    /// `IBV_WC_COMP_SWAP` = 3.
    CompSwap,
    /// `IBV_WC_FETCH_ADD` = 4.
    FetchAdd,
    /// `IBV_WC_BIND_MW` = 5.
    BindMw,
    /// `IBV_WC_LOCAL_INV` = 6.
    LocalInv,
    /// `IBV_WC_RECV` = 128: a receive WR consumed by a SEND.
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM` = 129: a receive WR consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm,
}

impl WcOpcode {
    /// libibverbs value.
    pub const fn raw(self) -> u32 {
        match self {
            WcOpcode::Send => 0,
            WcOpcode::RdmaWrite => 1,
            WcOpcode::RdmaRead => 2,
            WcOpcode::CompSwap => 3,
            WcOpcode::FetchAdd => 4,
            WcOpcode::BindMw => 5,
            WcOpcode::LocalInv => 6,
            WcOpcode::Recv => 128,
            WcOpcode::RecvRdmaWithImm => 129,
        }
    }

    /// Decodes a libibverbs value.
    pub const fn from_raw(v: u32) -> Option<WcOpcode> {
        match v {
            0 => Some(WcOpcode::Send),
            1 => Some(WcOpcode::RdmaWrite),
            2 => Some(WcOpcode::RdmaRead),
            3 => Some(WcOpcode::CompSwap),
            4 => Some(WcOpcode::FetchAdd),
            5 => Some(WcOpcode::BindMw),
            6 => Some(WcOpcode::LocalInv),
            128 => Some(WcOpcode::Recv),
            129 => Some(WcOpcode::RecvRdmaWithImm),
            _ => None,
        }
    }

    /// True for completions of receive WRs (libibverbs: `opcode & IBV_WC_RECV`).
    pub const fn is_recv(self) -> bool {
        self.raw() & 0x80 != 0
    }
}

bitflags! {
    /// Work completion flags (`enum ibv_wc_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u32 {
        /// A GRH is present (UD: the first 40 bytes of the receive buffer hold it).
        const GRH = 1;
        /// `imm_data` is valid.
        const WITH_IMM = 1 << 1;
        /// The IP checksum of a raw/UD IP packet was verified.
        const IP_CSUM_OK = 1 << 2;
        /// `invalidated_rkey` is valid.
        const WITH_INV = 1 << 3;
    }
}

/// Atomic operation support (`enum ibv_atomic_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AtomicCap {
    /// No atomics (`IBV_ATOMIC_NONE`).
    None,
    /// Atomic among QPs of this HCA only (`IBV_ATOMIC_HCA`).
    #[default]
    Hca,
    /// Atomic with respect to every agent, including the host CPU (`IBV_ATOMIC_GLOB`).
    Global,
}

/// Logical port state (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PortState {
    /// `IBV_PORT_DOWN` = 1.
    Down,
    /// `IBV_PORT_INIT` = 2.
    Init,
    /// `IBV_PORT_ARMED` = 3.
    Armed,
    /// `IBV_PORT_ACTIVE` = 4.
    #[default]
    Active,
}

impl PortState {
    /// libibverbs value.
    pub const fn raw(self) -> u32 {
        match self {
            PortState::Down => 1,
            PortState::Init => 2,
            PortState::Armed => 3,
            PortState::Active => 4,
        }
    }
}

/// Link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LinkLayer {
    /// Native InfiniBand: LRH-addressed by LID, GRH optional (`IBV_LINK_LAYER_INFINIBAND`).
    InfiniBand,
    /// RoCE: every packet carries a GRH / IP header, so every address vector needs a GRH
    /// (`IBV_LINK_LAYER_ETHERNET`).
    #[default]
    Ethernet,
}

/// The kind of a GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GidType {
    /// Native IB GID.
    Ib,
    /// RoCE v1 (GRH over Ethernet).
    RoceV1,
    /// RoCE v2 (IPv4/IPv6 + UDP 4791).
    #[default]
    RoceV2,
}

/// A 128-bit global identifier (`union ibv_gid`), big-endian bytes as on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The link-local subnet prefix fe80::/64 (IBA 4.1.1 default GID prefix).
    pub const LINK_LOCAL_PREFIX: u64 = 0xfe80_0000_0000_0000;

    /// Builds a GID from a subnet prefix and an interface identifier (usually a port GUID).
    pub const fn new(subnet_prefix: u64, interface_id: u64) -> Gid {
        let p = subnet_prefix.to_be_bytes();
        let i = interface_id.to_be_bytes();
        Gid([
            p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], i[0], i[1], i[2], i[3], i[4], i[5],
            i[6], i[7],
        ])
    }

    /// The IPv4-mapped IPv6 form `::ffff:a.b.c.d` RoCEv2 uses for IPv4 addresses.
    pub const fn from_ipv4(ip: [u8; 4]) -> Gid {
        Gid([
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[0], ip[1], ip[2], ip[3],
        ])
    }

    /// The upper 64 bits.
    pub fn subnet_prefix(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(b)
    }

    /// The lower 64 bits.
    pub fn interface_id(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[8..]);
        u64::from_be_bytes(b)
    }

    /// The IPv4 address if this is an IPv4-mapped GID.
    pub fn to_ipv4(&self) -> Option<[u8; 4]> {
        if self.0[..10].iter().all(|&b| b == 0) && self.0[10] == 0xff && self.0[11] == 0xff {
            Some([self.0[12], self.0[13], self.0[14], self.0[15]])
        } else {
            None
        }
    }

    /// True for the all-zero GID (an empty GID table slot).
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl fmt::Display for Gid {
    /// IPv6 notation without zero compression: eight groups of four hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks_exact(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_encoding() {
        for (i, m) in Mtu::ALL.iter().enumerate() {
            assert_eq!(m.raw() as usize, i + 1);
            assert_eq!(Mtu::from_raw(m.raw()), Some(*m));
            assert_eq!(Mtu::from_bytes(m.bytes()), Some(*m));
            assert_eq!(m.bytes(), 256 << i);
        }
        assert_eq!(Mtu::from_raw(0), None);
        assert_eq!(Mtu::from_raw(6), None);
        assert_eq!(Mtu::from_bytes(1500), None);
        assert!(Mtu::Mtu256 < Mtu::Mtu4096);
    }

    #[test]
    fn mtu_for_roce_link_matches_rxe() {
        assert_eq!(Mtu::for_roce_link(1500), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::for_roce_link(9000), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::for_roce_link(4096 + 80), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::for_roce_link(4096 + 79), Some(Mtu::Mtu2048));
        assert_eq!(Mtu::for_roce_link(300), None);
    }

    #[test]
    fn flag_values_match_libibverbs() {
        assert_eq!(AccessFlags::LOCAL_WRITE.bits(), 1);
        assert_eq!(AccessFlags::REMOTE_WRITE.bits(), 2);
        assert_eq!(AccessFlags::REMOTE_READ.bits(), 4);
        assert_eq!(AccessFlags::REMOTE_ATOMIC.bits(), 8);
        assert_eq!(AccessFlags::MW_BIND.bits(), 16);
        assert_eq!(SendFlags::FENCE.bits(), 1);
        assert_eq!(SendFlags::SIGNALED.bits(), 2);
        assert_eq!(SendFlags::SOLICITED.bits(), 4);
        assert_eq!(SendFlags::INLINE.bits(), 8);
        assert_eq!(WcFlags::GRH.bits(), 1);
        assert_eq!(WcFlags::WITH_IMM.bits(), 2);
        assert_eq!(WcFlags::IP_CSUM_OK.bits(), 4);
        assert_eq!(WcFlags::WITH_INV.bits(), 8);
    }

    #[test]
    fn wc_status_values_and_names() {
        assert_eq!(WcStatus::ALL.len(), 24);
        for (i, s) in WcStatus::ALL.iter().enumerate() {
            assert_eq!(s.raw() as usize, i);
            assert_eq!(WcStatus::from_raw(i as u32), Some(*s));
            assert!(s.name().starts_with("IBV_WC_"));
        }
        assert_eq!(WcStatus::LocProtErr.raw(), 4);
        assert_eq!(WcStatus::LocProtErr.name(), "IBV_WC_LOC_PROT_ERR");
        assert_eq!(WcStatus::WrFlushErr.raw(), 5);
        assert_eq!(WcStatus::WrFlushErr.name(), "IBV_WC_WR_FLUSH_ERR");
        assert_eq!(WcStatus::RnrRetryExcErr.raw(), 13);
        assert_eq!(WcStatus::RnrRetryExcErr.name(), "IBV_WC_RNR_RETRY_EXC_ERR");
        assert_eq!(WcStatus::from_raw(24), None);
    }

    #[test]
    fn wc_opcode_values() {
        for v in 0..=255u32 {
            if let Some(op) = WcOpcode::from_raw(v) {
                assert_eq!(op.raw(), v);
                assert_eq!(op.is_recv(), v >= 128);
            }
        }
        assert_eq!(WcOpcode::Recv.raw(), 128);
        assert_eq!(WcOpcode::RecvRdmaWithImm.raw(), 129);
        assert_eq!(WcOpcode::from_raw(7), None);
    }

    #[test]
    fn enum_values() {
        for (i, s) in QpState::ALL.iter().enumerate() {
            assert_eq!(s.raw() as usize, i);
            assert_eq!(QpState::from_raw(i as u32), Some(*s));
        }
        assert_eq!(QpState::from_raw(7), None);
        for t in QpType::ALL {
            assert_eq!(QpType::from_raw(t.raw()), Some(t));
        }
        assert_eq!(QpType::Rc.raw(), 2);
        assert_eq!(QpType::Ud.raw(), 4);
        assert_eq!(PathMigState::from_raw(2), Some(PathMigState::Armed));
        assert_eq!(PortState::Active.raw(), 4);
    }

    #[test]
    fn gid_forms() {
        let g = Gid::new(Gid::LINK_LOCAL_PREFIX, 0x0011_2233_4455_6677);
        assert_eq!(g.subnet_prefix(), 0xfe80_0000_0000_0000);
        assert_eq!(g.interface_id(), 0x0011_2233_4455_6677);
        assert_eq!(g.to_string(), "fe80:0000:0000:0000:0011:2233:4455:6677");
        assert_eq!(g.to_ipv4(), None);
        let v4 = Gid::from_ipv4([10, 0, 0, 7]);
        assert_eq!(v4.to_ipv4(), Some([10, 0, 0, 7]));
        assert!(Gid::default().is_zero());
        assert!(!v4.is_zero());
    }
}
