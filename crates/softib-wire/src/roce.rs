//! RoCEv2 framing: Ethernet [+ 802.1Q] + IPv4 or IPv6 + UDP (destination port 4791) + IBA
//! transport packet + ICRC.
//!
//! The IPv6 header has the GRH's layout and is handled by [`crate::grh`]. The ICRC is computed
//! as Linux rxe does ([`crate::icrc`]). Ethernet padding of frames shorter than 60 bytes is kept
//! as a trailer, so that a parsed frame is re-emitted byte for byte.
//!
//! Checks on parse: EtherType is IPv4/IPv6; IPv4 version/IHL, total length within the frame,
//! no fragments, protocol UDP; IPv6 version, payload length within the frame, next header UDP;
//! UDP destination port 4791 and UDP length equal to the IP payload; room for BTH and ICRC; the
//! transport checks of [`crate::transport`]. The ICRC value is reported, not judged:
//! [`RocePacket::icrc_ok`] compares it.

use crate::bth;
use crate::bth::Bth;
use crate::error::{Error, Field, Header, Result};
use crate::ethernet::{self, Ethernet, VlanTag};
use crate::grh::{self, Grh, GrhView};
use crate::icrc;
use crate::ipv4::{self, Ipv4, Ipv4View};
use crate::opcode::ExtHeaders;
use crate::transport::{OpcodeLayout, TransportHeaders, TransportPacket};
use crate::udp::{self, Udp, UdpView};

/// IP protocol / IPv6 next header number of UDP.
pub const IP_PROTO_UDP: u8 = 17;
/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// The network header of a RoCEv2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpHeader {
    V4(Ipv4),
    /// IPv6, parsed with the GRH layout it shares.
    V6(Grh),
}

/// What a captured Ethernet frame is, as far as softib is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameClass {
    /// IPv4/IPv6 carrying UDP to port 4791 (or too short to tell the port): parse it.
    RoceV2,
    /// Anything else (ARP, TCP, other UDP): not softib's to judge.
    Other,
}

/// Tells a RoCEv2 frame from other traffic without fully parsing it.
pub fn classify(frame: &[u8]) -> FrameClass {
    let Ok(eth) = Ethernet::parse(frame) else {
        return FrameClass::Other;
    };
    let l3 = &frame[eth.header_len()..];
    let (proto, l4) = match eth.ether_type {
        ethernet::ETHERTYPE_IPV4 => {
            let (Some(&vihl), Some(&proto)) = (l3.first(), l3.get(9)) else {
                return FrameClass::Other;
            };
            (proto, l3.get(usize::from(vihl & 0x0f) * 4..).unwrap_or(&[]))
        }
        ethernet::ETHERTYPE_IPV6 => {
            let Some(&nh) = l3.get(6) else {
                return FrameClass::Other;
            };
            (nh, l3.get(grh::LEN..).unwrap_or(&[]))
        }
        _ => return FrameClass::Other,
    };
    if proto != IP_PROTO_UDP {
        return FrameClass::Other;
    }
    match l4.get(2..4) {
        Some(p) if u16::from_be_bytes([p[0], p[1]]) != udp::ROCEV2_PORT => FrameClass::Other,
        _ => FrameClass::RoceV2,
    }
}

/// The IP header bytes of a frame being parsed.
#[derive(Clone, Copy)]
enum RawIp<'a> {
    V4(&'a [u8; ipv4::LEN]),
    V6(&'a [u8; grh::LEN]),
}

/// A parsed RoCEv2 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RocePacket<'a> {
    pub eth: Ethernet,
    pub ip: IpHeader,
    /// IPv4 options (IHL > 5), verbatim; empty for IPv6.
    pub ip_options: &'a [u8],
    pub udp: Udp,
    pub transport: TransportPacket<'a>,
    /// The ICRC as found in the frame (`icrc.to_le_bytes()` are the wire bytes).
    pub icrc: u32,
    /// Bytes after the IP datagram (Ethernet padding of short frames).
    pub trailer: &'a [u8],
    /// The IP header, UDP header and transport bytes as received, for the ICRC.
    raw_ip: &'a [u8],
    raw_udp: &'a [u8],
    raw_transport: &'a [u8],
}

/// The parts of a frame that passed the frame-level checks of [`RocePacket::parse`].
struct Parts<'a> {
    /// The first 14 bytes of the Ethernet header, its 802.1Q tag if any, and the payload
    /// EtherType.
    raw_eth: &'a [u8; ethernet::LEN],
    vlan: Option<VlanTag>,
    ether_type: u16,
    ip: RawIp<'a>,
    /// The whole IP header (IPv4 options included).
    raw_ip: &'a [u8],
    ip_options: &'a [u8],
    raw_udp: &'a [u8; udp::LEN],
    /// BTH through pad.
    raw_transport: &'a [u8],
    icrc: &'a [u8; ICRC_LEN],
    trailer: &'a [u8],
}

/// Ethernet + IPv4 (no options) + UDP.
const PLAIN_V4_HEADERS: usize = ethernet::LEN + ipv4::LEN + udp::LEN;

