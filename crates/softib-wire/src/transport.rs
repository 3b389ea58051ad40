//! The IBA transport part of a packet: BTH, the extension headers its opcode calls for (in the
//! order of the opcode table), the payload and the pad bytes. The ICRC that follows is handled
//! by the framings ([`crate::roce`], [`crate::native`]), because what it covers depends on them.
//!
//! Parsing checks, in order: BTH present; TVer = 0; opcode defined; every extension header the
//! opcode needs is present; opcodes without payload carry no bytes after their headers; PadCnt
//! fits the bytes present and pads the payload to a multiple of 4; payload ≤ 4096 bytes (the
//! largest IBA MTU — the engine then checks the QP's path MTU and the per-position lengths).

use crate::aeth::Aeth;
use crate::atomic_ack_eth::AtomicAckEth;
use crate::atomic_eth::AtomicEth;
use crate::bth::{self, Bth};
use crate::deth::Deth;
use crate::error::{Error, Field, Header, Result};
use crate::feth::Feth;
use crate::ieth::Ieth;
use crate::immdt::ImmDt;
use crate::opcode::{ExtHeaders, OpcodeInfo};
use crate::rdeth::Rdeth;
use crate::reth::Reth;
use crate::xrceth::Xrceth;

/// Largest IBA path MTU, and so the largest payload of one IBA transport packet.
pub const MAX_PAYLOAD: usize = 4096;

/// Length of the reserved block after the BTH of a RoCEv2 CNP.
pub const CNP_RESERVED_LEN: usize = 16;

/// Zero bytes used as pad when a packet is built rather than parsed.
static ZERO_PAD: [u8; 3] = [0; 3];

/// The BTH and the extension headers of one packet. Exactly the headers the opcode table lists
/// for `bth.opcode` are `Some`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransportHeaders {
    pub bth: Bth,
    pub rdeth: Option<Rdeth>,
    pub deth: Option<Deth>,
    pub xrceth: Option<Xrceth>,
    pub feth: Option<Feth>,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub atomic_eth: Option<AtomicEth>,
    pub atomic_ack_eth: Option<AtomicAckEth>,
    pub immdt: Option<ImmDt>,
    pub ieth: Option<Ieth>,
    /// The 16 reserved bytes of a RoCEv2 CNP, kept verbatim.
    pub cnp_reserved: Option<[u8; CNP_RESERVED_LEN]>,
}

/// Applies `$body` once per extension header, in wire order:
/// `$body!(field_name, Type, ExtHeaders flag, Header kind)`.
macro_rules! for_each_ext_header {
    ($body:ident) => {
        $body!(rdeth, Rdeth, ExtHeaders::RDETH, Header::Rdeth);
        $body!(deth, Deth, ExtHeaders::DETH, Header::Deth);
        $body!(xrceth, Xrceth, ExtHeaders::XRCETH, Header::Xrceth);
        $body!(feth, Feth, ExtHeaders::FETH, Header::Feth);
        $body!(reth, Reth, ExtHeaders::RETH, Header::Reth);
        $body!(aeth, Aeth, ExtHeaders::AETH, Header::Aeth);
        $body!(
            atomic_eth,
            AtomicEth,
            ExtHeaders::ATOMIC_ETH,
            Header::AtomicEth
        );
        $body!(
            atomic_ack_eth,
            AtomicAckEth,
            ExtHeaders::ATOMIC_ACK_ETH,
            Header::AtomicAckEth
        );
        $body!(immdt, ImmDt, ExtHeaders::IMMDT, Header::ImmDt);
        $body!(ieth, Ieth, ExtHeaders::IETH, Header::Ieth);
    };
}

impl TransportHeaders {
    /// Headers with only a BTH; fill in the extension headers the opcode needs.
    pub fn new(bth: Bth) -> Self {
        TransportHeaders {
            bth,
            ..Default::default()
        }
    }

