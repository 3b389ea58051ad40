//! CM — the Communication Manager messages (IBA chapter 12), carried in the data of a MAD
//! ([`crate::mad`], MgmtClass 0x07, ClassVersion 2, method Send) on QP1: REQ, MRA, REJ, REP,
//! RTU, DREQ, DREP, LAP, APR, SIDR_REQ and SIDR_REP.
//!
//! Every message is described once, as data: a table of its fields, each a byte offset into
//! the 232 bytes of MAD data, a bit offset from the most significant bit of that byte and a
//! width in bits (the IBA's `Byte[Bit]` notation of Tables 106-120), and the byte fields
//! (GIDs, additional information, private data). The structs, `parse`, `emit` and the
//! [`Message::FIELDS`] table all come from that description.
//!
//! Sources of the layouts (chapter 12 is not among the project's seeds): Linux
//! `include/rdma/ibta_vol1_c12.h`, which transcribes the IBA tables field by field, and
//! Wireshark's `packet-infiniband.c` (`parse_COM_MGT`), whose decoding the tests check with
//! tshark. `docs/cm.md` lists them per message.
//!
//! `parse` reads a message from the 232 data bytes and ignores reserved bits; `emit` writes
//! all 232 bytes, reserved bits zero, and the low `width` bits of each value (a value wider
//! than its field is cut, as a register would).

use crate::error::{Error, Field, Header, Result};
use crate::mad::{self, MadHdr};
use crate::psn::{Eecn, Psn, Qpn};

/// Length of the CM message: the MAD data after the common header.
pub const LEN: usize = mad::DATA_LEN;

/// Where a field sits in the MAD data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// Byte offset from the start of the MAD data.
    pub byte: u16,
    /// Bit offset from the most significant bit of that byte.
    pub bit: u8,
    /// Width in bits (at most 64).
    pub width: u8,
}

/// Reads the field at `loc` (big-endian, most significant bit first). `b` holds [`LEN`]
/// bytes.
fn get_bits(b: &[u8], loc: Loc) -> u64 {
    let nbytes = (loc.bit as usize + loc.width as usize).div_ceil(8);
    let start = loc.byte as usize;
    let acc = b[start..start + nbytes]
        .iter()
        .fold(0u128, |a, &x| (a << 8) | u128::from(x));
    let shift = nbytes * 8 - loc.bit as usize - loc.width as usize;
    ((acc >> shift) & low_mask(loc.width)) as u64
}

/// Writes the low `loc.width` bits of `v` at `loc`, leaving the other bits of the bytes.
fn set_bits(b: &mut [u8], loc: Loc, v: u64) {
    let nbytes = (loc.bit as usize + loc.width as usize).div_ceil(8);
    let start = loc.byte as usize;
    let bytes = &mut b[start..start + nbytes];
    let acc = bytes.iter().fold(0u128, |a, &x| (a << 8) | u128::from(x));
    let shift = nbytes * 8 - loc.bit as usize - loc.width as usize;
    let mask = low_mask(loc.width) << shift;
    let acc = (acc & !mask) | ((u128::from(v) << shift) & mask);
    for (i, out) in bytes.iter_mut().enumerate() {
        *out = (acc >> (8 * (nbytes - 1 - i))) as u8;
    }
}

fn low_mask(width: u8) -> u128 {
    (1u128 << width) - 1
}

/// A value a CM bit field holds.
pub trait CmField: Copy {
    /// The value of the field's bits.
    fn from_bits(v: u64) -> Self;
    /// The field's bits.
    fn to_bits(self) -> u64;
}

macro_rules! int_cm_field {
    ($($t:ty),+) => {$(
        impl CmField for $t {
            fn from_bits(v: u64) -> $t {
                v as $t
            }
            fn to_bits(self) -> u64 {
                self as u64
            }
        }
    )+};
}
int_cm_field!(u8, u16, u32, u64);

impl CmField for bool {
    fn from_bits(v: u64) -> bool {
        v != 0
    }
    fn to_bits(self) -> u64 {
        u64::from(self)
    }
}

macro_rules! u24_cm_field {
    ($($t:ty),+) => {$(
        impl CmField for $t {
            fn from_bits(v: u64) -> $t {
                <$t>::new(v as u32)
            }
            fn to_bits(self) -> u64 {
                u64::from(self.value())
            }
        }
    )+};
}
u24_cm_field!(Qpn, Psn, Eecn);

/// What every CM message offers.
pub trait Message: Sized {
    /// Its AttributeID in the MAD header.
    const ATTR_ID: AttrId;
    /// Its bit fields, by name: the layout as data (tests, docs).
    const FIELDS: &'static [(&'static str, Loc)];
    /// Its byte fields, by name: (name, byte offset, length).
    const BYTE_FIELDS: &'static [(&'static str, usize, usize)];
    /// Reads the message from the MAD data.
    fn parse(data: &[u8]) -> Result<Self>;
    /// Writes the message to the MAD data ([`LEN`] bytes, reserved bits zero).
    fn emit(&self, data: &mut [u8]) -> Result<usize>;
}

