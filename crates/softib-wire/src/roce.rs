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

use crate::error::{Error, Field, Header, Result};
use crate::ethernet::{self, Ethernet};
use crate::grh::{self, Grh};
use crate::icrc;
use crate::ipv4::Ipv4;
use crate::transport::TransportPacket;
use crate::udp::{self, Udp};

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

impl<'a> RocePacket<'a> {
    /// Parses an Ethernet frame (no FCS) holding a RoCEv2 packet.
    pub fn parse(frame: &'a [u8]) -> Result<RocePacket<'a>> {
        let eth = Ethernet::parse(frame)?;
        let l3 = &frame[eth.header_len()..];
        let (ip, ip_hdr_len, datagram_len) = match eth.ether_type {
            ethernet::ETHERTYPE_IPV4 => {
                let ip = Ipv4::parse(l3)?;
                let hl = ip.header_len();
                let total = usize::from(ip.total_len);
                if total < hl || total > l3.len() {
                    return Err(Error::Length {
                        field: Field::Ipv4TotalLength,
                        claimed: total,
                        actual: l3.len(),
                    });
                }
                if ip.frag_offset != 0 || ip.flags & 0x1 != 0 {
                    let v = (u64::from(ip.flags) << 13) | u64::from(ip.frag_offset);
                    return Err(Error::BadField {
                        field: Field::Ipv4Fragment,
                        value: v,
                    });
                }
                if ip.protocol != IP_PROTO_UDP {
                    return Err(Error::BadField {
                        field: Field::Ipv4Protocol,
                        value: ip.protocol.into(),
                    });
                }
                (IpHeader::V4(ip), hl, total)
            }
            ethernet::ETHERTYPE_IPV6 => {
                let ip = Grh::parse(l3)?;
                if ip.ip_ver != 6 {
                    return Err(Error::BadField {
                        field: Field::Ipv6Version,
                        value: ip.ip_ver.into(),
                    });
                }
                let total = grh::LEN + usize::from(ip.pay_len);
                if total > l3.len() {
                    return Err(Error::Length {
                        field: Field::Ipv6PayloadLength,
                        claimed: usize::from(ip.pay_len),
                        actual: l3.len() - grh::LEN,
                    });
                }
                if ip.nxt_hdr != IP_PROTO_UDP {
                    return Err(Error::BadField {
                        field: Field::Ipv6NextHeader,
                        value: ip.nxt_hdr.into(),
                    });
                }
                (IpHeader::V6(ip), grh::LEN, total)
            }
            other => {
                return Err(Error::BadField {
                    field: Field::EtherType,
                    value: other.into(),
                })
            }
        };
        let raw_ip = &l3[..ip_hdr_len];
        let ip_options = match ip {
            IpHeader::V4(_) => &raw_ip[crate::ipv4::LEN..],
            IpHeader::V6(_) => &[],
        };
        let l4 = &l3[ip_hdr_len..datagram_len];
        let trailer = &l3[datagram_len..];
        let udp = Udp::parse(l4)?;
        if udp.dst_port != udp::ROCEV2_PORT {
            return Err(Error::BadField {
                field: Field::UdpDstPort,
                value: udp.dst_port.into(),
            });
        }
        if usize::from(udp.length) != l4.len() {
            return Err(Error::Length {
                field: Field::UdpLength,
                claimed: usize::from(udp.length),
                actual: l4.len(),
            });
        }
        let body = &l4[udp::LEN..];
        if body.len() < crate::bth::LEN + ICRC_LEN {
            return Err(Error::Truncated {
                header: Header::Icrc,
                need: crate::bth::LEN + ICRC_LEN,
                have: body.len(),
            });
        }
        let (raw_transport, icrc_bytes) = body.split_at(body.len() - ICRC_LEN);
        let transport = TransportPacket::parse(raw_transport)?;
        Ok(RocePacket {
            eth,
            ip,
            ip_options,
            udp,
            transport,
            icrc: icrc::get(icrc_bytes)?,
            trailer,
            raw_ip,
            raw_udp: &l4[..udp::LEN],
            raw_transport,
        })
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
            IpHeader::V4(_) => crate::ipv4::LEN + self.ip_options.len(),
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
pub fn build(
    eth: &Ethernet,
    ip: &IpHeader,
    udp_src_port: u16,
    transport: &TransportPacket<'_>,
    buf: &mut [u8],
) -> Result<usize> {
    let tlen = transport.wire_len()?;
    let udp_len = udp::LEN + tlen + ICRC_LEN;
    let eth_len = eth.header_len();
    let ip_len = match ip {
        IpHeader::V4(_) => crate::ipv4::LEN,
        IpHeader::V6(_) => grh::LEN,
    };
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
    let mut e = *eth;
    e.ether_type = match ip {
        IpHeader::V4(_) => ethernet::ETHERTYPE_IPV4,
        IpHeader::V6(_) => ethernet::ETHERTYPE_IPV6,
    };
    e.emit(buf)?;
    let ip_at = eth_len;
    match ip {
        IpHeader::V4(v4) => {
            let mut v4 = *v4;
            v4.version = 4;
            v4.ihl = 5;
            v4.protocol = IP_PROTO_UDP;
            // A RoCEv2 packet is never a fragment: MF clear, offset 0.
            v4.flags &= !0b001;
            v4.frag_offset = 0;
            v4.total_len = u16::try_from(ip_len + udp_len).map_err(|_| Error::PayloadTooLong {
                len: ip_len + udp_len,
                max: usize::from(u16::MAX),
            })?;
            v4.checksum = 0;
            v4.emit(&mut buf[ip_at..])?;
            crate::ipv4::fill_checksum(&mut buf[ip_at..ip_at + ip_len]);
        }
        IpHeader::V6(v6) => {
            let mut v6 = *v6;
            v6.ip_ver = 6;
            v6.nxt_hdr = IP_PROTO_UDP;
            v6.pay_len = udp_len16;
            v6.emit(&mut buf[ip_at..])?;
        }
    }
    let udp_at = ip_at + ip_len;
    let u = Udp {
        src_port: udp_src_port,
        dst_port: udp::ROCEV2_PORT,
        length: udp_len16,
        checksum: 0,
    };
    u.emit(&mut buf[udp_at..])?;
    let t_at = udp_at + udp::LEN;
    transport.emit(&mut buf[t_at..])?;
    let icrc_at = t_at + tlen;
    let (head, tail) = buf.split_at_mut(icrc_at);
    let crc = match ip {
        IpHeader::V4(_) => icrc::roce_v4(&head[ip_at..udp_at], &head[udp_at..t_at], &head[t_at..]),
        IpHeader::V6(_) => icrc::roce_v6(&head[ip_at..udp_at], &head[udp_at..t_at], &head[t_at..]),
    };
    icrc::put(tail, crc)?;
    buf[end..frame_len].fill(0);
    Ok(frame_len)
}