    /// The opcode table row of `bth.opcode`.
    pub fn info(&self) -> Result<&'static OpcodeInfo> {
        self.bth
            .opcode
            .info()
            .ok_or(Error::UnknownOpcode(self.bth.opcode.0))
    }

    /// Parses the BTH and the extension headers at the start of `buf`; returns them and the
    /// number of bytes they take.
    #[inline(always)]
    pub fn parse(buf: &[u8]) -> Result<(TransportHeaders, &'static OpcodeInfo, usize)> {
        let bth = Bth::parse(buf)?;
        if bth.tver != 0 {
            return Err(Error::BadField {
                field: Field::BthTVer,
                value: bth.tver.into(),
            });
        }
        let mut h = TransportHeaders::new(bth);
        let info = h.info()?;
        let mut at = bth::LEN;
        macro_rules! parse_one {
            ($f:ident, $T:ident, $flag:expr, $kind:expr) => {
                if info.headers.contains($flag) {
                    let rest = buf.get(at..).unwrap_or(&[]);
                    h.$f = Some($T::parse(rest)?);
                    at += $T::LEN;
                }
            };
        }
        for_each_ext_header!(parse_one);
        if info.headers.contains(ExtHeaders::CNP_RESERVED) {
            let rest = buf.get(at..).unwrap_or(&[]);
            let block = rest.get(..CNP_RESERVED_LEN).ok_or(Error::Truncated {
                header: Header::CnpReserved,
                need: CNP_RESERVED_LEN,
                have: rest.len(),
            })?;
            let mut r = [0u8; CNP_RESERVED_LEN];
            r.copy_from_slice(block);
            h.cnp_reserved = Some(r);
            at += CNP_RESERVED_LEN;
        }
        Ok((h, info, at))
    }

    /// Checks that exactly the extension headers of the opcode are present.
    pub fn check_header_set(&self) -> Result<&'static OpcodeInfo> {
        let info = self.info()?;
        // Common case first: the present headers, as a set, equal the opcode's.
        let mut present = 0u16;
        macro_rules! present_bit {
            ($f:ident, $T:ident, $flag:expr, $kind:expr) => {
                if self.$f.is_some() {
                    present |= $flag.bits();
                }
            };
        }
        for_each_ext_header!(present_bit);
        if self.cnp_reserved.is_some() {
            present |= ExtHeaders::CNP_RESERVED.bits();
        }
        if present == info.headers.bits() {
            return Ok(info);
        }
        // Name the first header, in wire order, that is wrongly present or missing.
        let op = self.bth.opcode.0;
        macro_rules! check_one {
            ($f:ident, $T:ident, $flag:expr, $kind:expr) => {
                let want = info.headers.contains($flag);
                if want != self.$f.is_some() {
                    return Err(Error::HeaderSet {
                        opcode: op,
                        header: $kind,
                        present: !want,
                    });
                }
            };
        }
        for_each_ext_header!(check_one);
        let want = info.headers.contains(ExtHeaders::CNP_RESERVED);
        if want != self.cnp_reserved.is_some() {
            return Err(Error::HeaderSet {
                opcode: op,
                header: Header::CnpReserved,
                present: !want,
            });
        }
        Ok(info)
    }

    /// Length of the BTH plus extension headers, from the opcode table.
    pub fn header_len(&self) -> Result<usize> {
        Ok(self.info()?.transport_header_len())
    }

    /// Writes the BTH and extension headers; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        self.check_header_set()?;
        self.emit_checked(buf)
    }

    /// [`Self::emit`] once [`Self::check_header_set`] has passed.
    fn emit_checked(&self, buf: &mut [u8]) -> Result<usize> {
        let mut at = self.bth.emit(buf)?;
        macro_rules! emit_one {
            ($f:ident, $T:ident, $flag:expr, $kind:expr) => {
                if let Some(x) = &self.$f {
                    let rest = buf.get_mut(at..).unwrap_or(&mut []);
                    at += x.emit(rest)?;
                }
            };
        }
        for_each_ext_header!(emit_one);
        if let Some(r) = &self.cnp_reserved {
            let have = buf.len().saturating_sub(at);
            let dst = buf
                .get_mut(at..at + CNP_RESERVED_LEN)
                .ok_or(Error::Truncated {
                    header: Header::CnpReserved,
                    need: CNP_RESERVED_LEN,
                    have,
                })?;
            dst.copy_from_slice(r);
            at += CNP_RESERVED_LEN;
        }
        Ok(at)
    }
}

/// Pad bytes needed after a payload of `len` bytes (IBA: PadCnt).
#[inline]
pub const fn pad_for(len: usize) -> usize {
    (4 - (len % 4)) % 4
}