fn check_len(data: &[u8]) -> Result<()> {
    if data.len() < LEN {
        return Err(Error::truncated(Header::Cm, LEN, data.len()));
    }
    Ok(())
}

/// Declares a CM message from its layout table.
macro_rules! cm_message {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($attr:expr) {
            $(
                $(#[$fmeta:meta])*
                pub $field:ident: $ty:ty = ($byte:expr, $bit:expr, $width:expr),
            )*
        }
        bytes {
            $(
                $(#[$bmeta:meta])*
                pub $bfield:ident: [u8; $blen:expr] = $bbyte:expr,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $(
                $(#[$fmeta])*
                pub $field: $ty,
            )*
            $(
                $(#[$bmeta])*
                pub $bfield: [u8; $blen],
            )*
        }

        impl Default for $name {
            fn default() -> $name {
                $name {
                    $($field: <$ty as CmField>::from_bits(0),)*
                    $($bfield: [0u8; $blen],)*
                }
            }
        }

        impl Message for $name {
            const ATTR_ID: AttrId = $attr;
            const FIELDS: &'static [(&'static str, Loc)] = &[
                $((stringify!($field), Loc { byte: $byte, bit: $bit, width: $width }),)*
            ];
            const BYTE_FIELDS: &'static [(&'static str, usize, usize)] = &[
                $((stringify!($bfield), $bbyte, $blen),)*
            ];

            fn parse(data: &[u8]) -> Result<$name> {
                check_len(data)?;
                Ok($name {
                    $($field: <$ty as CmField>::from_bits(
                        get_bits(data, Loc { byte: $byte, bit: $bit, width: $width })
                    ),)*
                    $($bfield: {
                        let mut a = [0u8; $blen];
                        a.copy_from_slice(&data[$bbyte..$bbyte + $blen]);
                        a
                    },)*
                })
            }

            fn emit(&self, data: &mut [u8]) -> Result<usize> {
                check_len(data)?;
                data[..LEN].fill(0);
                $(set_bits(
                    data,
                    Loc { byte: $byte, bit: $bit, width: $width },
                    CmField::to_bits(self.$field),
                );)*
                $(data[$bbyte..$bbyte + $blen].copy_from_slice(&self.$bfield);)*
                Ok(LEN)
            }
        }
    };
}

/// The CM's attributes (AttributeID of the MAD header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum AttrId {
    /// ClassPortInfo (Get/GetResp; softib answers it, it sends none).
    ClassPortInfo = 0x0001,
    /// ConnectRequest.
    Req = 0x0010,
    /// MsgRcptAck: more time is needed.
    Mra = 0x0011,
    /// ConnectReject.
    Rej = 0x0012,
    /// ConnectReply.
    Rep = 0x0013,
    /// ReadyToUse.
    Rtu = 0x0014,
    /// DisconnectRequest.
    Dreq = 0x0015,
    /// DisconnectReply.
    Drep = 0x0016,
    /// ServiceIDResReq.
    SidrReq = 0x0017,
    /// ServiceIDResReqResp.
    SidrRep = 0x0018,
    /// LoadAlternatePath.
    Lap = 0x0019,
    /// AlternatePathResponse.
    Apr = 0x001A,
}

impl AttrId {
    /// The attribute of an AttributeID, if the CM has it.
    pub fn from_u16(v: u16) -> Option<AttrId> {
        Some(match v {
            0x0001 => AttrId::ClassPortInfo,
            0x0010 => AttrId::Req,
            0x0011 => AttrId::Mra,
            0x0012 => AttrId::Rej,
            0x0013 => AttrId::Rep,
            0x0014 => AttrId::Rtu,
            0x0015 => AttrId::Dreq,
            0x0016 => AttrId::Drep,
            0x0017 => AttrId::SidrReq,
            0x0018 => AttrId::SidrRep,
            0x0019 => AttrId::Lap,
            0x001A => AttrId::Apr,
            _ => return None,
        })
    }
}

/// Transport Service Type of a REQ (2 bits).
pub mod service_type {
    /// Reliable Connection.
    pub const RC: u8 = 0;
    /// Unreliable Connection.
    pub const UC: u8 = 1;
    /// Reliable Datagram.
    pub const RD: u8 = 2;
    /// Extended: see the REQ's ExtendedTransportType (XRC).
    pub const EXTENDED: u8 = 3;
    /// ExtendedTransportType of an XRC REQ.
    pub const EXT_XRC: u8 = 1;
}

/// Which message a REJ or MRA is about (MessageRejected / MessageMRAed, 2 bits).
pub mod msg_code {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Another message (LAP).
    pub const OTHER: u8 = 2;
}