impl<'a> Parts<'a> {
    /// The common frame, recognised without naming faults: untagged, IPv4 without options, not a
    /// fragment, UDP to port 4791 with a consistent length, room for BTH and ICRC. `None` sends
    /// the frame to [`Parts::check`], which accepts exactly the same frames among others and
    /// finds the same parts in them.
    #[inline(always)]
    fn plain_v4(frame: &'a [u8]) -> Option<Parts<'a>> {
        let (h, after_udp) = frame.split_first_chunk::<PLAIN_V4_HEADERS>()?;
        let (raw_eth, rest) = h.split_first_chunk::<{ ethernet::LEN }>()?;
        let (ip, raw_udp) = rest.split_first_chunk::<{ ipv4::LEN }>()?;
        let raw_udp: &[u8; udp::LEN] = raw_udp.try_into().ok()?;
        let word =
            |b: &[u8], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        // EtherType IPv4, version 4, IHL 5 (TOS is free).
        let type_ver_ihl = (u32::from(ethernet::ETHERTYPE_IPV4) << 16) | 0x4500;
        // Flags/fragment offset: MF and offset clear (reserved and DF free); TTL free; UDP.
        let frag_proto_mask = 0x3FFF_00FF;
        let total = u16::from_be_bytes([ip[2], ip[3]]);
        // UDP header, BTH and ICRC at least.
        let body_len =
            usize::from(total).checked_sub(ipv4::LEN + udp::LEN + bth::LEN + ICRC_LEN)?;
        if word(h, 12) & 0xFFFF_FF00 != type_ver_ihl
            || word(ip, 6) & frag_proto_mask != u32::from(IP_PROTO_UDP)
            || word(raw_udp, 2)
                != (u32::from(udp::ROCEV2_PORT) << 16) | u32::from(total - ipv4::LEN as u16)
        {
            return None;
        }
        let (body, trailer) = after_udp.split_at_checked(body_len + bth::LEN + ICRC_LEN)?;
        let (raw_transport, icrc) = body.split_last_chunk::<ICRC_LEN>()?;
        Some(Parts {
            raw_eth,
            vlan: None,
            ether_type: ethernet::ETHERTYPE_IPV4,
            ip: RawIp::V4(ip),
            raw_ip: ip,
            ip_options: &[],
            raw_udp,
            raw_transport,
            icrc,
            trailer,
        })
    }

    /// Every frame-level check of [`RocePacket::parse`], in its documented order.
    fn check(frame: &'a [u8]) -> Result<Parts<'a>> {
        let ethernet::CheckedEthernet {
            header: raw_eth,
            vlan,
            ether_type,
            payload: l3,
        } = Ethernet::check(frame)?;
        let (ip, ip_hdr_len, datagram_len) = match ether_type {
            ethernet::ETHERTYPE_IPV4 => {
                let Some(h) = l3.first_chunk::<{ ipv4::LEN }>() else {
                    return Err(Error::truncated(Header::Ipv4, ipv4::LEN, l3.len()));
                };
                let v = Ipv4View::new_unchecked(h);
                if v.version() != 4 {
                    return Err(Error::BadField {
                        field: Field::Ipv4Version,
                        value: v.version().into(),
                    });
                }
                if v.ihl() < 5 {
                    return Err(Error::BadField {
                        field: Field::Ipv4Ihl,
                        value: v.ihl().into(),
                    });
                }
                let hl = v.header_len();
                if l3.len() < hl {
                    return Err(Error::truncated(Header::Ipv4, hl, l3.len()));
                }
                let total = usize::from(v.total_len());
                if total < hl || total > l3.len() {
                    return Err(Error::Length {
                        field: Field::Ipv4TotalLength,
                        claimed: total,
                        actual: l3.len(),
                    });
                }
                if v.is_fragment() {
                    let v = (u64::from(v.flags()) << 13) | u64::from(v.frag_offset());
                    return Err(Error::BadField {
                        field: Field::Ipv4Fragment,
                        value: v,
                    });
                }
                if v.protocol() != IP_PROTO_UDP {
                    return Err(Error::BadField {
                        field: Field::Ipv4Protocol,
                        value: v.protocol().into(),
                    });
                }
                (RawIp::V4(h), hl, total)
            }
            ethernet::ETHERTYPE_IPV6 => {
                let Some(h) = l3.first_chunk::<{ grh::LEN }>() else {
                    return Err(Error::truncated(Header::Grh, grh::LEN, l3.len()));
                };
                let v = GrhView::new_unchecked(h);
                if v.ip_ver() != 6 {
                    return Err(Error::BadField {
                        field: Field::Ipv6Version,
                        value: v.ip_ver().into(),
                    });
                }
                let total = grh::LEN + usize::from(v.pay_len());
                if total > l3.len() {
                    return Err(Error::Length {
                        field: Field::Ipv6PayloadLength,
                        claimed: usize::from(v.pay_len()),
                        actual: l3.len() - grh::LEN,
                    });
                }
                if v.nxt_hdr() != IP_PROTO_UDP {
                    return Err(Error::BadField {
                        field: Field::Ipv6NextHeader,
                        value: v.nxt_hdr().into(),
                    });
                }
                (RawIp::V6(h), grh::LEN, total)
            }
            other => {
                return Err(Error::BadField {
                    field: Field::EtherType,
                    value: other.into(),
                })
            }
        };
        let (raw_ip, rest) = l3.split_at(ip_hdr_len);
        let ip_options = match ip {
            RawIp::V4(_) => &raw_ip[ipv4::LEN..],
            RawIp::V6(_) => &[],
        };
        let (l4, trailer) = rest.split_at(datagram_len - ip_hdr_len);
        let Some((raw_udp, body)) = l4.split_first_chunk::<{ udp::LEN }>() else {
            return Err(Error::truncated(Header::Udp, udp::LEN, l4.len()));
        };
        let uv = UdpView::new_unchecked(raw_udp);
        if uv.dst_port() != udp::ROCEV2_PORT {
            return Err(Error::BadField {
                field: Field::UdpDstPort,
                value: uv.dst_port().into(),
            });
        }
        if usize::from(uv.length()) != l4.len() {
            return Err(Error::Length {
                field: Field::UdpLength,
                claimed: usize::from(uv.length()),
                actual: l4.len(),
            });
        }
        let Some((raw_transport, icrc)) = body
            .split_last_chunk::<ICRC_LEN>()
            .filter(|(t, _)| t.len() >= bth::LEN)
        else {
            return Err(Error::Truncated {
                header: Header::Icrc,
                need: bth::LEN + ICRC_LEN,
                have: body.len(),
            });
        };
        Ok(Parts {
            raw_eth,
            vlan,
            ether_type,
            ip,
            raw_ip,
            ip_options,
            raw_udp,
            raw_transport,
            icrc,
            trailer,
        })
    }

    /// The transport checks, then the packet, filled in from the parts.
    #[inline(always)]
    fn assemble(self) -> Result<RocePacket<'a>> {
        let checked = TransportPacket::check(self.raw_transport)?;
        // One struct expression per case, so that each is written straight into the result.
        macro_rules! packet {
            ($headers:expr) => {
                // The values the checks left in registers go first.
                Ok(RocePacket {
                    transport: TransportPacket {
                        headers: $headers,
                        payload: checked.payload,
                        pad: checked.pad,
                    },
                    raw_transport: self.raw_transport,
                    trailer: self.trailer,
                    icrc: u32::from_le_bytes(*self.icrc),
                    raw_ip: self.raw_ip,
                    raw_udp: self.raw_udp,
                    ip_options: self.ip_options,
                    udp: Udp::from_bytes(self.raw_udp),
                    ip: match self.ip {
                        RawIp::V4(h) => IpHeader::V4(Ipv4::from_bytes(h)),
                        RawIp::V6(h) => IpHeader::V6(Grh::from_bytes(h)),
                    },
                    eth: Ethernet::from_checked(self.raw_eth, self.vlan, self.ether_type),
                })
            };
        }
        if checked.headers.is_empty() {
            packet!(TransportHeaders::new(Bth::from_bytes(checked.bth)))
        } else {
            packet!(TransportHeaders::parse_ext(
                Bth::from_bytes(checked.bth),
                checked.headers,
                self.raw_transport
            )?)
        }
    }
}

/// The common RC packet, as [`RocePacket::parse_express`] reads it from a frame and
/// [`ExpressPacket::parse_datagram`] from a UDP datagram: a one-packet SEND or RDMA WRITE, an
/// RDMA READ request, an ATOMIC request, an ACK, an RDMA READ response packet or an ATOMIC
/// ACK; its IPv4 addresses and transport headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpressPacket<'a> {
    /// IPv4 source and destination.
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub bth: Bth,
    /// RDMA WRITE and READ request: the RETH.
    pub reth: Option<crate::reth::Reth>,
    /// With immediate data: the ImmDt.
    pub immdt: Option<crate::immdt::ImmDt>,
    /// An ACK, a READ response's first, last or only packet, an ATOMIC ACK: the AETH.
    pub aeth: Option<crate::aeth::Aeth>,
    /// COMPARE_SWAP and FETCH_ADD: the AtomicETH.
    pub atomic_eth: Option<crate::atomic_eth::AtomicEth>,
    /// An ATOMIC ACK: the AtomicAckETH.
    pub atomic_ack_eth: Option<crate::atomic_ack_eth::AtomicAckEth>,
    /// The payload, pad excluded.
    pub payload: &'a [u8],
}

/// An [`ExpressPacket`] read from a frame, with what its ICRC covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpressFrame<'a> {
    pub packet: ExpressPacket<'a>,
    raw_ip: &'a [u8],
    raw_udp: &'a [u8],
    raw_transport: &'a [u8],
    icrc: u32,
}

impl ExpressFrame<'_> {
    /// True when the received ICRC matches ([`RocePacket::icrc_ok`]).
    pub fn icrc_ok(&self) -> bool {
        icrc::roce_v4(self.raw_ip, self.raw_udp, self.raw_transport) == self.icrc
    }
}

/// The extension headers of an opcode the express reads take; `None` for the others.
#[inline(always)]
fn express_headers(opcode: u8) -> Option<ExtHeaders> {
    use crate::opcode::Opcode;
    Some(match Opcode(opcode) {
        Opcode::RC_SEND_ONLY => ExtHeaders::NONE,
        Opcode::RC_SEND_ONLY_WITH_IMMEDIATE => ExtHeaders::IMMDT,
        Opcode::RC_RDMA_WRITE_ONLY => ExtHeaders::RETH,
        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => ExtHeaders::RETH.union(ExtHeaders::IMMDT),
        Opcode::RC_RDMA_READ_REQUEST => ExtHeaders::RETH,
        Opcode::RC_COMPARE_SWAP | Opcode::RC_FETCH_ADD => ExtHeaders::ATOMIC_ETH,
        Opcode::RC_ATOMIC_ACKNOWLEDGE => ExtHeaders::AETH.union(ExtHeaders::ATOMIC_ACK_ETH),
        Opcode::RC_ACKNOWLEDGE
        | Opcode::RC_RDMA_READ_RESPONSE_FIRST
        | Opcode::RC_RDMA_READ_RESPONSE_LAST
        | Opcode::RC_RDMA_READ_RESPONSE_ONLY => ExtHeaders::AETH,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE => ExtHeaders::NONE,
        _ => return None,
    })
}