/// A parsed transport packet (BTH through pad, ICRC excluded), borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportPacket<'a> {
    pub headers: TransportHeaders,
    /// Message data carried by this packet, pad excluded.
    pub payload: &'a [u8],
    /// The pad bytes (BTH:PadCnt of them), kept so that re-emission is byte-identical.
    pub pad: &'a [u8],
}

impl<'a> TransportPacket<'a> {
    /// Builds a packet around `payload`: sets BTH:PadCnt and uses zero pad bytes.
    pub fn new(mut headers: TransportHeaders, payload: &'a [u8]) -> Self {
        let pad = pad_for(payload.len());
        headers.bth.pad_cnt = pad as u8;
        TransportPacket {
            headers,
            payload,
            pad: &ZERO_PAD[..pad],
        }
    }

    /// Parses `buf`, which must hold exactly BTH … pad (no ICRC).
    #[inline(always)]
    pub fn parse(buf: &'a [u8]) -> Result<TransportPacket<'a>> {
        let (headers, info, at) = TransportHeaders::parse(buf)?;
        let rest = &buf[at..];
        let pad_cnt = usize::from(headers.bth.pad_cnt);
        if !info.payload {
            if !rest.is_empty() {
                return Err(Error::Length {
                    field: Field::PayloadLength,
                    claimed: 0,
                    actual: rest.len(),
                });
            }
            if pad_cnt != 0 {
                return Err(Error::BadField {
                    field: Field::BthPadCnt,
                    value: pad_cnt as u64,
                });
            }
            return Ok(TransportPacket {
                headers,
                payload: &[],
                pad: &[],
            });
        }
        if pad_cnt > rest.len() || rest.len() % 4 != 0 {
            // PadCnt must bring the payload to a whole number of 4-byte words.
            return Err(Error::BadField {
                field: Field::BthPadCnt,
                value: pad_cnt as u64,
            });
        }
        let (payload, pad) = rest.split_at(rest.len() - pad_cnt);
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::PayloadTooLong {
                len: payload.len(),
                max: MAX_PAYLOAD,
            });
        }
        Ok(TransportPacket {
            headers,
            payload,
            pad,
        })
    }

    /// The opcode table row (always defined for a parsed packet).
    pub fn info(&self) -> Result<&'static OpcodeInfo> {
        self.headers.info()
    }

    /// Bytes this packet takes on the wire, ICRC excluded.
    pub fn wire_len(&self) -> Result<usize> {
        Ok(self.headers.header_len()? + self.payload.len() + self.pad.len())
    }

    /// Writes headers, payload and pad; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let info = self.headers.check_header_set()?;
        if !info.payload && (!self.payload.is_empty() || !self.pad.is_empty()) {
            return Err(Error::PayloadTooLong {
                len: self.payload.len(),
                max: 0,
            });
        }
        if self.pad.len() != usize::from(self.headers.bth.pad_cnt)
            || (self.payload.len() + self.pad.len()) % 4 != 0
        {
            // PadCnt must bring the payload to a whole number of 4-byte words, as on parse.
            return Err(Error::BadField {
                field: Field::BthPadCnt,
                value: self.headers.bth.pad_cnt.into(),
            });
        }
        let total = info.transport_header_len() + self.payload.len() + self.pad.len();
        if buf.len() < total {
            return Err(Error::Truncated {
                header: Header::Payload,
                need: total,
                have: buf.len(),
            });
        }
        let mut at = self.headers.emit_checked(buf)?;
        buf[at..at + self.payload.len()].copy_from_slice(self.payload);
        at += self.payload.len();
        buf[at..at + self.pad.len()].copy_from_slice(self.pad);
        Ok(at + self.pad.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::{Opcode, ROWS};
    use crate::psn::{Msn, Psn, Qpn};

    fn headers_for(info: &OpcodeInfo) -> TransportHeaders {
        let mut h = TransportHeaders::new(Bth {
            opcode: info.opcode,
            pkey: 0xffff,
            dest_qp: Qpn::new(0x11),
            psn: Psn::new(7),
            ..Bth::default()
        });
        macro_rules! fill {
            ($f:ident, $T:ident, $flag:expr, $kind:expr) => {
                if info.headers.contains($flag) {
                    h.$f = Some($T::default());
                }
            };
        }
        for_each_ext_header!(fill);
        if info.headers.contains(ExtHeaders::CNP_RESERVED) {
            h.cnp_reserved = Some([0; CNP_RESERVED_LEN]);
        }
        h
    }

    #[test]
    fn every_opcode_round_trips() {
        let data = [0xa5u8; 13];
        for info in ROWS {
            let h = headers_for(info);
            let payload: &[u8] = if info.payload { &data } else { &[] };
            let p = TransportPacket::new(h, payload);
            let mut buf = [0u8; 128];
            let n = p.emit(&mut buf).unwrap();
            assert_eq!(n, info.transport_header_len() + payload.len() + p.pad.len());
            assert_eq!(n % 4, 0, "{}", info.name);
            let q = TransportPacket::parse(&buf[..n]).unwrap();
            assert_eq!(q, p, "{}", info.name);
        }
    }

    #[test]
    fn rejects_unknown_opcode_and_tver() {
        let mut buf = [0u8; 12];
        buf[0] = 0x15;
        assert_eq!(
            TransportPacket::parse(&buf),
            Err(Error::UnknownOpcode(0x15))
        );
        buf[0] = Opcode::RC_SEND_ONLY.0;
        buf[1] = 0x01; // TVer 1
        assert_eq!(
            TransportPacket::parse(&buf),
            Err(Error::BadField {
                field: Field::BthTVer,
                value: 1
            })
        );
    }

    #[test]
    fn rejects_missing_extension_header() {
        // RDMA WRITE ONLY needs a RETH: 12-byte BTH + 8 bytes is too short.
        let mut buf = [0u8; 20];
        buf[0] = Opcode::RC_RDMA_WRITE_ONLY.0;
        assert!(matches!(
            TransportPacket::parse(&buf),
            Err(Error::Truncated {
                header: Header::Reth,
                need: 16,
                have: 8
            })
        ));
    }

    #[test]
    fn rejects_payload_on_ack_and_bad_pad() {
        let mut h = headers_for(Opcode::RC_ACKNOWLEDGE.info().unwrap());
        h.aeth = Some(Aeth {
            syndrome: 0x1f,
            msn: Msn::new(3),
        });
        let mut buf = [0u8; 24];
        let n = h.emit(&mut buf).unwrap();
        assert_eq!(n, 16);
        assert!(TransportPacket::parse(&buf[..16]).is_ok());
        assert_eq!(
            TransportPacket::parse(&buf[..20]),
            Err(Error::Length {
                field: Field::PayloadLength,
                claimed: 0,
                actual: 4
            })
        );
        // SEND ONLY with 5 bytes after the BTH: not a whole number of words.
        let mut s = [0u8; 17];
        s[0] = Opcode::RC_SEND_ONLY.0;
        assert!(matches!(
            TransportPacket::parse(&s),
            Err(Error::BadField {
                field: Field::BthPadCnt,
                ..
            })
        ));
        // PadCnt 3 with 0 payload bytes.
        s[1] = 0x30;
        assert!(TransportPacket::parse(&s[..12]).is_err());
    }

    #[test]
    fn emit_checks_header_set() {
        let mut h = headers_for(Opcode::RC_SEND_ONLY.info().unwrap());
        h.reth = Some(Reth::default());
        assert_eq!(
            h.emit(&mut [0u8; 64]),
            Err(Error::HeaderSet {
                opcode: 0x04,
                header: Header::Reth,
                present: true
            })
        );
        let h = TransportHeaders::new(Bth {
            opcode: Opcode::RC_RDMA_READ_REQUEST,
            ..Bth::default()
        });
        assert_eq!(
            h.emit(&mut [0u8; 64]),
            Err(Error::HeaderSet {
                opcode: 0x0c,
                header: Header::Reth,
                present: false
            })
        );
    }

    #[test]
    fn payload_limit() {
        let h = headers_for(Opcode::UD_SEND_ONLY.info().unwrap());
        let big = vec![0u8; MAX_PAYLOAD + 4];
        let p = TransportPacket::new(h, &big);
        let mut buf = vec![0u8; 5000];
        let n = p.emit(&mut buf).unwrap();
        assert_eq!(
            TransportPacket::parse(&buf[..n]),
            Err(Error::PayloadTooLong {
                len: MAX_PAYLOAD + 4,
                max: MAX_PAYLOAD
            })
        );
    }
}
