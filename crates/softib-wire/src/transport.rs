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
use crate::bth::{self, Bth, BthView};
use crate::deth::Deth;
use crate::error::{Error, Field, Header, Result};
use crate::feth::Feth;
use crate::ieth::Ieth;
use crate::immdt::ImmDt;
use crate::opcode::{ExtHeaders, OpcodeInfo, ROWS};
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

impl Bth {
    /// The opcode table row of the opcode, or [`Error::UnknownOpcode`].
    #[inline]
    fn info_or_unknown(&self) -> Result<&'static OpcodeInfo> {
        self.opcode
            .info()
            .ok_or(Error::UnknownOpcode(self.opcode.0))
    }
}

/// What the per-packet paths need from the opcode table, for one opcode byte.
#[derive(Clone, Copy)]
pub(crate) struct OpcodeLayout {
    /// The extension headers after the BTH.
    pub headers: ExtHeaders,
    /// BTH plus extension headers, in bytes (0: undefined opcode).
    pub header_len: u8,
    /// Defined in the opcode table.
    pub defined: bool,
    /// Carries a payload.
    pub payload: bool,
}

/// [`OpcodeLayout`] of every opcode byte, computed at compile time from the opcode table, so
/// that a packet costs one small load instead of an `Option<OpcodeInfo>` and a walk over the
/// header list.
static LAYOUT: [OpcodeLayout; 256] = {
    let mut t = [OpcodeLayout {
        headers: ExtHeaders::NONE,
        header_len: 0,
        defined: false,
        payload: false,
    }; 256];
    let mut i = 0;
    while i < ROWS.len() {
        let len = ROWS[i].transport_header_len();
        assert!(len <= u8::MAX as usize);
        t[ROWS[i].opcode.0 as usize] = OpcodeLayout {
            headers: ROWS[i].headers,
            header_len: len as u8,
            defined: true,
            payload: ROWS[i].payload,
        };
        i += 1;
    }
    t
};

/// The layout of opcode byte `op`.
#[inline(always)]
pub(crate) fn layout(op: u8) -> &'static OpcodeLayout {
    &LAYOUT[usize::from(op)]
}

impl TransportHeaders {
    /// Headers with only a BTH; fill in the extension headers the opcode needs.
    #[inline]
    pub fn new(bth: Bth) -> Self {
        TransportHeaders {
            bth,
            rdeth: None,
            deth: None,
            xrceth: None,
            feth: None,
            reth: None,
            aeth: None,
            atomic_eth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
            cnp_reserved: None,
        }
    }

