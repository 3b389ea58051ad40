//! Native InfiniBand framing: LRH, then what LRH:LNH selects (IBA 7.7.5; seed 002 table 4-2),
//! then the VCRC.
//!
//! | LNH | packet | after the LRH | trailer |
//! |---|---|---|---|
//! | 3 | IBA global | GRH, BTH … payload, pad | ICRC, VCRC |
//! | 2 | IBA local | BTH … payload, pad | ICRC, VCRC |
//! | 1 | raw IPv6 | IPv6 header, payload | VCRC |
//! | 0 | raw EtherType | RWH, payload | VCRC |
//!
//! LRH:PktLen counts 4-byte words from the first LRH byte through the ICRC (raw packets: through
//! the payload); the VCRC (2 bytes) follows and is not counted. Raw packets carry no ICRC, no
//! PadCnt and no DestQP; their payload is a whole number of words (o9-145). A raw IPv6 packet
//! must not carry an IBA transport header (next header 0x1B; C9-208).

use crate::error::{Error, Field, Header, Result};
use crate::grh::{self, Grh};
use crate::icrc;
use crate::lrh::{self, Lnh, Lrh};
use crate::rwh::{self, Rwh};
use crate::transport::TransportPacket;
use crate::vcrc;

/// Length of the VCRC trailer.
pub const VCRC_LEN: usize = 2;
/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;
/// Largest value of the 11-bit LRH:PktLen, in words.
pub const MAX_PKT_WORDS: usize = 0x7FF;

/// What follows the LRH.
// The IBA variant holds the parsed headers by value so that parsing never allocates.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeBody<'a> {
    /// An IBA transport packet (LNH 2 or 3), with the ICRC found in the packet.
    Iba {
        grh: Option<Grh>,
        transport: TransportPacket<'a>,
        icrc: u32,
    },
    /// Raw IPv6 datagram (LNH 1): the IPv6 header (GRH layout) and what follows it.
    RawIpv6 { ipv6: Grh, payload: &'a [u8] },
    /// Raw EtherType datagram (LNH 0).
    RawEthertype { rwh: Rwh, payload: &'a [u8] },
}

/// A parsed native IB packet, LRH first, VCRC last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativePacket<'a> {
    pub lrh: Lrh,
    pub body: NativeBody<'a>,
    /// The VCRC as found in the packet.
    pub vcrc: u16,
    /// Bytes covered by the VCRC (LRH through ICRC / raw payload), as received.
    raw: &'a [u8],
}