/// REJ reasons (IBA Table 109).
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No EE context available.
    pub const NO_EEC: u16 = 2;
    /// No resources available.
    pub const NO_RESOURCES: u16 = 3;
    /// A response did not come in time.
    pub const TIMEOUT: u16 = 4;
    /// The request is not supported.
    pub const UNSUPPORTED_REQ: u16 = 5;
    /// The communication ID is not valid.
    pub const INVALID_COMM_ID: u16 = 6;
    /// The communication instance is not valid.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// No listener for the Service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// The transport service type is not supported.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// A stale connection: the QP is still connected as far as the other side knows.
    pub const STALE_CONN: u16 = 10;
    /// The RD channel does not exist.
    pub const RDC_NOT_EXIST: u16 = 11;
    /// The primary remote port GID is not this port's (ARI: the GID to use).
    pub const INVALID_GID: u16 = 12;
    /// The primary remote port LID is not valid.
    pub const INVALID_LID: u16 = 13;
    /// The primary SL is not valid.
    pub const INVALID_SL: u16 = 14;
    /// The primary traffic class is not valid.
    pub const INVALID_TRAFFIC_CLASS: u16 = 15;
    /// The primary hop limit is not valid.
    pub const INVALID_HOP_LIMIT: u16 = 16;
    /// The primary packet rate is not valid.
    pub const INVALID_PACKET_RATE: u16 = 17;
    /// The alternate remote port GID is not valid.
    pub const INVALID_ALT_GID: u16 = 18;
    /// The alternate remote port LID is not valid.
    pub const INVALID_ALT_LID: u16 = 19;
    /// The alternate SL is not valid.
    pub const INVALID_ALT_SL: u16 = 20;
    /// The alternate traffic class is not valid.
    pub const INVALID_ALT_TRAFFIC_CLASS: u16 = 21;
    /// The alternate hop limit is not valid.
    pub const INVALID_ALT_HOP_LIMIT: u16 = 22;
    /// The alternate packet rate is not valid.
    pub const INVALID_ALT_PACKET_RATE: u16 = 23;
    /// The port's CM is elsewhere (redirect).
    pub const PORT_CM_REDIRECT: u16 = 24;
    /// Use another port (redirect).
    pub const PORT_REDIRECT: u16 = 25;
    /// The path MTU is not supported.
    pub const INVALID_MTU: u16 = 26;
    /// Not enough responder resources (RDMA READ / atomic depth).
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// The consumer rejected the connection (rdma_reject).
    pub const CONSUMER_DEFINED: u16 = 28;
    /// The RNR retry count is not valid.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// The local communication ID is already in use with this peer.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// The class version is not supported.
    pub const INVALID_CLASS_VERSION: u16 = 31;
    /// The primary flow label is not valid.
    pub const INVALID_FLOW_LABEL: u16 = 32;
    /// The alternate flow label is not valid.
    pub const INVALID_ALT_FLOW_LABEL: u16 = 33;
    /// A vendor option is not supported (IBA comment 9434).
    pub const VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;
}