    /// The opcode table row of `bth.opcode`.
    #[inline]
    pub fn info(&self) -> Result<&'static OpcodeInfo> {
        self.bth.info_or_unknown()
    }

    /// Parses the BTH and the extension headers at the start of `buf`; returns them and the
    /// number of bytes they take.
    #[inline]
    pub fn parse(buf: &[u8]) -> Result<(TransportHeaders, &'static OpcodeInfo, usize)> {
        let (b, l) = check_bth(buf)?;
        let bth = Bth::from_bytes(b);
        let info = bth.info_or_unknown()?;
        if l.headers.is_empty() {
            return Ok((TransportHeaders::new(bth), info, bth::LEN));
        }
        let h = Self::parse_ext(bth, l.headers, buf)?;
        Ok((h, info, usize::from(l.header_len)))
    }

    /// The extension headers of `set` after the BTH in `buf`, parsed in wire order (so that a
    /// short buffer names the first header it cuts).
    #[inline]
    pub(crate) fn parse_ext(bth: Bth, set: ExtHeaders, buf: &[u8]) -> Result<TransportHeaders> {
        let mut at = bth::LEN;
        macro_rules! ext {
            ($T:ident, $flag:expr) => {
                if set.contains($flag) {
                    let x = $T::parse(buf.get(at..).unwrap_or(&[]))?;
                    at += $T::LEN;
                    Some(x)
                } else {
                    None
                }
            };
        }
        // Struct expression fields are evaluated in the order written: wire order.
        Ok(TransportHeaders {
            bth,
            rdeth: ext!(Rdeth, ExtHeaders::RDETH),
            deth: ext!(Deth, ExtHeaders::DETH),
            xrceth: ext!(Xrceth, ExtHeaders::XRCETH),
            feth: ext!(Feth, ExtHeaders::FETH),
            reth: ext!(Reth, ExtHeaders::RETH),
            aeth: ext!(Aeth, ExtHeaders::AETH),
            atomic_eth: ext!(AtomicEth, ExtHeaders::ATOMIC_ETH),
            atomic_ack_eth: ext!(AtomicAckEth, ExtHeaders::ATOMIC_ACK_ETH),
            immdt: ext!(ImmDt, ExtHeaders::IMMDT),
            ieth: ext!(Ieth, ExtHeaders::IETH),
            cnp_reserved: if set.contains(ExtHeaders::CNP_RESERVED) {
                let rest = buf.get(at..).unwrap_or(&[]);
                match rest.first_chunk::<CNP_RESERVED_LEN>() {
                    Some(r) => Some(*r),
                    None => {
                        return Err(Error::Truncated {
                            header: Header::CnpReserved,
                            need: CNP_RESERVED_LEN,
                            have: rest.len(),
                        })
                    }
                }
            } else {
                None
            },
        })
    }

    /// The extension headers present, as a set.
    #[inline(always)]
    fn present(&self) -> ExtHeaders {
        // Most packets carry none: one test of all the tags (`|`, not `||`, so that they are
        // combined rather than branched on one by one).
        let any = self.rdeth.is_some()
            | self.deth.is_some()
            | self.xrceth.is_some()
            | self.feth.is_some()
            | self.reth.is_some()
            | self.aeth.is_some()
            | self.atomic_eth.is_some()
            | self.atomic_ack_eth.is_some()
            | self.immdt.is_some()
            | self.ieth.is_some()
            | self.cnp_reserved.is_some();
        if any {
            self.present_each()
        } else {
            ExtHeaders::NONE
        }
    }

    /// [`Self::present`], header by header.
    #[inline(never)]
    fn present_each(&self) -> ExtHeaders {
        let mut present = ExtHeaders::NONE;
        macro_rules! present_bit {
            ($f:ident, $T:ident, $flag:expr, $kind:expr) => {
                if self.$f.is_some() {
                    present = present.union($flag);
                }
            };
        }
        for_each_ext_header!(present_bit);
        if self.cnp_reserved.is_some() {
            present = present.union(ExtHeaders::CNP_RESERVED);
        }
        present
    }

    /// The layout of `bth.opcode`, or [`Error::UnknownOpcode`].
    #[inline(always)]
    pub(crate) fn layout(&self) -> Result<&'static OpcodeLayout> {
        let op = self.bth.opcode.0;
        let l = layout(op);
        if l.defined {
            Ok(l)
        } else {
            Err(Error::UnknownOpcode(op))
        }
    }

    /// Checks that exactly the extension headers of the opcode are present.
    #[inline]
    pub fn check_header_set(&self) -> Result<&'static OpcodeInfo> {
        self.check_set()?;
        self.info()
    }

    /// [`Self::check_header_set`], returning the opcode's layout.
    #[inline(always)]
    pub(crate) fn check_set(&self) -> Result<&'static OpcodeLayout> {
        let l = self.layout()?;
        // Common case first: the present headers, as a set, equal the opcode's.
        if self.present() == l.headers {
            Ok(l)
        } else {
            Err(self.header_set_error(l.headers))
        }
    }

    /// The error naming the first header, in wire order, that is wrongly present or missing
    /// (`set`: the opcode's headers).
    #[cold]
    #[inline(never)]
    fn header_set_error(&self, set: ExtHeaders) -> Error {
        let op = self.bth.opcode.0;
        macro_rules! check_one {
            ($f:ident, $T:ident, $flag:expr, $kind:expr) => {
                let want = set.contains($flag);
                if want != self.$f.is_some() {
                    return Error::HeaderSet {
                        opcode: op,
                        header: $kind,
                        present: !want,
                    };
                }
            };
        }
        for_each_ext_header!(check_one);
        Error::HeaderSet {
            opcode: op,
            header: Header::CnpReserved,
            present: !set.contains(ExtHeaders::CNP_RESERVED),
        }
    }

    /// Length of the BTH plus extension headers, from the opcode table.
    #[inline]
    pub fn header_len(&self) -> Result<usize> {
        Ok(usize::from(self.layout()?.header_len))
    }

    /// Writes the BTH and extension headers; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let l = self.check_set()?;
        self.emit_checked(l.headers, buf)
    }

    /// [`Self::emit`] once [`Self::check_header_set`] has passed: `set` is the set of headers
    /// present (the opcode's).
    #[inline]
    fn emit_checked(&self, set: ExtHeaders, buf: &mut [u8]) -> Result<usize> {
        let at = self.bth.emit(buf)?;
        if set.is_empty() {
            return Ok(at);
        }
        self.emit_ext(at, buf)
    }

    /// Writes the extension headers present from `buf[at..]`; returns the end offset.
    fn emit_ext(&self, mut at: usize, buf: &mut [u8]) -> Result<usize> {
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
        let c = Self::check(buf)?;
        Self::from_checked(buf, c)
    }

    /// The checks of [`Self::parse`], in its order, with nothing copied out of `buf` yet (the
    /// packet parsers validate a whole frame first and then fill in the result in one go).
    #[inline(always)]
    pub(crate) fn check(buf: &'a [u8]) -> Result<Checked<'a>> {
        let (b, l) = check_bth(buf)?;
        let Some(rest) = buf.get(usize::from(l.header_len)..) else {
            // An extension header is cut short: name the first one, as parsing them does.
            return Err(ext_truncation(b, l.headers, buf));
        };
        let (payload, pad) = split_payload(l.payload, BthView::new_unchecked(b).pad_cnt(), rest)?;
        Ok(Checked {
            bth: b,
            headers: l.headers,
            payload,
            pad,
        })
    }

    /// The packet [`Self::check`] approved in `buf`.
    #[inline(always)]
    pub(crate) fn from_checked(buf: &'a [u8], c: Checked<'a>) -> Result<TransportPacket<'a>> {
        // One struct expression per case, so that each is written straight into the result.
        if c.headers.is_empty() {
            Ok(TransportPacket {
                headers: TransportHeaders::new(Bth::from_bytes(c.bth)),
                payload: c.payload,
                pad: c.pad,
            })
        } else {
            Ok(TransportPacket {
                headers: TransportHeaders::parse_ext(Bth::from_bytes(c.bth), c.headers, buf)?,
                payload: c.payload,
                pad: c.pad,
            })
        }
    }

    /// The opcode table row (always defined for a parsed packet).
    #[inline]
    pub fn info(&self) -> Result<&'static OpcodeInfo> {
        self.headers.info()
    }

    /// Bytes this packet takes on the wire, ICRC excluded.
    #[inline]
    pub fn wire_len(&self) -> Result<usize> {
        Ok(self.headers.header_len()? + self.payload.len() + self.pad.len())
    }

    /// Checks the packet as [`Self::emit`] does before writing anything; returns the opcode's
    /// layout.
    #[inline(always)]
    pub(crate) fn check_emit(&self) -> Result<&'static OpcodeLayout> {
        let l = self.headers.check_set()?;
        if !l.payload && (!self.payload.is_empty() || !self.pad.is_empty()) {
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
        Ok(l)
    }

    /// Writes headers, payload and pad once [`Self::check_emit`] has passed and `buf` is known
    /// to hold them all; returns the bytes written.
    #[inline]
    fn emit_checked(&self, l: &OpcodeLayout, buf: &mut [u8]) -> Result<usize> {
        let at = self.headers.bth.emit(buf)?;
        self.emit_after_bth(l, at, buf)
    }

    /// Writes everything after the BTH (extension headers, payload, pad) from `buf[at..]` once
    /// [`Self::check_emit`] has passed; returns the end offset.
    #[inline(always)]
    pub(crate) fn emit_after_bth(
        &self,
        l: &OpcodeLayout,
        mut at: usize,
        buf: &mut [u8],
    ) -> Result<usize> {
        if !l.headers.is_empty() {
            at = self.headers.emit_ext(at, buf)?;
        }
        let end = at + self.payload.len();
        buf[at..end].copy_from_slice(self.payload);
        at = end;
        for (d, s) in buf[at..at + self.pad.len()].iter_mut().zip(self.pad) {
            *d = *s;
        }
        Ok(at + self.pad.len())
    }

    /// Writes headers, payload and pad; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let l = self.check_emit()?;
        let total = usize::from(l.header_len) + self.payload.len() + self.pad.len();
        if buf.len() < total {
            return Err(Error::Truncated {
                header: Header::Payload,
                need: total,
                have: buf.len(),
            });
        }
        self.emit_checked(l, buf)
    }
}