impl<'a> ExpressPacket<'a> {
    /// The packet of a RoCEv2 UDP datagram over IPv4 from `src` to `dst`, read where it lies
    /// (`datagram` is the UDP payload: BTH .. ICRC), when it is one [`RocePacket::parse_express`]
    /// reads: the same packet as from the frame of that datagram (tested against it, and
    /// fuzzed). The ICRC is not looked at: the caller has checked it.
    #[inline(always)]
    pub fn parse_datagram(src: [u8; 4], dst: [u8; 4], datagram: &'a [u8]) -> Option<Self> {
        let headers = express_headers(*datagram.first()?)?;
        let raw = datagram.get(..datagram.len().checked_sub(ICRC_LEN)?)?;
        Self::read(src, dst, raw, headers)
    }

    /// The packet of `raw` (BTH .. pad, no ICRC), whose opcode has the extension headers
    /// `headers`.
    #[inline(always)]
    fn read(src: [u8; 4], dst: [u8; 4], raw: &'a [u8], headers: ExtHeaders) -> Option<Self> {
        let checked = TransportPacket::check(raw).ok()?;
        // The opcode's extension headers, in wire order: RETH, AtomicETH, AETH, AtomicAckETH,
        // ImmDt (none at all for a SEND: nothing to look for).
        let (mut reth, mut atomic_eth, mut aeth, mut atomic_ack_eth, mut immdt) =
            (None, None, None, None, None);
        if !headers.is_empty() {
            let mut at = bth::LEN;
            if headers.contains(ExtHeaders::RETH) {
                reth = Some(crate::reth::Reth::parse(raw.get(at..)?).ok()?);
                at += crate::reth::LEN;
            }
            if headers.contains(ExtHeaders::ATOMIC_ETH) {
                atomic_eth = Some(crate::atomic_eth::AtomicEth::parse(raw.get(at..)?).ok()?);
                at += crate::atomic_eth::LEN;
            }
            if headers.contains(ExtHeaders::AETH) {
                aeth = Some(crate::aeth::Aeth::parse(raw.get(at..)?).ok()?);
                at += crate::aeth::LEN;
            }
            if headers.contains(ExtHeaders::ATOMIC_ACK_ETH) {
                atomic_ack_eth =
                    Some(crate::atomic_ack_eth::AtomicAckEth::parse(raw.get(at..)?).ok()?);
                at += crate::atomic_ack_eth::LEN;
            }
            if headers.contains(ExtHeaders::IMMDT) {
                immdt = Some(crate::immdt::ImmDt::parse(raw.get(at..)?).ok()?);
            }
        }
        Some(ExpressPacket {
            src,
            dst,
            bth: Bth::from_bytes(checked.bth),
            reth,
            immdt,
            aeth,
            atomic_eth,
            atomic_ack_eth,
            payload: checked.payload,
        })
    }
}