/// SIDR_REP status (IBA Table 121).
pub mod sidr_status {
    /// The QP and Q_Key are valid.
    pub const SUCCESS: u8 = 0;
    /// The Service ID is not supported.
    pub const UNSUPPORTED: u8 = 1;
    /// The request was rejected.
    pub const REJECT: u8 = 2;
    /// No QP is available.
    pub const NO_QP: u8 = 3;
    /// Use another CM (redirect).
    pub const REDIRECT: u8 = 4;
    /// The class version is not supported.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

cm_message! {
    /// REQ — ConnectRequest (IBA Table 106).
    pub struct Req(AttrId::Req) {
        /// Local Communication ID: the sender's handle for this connection.
        pub local_comm_id: u32 = (0, 0, 32),
        /// Service ID: what the sender connects to (rdma_cm: port space and port).
        pub service_id: u64 = (8, 0, 64),
        /// Local CA GUID.
        pub local_ca_guid: u64 = (16, 0, 64),
        /// Local Q_Key (RD only).
        pub local_qkey: u32 = (28, 0, 32),
        /// Local QPN.
        pub local_qpn: Qpn = (32, 0, 24),
        /// Responder Resources: RDMA READ / atomic requests the sender accepts at once.
        pub responder_resources: u8 = (35, 0, 8),
        /// Local EECN (RD only).
        pub local_eecn: Eecn = (36, 0, 24),
        /// Initiator Depth: RDMA READ / atomic requests the sender issues at once.
        pub initiator_depth: u8 = (39, 0, 8),
        /// Remote EECN (RD only).
        pub remote_eecn: Eecn = (40, 0, 24),
        /// Remote CM Response Timeout: 4.096 us * 2^value for the passive side's answer.
        pub remote_cm_response_timeout: u8 = (43, 0, 5),
        /// Transport Service Type ([`service_type`]).
        pub transport_service_type: u8 = (43, 5, 2),
        /// End-to-End Flow Control.
        pub end_to_end_flow_control: bool = (43, 7, 1),
        /// Starting PSN of the sender's send queue.
        pub starting_psn: Psn = (44, 0, 24),
        /// Local CM Response Timeout.
        pub local_cm_response_timeout: u8 = (47, 0, 5),
        /// Retry Count of the transport.
        pub retry_count: u8 = (47, 5, 3),
        /// Partition Key.
        pub partition_key: u16 = (48, 0, 16),
        /// Path Packet Payload MTU (1: 256 ... 5: 4096).
        pub path_mtu: u8 = (50, 0, 4),
        /// RDC Exists (RD only).
        pub rdc_exists: bool = (50, 4, 1),
        /// RNR Retry Count.
        pub rnr_retry_count: u8 = (50, 5, 3),
        /// Max CM Retries.
        pub max_cm_retries: u8 = (51, 0, 4),
        /// SRQ: the sender's QP takes receives from an SRQ.
        pub srq: bool = (51, 4, 1),
        /// Extended Transport Type ([`service_type::EXT_XRC`]).
        pub extended_transport_type: u8 = (51, 5, 3),
        /// Primary Local Port LID (0xFFFF over RoCE).
        pub primary_local_lid: u16 = (52, 0, 16),
        /// Primary Remote Port LID.
        pub primary_remote_lid: u16 = (54, 0, 16),
        /// Primary Flow Label.
        pub primary_flow_label: u32 = (88, 0, 20),
        /// Primary Packet Rate.
        pub primary_packet_rate: u8 = (91, 2, 6),
        /// Primary Traffic Class.
        pub primary_traffic_class: u8 = (92, 0, 8),
        /// Primary Hop Limit.
        pub primary_hop_limit: u8 = (93, 0, 8),
        /// Primary SL.
        pub primary_sl: u8 = (94, 0, 4),
        /// Primary Subnet Local.
        pub primary_subnet_local: bool = (94, 4, 1),
        /// Primary Local ACK Timeout.
        pub primary_local_ack_timeout: u8 = (95, 0, 5),
        /// Alternate Local Port LID.
        pub alternate_local_lid: u16 = (96, 0, 16),
        /// Alternate Remote Port LID.
        pub alternate_remote_lid: u16 = (98, 0, 16),
        /// Alternate Flow Label.
        pub alternate_flow_label: u32 = (132, 0, 20),
        /// Alternate Packet Rate.
        pub alternate_packet_rate: u8 = (135, 2, 6),
        /// Alternate Traffic Class.
        pub alternate_traffic_class: u8 = (136, 0, 8),
        /// Alternate Hop Limit.
        pub alternate_hop_limit: u8 = (137, 0, 8),
        /// Alternate SL.
        pub alternate_sl: u8 = (138, 0, 4),
        /// Alternate Subnet Local.
        pub alternate_subnet_local: bool = (138, 4, 1),
        /// Alternate Local ACK Timeout.
        pub alternate_local_ack_timeout: u8 = (139, 0, 5),
        /// SAP Supported.
        pub sap_supported: bool = (139, 5, 1),
    }
    bytes {
        /// Primary Local Port GID.
        pub primary_local_gid: [u8; 16] = 56,
        /// Primary Remote Port GID.
        pub primary_remote_gid: [u8; 16] = 72,
        /// Alternate Local Port GID.
        pub alternate_local_gid: [u8; 16] = 100,
        /// Alternate Remote Port GID.
        pub alternate_remote_gid: [u8; 16] = 116,
        /// PrivateData.
        pub private_data: [u8; 92] = 140,
    }
}

cm_message! {
    /// MRA — MsgRcptAck (IBA Table 107): the sender needs more time to answer.
    pub struct Mra(AttrId::Mra) {
        /// Local Communication ID.
        pub local_comm_id: u32 = (0, 0, 32),
        /// Remote Communication ID.
        pub remote_comm_id: u32 = (4, 0, 32),
        /// Message MRAed ([`msg_code`]).
        pub message_mraed: u8 = (8, 0, 2),
        /// Service Timeout: 4.096 us * 2^value more.
        pub service_timeout: u8 = (9, 0, 5),
    }
    bytes {
        /// PrivateData.
        pub private_data: [u8; 222] = 10,
    }
}

cm_message! {
    /// REJ — ConnectReject (IBA Table 108).
    pub struct Rej(AttrId::Rej) {
        /// Local Communication ID.
        pub local_comm_id: u32 = (0, 0, 32),
        /// Remote Communication ID (0 if the REQ's was not known).
        pub remote_comm_id: u32 = (4, 0, 32),
        /// Message Rejected ([`msg_code`]).
        pub message_rejected: u8 = (8, 0, 2),
        /// Reject Info Length: the bytes of `ari` that count.
        pub reject_info_length: u8 = (9, 0, 7),
        /// Reason ([`rej_reason`]).
        pub reason: u16 = (10, 0, 16),
    }
    bytes {
        /// Additional Rejection Information.
        pub ari: [u8; 72] = 12,
        /// PrivateData.
        pub private_data: [u8; 148] = 84,
    }
}

cm_message! {
    /// REP — ConnectReply (IBA Table 110).
    pub struct Rep(AttrId::Rep) {
        /// Local Communication ID.
        pub local_comm_id: u32 = (0, 0, 32),
        /// Remote Communication ID: the REQ's Local Communication ID.
        pub remote_comm_id: u32 = (4, 0, 32),
        /// Local Q_Key (RD only).
        pub local_qkey: u32 = (8, 0, 32),
        /// Local QPN.
        pub local_qpn: Qpn = (12, 0, 24),
        /// Local EE Context Number (RD only).
        pub local_eecn: Eecn = (16, 0, 24),
        /// Starting PSN of the sender's send queue.
        pub starting_psn: Psn = (20, 0, 24),
        /// Responder Resources.
        pub responder_resources: u8 = (24, 0, 8),
        /// Initiator Depth.
        pub initiator_depth: u8 = (25, 0, 8),
        /// Target ACK Delay.
        pub target_ack_delay: u8 = (26, 0, 5),
        /// Failover Accepted.
        pub failover_accepted: u8 = (26, 5, 2),
        /// End-to-End Flow Control.
        pub end_to_end_flow_control: bool = (26, 7, 1),
        /// RNR Retry Count.
        pub rnr_retry_count: u8 = (27, 0, 3),
        /// SRQ.
        pub srq: bool = (27, 3, 1),
        /// Local CA GUID.
        pub local_ca_guid: u64 = (28, 0, 64),
    }
    bytes {
        /// PrivateData.
        pub private_data: [u8; 196] = 36,
    }
}

cm_message! {
    /// RTU — ReadyToUse (IBA Table 111).
    pub struct Rtu(AttrId::Rtu) {
        /// Local Communication ID.
        pub local_comm_id: u32 = (0, 0, 32),
        /// Remote Communication ID.
        pub remote_comm_id: u32 = (4, 0, 32),
    }
    bytes {
        /// PrivateData.
        pub private_data: [u8; 224] = 8,
    }
}

cm_message! {
    /// DREQ — DisconnectRequest (IBA Table 112).
    pub struct Dreq(AttrId::Dreq) {
        /// Local Communication ID.
        pub local_comm_id: u32 = (0, 0, 32),
        /// Remote Communication ID.
        pub remote_comm_id: u32 = (4, 0, 32),
        /// Remote QPN/EECN: the receiver's QP being disconnected.
        pub remote_qpn_eecn: Qpn = (8, 0, 24),
    }
    bytes {
        /// PrivateData.
        pub private_data: [u8; 220] = 12,
    }
}

cm_message! {
    /// DREP — DisconnectReply (IBA Table 113).
    pub struct Drep(AttrId::Drep) {
        /// Local Communication ID.
        pub local_comm_id: u32 = (0, 0, 32),
        /// Remote Communication ID.
        pub remote_comm_id: u32 = (4, 0, 32),
    }
    bytes {
        /// PrivateData.
        pub private_data: [u8; 224] = 8,
    }
}

cm_message! {
    /// LAP — LoadAlternatePath (IBA Table 115).
    pub struct Lap(AttrId::Lap) {
        /// Local Communication ID.
        pub local_comm_id: u32 = (0, 0, 32),
        /// Remote Communication ID.
        pub remote_comm_id: u32 = (4, 0, 32),
        /// Remote QPN/EECN.
        pub remote_qpn_eecn: Qpn = (12, 0, 24),
        /// Remote CM Response Timeout.
        pub remote_cm_response_timeout: u8 = (15, 0, 5),
        /// Alternate Local Port LID.
        pub alternate_local_lid: u16 = (20, 0, 16),
        /// Alternate Remote Port LID.
        pub alternate_remote_lid: u16 = (22, 0, 16),
        /// Alternate Flow Label.
        pub alternate_flow_label: u32 = (56, 0, 20),
        /// Alternate Traffic Class.
        pub alternate_traffic_class: u8 = (59, 0, 8),
        /// Alternate Hop Limit.
        pub alternate_hop_limit: u8 = (60, 0, 8),
        /// Alternate Packet Rate.
        pub alternate_packet_rate: u8 = (61, 2, 6),
        /// Alternate SL.
        pub alternate_sl: u8 = (62, 0, 4),
        /// Alternate Subnet Local.
        pub alternate_subnet_local: bool = (62, 4, 1),
        /// Alternate Local ACK Timeout.
        pub alternate_local_ack_timeout: u8 = (63, 0, 5),
    }
    bytes {
        /// Alternate Local Port GID.
        pub alternate_local_gid: [u8; 16] = 24,
        /// Alternate Remote Port GID.
        pub alternate_remote_gid: [u8; 16] = 40,
        /// PrivateData.
        pub private_data: [u8; 168] = 64,
    }
}

cm_message! {
    /// APR — AlternatePathResponse (IBA Table 116).
    pub struct Apr(AttrId::Apr) {
        /// Local Communication ID.
        pub local_comm_id: u32 = (0, 0, 32),
        /// Remote Communication ID.
        pub remote_comm_id: u32 = (4, 0, 32),
        /// Additional Information Length.
        pub additional_info_length: u8 = (8, 0, 8),
        /// AP Status.
        pub ap_status: u8 = (9, 0, 8),
    }
    bytes {
        /// Additional Information.
        pub additional_info: [u8; 72] = 12,
        /// PrivateData.
        pub private_data: [u8; 148] = 84,
    }
}

cm_message! {
    /// SIDR_REQ — ServiceIDResReq (IBA Table 119): which UD QP serves a Service ID.
    pub struct SidrReq(AttrId::SidrReq) {
        /// Request ID: the sender's handle.
        pub request_id: u32 = (0, 0, 32),
        /// Partition Key.
        pub partition_key: u16 = (4, 0, 16),
        /// Service ID.
        pub service_id: u64 = (8, 0, 64),
    }
    bytes {
        /// PrivateData.
        pub private_data: [u8; 216] = 16,
    }
}

cm_message! {
    /// SIDR_REP — ServiceIDResReqResp (IBA Table 120).
    pub struct SidrRep(AttrId::SidrRep) {
        /// Request ID: the SIDR_REQ's.
        pub request_id: u32 = (0, 0, 32),
        /// Status ([`sidr_status`]).
        pub status: u8 = (4, 0, 8),
        /// Additional Information Length.
        pub additional_info_length: u8 = (5, 0, 8),
        /// QPN of the UD QP that serves the Service ID.
        pub qpn: Qpn = (8, 0, 24),
        /// Service ID.
        pub service_id: u64 = (12, 0, 64),
        /// Q_Key of that QP.
        pub qkey: u32 = (20, 0, 32),
    }
    bytes {
        /// Additional Information.
        pub additional_info: [u8; 72] = 24,
        /// PrivateData.
        pub private_data: [u8; 136] = 96,
    }
}

/// The RDMA IP CM Service (IBA Annex A11, rdma_cm's `struct cma_hdr`): a REQ to a Service ID
/// of an IP port space carries this 36-byte header at the start of its private data, naming
/// the IP addresses and source port of the connection; the consumer's own private data follows
/// it (56 bytes in a REQ).
///
/// ```text
///  byte 0     MajV (bits 7-4) | MinV (bits 3-0): 0 | 0
///  byte 1     IPV (bits 7-4): 4 or 6 | reserved
///  byte 2-3   Source port
///  byte 4-19  Source IP (IPv4: the last 4 bytes, the first 12 zero)
///  byte 20-35 Destination IP (likewise)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IpCmHdr {
    /// MajV and MinV (byte 0); rdma_cm sends 0.
    pub version: u8,
    /// IP version, 4 or 6.
    pub ip_version: u8,
    /// The active side's port.
    pub src_port: u16,
    /// The active side's address (IPv4 in the last 4 bytes).
    pub src_ip: [u8; 16],
    /// The passive side's address.
    pub dst_ip: [u8; 16],
}

