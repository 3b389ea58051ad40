//! Typed parse errors. Every failure names the header and, where one field is to blame, the field.

use core::fmt;

/// The header (or trailer) an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Header {
    Lrh,
    Grh,
    Bth,
    Rdeth,
    Deth,
    Xrceth,
    Feth,
    Reth,
    AtomicEth,
    Aeth,
    AtomicAckEth,
    ImmDt,
    Ieth,
    Rwh,
    /// The 16 reserved bytes after the BTH of a RoCEv2 CNP.
    CnpReserved,
    Payload,
    Icrc,
    Vcrc,
    Ethernet,
    Vlan,
    Ipv4,
    Ipv6,
    Udp,
    /// The common header of a management datagram (MAD) on QP0 or QP1.
    Mad,
    /// A Communication Manager message in a MAD's data.
    Cm,
    Pcap,
}

impl Header {
    /// Spec-style name, as used in error messages and decode output.
    pub const fn name(self) -> &'static str {
        match self {
            Header::Lrh => "LRH",
            Header::Grh => "GRH",
            Header::Bth => "BTH",
            Header::Rdeth => "RDETH",
            Header::Deth => "DETH",
            Header::Xrceth => "XRCETH",
            Header::Feth => "FETH",
            Header::Reth => "RETH",
            Header::AtomicEth => "AtomicETH",
            Header::Aeth => "AETH",
            Header::AtomicAckEth => "AtomicAckETH",
            Header::ImmDt => "ImmDt",
            Header::Ieth => "IETH",
            Header::Rwh => "RWH",
            Header::CnpReserved => "CNP reserved",
            Header::Payload => "payload",
            Header::Icrc => "ICRC",
            Header::Vcrc => "VCRC",
            Header::Ethernet => "Ethernet",
            Header::Vlan => "802.1Q",
            Header::Ipv4 => "IPv4",
            Header::Ipv6 => "IPv6",
            Header::Udp => "UDP",
            Header::Mad => "MAD",
            Header::Cm => "CM",
            Header::Pcap => "pcap",
        }
    }
}

/// A header field whose value was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    LrhLVer,
    LrhLnh,
    LrhPktLen,
    GrhIpVer,
    GrhPayLen,
    GrhNxtHdr,
    BthOpCode,
    BthPadCnt,
    BthTVer,
    Ipv4Version,
    Ipv4Ihl,
    Ipv4TotalLength,
    Ipv4Protocol,
    Ipv4Fragment,
    Ipv6Version,
    Ipv6PayloadLength,
    Ipv6NextHeader,
    UdpLength,
    UdpDstPort,
    MadBaseVersion,
    MadMgmtClass,
    MadClassVersion,
    MadMethod,
    MadAttributeId,
    IpCmIpVersion,
    EtherType,
    RwhEtherType,
    PayloadLength,
    PcapMagic,
    PcapVersion,
    PcapLinkType,
    PcapCapturedLength,
}