/// What [`TransportPacket::check`] established about a buffer.
pub(crate) struct Checked<'a> {
    /// The BTH bytes.
    pub bth: &'a [u8; bth::LEN],
    /// The extension headers of the BTH's opcode.
    pub headers: ExtHeaders,
    pub payload: &'a [u8],
    pub pad: &'a [u8],
}

/// Checks the BTH at the start of `buf`: present, TVer 0, opcode defined.
#[inline(always)]
fn check_bth(buf: &[u8]) -> Result<(&[u8; bth::LEN], &'static OpcodeLayout)> {
    let Some(b) = buf.first_chunk::<{ bth::LEN }>() else {
        return Err(Error::truncated(Header::Bth, bth::LEN, buf.len()));
    };
    let v = BthView::new_unchecked(b);
    if v.tver() != 0 {
        return Err(Error::BadField {
            field: Field::BthTVer,
            value: v.tver().into(),
        });
    }
    let op = v.opcode().0;
    let l = layout(op);
    if !l.defined {
        return Err(Error::UnknownOpcode(op));
    }
    Ok((b, l))
}

/// The error for a buffer too short for the extension headers `set`: the truncation of the
/// first header, in wire order, that does not fit.
#[cold]
#[inline(never)]
fn ext_truncation(b: &[u8; bth::LEN], set: ExtHeaders, buf: &[u8]) -> Error {
    match TransportHeaders::parse_ext(Bth::from_bytes(b), set, buf) {
        Err(e) => e,
        // Not reached: the headers are longer than `buf`, so one of them is cut.
        Ok(_) => Error::truncated(Header::Payload, bth::LEN + set.len(), buf.len()),
    }
}