impl IpCmHdr {
    /// Length of the header in the private data.
    pub const LEN: usize = 36;

    /// The header rdma_cm writes for a connection from `src` (port `src_port`) to `dst`:
    /// version 0, IPv4 addresses in the last 4 bytes after 12 zero bytes (Linux
    /// `struct cma_hdr`, not IPv4-mapped). `None` when the two addresses are of different
    /// families.
    pub fn for_ips(src: std::net::IpAddr, dst: std::net::IpAddr, src_port: u16) -> Option<IpCmHdr> {
        use std::net::IpAddr::{V4, V6};
        let v4 = |a: std::net::Ipv4Addr| {
            let mut f = [0u8; 16];
            f[12..].copy_from_slice(&a.octets());
            f
        };
        let (ip_version, src_ip, dst_ip) = match (src, dst) {
            (V4(s), V4(d)) => (4, v4(s), v4(d)),
            (V6(s), V6(d)) => (6, s.octets(), d.octets()),
            _ => return None,
        };
        Some(IpCmHdr {
            version: 0,
            ip_version,
            src_port,
            src_ip,
            dst_ip,
        })
    }

    /// Reads the header at the start of a REQ's private data; refuses an IP version other
    /// than 4 or 6.
    pub fn parse(private_data: &[u8]) -> Result<IpCmHdr> {
        if private_data.len() < Self::LEN {
            return Err(Error::truncated(Header::Cm, Self::LEN, private_data.len()));
        }
        let ip_version = private_data[1] >> 4;
        if ip_version != 4 && ip_version != 6 {
            return Err(Error::BadField {
                field: Field::IpCmIpVersion,
                value: ip_version.into(),
            });
        }
        let mut h = IpCmHdr {
            version: private_data[0],
            ip_version,
            src_port: u16::from_be_bytes([private_data[2], private_data[3]]),
            ..IpCmHdr::default()
        };
        h.src_ip.copy_from_slice(&private_data[4..20]);
        h.dst_ip.copy_from_slice(&private_data[20..36]);
        Ok(h)
    }