impl<'a> RocePacket<'a> {
    /// The frame's packet when it is an RC SEND or RDMA WRITE of one packet (ONLY, with or
    /// without immediate data), an RC RDMA READ or ATOMIC request, an RC ACK, RDMA READ response
    /// packet or ATOMIC ACK in an untagged IPv4 frame without options, read without
    /// building a [`RocePacket`]; `None` for anything else. A frame it reads is one
    /// [`RocePacket::parse`] accepts, with the same addresses, headers and payload (tested
    /// over captures and their mutations, and fuzzed). The ICRC is checked apart
    /// ([`ExpressFrame::icrc_ok`]).
    #[inline(always)]
    pub fn parse_express(frame: &'a [u8]) -> Option<ExpressFrame<'a>> {
        // The opcode first, where a plain IPv4 frame has it: other packets leave at once.
        let headers = express_headers(*frame.get(PLAIN_V4_HEADERS)?)?;
        Self::read_express(frame, headers)
    }

    /// [`RocePacket::parse_express`] once the opcode is known to be one it reads.
    #[inline(never)]
    fn read_express(frame: &'a [u8], headers: ExtHeaders) -> Option<ExpressFrame<'a>> {
        let parts = Parts::plain_v4(frame)?;
        let RawIp::V4(ip) = parts.ip else {
            return None;
        };
        let src = [ip[12], ip[13], ip[14], ip[15]];
        let dst = [ip[16], ip[17], ip[18], ip[19]];
        let packet = ExpressPacket::read(src, dst, parts.raw_transport, headers)?;
        Some(ExpressFrame {
            packet,
            raw_ip: parts.raw_ip,
            raw_udp: parts.raw_udp,
            raw_transport: parts.raw_transport,
            icrc: u32::from_le_bytes(*parts.icrc),
        })
    }

    /// Parses an Ethernet frame (no FCS) holding a RoCEv2 packet.
    ///
    /// The frame is checked first, keeping only references to its parts, and the parsed headers
    /// are then filled in straight from those bytes. Untagged IPv4 frames without options (what
    /// softib and rxe send) are recognised by a few combined comparisons; anything else, valid
    /// or not, takes the general path, which checks field by field in the documented order and
    /// names the first fault.
    pub fn parse(frame: &'a [u8]) -> Result<RocePacket<'a>> {
        match Parts::plain_v4(frame) {
            Some(parts) => parts.assemble(),
            None => Self::parse_general(frame),
        }
    }

    /// [`Self::parse`] for any frame.
    #[inline(never)]
    fn parse_general(frame: &'a [u8]) -> Result<RocePacket<'a>> {
        Parts::check(frame)?.assemble()
    }

    /// The ICRC computed over the received bytes.
    pub fn computed_icrc(&self) -> u32 {
        match self.ip {
            IpHeader::V4(_) => icrc::roce_v4(self.raw_ip, self.raw_udp, self.raw_transport),
            IpHeader::V6(_) => icrc::roce_v6(self.raw_ip, self.raw_udp, self.raw_transport),
        }
    }

    /// True when the received ICRC matches.
    pub fn icrc_ok(&self) -> bool {
        self.computed_icrc() == self.icrc
    }

    /// Parses and verifies the ICRC in one step.
    pub fn parse_verified(frame: &'a [u8]) -> Result<RocePacket<'a>> {
        let p = Self::parse(frame)?;
        let computed = p.computed_icrc();
        if computed != p.icrc {
            return Err(Error::Icrc {
                computed,
                found: p.icrc,
            });
        }
        Ok(p)
    }

    /// Length of the frame this packet emits to.
    pub fn wire_len(&self) -> Result<usize> {
        let ip_len = match self.ip {
            IpHeader::V4(_) => ipv4::LEN + self.ip_options.len(),
            IpHeader::V6(_) => grh::LEN,
        };
        Ok(self.eth.header_len()
            + ip_len
            + udp::LEN
            + self.transport.wire_len()?
            + ICRC_LEN
            + self.trailer.len())
    }

    /// Writes the frame exactly as the fields say (lengths, checksums and ICRC verbatim).
    /// A frame parsed from bytes re-emits to the same bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let need = self.wire_len()?;
        if buf.len() < need {
            return Err(Error::Truncated {
                header: Header::Ethernet,
                need,
                have: buf.len(),
            });
        }
        let mut at = self.eth.emit(buf)?;
        match &self.ip {
            IpHeader::V4(ip) => {
                at += ip.emit(&mut buf[at..])?;
                buf[at..at + self.ip_options.len()].copy_from_slice(self.ip_options);
                at += self.ip_options.len();
            }
            IpHeader::V6(ip) => at += ip.emit(&mut buf[at..])?,
        }
        at += self.udp.emit(&mut buf[at..])?;
        at += self.transport.emit(&mut buf[at..])?;
        icrc::put(&mut buf[at..], self.icrc)?;
        at += ICRC_LEN;
        buf[at..at + self.trailer.len()].copy_from_slice(self.trailer);
        Ok(at + self.trailer.len())
    }
}

/// Builds a RoCEv2 frame: fills in the IP and UDP lengths, the IPv4 header checksum and the
/// ICRC, and pads the frame to the 60-byte Ethernet minimum. `ip` supplies addresses, TTL/hop
/// limit, TOS/traffic class, identification and flags; `udp` supplies the ports.
///
/// Everything is checked before the first byte is written; on error `buf` is left as it was.
pub fn build(
    eth: &Ethernet,
    ip: &IpHeader,
    udp_src_port: u16,
    transport: &TransportPacket<'_>,
    buf: &mut [u8],
) -> Result<usize> {
    let ident = match ip {
        IpHeader::V4(v4) => v4.ident,
        IpHeader::V6(_) => 0,
    };
    HeaderTemplate::new(eth, ip, udp_src_port).build(ident, transport, buf)
}

/// Longest Ethernet + IP + UDP header [`build`] writes: 802.1Q-tagged Ethernet and IPv6.
const TEMPLATE_MAX: usize = ethernet::VLAN_LEN + grh::LEN + udp::LEN;

/// The Ethernet, IP and UDP headers [`build`] writes for one (Ethernet header, IP header, UDP
/// source port), serialized once. Frames built from one template differ only in their lengths,
/// the IPv4 Identification and the IPv4 header checksum, which [`HeaderTemplate::build`] fills
/// in per packet: a sender whose addressing does not change (a connected QP) keeps the
/// template and skips the per-packet serialization of the headers. `build(eth, ip, sport, ..)`
/// is `HeaderTemplate::new(eth, ip, sport).build(ip's Identification, ..)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderTemplate {
    /// Ethernet + IP + UDP header; lengths, IPv4 Identification and checksum zero.
    bytes: [u8; TEMPLATE_MAX],
    /// The IP + UDP header of `bytes` with its ICRC-variant bits set to one, as the ICRC
    /// covers it.
    masked: [u8; grh::LEN + udp::LEN],
    /// Length of the Ethernet header (14, or 18 with a VLAN tag).
    eth_len: u8,
    /// IPv4 (else IPv6).
    v4: bool,
    /// IPv4: the ones' complement sum (1..=0xFFFF) of the header words other than the total
    /// length, the Identification and the checksum.
    ip_sum: u16,
}

impl HeaderTemplate {
    /// The headers of frames `build(eth, ip, udp_src_port, ..)` writes. The IPv4 header's
    /// Identification, total length and checksum and the IPv6 payload length are ignored; the
    /// EtherType follows `ip`.
    pub fn new(eth: &Ethernet, ip: &IpHeader, udp_src_port: u16) -> HeaderTemplate {
        let mut bytes = [0u8; TEMPLATE_MAX];
        let mut e = *eth;
        e.ether_type = match ip {
            IpHeader::V4(_) => ethernet::ETHERTYPE_IPV4,
            IpHeader::V6(_) => ethernet::ETHERTYPE_IPV6,
        };
        let eth_len = eth.header_len();
        // `bytes` holds the longest Ethernet header.
        let _ = e.emit(&mut bytes);
        let (ip_len, v4, ip_sum) = match ip {
            IpHeader::V4(v4) => {
                // A RoCEv2 packet is never a fragment: MF clear, offset 0.
                let h = Ipv4 {
                    version: 4,
                    ihl: 5,
                    protocol: IP_PROTO_UDP,
                    flags: v4.flags & !ipv4::FLAG_MF,
                    frag_offset: 0,
                    total_len: 0,
                    ident: 0,
                    ..*v4
                }
                .to_bytes_with_checksum();
                bytes[eth_len..eth_len + ipv4::LEN].copy_from_slice(&h);
                // The checksum field is the complement of the sum of the other words.
                let sum = !u16::from_be_bytes([h[10], h[11]]);
                bytes[eth_len + 10..eth_len + 12].fill(0);
                (ipv4::LEN, true, sum)
            }
            IpHeader::V6(v6) => {
                let h = Grh {
                    ip_ver: 6,
                    nxt_hdr: IP_PROTO_UDP,
                    pay_len: 0,
                    ..*v6
                }
                .to_bytes();
                bytes[eth_len..eth_len + grh::LEN].copy_from_slice(&h);
                (grh::LEN, false, 0)
            }
        };
        let udp = Udp {
            src_port: udp_src_port,
            dst_port: udp::ROCEV2_PORT,
            length: 0,
            checksum: 0,
        };
        let at = eth_len + ip_len;
        bytes[at..at + udp::LEN].copy_from_slice(&udp.to_bytes());
        let mut masked = [0u8; grh::LEN + udp::LEN];
        masked[..ip_len + udp::LEN].copy_from_slice(&bytes[eth_len..at + udp::LEN]);
        let ip_variant = if v4 {
            icrc::IPV4_VARIANT
        } else {
            icrc::IPV6_VARIANT
        };
        icrc::mask_ip_udp(&mut masked, ip_len, ip_variant);
        HeaderTemplate {
            bytes,
            masked,
            eth_len: eth_len as u8,
            v4,
            ip_sum,
        }
    }

    /// Length of the Ethernet, IP and UDP headers.
    pub fn header_len(&self) -> usize {
        usize::from(self.eth_len) + if self.v4 { ipv4::LEN } else { grh::LEN } + udp::LEN
    }

    /// Builds the frame of `transport` with these headers and IPv4 Identification `ident`
    /// (ignored for IPv6), as [`build`] does: lengths, IPv4 header checksum and ICRC filled in,
    /// padded to the Ethernet minimum; checked before the first byte is written.
    #[inline]
    pub fn build(
        &self,
        ident: u16,
        transport: &TransportPacket<'_>,
        buf: &mut [u8],
    ) -> Result<usize> {
        let tlen = usize::from(transport.headers.layout()?.header_len)
            + transport.payload.len()
            + transport.pad.len();
        let udp_len = udp::LEN + tlen + ICRC_LEN;
        let eth_len = usize::from(self.eth_len);
        let ip_len = if self.v4 { ipv4::LEN } else { grh::LEN };
        let end = eth_len + ip_len + udp_len;
        let frame_len = end.max(ethernet::MIN_FRAME_LEN);
        if buf.len() < frame_len {
            return Err(Error::Truncated {
                header: Header::Ethernet,
                need: frame_len,
                have: buf.len(),
            });
        }
        let udp_len16 = u16::try_from(udp_len).map_err(|_| Error::PayloadTooLong {
            len: udp_len,
            max: usize::from(u16::MAX),
        })?;
        if self.v4 {
            let total_len = u16::try_from(ip_len + udp_len).map_err(|_| Error::PayloadTooLong {
                len: ip_len + udp_len,
                max: usize::from(u16::MAX),
            })?;
            let layout = transport.check_emit()?;
            let checksum = self.ipv4_checksum(total_len, ident);
            self.write::<V4_HEADERS>(transport, layout, buf, end, frame_len, |h, masked| {
                h[2..4].copy_from_slice(&total_len.to_be_bytes());
                h[4..6].copy_from_slice(&ident.to_be_bytes());
                if !masked {
                    h[10..12].copy_from_slice(&checksum.to_be_bytes());
                }
                h[ipv4::LEN + 4..ipv4::LEN + 6].copy_from_slice(&udp_len16.to_be_bytes());
            })
        } else {
            let layout = transport.check_emit()?;
            self.write::<V6_HEADERS>(transport, layout, buf, end, frame_len, |h, _| {
                h[4..6].copy_from_slice(&udp_len16.to_be_bytes());
                h[grh::LEN + 4..grh::LEN + 6].copy_from_slice(&udp_len16.to_be_bytes());
            })
        }
    }

    /// Writes the frame once every check has passed: `H` is the length of the IP, UDP and BTH
    /// headers, `patch` fills the per-packet fields into the IP and UDP headers (the second
    /// argument tells the masked copy, which keeps the IPv4 checksum all ones), `end` is the end
    /// of the ICRC and `frame_len` the padded length (`buf` holds it: checked by the caller).
    ///
    /// The ICRC is computed over the frame itself, in one pass and without a copy: the frame
    /// first receives the headers with their variant bits set to one and, in the 8 bytes before
    /// the IP header (the end of the Ethernet header), the all-ones LRH stand-in; once the
    /// ICRC is known, the headers as they go on the wire and the Ethernet header are written
    /// over them.
    #[inline(always)]
    fn write<const H: usize>(
        &self,
        transport: &TransportPacket<'_>,
        layout: &OpcodeLayout,
        buf: &mut [u8],
        end: usize,
        frame_len: usize,
        patch: impl Fn(&mut [u8; H], bool),
    ) -> Result<usize> {
        let eth_len = usize::from(self.eth_len);
        let ip_udp = H - bth::LEN;
        // Everything after the BTH (extension headers, payload, pad); the end, counted from
        // the IP header.
        let rest_end = transport.emit_after_bth(layout, H, &mut buf[eth_len..])?;
        let truncated = || Error::truncated(Header::Ethernet, frame_len, eth_len);
        let bth_bytes = transport.headers.bth.to_bytes();
        {
            let (head, from_ip) = buf.split_at_mut(eth_len);
            let (Some(lrh), Some(slot)) =
                (head.last_chunk_mut::<8>(), from_ip.first_chunk_mut::<H>())
            else {
                return Err(truncated());
            };
            lrh.fill(0xFF);
            slot[..ip_udp].copy_from_slice(&self.masked[..ip_udp]);
            patch(slot, true);
            slot[ip_udp..].copy_from_slice(&bth_bytes);
            slot[ip_udp + bth::ICRC_MASKED_BYTE] = 0xFF;
        }
        let crc = icrc::raw(&buf[eth_len - 8..eth_len + rest_end]);
        let Some(slot) = buf[eth_len..].first_chunk_mut::<H>() else {
            return Err(truncated());
        };
        slot[..ip_udp].copy_from_slice(&self.bytes[eth_len..eth_len + ip_udp]);
        patch(slot, false);
        slot[ip_udp + bth::ICRC_MASKED_BYTE] = bth_bytes[bth::ICRC_MASKED_BYTE];
        match buf.first_chunk_mut::<{ ethernet::LEN }>() {
            // Untagged: a fixed-size copy.
            Some(to) if eth_len == ethernet::LEN => {
                to.copy_from_slice(&self.bytes[..ethernet::LEN]);
            }
            _ => buf[..eth_len].copy_from_slice(&self.bytes[..eth_len]),
        }
        buf[end - ICRC_LEN..end].copy_from_slice(&crc.to_le_bytes());
        buf[end..frame_len].fill(0);
        Ok(frame_len)
    }

    /// [`HeaderTemplate::build`] for the common request of a connected QP, in fewer steps: an
    /// untagged IPv4 template, the BTH given as its 12 wire bytes (its PadCnt is set here),
    /// the extension headers already serialized (`ext`, at most [`EXPRESS_EXT_MAX`] bytes),
    /// then `payload` and its zero pad. The frame replaces `out`'s contents; the bytes are
    /// those `build` writes for the same packet (tested). False, and `out` untouched, for a
    /// template or packet this path does not take (VLAN-tagged or IPv6 template, `ext` too
    /// long, a payload that does not fit in a UDP datagram): the caller uses `build`.
    #[inline]
    pub fn build_v4_express(
        &self,
        ident: u16,
        mut bth: [u8; bth::LEN],
        ext: &[u8],
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> bool {
        const ETH: usize = ethernet::LEN;
        const IP_UDP: usize = ipv4::LEN + udp::LEN;
        const LRH: usize = 8;
        if !self.v4 || usize::from(self.eth_len) != ETH || ext.len() > EXPRESS_EXT_MAX {
            return false;
        }
        let pad = crate::transport::pad_for(payload.len());
        let udp_len = udp::LEN + bth::LEN + ext.len() + payload.len() + pad + ICRC_LEN;
        let Ok(total_len) = u16::try_from(ipv4::LEN + udp_len) else {
            return false;
        };
        let udp_len = total_len - ipv4::LEN as u16;
        let flags = &mut bth[bth::field::FLAGS];
        *flags = (*flags & !bth::field::PAD_MASK) | ((pad as u8) << bth::field::PAD_SHIFT);
        let end = ETH + usize::from(total_len);
        // Over the frame itself, in one pass: the LRH stand-in over the end of the Ethernet
        // header and the masked IP, UDP and BTH headers first; the ICRC is computed over them
        // and what follows, then the wire headers are written over them.
        out.resize(end.max(ethernet::MIN_FRAME_LEN), 0);
        let (head, rest) = out.split_at_mut(ETH + IP_UDP + bth::LEN);
        let Some(head) = head.first_chunk_mut::<{ ETH + IP_UDP + bth::LEN }>() else {
            return false;
        };
        let masked = &self.masked[..IP_UDP];
        let ip_udp = ip_udp_v4(masked, total_len, ident, udp_len);
        head[ETH - LRH..ETH].fill(0xFF);
        head[ETH..ETH + IP_UDP].copy_from_slice(&ip_udp);
        head[ETH + IP_UDP..].copy_from_slice(&bth);
        head[ETH + IP_UDP + bth::ICRC_MASKED_BYTE] = 0xFF;
        let body = ext.len() + payload.len();
        rest[..ext.len()].copy_from_slice(ext);
        rest[ext.len()..body].copy_from_slice(payload);
        if pad > 0 {
            rest[body..body + pad].fill(0);
        }
        let crc = icrc::raw(&out[ETH - LRH..end - ICRC_LEN]);
        // The wire headers.
        let mut ip_udp = ip_udp_v4(&self.bytes[ETH..ETH + IP_UDP], total_len, ident, udp_len);
        let checksum = self.ipv4_checksum(total_len, ident);
        ip_udp[10..12].copy_from_slice(&checksum.to_be_bytes());
        let Some(head) = out.first_chunk_mut::<{ ETH + IP_UDP + bth::LEN }>() else {
            return false;
        };
        head[..ETH].copy_from_slice(&self.bytes[..ETH]);
        head[ETH..ETH + IP_UDP].copy_from_slice(&ip_udp);
        head[ETH + IP_UDP + bth::ICRC_MASKED_BYTE] = bth[bth::ICRC_MASKED_BYTE];
        out[end - ICRC_LEN..end].copy_from_slice(&crc.to_le_bytes());
        if end < out.len() {
            // Ethernet padding up to the minimum frame.
            out[end..].fill(0);
        }
        true
    }

    /// [`HeaderTemplate::build_v4_express`] for a sender whose UDP socket writes the IP and UDP
    /// headers itself, with IPv4 Identification 0 (what the kernel gives a lone datagram with
    /// DF set): only the datagram (BTH, `ext`, `payload`, pad, ICRC) is appended to `out`, and
    /// where it starts is returned. Its bytes are those of the UDP payload of the frame
    /// `build_v4_express(0, ..)` writes (tested); `None`, and `out` untouched, where that
    /// returns false.
    ///
    /// The ICRC covers the LRH stand-in and the masked IP and UDP headers before the BTH. Up to
    /// the UDP ports they depend on the template and the IP total length only: `prefix`
    /// keeps their CRC for the last two total lengths (a connection's packets mostly have
    /// one size, or two). The pass then covers 4 + 12 + `ext`, payload and pad bytes, whole 16-byte
    /// blocks for the common sizes: the UDP length and masked checksum are written for it
    /// over the 4 bytes in front of the datagram (the end of the previous one, put back
    /// after; `out` is given 4 leading bytes when shorter).
    #[inline(always)]
    pub fn append_v4_datagram(
        &self,
        prefix: &mut V4PrefixCrc,
        mut bth: [u8; bth::LEN],
        ext: &[u8],
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        const IP_UDP: usize = ipv4::LEN + udp::LEN;
        const LRH: usize = 8;
        /// The UDP length and checksum: the covered bytes before the BTH that the prefix
        /// leaves out.
        const UDP_TAIL: usize = 4;
        if !self.v4 || usize::from(self.eth_len) != ethernet::LEN || ext.len() > EXPRESS_EXT_MAX {
            return None;
        }
        let pad = crate::transport::pad_for(payload.len());
        let udp_len = udp::LEN + bth::LEN + ext.len() + payload.len() + pad + ICRC_LEN;
        let total_len = u16::try_from(ipv4::LEN + udp_len).ok()?;
        let udp_len = total_len - ipv4::LEN as u16;
        let flags = &mut bth[bth::field::FLAGS];
        *flags = (*flags & !bth::field::PAD_MASK) | ((pad as u8) << bth::field::PAD_SHIFT);
        let after = prefix.for_len(total_len, || {
            let masked = ip_udp_v4(&self.masked[..IP_UDP], total_len, 0, udp_len);
            let mut p = [0xFFu8; LRH + IP_UDP - UDP_TAIL];
            p[LRH..].copy_from_slice(&masked[..IP_UDP - UDP_TAIL]);
            icrc::Continued::after(&p)
        });
        if out.len() < UDP_TAIL {
            out.resize(UDP_TAIL, 0);
        }
        let start = out.len();
        // BTH and extension headers in one fixed-size copy (the excess cut off after).
        let mut head = [0u8; bth::LEN + EXPRESS_EXT_MAX];
        head[..bth::LEN].copy_from_slice(&bth);
        head[bth::LEN..bth::LEN + ext.len()].copy_from_slice(ext);
        head[bth::ICRC_MASKED_BYTE] = 0xFF;
        out.extend_from_slice(&head);
        out.truncate(start + bth::LEN + ext.len());
        out.extend_from_slice(payload);
        if pad > 0 {
            // (Most payloads are whole words: no call to append nothing.)
            out.extend_from_slice(&[0u8; 3][..pad]);
        }
        let end = out.len();
        // The UDP length and the checksum masked to ones, over the 4 bytes in front.
        let [len_hi, len_lo] = udp_len.to_be_bytes();
        let tail = &mut out[start - UDP_TAIL..start];
        let saved = [tail[0], tail[1], tail[2], tail[3]];
        tail.copy_from_slice(&[len_hi, len_lo, 0xFF, 0xFF]);
        let crc = after.finish(&out[start - UDP_TAIL..end]);
        out[start - UDP_TAIL..start].copy_from_slice(&saved);
        out[start + bth::ICRC_MASKED_BYTE] = bth[bth::ICRC_MASKED_BYTE];
        out.extend_from_slice(&crc.to_le_bytes());
        Some(start)
    }

    /// True when the template's source address is `addr`, a GID's 16 bytes: for an IPv4
    /// template, `addr` is the IPv4-mapped form (`::ffff:a.b.c.d`) of its source; for IPv6,
    /// its source itself.
    #[inline]
    pub fn source_is(&self, addr: &[u8; 16]) -> bool {
        let ip = usize::from(self.eth_len);
        if self.v4 {
            u128::from_be_bytes(*addr) >> 32 == 0xffff && addr[12..] == self.bytes[ip + 12..ip + 16]
        } else {
            addr[..] == self.bytes[ip + 8..ip + 24]
        }
    }

    /// The destination of an IPv4 template's packets.
    #[inline]
    pub fn v4_destination(&self) -> Option<[u8; 4]> {
        let at = usize::from(self.eth_len) + 16;
        self.v4
            .then(|| self.bytes[at..at + 4].try_into().ok())
            .flatten()
    }

    /// The IPv4 header checksum for a total length and an Identification: the complement of
    /// the ones' complement sum, the template's words and the two (end-around carry).
    #[inline(always)]
    fn ipv4_checksum(&self, total_len: u16, ident: u16) -> u16 {
        ipv4::checksum_adding(self.ip_sum, [total_len, ident])
    }
}

/// The CRC of the ICRC-covered bytes of a RoCEv2/IPv4 packet before its UDP length (the LRH
/// stand-in, the masked IPv4 header, the UDP ports) for IPv4 Identification 0
/// ([`HeaderTemplate::append_v4_datagram`] keeps it per connection), kept as the CRC state a
/// packet's pass continues from, for the last two IP total lengths: a connection's packets
/// mostly have one size, or alternate between two (an RDMA WRITE and the ACK of the peer's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct V4PrefixCrc(icrc::TwoSlots<u16, icrc::Continued>);

impl V4PrefixCrc {
    /// The pass for `total_len` (0, no packet's, is "none"), made by `make` when not kept.
    #[inline(always)]
    fn for_len(
        &mut self,
        total_len: u16,
        make: impl FnOnce() -> icrc::Continued,
    ) -> &icrc::Continued {
        self.0.get_or_make(total_len, |_| make())
    }
}

/// An IPv4 header without options and a UDP header (`base`, 28 bytes: a template's wire or
/// masked copy) with a total length, an Identification and a UDP length filled in.
#[inline(always)]
fn ip_udp_v4(base: &[u8], total_len: u16, ident: u16, udp_len: u16) -> [u8; ipv4::LEN + udp::LEN] {
    let mut h = [0u8; ipv4::LEN + udp::LEN];
    h.copy_from_slice(base);
    h[2..4].copy_from_slice(&total_len.to_be_bytes());
    h[4..6].copy_from_slice(&ident.to_be_bytes());
    h[ipv4::LEN + 4..ipv4::LEN + 6].copy_from_slice(&udp_len.to_be_bytes());
    h
}

/// The longest extension headers [`HeaderTemplate::build_v4_express`] takes: an AtomicETH
/// (longer than a RETH and an ImmDt, or an AETH and an AtomicAckETH).
pub const EXPRESS_EXT_MAX: usize = crate::atomic_eth::LEN;
/// IPv4 + UDP + BTH.
const V4_HEADERS: usize = ipv4::LEN + udp::LEN + bth::LEN;
/// IPv6 + UDP + BTH.
const V6_HEADERS: usize = grh::LEN + udp::LEN + bth::LEN;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aeth::Aeth;
    use crate::opcode::Opcode;
    use crate::pcap::PcapReader;
    use crate::psn::{Msn, Psn, Qpn};

    const VECTORS: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/testvectors/rxe"
    );

    /// Every frame of every capture.
    fn capture_frames() -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(VECTORS)
            .expect("test vectors")
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
            .collect();
        names.sort();
        for path in names {
            let data = std::fs::read(&path).unwrap();
            for rec in PcapReader::new(&data).unwrap().records() {
                out.push(rec.unwrap().data.to_vec());
            }
        }
        out
    }

    /// xorshift64: deterministic mutations without a dependency.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// The combined comparisons of the common-frame path accept only frames the field-by-field
    /// checks accept, and both paths give the same packet (or error) for every frame: captured
    /// frames (IPv4 and IPv6) and mutations of them aimed at the header fields. The express
    /// read takes exactly the common RC packets among the frames that parse, and reads them
    /// as the parse does.
    #[test]
    fn common_frame_path_agrees_with_the_general_path() {
        let frames = capture_frames();
        assert!(frames.len() > 300);
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut plain, mut plain_ok, mut express_read, mut datagram_read) = (0, 0, 0, 0);
        for f in &frames {
            for round in 0..40 {
                let mut g = f.clone();
                match round {
                    0 => {}
                    1..=29 => {
                        for _ in 0..=rng.below(2) {
                            let at = rng.below(g.len().min(70));
                            g[at] ^= 1 << rng.below(8);
                        }
                    }
                    30..=34 => g.truncate(rng.below(g.len() + 1)),
                    35..=37 => g.extend(std::iter::repeat_n(0xA5, rng.below(9))),
                    _ => {
                        // Length fields: IPv4 total length, UDP length.
                        let at = [16, 17, 38, 39][rng.below(4)];
                        if at < g.len() {
                            g[at] = g[at].wrapping_add(rng.below(9) as u8).wrapping_sub(4);
                        }
                    }
                }
                let general = Parts::check(&g).and_then(Parts::assemble);
                assert_eq!(RocePacket::parse(&g), general, "{g:02x?}");
                if let Some(parts) = Parts::plain_v4(&g) {
                    plain += 1;
                    let fast = parts.assemble();
                    plain_ok += usize::from(fast.is_ok());
                    assert_eq!(fast, general, "{g:02x?}");
                }
                let express = RocePacket::parse_express(&g);
                express_read += usize::from(express.is_some());
                assert_eq!(
                    express,
                    general.as_ref().ok().and_then(express_of),
                    "{g:02x?}"
                );
                if let (Some(x), Ok(p)) = (express, &general) {
                    assert_eq!(x.icrc_ok(), p.icrc_ok());
                }
                // The same packet read from the frame's UDP datagram where it lies.
                if let Some(parts) = Parts::plain_v4(&g) {
                    let RawIp::V4(ip) = parts.ip else {
                        unreachable!("plain_v4 is IPv4")
                    };
                    let at = PLAIN_V4_HEADERS;
                    let datagram = &g[at..at + parts.raw_transport.len() + ICRC_LEN];
                    let (src, dst) = (ip[12..16].try_into(), ip[16..20].try_into());
                    let x = ExpressPacket::parse_datagram(src.unwrap(), dst.unwrap(), datagram);
                    datagram_read += usize::from(x.is_some());
                    assert_eq!(x, express.map(|e| e.packet), "{g:02x?}");
                }
            }
        }
        assert!(plain > 5000 && plain_ok > 5000, "{plain} {plain_ok}");
        assert!(express_read > 500, "{express_read}");
        assert_eq!(datagram_read, express_read);
    }