impl Field {
    /// `HEADER.Field` as the spec spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Field::LrhLVer => "LRH.LVer",
            Field::LrhLnh => "LRH.LNH",
            Field::LrhPktLen => "LRH.PktLen",
            Field::GrhIpVer => "GRH.IPVer",
            Field::GrhPayLen => "GRH.PayLen",
            Field::GrhNxtHdr => "GRH.NxtHdr",
            Field::BthOpCode => "BTH.OpCode",
            Field::BthPadCnt => "BTH.PadCnt",
            Field::BthTVer => "BTH.TVer",
            Field::Ipv4Version => "IPv4.Version",
            Field::Ipv4Ihl => "IPv4.IHL",
            Field::Ipv4TotalLength => "IPv4.TotalLength",
            Field::Ipv4Protocol => "IPv4.Protocol",
            Field::Ipv4Fragment => "IPv4.FragmentOffset/MF",
            Field::Ipv6Version => "IPv6.Version",
            Field::Ipv6PayloadLength => "IPv6.PayloadLength",
            Field::Ipv6NextHeader => "IPv6.NextHeader",
            Field::UdpLength => "UDP.Length",
            Field::UdpDstPort => "UDP.DstPort",
            Field::MadBaseVersion => "MAD.BaseVersion",
            Field::MadMgmtClass => "MAD.MgmtClass",
            Field::MadClassVersion => "MAD.ClassVersion",
            Field::MadMethod => "MAD.Method",
            Field::MadAttributeId => "MAD.AttributeID",
            Field::IpCmIpVersion => "IP CM header IPV",
            Field::EtherType => "Ethernet.EtherType",
            Field::RwhEtherType => "RWH.EtherType",
            Field::PayloadLength => "payload length",
            Field::PcapMagic => "pcap.magic",
            Field::PcapVersion => "pcap.version",
            Field::PcapLinkType => "pcap.linktype",
            Field::PcapCapturedLength => "pcap.incl_len",
        }
    }
}

/// Why a buffer was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before `header` does.
    Truncated {
        header: Header,
        need: usize,
        have: usize,
    },
    /// `field` holds a value the spec does not allow here (`value` is the raw field value).
    BadField { field: Field, value: u64 },
    /// A length field disagrees with the bytes actually present.
    Length {
        field: Field,
        claimed: usize,
        actual: usize,
    },
    /// The BTH opcode is not in the opcode table.
    UnknownOpcode(u8),
    /// The extension headers given for an opcode differ from the set the opcode table requires
    /// (`present`: the header was given but the opcode has none; otherwise it is missing).
    HeaderSet {
        opcode: u8,
        header: Header,
        present: bool,
    },
    /// The payload is longer than allowed (path MTU, or the opcode carries none).
    PayloadTooLong { len: usize, max: usize },
    /// The invariant CRC does not match.
    Icrc { computed: u32, found: u32 },
    /// The variant CRC does not match.
    Vcrc { computed: u16, found: u16 },
}

impl Error {
    pub(crate) const fn truncated(header: Header, need: usize, have: usize) -> Self {
        Error::Truncated { header, need, have }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { header, need, have } => {
                write!(
                    f,
                    "{} truncated: need {need} bytes, have {have}",
                    header.name()
                )
            }
            Error::BadField { field, value } => {
                write!(f, "{} has invalid value {value:#x}", field.name())
            }
            Error::Length {
                field,
                claimed,
                actual,
            } => write!(
                f,
                "{} says {claimed} bytes but {actual} are present",
                field.name()
            ),
            Error::UnknownOpcode(op) => write!(f, "BTH.OpCode {op:#04x} is not a known opcode"),
            Error::HeaderSet {
                opcode,
                header,
                present: true,
            } => write!(
                f,
                "opcode {opcode:#04x} carries no {} but one was given",
                header.name()
            ),
            Error::HeaderSet {
                opcode,
                header,
                present: false,
            } => {
                write!(
                    f,
                    "opcode {opcode:#04x} requires a {} header",
                    header.name()
                )
            }
            Error::PayloadTooLong { len, max } => {
                write!(f, "payload of {len} bytes exceeds the limit of {max}")
            }
            Error::Icrc { computed, found } => {
                write!(
                    f,
                    "ICRC mismatch: computed {computed:#010x}, packet has {found:#010x}"
                )
            }
            Error::Vcrc { computed, found } => {
                write!(
                    f,
                    "VCRC mismatch: computed {computed:#06x}, packet has {found:#06x}"
                )
            }
        }
    }
}

impl std::error::Error for Error {}

/// Result alias for the wire layer.
pub type Result<T> = core::result::Result<T, Error>;

/// Returns `Ok` when `buf` holds at least `need` bytes for `header`.
#[inline]
pub(crate) fn check_len(header: Header, buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::truncated(header, need, buf.len()))
    } else {
        Ok(())
    }
}