    /// Writes the header to the start of `out`; returns [`IpCmHdr::LEN`].
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        if out.len() < Self::LEN {
            return Err(Error::truncated(Header::Cm, Self::LEN, out.len()));
        }
        out[0] = self.version;
        out[1] = self.ip_version << 4;
        out[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        out[4..20].copy_from_slice(&self.src_ip);
        out[20..36].copy_from_slice(&self.dst_ip);
        Ok(Self::LEN)
    }
}

/// rdma_cm's port spaces (`enum rdma_ucm_port_space`): the Service ID of a listener on `port`
/// in port space `ps` is `ps << 16 | port` ([`ip_service_id`]).
pub mod port_space {
    /// RDMA_PS_IPOIB.
    pub const IPOIB: u16 = 0x0002;
    /// RDMA_PS_IB: any QP type, no IP CM header.
    pub const IB: u16 = 0x013F;
    /// RDMA_PS_TCP: connected (RC), with the IP CM header.
    pub const TCP: u16 = 0x0106;
    /// RDMA_PS_UDP: datagrams (UD, SIDR), with the IP CM header.
    pub const UDP: u16 = 0x0111;
}

/// The Service ID rdma_cm uses for `port` in port space `ps` (IBA Annex A11).
pub const fn ip_service_id(ps: u16, port: u16) -> u64 {
    ((ps as u64) << 16) | port as u64
}