    /// What [`RocePacket::parse_express`] should read from a frame that parsed as `p`.
    fn express_of<'a>(p: &RocePacket<'a>) -> Option<ExpressFrame<'a>> {
        let IpHeader::V4(ip) = p.ip else {
            return None;
        };
        let h = &p.transport.headers;
        let op = h.bth.opcode;
        let express_op = [
            Opcode::RC_SEND_ONLY,
            Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            Opcode::RC_RDMA_WRITE_ONLY,
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            Opcode::RC_RDMA_READ_REQUEST,
            Opcode::RC_ACKNOWLEDGE,
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            Opcode::RC_RDMA_READ_RESPONSE_LAST,
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            Opcode::RC_COMPARE_SWAP,
            Opcode::RC_FETCH_ADD,
            Opcode::RC_ATOMIC_ACKNOWLEDGE,
        ]
        .contains(&op);
        if !express_op || p.eth.vlan.is_some() || !p.ip_options.is_empty() {
            return None;
        }
        Some(ExpressFrame {
            packet: ExpressPacket {
                src: ip.src,
                dst: ip.dst,
                bth: h.bth,
                reth: h.reth,
                immdt: h.immdt,
                aeth: h.aeth,
                atomic_eth: h.atomic_eth,
                atomic_ack_eth: h.atomic_ack_eth,
                payload: p.transport.payload,
            },
            raw_ip: p.raw_ip,
            raw_udp: p.raw_udp,
            raw_transport: p.raw_transport,
            icrc: p.icrc,
        })
    }

    fn ethernet(vlan: Option<VlanTag>) -> Ethernet {
        Ethernet {
            dst: [0x02, 0, 0, 0, 0, 2],
            src: [0x02, 0, 0, 0, 0, 1],
            ether_type: 0x1234,
            vlan,
        }
    }

    fn ip(v6: bool) -> IpHeader {
        if v6 {
            IpHeader::V6(Grh {
                ip_ver: 0,
                tclass: 0x5a,
                flow_label: 0x12345,
                pay_len: 0,
                nxt_hdr: 0,
                hop_lmt: 64,
                sgid: [0xfe; 16],
                dgid: [0x80; 16],
            })
        } else {
            IpHeader::V4(Ipv4 {
                dscp_ecn: 0x02,
                ident: 0xe80e,
                flags: 0x3,
                frag_offset: 0x1fff,
                ttl: 64,
                checksum: 0xdead,
                src: [10, 99, 0, 2],
                dst: [10, 99, 0, 3],
                ..Ipv4::default()
            })
        }
    }

    /// `build` against the frame assembled piece by piece from the header emitters and the
    /// public ICRC function (how `build` worked before the ICRC was computed in the frame).
    #[test]
    fn build_matches_a_piecewise_reference() {
        let payload: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        let aeth = Aeth {
            syndrome: 0x1f,
            msn: Msn::new(9),
        };
        for (op, len) in [
            (Opcode::RC_SEND_ONLY, 0),
            (Opcode::RC_SEND_ONLY, 1),
            (Opcode::RC_SEND_ONLY, 64),
            (Opcode::RC_SEND_MIDDLE, 256),
            (Opcode::RC_RDMA_WRITE_MIDDLE, 300),
            (Opcode::RC_ACKNOWLEDGE, 0),
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 77),
        ] {
            let mut h = TransportHeaders::new(Bth {
                opcode: op,
                pkey: 0xffff,
                dest_qp: Qpn::new(0x11),
                psn: Psn::new(0xabcdef),
                ack_req: true,
                fecn: true,
                resv6a: 0x15,
                ..Bth::default()
            });
            if op
                .info()
                .unwrap()
                .headers
                .contains(crate::opcode::ExtHeaders::AETH)
            {
                h.aeth = Some(aeth);
            }
            let t = TransportPacket::new(h, &payload[..len]);
            for (vlan, v6, ident) in [
                (None, false, 0xe80e),
                (None, false, 0),
                (None, false, 0xffff),
                (None, false, 0x17f1),
                (None, true, 0),
                (Some(VlanTag::from_tci(0xb123)), false, 0xe80e),
                (Some(VlanTag::from_tci(0xb123)), true, 0),
            ] {
                {
                    let (eth, mut ip) = (ethernet(vlan), ip(v6));
                    if let IpHeader::V4(v4) = &mut ip {
                        v4.ident = ident;
                    }
                    let mut got = vec![0x77u8; 600];
                    let n = build(&eth, &ip, 0xc0de, &t, &mut got).unwrap();

                    let mut want = vec![0x77u8; 600];
                    let tlen = t.wire_len().unwrap();
                    let udp_len = udp::LEN + tlen + ICRC_LEN;
                    let mut e = eth;
                    let (ip_len, ip_bytes) = match ip {
                        IpHeader::V4(v4) => {
                            e.ether_type = ethernet::ETHERTYPE_IPV4;
                            let mut v4 = v4;
                            (v4.version, v4.ihl, v4.protocol) = (4, 5, IP_PROTO_UDP);
                            (v4.flags, v4.frag_offset) = (v4.flags & !ipv4::FLAG_MF, 0);
                            v4.total_len = (ipv4::LEN + udp_len) as u16;
                            let mut b = vec![0u8; ipv4::LEN];
                            v4.emit(&mut b).unwrap();
                            ipv4::fill_checksum(&mut b);
                            (ipv4::LEN, b)
                        }
                        IpHeader::V6(v6) => {
                            e.ether_type = ethernet::ETHERTYPE_IPV6;
                            let mut v6 = v6;
                            (v6.ip_ver, v6.nxt_hdr, v6.pay_len) = (6, IP_PROTO_UDP, udp_len as u16);
                            let mut b = vec![0u8; grh::LEN];
                            v6.emit(&mut b).unwrap();
                            (grh::LEN, b)
                        }
                    };
                    let ip_at = e.emit(&mut want).unwrap();
                    want[ip_at..ip_at + ip_len].copy_from_slice(&ip_bytes);
                    let udp_at = ip_at + ip_len;
                    Udp {
                        src_port: 0xc0de,
                        dst_port: udp::ROCEV2_PORT,
                        length: udp_len as u16,
                        checksum: 0,
                    }
                    .emit(&mut want[udp_at..])
                    .unwrap();
                    let t_at = udp_at + udp::LEN;
                    assert_eq!(t.emit(&mut want[t_at..]), Ok(tlen));
                    let end = t_at + tlen + ICRC_LEN;
                    let icrc = match ip {
                        IpHeader::V4(_) => icrc::roce_v4(
                            &want[ip_at..udp_at],
                            &want[udp_at..t_at],
                            &want[t_at..t_at + tlen],
                        ),
                        IpHeader::V6(_) => icrc::roce_v6(
                            &want[ip_at..udp_at],
                            &want[udp_at..t_at],
                            &want[t_at..t_at + tlen],
                        ),
                    };
                    want[end - ICRC_LEN..end].copy_from_slice(&icrc.to_le_bytes());
                    let frame_len = end.max(ethernet::MIN_FRAME_LEN);
                    want[end..frame_len].fill(0);
                    assert_eq!(n, frame_len);
                    assert_eq!(got, want, "{op:?} {len} {vlan:?} v6={v6}");
                    assert!(RocePacket::parse_verified(&got[..n]).is_ok());
                    // A template made from other values of the fields it fills in per packet
                    // builds the same frame.
                    let mut other = ip;
                    match &mut other {
                        IpHeader::V4(v4) => {
                            (v4.ident, v4.total_len, v4.checksum) = (0x5a5a, 999, 0x1234)
                        }
                        IpHeader::V6(v6) => v6.pay_len = 999,
                    }
                    let tmpl = HeaderTemplate::new(&eth, &other, 0xc0de);
                    assert_eq!(tmpl.header_len(), ip_at + ip_len + udp::LEN);
                    let mut got = vec![0x77u8; 600];
                    assert_eq!(tmpl.build(ident, &t, &mut got), Ok(n));
                    assert_eq!(got, want, "template: {op:?} {len} {vlan:?} v6={v6}");
                }
            }
        }
    }

    /// The express build gives `build`'s bytes for the packets it takes: every opcode whose
    /// extension headers are among RETH, AtomicETH, AETH, AtomicAckETH and ImmDt (the express
    /// paths' requests and responses), every pad, the Ethernet minimum
    /// and longer frames; and it refuses tagged and IPv6 templates, leaving `out` as it was.
    #[test]
    fn express_build_matches_build() {
        let payload: Vec<u8> = (0..1100u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut checked = 0;
        let mut prefix_for_other_len = V4PrefixCrc::default();
        for code in 0..=u8::MAX {
            let op = Opcode(code);
            let Some(info) = op.info() else { continue };
            let mut h = TransportHeaders::new(Bth {
                opcode: op,
                solicited: code % 3 == 0,
                ack_req: code % 2 == 0,
                pkey: 0xffff,
                dest_qp: Qpn::new(0x12_3456),
                psn: Psn::new(0xab_cdef),
                ..Bth::default()
            });
            use crate::opcode::ExtHeaders as X;
            let taken = X::RETH
                .union(X::IMMDT)
                .union(X::ATOMIC_ETH)
                .union(X::AETH)
                .union(X::ATOMIC_ACK_ETH);
            if info.headers.bits() & !taken.bits() != 0 {
                continue;
            }
            if info.headers.contains(X::ATOMIC_ETH) {
                h.atomic_eth = Some(crate::atomic_eth::AtomicEth {
                    va: 0x0102_0304_0506_0708,
                    rkey: 0x5566_7788,
                    swap_add: 0x1112_1314_1516_1718,
                    compare: 0x2122_2324_2526_2728,
                });
            }
            if info.headers.contains(X::AETH) {
                h.aeth = Some(crate::aeth::Aeth {
                    syndrome: 0x1f,
                    msn: crate::psn::Msn::new(0x44_5566),
                });
            }
            if info.headers.contains(X::ATOMIC_ACK_ETH) {
                h.atomic_ack_eth = Some(crate::atomic_ack_eth::AtomicAckEth {
                    orig_remote_data: 0x3132_3334_3536_3738,
                });
            }
            if info.headers.contains(X::RETH) {
                h.reth = Some(crate::reth::Reth {
                    va: 0x1122_3344_5566_7788,
                    rkey: 0x99aa_bbcc,
                    dma_len: 77,
                });
            }
            if info.headers.contains(X::IMMDT) {
                h.immdt = Some(crate::immdt::ImmDt { imm: 0xdead_beef });
            }
            let ext_len = usize::from(h.layout().unwrap().header_len) - bth::LEN;
            let mut ext = vec![0u8; ext_len + bth::LEN];
            h.emit(&mut ext).unwrap();
            let ext = ext[bth::LEN..].to_vec();
            for len in (0..=70).chain([1024, 1100]) {
                let t = TransportPacket::new(h, &payload[..len]);
                for ident in [0, 1, 0xe80e, 0xffff] {
                    let tmpl = HeaderTemplate::new(&ethernet(None), &ip(false), 0xc0de);
                    let mut want = vec![0x77u8; 1300];
                    // Packets `build` refuses (a payload on an opcode without one) are not
                    // the express path's: its caller builds only valid requests.
                    let Ok(n) = tmpl.build(ident, &t, &mut want) else {
                        continue;
                    };
                    want.truncate(n);
                    let mut got = vec![0x55u8; 7];
                    let mut bth_bytes = h.bth.to_bytes();
                    bth_bytes[1] |= 0x30; // PadCnt is the builder's to set
                    assert!(tmpl.build_v4_express(
                        ident,
                        bth_bytes,
                        &ext,
                        &payload[..len],
                        &mut got
                    ));
                    assert_eq!(got, want, "{op:?} {len} {ident}");
                    checked += 1;
                    if ident == 0 {
                        // The datagram form, appended behind others: the frame's UDP
                        // payload, the bytes in front of it unchanged, whatever the cached
                        // prefix was for.
                        let at = ethernet::LEN + ipv4::LEN + udp::LEN;
                        let udp_len = usize::from(u16::from_be_bytes([want[at - 4], want[at - 3]]));
                        let datagram = &want[at..at - udp::LEN + udp_len];
                        let dst = tmpl.v4_destination().unwrap();
                        assert_eq!(&want[ethernet::LEN + 16..ethernet::LEN + 20], &dst);
                        for (mut prefix, before) in [
                            (V4PrefixCrc::default(), vec![]),
                            (V4PrefixCrc::default(), vec![9u8; 3]),
                            (prefix_for_other_len.clone(), vec![1u8, 2, 3, 4, 5, 6]),
                        ] {
                            let mut out = before.clone();
                            let start = tmpl
                                .append_v4_datagram(
                                    &mut prefix,
                                    bth_bytes,
                                    &ext,
                                    &payload[..len],
                                    &mut out,
                                )
                                .unwrap();
                            assert_eq!(&out[start..], datagram, "{op:?} {len}");
                            assert_eq!(start, before.len().max(4));
                            assert_eq!(&out[..before.len()], &before[..]);
                            // The prefix kept is the one for this length.
                            let mut again = vec![0u8; 4];
                            tmpl.append_v4_datagram(
                                &mut prefix,
                                bth_bytes,
                                &ext,
                                &payload[..len],
                                &mut again,
                            )
                            .unwrap();
                            assert_eq!(&again[4..], datagram);
                            prefix_for_other_len = prefix;
                        }
                    }
                }
            }
        }
        assert!(checked > 1000, "{checked}");
        let bth_bytes = Bth::default().to_bytes();
        for tmpl in [
            HeaderTemplate::new(&ethernet(Some(VlanTag::from_tci(0xb123))), &ip(false), 1),
            HeaderTemplate::new(&ethernet(None), &ip(true), 1),
        ] {
            let mut out = vec![1, 2, 3];
            assert!(!tmpl.build_v4_express(1, bth_bytes, &[], &[0; 8], &mut out));
            let mut prefix = V4PrefixCrc::default();
            assert!(tmpl
                .append_v4_datagram(&mut prefix, bth_bytes, &[], &[0; 8], &mut out)
                .is_none());
            assert_eq!(out, [1, 2, 3]);
        }
        let tmpl = HeaderTemplate::new(&ethernet(None), &ip(false), 1);
        let mut out = vec![1, 2, 3];
        assert!(!tmpl.build_v4_express(1, bth_bytes, &[0; EXPRESS_EXT_MAX + 4], &[], &mut out));
        assert!(!tmpl.build_v4_express(1, bth_bytes, &[], &vec![0; 65_536], &mut out));
        let mut prefix = V4PrefixCrc::default();
        for (ext, payload) in [
            (&[0u8; EXPRESS_EXT_MAX + 4][..], &[][..]),
            (&[], &vec![0; 65_536][..]),
        ] {
            assert!(tmpl
                .append_v4_datagram(&mut prefix, bth_bytes, ext, payload, &mut out)
                .is_none());
        }
        assert_eq!(out, [1, 2, 3]);
    }

    /// A template's source address is recognised in a GID's bytes: the IPv4-mapped form of
    /// an IPv4 source (with and without a VLAN tag), an IPv6 source itself; nothing else.
    #[test]
    fn template_source_is_its_gid() {
        let mapped = |a: [u8; 4]| {
            let mut g = [0u8; 16];
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(&a);
            g
        };
        for tag in [None, Some(VlanTag::from_tci(0xb123))] {
            let v4 = HeaderTemplate::new(&ethernet(tag), &ip(false), 1);
            assert!(v4.source_is(&mapped([10, 99, 0, 2])));
            assert!(!v4.source_is(&mapped([10, 99, 0, 3])));
            let mut not_mapped = mapped([10, 99, 0, 2]);
            not_mapped[0] = 0xfe;
            assert!(!v4.source_is(&not_mapped));
            let v6 = HeaderTemplate::new(&ethernet(tag), &ip(true), 1);
            assert!(v6.source_is(&[0xfe; 16]));
            assert!(!v6.source_is(&[0x80; 16]));
            let mut last = [0xfe; 16];
            last[15] = 0xff;
            assert!(!v6.source_is(&last));
            assert!(!v6.source_is(&mapped([10, 99, 0, 2])));
        }
    }

    /// A refused packet leaves the buffer as it was.
    #[test]
    fn build_writes_nothing_on_error() {
        let mut h = TransportHeaders::new(Bth {
            opcode: Opcode::RC_SEND_ONLY,
            ..Bth::default()
        });
        h.reth = Some(crate::reth::Reth::default());
        let t = TransportPacket::new(h, &[1, 2, 3, 4]);
        let mut buf = [0x77u8; 128];
        assert!(matches!(
            build(&ethernet(None), &ip(false), 1, &t, &mut buf),
            Err(Error::HeaderSet { .. })
        ));
        assert!(buf.iter().all(|&b| b == 0x77));
        let t = TransportPacket::new(TransportHeaders::new(Bth::default()), &[0; 64]);
        let mut short = [0x77u8; 100];
        assert!(matches!(
            build(&ethernet(None), &ip(true), 1, &t, &mut short),
            Err(Error::Truncated { need: 142, .. })
        ));
        assert!(short.iter().all(|&b| b == 0x77));
    }
}