/// Splits the bytes after the headers into payload and pad, checking them against the opcode
/// (`has_payload`) and BTH:PadCnt.
#[inline(always)]
fn split_payload(has_payload: bool, pad_cnt: u8, rest: &[u8]) -> Result<(&[u8], &[u8])> {
    let pad_cnt = usize::from(pad_cnt);
    if !has_payload {
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
        return Ok((&[], &[]));
    }
    // PadCnt must bring the payload to a whole number of 4-byte words.
    if rest.len() % 4 != 0 || pad_cnt > rest.len() {
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
    Ok((payload, pad))
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

    /// The per-opcode layout table agrees with the opcode table for every opcode byte.
    #[test]
    fn layout_matches_the_opcode_table() {
        for op in 0..=u8::MAX {
            let l = layout(op);
            match Opcode(op).info() {
                Some(info) => {
                    assert!(l.defined, "{}", info.name);
                    assert_eq!(usize::from(l.header_len), info.transport_header_len());
                    assert_eq!(l.headers, info.headers);
                    assert_eq!(l.payload, info.payload);
                }
                None => assert!(!l.defined && l.header_len == 0, "{op:#04x}"),
            }
        }
    }

    /// `check_header_set` names the same header whether the fast set comparison or the
    /// header-by-header walk runs: every single wrong header, on every opcode.
    #[test]
    fn header_set_errors_name_the_first_wrong_header() {
        for info in ROWS {
            let good = headers_for(info);
            assert_eq!(good.check_header_set(), Ok(info));
            let mut bad = good;
            bad.cnp_reserved = match bad.cnp_reserved {
                Some(_) => None,
                None => Some([0; CNP_RESERVED_LEN]),
            };
            assert_eq!(
                bad.check_header_set(),
                Err(Error::HeaderSet {
                    opcode: info.opcode.0,
                    header: Header::CnpReserved,
                    present: !info.headers.contains(ExtHeaders::CNP_RESERVED),
                })
            );
            let mut bad = good;
            bad.deth = match bad.deth {
                Some(_) => None,
                None => Some(Deth::default()),
            };
            assert_eq!(
                bad.check_header_set(),
                Err(Error::HeaderSet {
                    opcode: info.opcode.0,
                    header: Header::Deth,
                    present: !info.headers.contains(ExtHeaders::DETH),
                })
            );
            // Two wrong headers: the first in wire order is named.
            bad.ieth = match bad.ieth {
                Some(_) => None,
                None => Some(Ieth::default()),
            };
            assert!(matches!(
                bad.check_header_set(),
                Err(Error::HeaderSet {
                    header: Header::Deth,
                    ..
                })
            ));
        }
    }
}