/// The port space and port of an rdma_cm Service ID, if it is one (prefix 0x0000000001).
pub const fn ip_service_port(service_id: u64) -> Option<(u16, u16)> {
    if service_id >> 32 != 0 || (service_id >> 24) & 0xff != 0x01 {
        return None;
    }
    Some(((service_id >> 16) as u16, service_id as u16))
}

/// A CM message of any kind (as large as a REQ: no allocation).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMessage {
    /// ConnectRequest.
    Req(Req),
    /// MsgRcptAck.
    Mra(Mra),
    /// ConnectReject.
    Rej(Rej),
    /// ConnectReply.
    Rep(Rep),
    /// ReadyToUse.
    Rtu(Rtu),
    /// DisconnectRequest.
    Dreq(Dreq),
    /// DisconnectReply.
    Drep(Drep),
    /// LoadAlternatePath.
    Lap(Lap),
    /// AlternatePathResponse.
    Apr(Apr),
    /// ServiceIDResReq.
    SidrReq(SidrReq),
    /// ServiceIDResReqResp.
    SidrRep(SidrRep),
}

macro_rules! each_message {
    ($self:expr, $m:ident => $e:expr) => {
        match $self {
            CmMessage::Req($m) => $e,
            CmMessage::Mra($m) => $e,
            CmMessage::Rej($m) => $e,
            CmMessage::Rep($m) => $e,
            CmMessage::Rtu($m) => $e,
            CmMessage::Dreq($m) => $e,
            CmMessage::Drep($m) => $e,
            CmMessage::Lap($m) => $e,
            CmMessage::Apr($m) => $e,
            CmMessage::SidrReq($m) => $e,
            CmMessage::SidrRep($m) => $e,
        }
    };
}

impl CmMessage {
    /// Its AttributeID.
    pub fn attr_id(&self) -> AttrId {
        fn id<M: Message>(_: &M) -> AttrId {
            M::ATTR_ID
        }
        each_message!(self, m => id(m))
    }

    /// Writes the message to the MAD data.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize> {
        each_message!(self, m => m.emit(data))
    }
}

/// A whole CM MAD: the common header and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmMad {
    /// The common header (its AttributeID agrees with `msg`).
    pub hdr: MadHdr,
    /// The message.
    pub msg: CmMessage,
}

impl CmMad {
    /// A CM MAD carrying `msg` with method Send.
    pub fn new(msg: CmMessage, transaction_id: u64) -> CmMad {
        CmMad {
            hdr: MadHdr::cm_send(msg.attr_id() as u16, transaction_id),
            msg,
        }
    }