impl<'a> NativePacket<'a> {
    /// Parses one native IB packet; `buf` must end with its VCRC.
    pub fn parse(buf: &'a [u8]) -> Result<NativePacket<'a>> {
        let lrh = Lrh::parse(buf)?;
        if lrh.lver != 0 {
            return Err(Error::BadField {
                field: Field::LrhLVer,
                value: lrh.lver.into(),
            });
        }
        let covered = usize::from(lrh.pkt_len) * 4;
        if covered + VCRC_LEN != buf.len() || covered < lrh::LEN {
            return Err(Error::Length {
                field: Field::LrhPktLen,
                claimed: covered,
                actual: buf.len().saturating_sub(VCRC_LEN),
            });
        }
        let (raw, vcrc_bytes) = buf.split_at(covered);
        let after = &raw[lrh::LEN..];
        let body = match lrh.lnh {
            Lnh::IbaGlobal | Lnh::IbaLocal => {
                let (grh, t) = if lrh.lnh == Lnh::IbaGlobal {
                    let g = Grh::parse(after)?;
                    check_grh_ver(&g)?;
                    if g.nxt_hdr != grh::NXT_HDR_IBA {
                        return Err(Error::BadField {
                            field: Field::GrhNxtHdr,
                            value: g.nxt_hdr.into(),
                        });
                    }
                    let rest = &after[grh::LEN..];
                    if usize::from(g.pay_len) != rest.len() {
                        return Err(Error::Length {
                            field: Field::GrhPayLen,
                            claimed: g.pay_len.into(),
                            actual: rest.len(),
                        });
                    }
                    (Some(g), rest)
                } else {
                    (None, after)
                };
                if t.len() < crate::bth::LEN + ICRC_LEN {
                    return Err(Error::Truncated {
                        header: Header::Icrc,
                        need: crate::bth::LEN + ICRC_LEN,
                        have: t.len(),
                    });
                }
                let (tb, icrc_bytes) = t.split_at(t.len() - ICRC_LEN);
                let transport = TransportPacket::parse(tb)?;
                NativeBody::Iba {
                    grh,
                    transport,
                    icrc: icrc::get(icrc_bytes)?,
                }
            }
            Lnh::Ipv6 => {
                let ipv6 = Grh::parse(after)?;
                if ipv6.ip_ver != 6 {
                    return Err(Error::BadField {
                        field: Field::Ipv6Version,
                        value: ipv6.ip_ver.into(),
                    });
                }
                if ipv6.nxt_hdr == grh::NXT_HDR_IBA {
                    // C9-208: a raw IPv6 datagram never carries an IBA transport header.
                    return Err(Error::BadField {
                        field: Field::Ipv6NextHeader,
                        value: ipv6.nxt_hdr.into(),
                    });
                }
                let payload = &after[grh::LEN..];
                if usize::from(ipv6.pay_len) > payload.len() {
                    return Err(Error::Length {
                        field: Field::Ipv6PayloadLength,
                        claimed: ipv6.pay_len.into(),
                        actual: payload.len(),
                    });
                }
                NativeBody::RawIpv6 { ipv6, payload }
            }
            Lnh::Raw => {
                let rwh = Rwh::parse(after)?;
                NativeBody::RawEthertype {
                    rwh,
                    payload: &after[rwh::LEN..],
                }
            }
        };
        Ok(NativePacket {
            lrh,
            body,
            vcrc: vcrc::get(vcrc_bytes)?,
            raw,
        })
    }

    /// The ICRC computed over the received bytes (IBA packets only).
    pub fn computed_icrc(&self) -> Option<u32> {
        match self.body {
            NativeBody::Iba { grh, .. } => {
                let grh_len = if grh.is_some() { grh::LEN } else { 0 };
                let (grh_b, t) = self.raw[lrh::LEN..].split_at(grh_len);
                let t = &t[..t.len() - ICRC_LEN];
                Some(icrc::native(grh.map(|_| grh_b), t))
            }
            _ => None,
        }
    }

    /// The ICRC found in the packet (IBA packets only).
    pub fn icrc(&self) -> Option<u32> {
        match self.body {
            NativeBody::Iba { icrc, .. } => Some(icrc),
            _ => None,
        }
    }

    /// True when the ICRC matches, or the packet is raw and has none.
    pub fn icrc_ok(&self) -> bool {
        self.computed_icrc() == self.icrc()
    }

    /// The VCRC computed over the received bytes.
    pub fn computed_vcrc(&self) -> u16 {
        vcrc::compute(self.raw)
    }

    pub fn vcrc_ok(&self) -> bool {
        self.computed_vcrc() == self.vcrc
    }

    /// Parses and verifies ICRC and VCRC.
    pub fn parse_verified(buf: &'a [u8]) -> Result<NativePacket<'a>> {
        let p = Self::parse(buf)?;
        if let (Some(computed), Some(found)) = (p.computed_icrc(), p.icrc()) {
            if computed != found {
                return Err(Error::Icrc { computed, found });
            }
        }
        let computed = p.computed_vcrc();
        if computed != p.vcrc {
            return Err(Error::Vcrc {
                computed,
                found: p.vcrc,
            });
        }
        Ok(p)
    }

    /// Writes the packet exactly as the fields say (PktLen, PayLen, CRCs verbatim).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut at = self.lrh.emit(buf)?;
        match &self.body {
            NativeBody::Iba {
                grh,
                transport,
                icrc,
            } => {
                if let Some(g) = grh {
                    at += g.emit(sub(buf, at)?)?;
                }
                at += transport.emit(sub(buf, at)?)?;
                icrc::put(window(buf, at, ICRC_LEN)?, *icrc)?;
                at += ICRC_LEN;
            }
            NativeBody::RawIpv6 { ipv6, payload } => {
                at += ipv6.emit(sub(buf, at)?)?;
                window(buf, at, payload.len())?.copy_from_slice(payload);
                at += payload.len();
            }
            NativeBody::RawEthertype { rwh, payload } => {
                at += rwh.emit(sub(buf, at)?)?;
                window(buf, at, payload.len())?.copy_from_slice(payload);
                at += payload.len();
            }
        }
        vcrc::put(window(buf, at, VCRC_LEN)?, self.vcrc)?;
        Ok(at + VCRC_LEN)
    }
}

fn check_grh_ver(g: &Grh) -> Result<()> {
    if g.ip_ver != 6 {
        return Err(Error::BadField {
            field: Field::GrhIpVer,
            value: g.ip_ver.into(),
        });
    }
    Ok(())
}

fn sub(buf: &mut [u8], at: usize) -> Result<&mut [u8]> {
    let have = buf.len();
    buf.get_mut(at..).ok_or(Error::Truncated {
        header: Header::Payload,
        need: at,
        have,
    })
}

fn window(buf: &mut [u8], at: usize, len: usize) -> Result<&mut [u8]> {
    let have = buf.len();
    buf.get_mut(at..at + len).ok_or(Error::Truncated {
        header: Header::Payload,
        need: at + len,
        have,
    })
}

fn pkt_words(covered: usize) -> Result<u16> {
    debug_assert_eq!(covered % 4, 0);
    let words = covered / 4;
    if words > MAX_PKT_WORDS {
        return Err(Error::PayloadTooLong {
            len: covered,
            max: MAX_PKT_WORDS * 4,
        });
    }
    Ok(words as u16)
}

/// Builds a native IBA packet: sets LRH:LNH and PktLen, GRH:PayLen and NxtHdr (when a GRH is
/// given), computes the ICRC and the VCRC. Returns the bytes written.
pub fn build(
    lrh: &Lrh,
    grh: Option<&Grh>,
    transport: &TransportPacket<'_>,
    buf: &mut [u8],
) -> Result<usize> {
    let tlen = transport.wire_len()?;
    if tlen % 4 != 0 {
        // The pad does not bring the payload to whole words ([`TransportPacket::emit`] refuses
        // it too); PktLen could not count the packet.
        return Err(Error::BadField {
            field: Field::BthPadCnt,
            value: transport.headers.bth.pad_cnt.into(),
        });
    }
    let grh_len = if grh.is_some() { grh::LEN } else { 0 };
    let covered = lrh::LEN + grh_len + tlen + ICRC_LEN;
    let mut l = *lrh;
    l.lnh = if grh.is_some() {
        Lnh::IbaGlobal
    } else {
        Lnh::IbaLocal
    };
    l.pkt_len = pkt_words(covered)?;
    window(buf, 0, covered + VCRC_LEN)?;
    let mut at = l.emit(buf)?;
    if let Some(g) = grh {
        let mut g = *g;
        g.ip_ver = 6;
        g.nxt_hdr = grh::NXT_HDR_IBA;
        g.pay_len = (tlen + ICRC_LEN) as u16;
        at += g.emit(&mut buf[at..])?;
    }
    at += transport.emit(&mut buf[at..])?;
    let crc = {
        let (grh_b, t) = buf[lrh::LEN..at].split_at(grh_len);
        icrc::native(grh.map(|_| grh_b), t)
    };
    icrc::put(&mut buf[at..], crc)?;
    at += ICRC_LEN;
    let v = vcrc::compute(&buf[..at]);
    vcrc::put(&mut buf[at..], v)?;
    Ok(at + VCRC_LEN)
}

/// Builds a raw datagram (LNH 1 with an IPv6 header, or LNH 0 with an RWH). The payload must
/// be a whole number of 4-byte words (o9-145); raw packets have no pad count to fix it up.
pub fn build_raw(lrh: &Lrh, body: &NativeBody<'_>, buf: &mut [u8]) -> Result<usize> {
    /// The header that follows the LRH, checked before anything is written.
    enum RawHeader {
        Ipv6(Grh),
        Rwh(Rwh),
    }
    let (lnh, header, payload) = match body {
        NativeBody::RawIpv6 { ipv6, payload } => {
            if ipv6.nxt_hdr == grh::NXT_HDR_IBA {
                return Err(Error::BadField {
                    field: Field::Ipv6NextHeader,
                    value: ipv6.nxt_hdr.into(),
                });
            }
            let mut g = *ipv6;
            g.ip_ver = 6;
            g.pay_len = payload.len() as u16;
            (Lnh::Ipv6, RawHeader::Ipv6(g), *payload)
        }
        NativeBody::RawEthertype { rwh, payload } => (Lnh::Raw, RawHeader::Rwh(*rwh), *payload),
        NativeBody::Iba { .. } => {
            return Err(Error::BadField {
                field: Field::LrhLnh,
                value: 2,
            });
        }
    };
    if payload.len() % 4 != 0 {
        return Err(Error::Length {
            field: Field::PayloadLength,
            claimed: payload.len().next_multiple_of(4),
            actual: payload.len(),
        });
    }
    let hdr_len = match header {
        RawHeader::Ipv6(_) => grh::LEN,
        RawHeader::Rwh(_) => rwh::LEN,
    };
    let covered = lrh::LEN + hdr_len + payload.len();
    let mut l = *lrh;
    l.lnh = lnh;
    l.pkt_len = pkt_words(covered)?;
    window(buf, 0, covered + VCRC_LEN)?;
    let mut at = l.emit(buf)?;
    at += match &header {
        RawHeader::Ipv6(g) => g.emit(&mut buf[at..])?,
        RawHeader::Rwh(r) => r.emit(&mut buf[at..])?,
    };
    buf[at..at + payload.len()].copy_from_slice(payload);
    at += payload.len();
    let v = vcrc::compute(&buf[..at]);
    vcrc::put(&mut buf[at..], v)?;
    Ok(at + VCRC_LEN)
}