    /// Parses a CM MAD (the 256-byte UD payload to QP1). Refuses another base version,
    /// class or class version, a method other than Send and an attribute the CM has no
    /// message for (ClassPortInfo included: it is a Get, not a message).
    pub fn parse(mad: &[u8]) -> Result<CmMad> {
        if mad.len() < mad::MAD_LEN {
            return Err(Error::truncated(Header::Mad, mad::MAD_LEN, mad.len()));
        }
        let hdr = MadHdr::parse(mad)?;
        let bad = |field, value: u64| Err(Error::BadField { field, value });
        if hdr.base_version != mad::BASE_VERSION {
            return bad(Field::MadBaseVersion, hdr.base_version.into());
        }
        if hdr.mgmt_class != mad::CLASS_CM {
            return bad(Field::MadMgmtClass, hdr.mgmt_class.into());
        }
        if hdr.class_version != mad::CM_CLASS_VERSION {
            return bad(Field::MadClassVersion, hdr.class_version.into());
        }
        if hdr.method != mad::method::SEND {
            return bad(Field::MadMethod, hdr.method.into());
        }
        let data = &mad[mad::LEN..mad::MAD_LEN];
        let msg = match AttrId::from_u16(hdr.attribute_id) {
            Some(AttrId::Req) => CmMessage::Req(Req::parse(data)?),
            Some(AttrId::Mra) => CmMessage::Mra(Mra::parse(data)?),
            Some(AttrId::Rej) => CmMessage::Rej(Rej::parse(data)?),
            Some(AttrId::Rep) => CmMessage::Rep(Rep::parse(data)?),
            Some(AttrId::Rtu) => CmMessage::Rtu(Rtu::parse(data)?),
            Some(AttrId::Dreq) => CmMessage::Dreq(Dreq::parse(data)?),
            Some(AttrId::Drep) => CmMessage::Drep(Drep::parse(data)?),
            Some(AttrId::Lap) => CmMessage::Lap(Lap::parse(data)?),
            Some(AttrId::Apr) => CmMessage::Apr(Apr::parse(data)?),
            Some(AttrId::SidrReq) => CmMessage::SidrReq(SidrReq::parse(data)?),
            Some(AttrId::SidrRep) => CmMessage::SidrRep(SidrRep::parse(data)?),
            Some(AttrId::ClassPortInfo) | None => {
                return bad(Field::MadAttributeId, hdr.attribute_id.into())
            }
        };
        Ok(CmMad { hdr, msg })
    }

    /// Writes the 256-byte MAD; returns [`mad::MAD_LEN`].
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        if out.len() < mad::MAD_LEN {
            return Err(Error::truncated(Header::Mad, mad::MAD_LEN, out.len()));
        }
        let hdr = MadHdr {
            attribute_id: self.msg.attr_id() as u16,
            ..self.hdr
        };
        hdr.emit(out)?;
        self.msg.emit(&mut out[mad::LEN..mad::MAD_LEN])?;
        Ok(mad::MAD_LEN)
    }
}

/// Whom a CM MAD is for, on a port several agents share (one per process): a request names
/// the Service ID of its listener, every other message the receiving agent's own
/// Communication ID (REP, RTU, REJ, MRA, DREQ, DREP, LAP, APR: their Remote Communication ID)
/// or SIDR Request ID (SIDR_REP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressee {
    /// REQ or SIDR_REQ: the agent that listens on this Service ID.
    Service(u64),
    /// The agent that handed out this Communication or Request ID.
    Id(u32),
}

/// [`Addressee`] of a MAD (the 256-byte UD payload to QP1), read without parsing the whole
/// message; `None` for what is not a CM message of the current class version (ClassPortInfo,
/// other classes, a short buffer).
pub fn addressee(mad: &[u8]) -> Option<Addressee> {
    let hdr = mad.get(..mad::LEN)?;
    let data = mad.get(mad::LEN..mad::MAD_LEN)?;
    if hdr[mad::field::MGMT_CLASS] != mad::CLASS_CM
        || hdr[mad::field::CLASS_VERSION] != mad::CM_CLASS_VERSION
    {
        return None;
    }
    let at = mad::field::ATTRIBUTE_ID;
    let u32_at = |o: usize| u32::from_be_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]]);
    let u64_at = |o: usize| (u64::from(u32_at(o)) << 32) | u64::from(u32_at(o + 4));
    match AttrId::from_u16(u16::from_be_bytes([hdr[at], hdr[at + 1]]))? {
        AttrId::Req | AttrId::SidrReq => Some(Addressee::Service(u64_at(8))),
        AttrId::SidrRep => Some(Addressee::Id(u32_at(0))),
        AttrId::ClassPortInfo => None,
        _ => Some(Addressee::Id(u32_at(4))),
    }
}

#[cfg(test)]
mod tests;
