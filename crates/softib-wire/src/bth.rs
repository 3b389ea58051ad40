//! BTH — Base Transport Header (IBA 9.2), 12 bytes, present in every IBA transport packet.
//!
//! ```text
//!  byte 0   OpCode
//!  byte 1   SE(7) M(6) PadCnt(5:4) TVer(3:0)
//!  byte 2-3 P_Key
//!  byte 4   FECN(7) BECN(6) Resv6a(5:0)      -- "Resv8a" before IBA 1.2.1; masked by the ICRC
//!  byte 5-7 DestQP
//!  byte 8   AckReq(7) Resv7(6:0)
//!  byte 9-11 PSN
//! ```
//!
//! This module follows the shape every header module of the crate has: a zero-copy view
//! ([`BthView`]) over any `AsRef<[u8]>` with getters, and setters on `AsMut<[u8]>`; and a plain
//! struct ([`Bth`]) with `parse` and `emit`. After [`BthView::new_checked`] succeeds no accessor
//! panics. Reserved bits are kept so that re-emitting a parsed header is byte-identical.

use crate::bytes::{get_u16, get_u32, set_bit, set_u16, set_u24};
use crate::error::{Error, Header, Result};
use crate::field_macros::header_view;
use crate::opcode::Opcode;
use crate::psn::{Psn, Qpn};

/// Length of the BTH in bytes.
pub const LEN: usize = 12;

pub(crate) mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const RESV8A: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK: usize = 8;
    pub const PSN: usize = 9;

    pub const SE: u8 = 0x80;
    pub const MIG: u8 = 0x40;
    pub const PAD_SHIFT: u8 = 4;
    pub const PAD_MASK: u8 = 0x30;
    pub const TVER_MASK: u8 = 0x0F;
    pub const FECN: u8 = 0x80;
    pub const BECN: u8 = 0x40;
    pub const RESV6A: u8 = 0x3F;
    pub const ACK_REQ: u8 = 0x80;
    pub const RESV7: u8 = 0x7F;
}

/// Byte offset of the ICRC-masked byte (FECN, BECN, Resv6a) inside the BTH.
pub const ICRC_MASKED_BYTE: usize = field::RESV8A;

header_view! {
    /// Zero-copy view of a BTH at the start of `buffer`.
    pub struct BthView(Header::Bth, "BTH", LEN);
}

impl<T: AsRef<[u8]>> BthView<T> {
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[field::OPCODE])
    }
    /// SE: solicited event.
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & field::SE != 0
    }
    /// M: migration request.
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & field::MIG != 0
    }
    pub fn pad_cnt(&self) -> u8 {
        (self.b()[field::FLAGS] & field::PAD_MASK) >> field::PAD_SHIFT
    }
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & field::TVER_MASK
    }
    pub fn pkey(&self) -> u16 {
        get_u16(self.b(), field::PKEY)
    }
    pub fn fecn(&self) -> bool {
        self.b()[field::RESV8A] & field::FECN != 0
    }
    pub fn becn(&self) -> bool {
        self.b()[field::RESV8A] & field::BECN != 0
    }
    pub fn resv6a(&self) -> u8 {
        self.b()[field::RESV8A] & field::RESV6A
    }
    pub fn dest_qp(&self) -> Qpn {
        // One 32-bit load: the byte before DestQP (FECN/BECN/Resv6a) falls to the 24-bit mask.
        Qpn::new(get_u32(self.b(), field::DEST_QP - 1))
    }
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK] & field::ACK_REQ != 0
    }
    pub fn resv7(&self) -> u8 {
        self.b()[field::ACK] & field::RESV7
    }
    pub fn psn(&self) -> Psn {
        // As `dest_qp`: the AckReq/Resv7 byte falls to the 24-bit mask.
        Psn::new(get_u32(self.b(), field::PSN - 1))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthView<T> {
    pub fn set_opcode(&mut self, op: Opcode) {
        self.bm()[field::OPCODE] = op.0;
    }
    pub fn set_solicited(&mut self, v: bool) {
        set_bit(&mut self.bm()[field::FLAGS], field::SE, v);
    }
    pub fn set_mig_req(&mut self, v: bool) {
        set_bit(&mut self.bm()[field::FLAGS], field::MIG, v);
    }
    /// Sets PadCnt (low 2 bits of `v`).
    pub fn set_pad_cnt(&mut self, v: u8) {
        let b = &mut self.bm()[field::FLAGS];
        *b = (*b & !field::PAD_MASK) | ((v << field::PAD_SHIFT) & field::PAD_MASK);
    }
    /// Sets TVer (low 4 bits of `v`).
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.bm()[field::FLAGS];
        *b = (*b & !field::TVER_MASK) | (v & field::TVER_MASK);
    }
    pub fn set_pkey(&mut self, v: u16) {
        set_u16(self.bm(), field::PKEY, v);
    }
    pub fn set_fecn(&mut self, v: bool) {
        set_bit(&mut self.bm()[field::RESV8A], field::FECN, v);
    }
    pub fn set_becn(&mut self, v: bool) {
        set_bit(&mut self.bm()[field::RESV8A], field::BECN, v);
    }
    /// Sets Resv6a (low 6 bits of `v`).
    pub fn set_resv6a(&mut self, v: u8) {
        let b = &mut self.bm()[field::RESV8A];
        *b = (*b & !field::RESV6A) | (v & field::RESV6A);
    }
    pub fn set_dest_qp(&mut self, v: Qpn) {
        set_u24(self.bm(), field::DEST_QP, v.value());
    }
    pub fn set_ack_req(&mut self, v: bool) {
        set_bit(&mut self.bm()[field::ACK], field::ACK_REQ, v);
    }
    /// Sets Resv7 (low 7 bits of `v`).
    pub fn set_resv7(&mut self, v: u8) {
        let b = &mut self.bm()[field::ACK];
        *b = (*b & !field::RESV7) | (v & field::RESV7);
    }
    pub fn set_psn(&mut self, v: Psn) {
        set_u24(self.bm(), field::PSN, v.value());
    }
}

/// A parsed BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Bth {
    pub opcode: Opcode,
    /// SE: solicited event.
    pub solicited: bool,
    /// M: migration request.
    pub mig_req: bool,
    /// PadCnt: 0..=3 pad bytes after the payload.
    pub pad_cnt: u8,
    /// TVer: transport header version (0).
    pub tver: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    /// Reserved bits 5:0 of byte 4; zero on send, ignored on receipt.
    pub resv6a: u8,
    pub dest_qp: Qpn,
    pub ack_req: bool,
    /// Reserved bits 6:0 of byte 8; zero on send, ignored on receipt.
    pub resv7: u8,
    pub psn: Psn,
}

impl Bth {
    pub const LEN: usize = LEN;

    /// Parses the BTH at the start of `buf`. Field values are not judged here; the packet
    /// parser checks TVer, PadCnt and the opcode against the rest of the packet.
    #[inline]
    pub fn parse(buf: &[u8]) -> Result<Bth> {
        match buf.first_chunk::<LEN>() {
            Some(b) => Ok(Bth::from_bytes(b)),
            None => Err(Error::truncated(Header::Bth, LEN, buf.len())),
        }
    }

    /// The BTH held by exactly these 12 bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; LEN]) -> Bth {
        let v = BthView::new_unchecked(b);
        // Bytes 4-11 in one load: FECN/BECN/Resv6a, DestQP, AckReq/Resv7, PSN.
        let [_, _, _, _, w @ ..] = b;
        let w = u64::from_be_bytes(*w);
        let byte4 = (w >> 56) as u8;
        let byte8 = (w >> 24) as u8;
        Bth {
            opcode: v.opcode(),
            solicited: v.solicited(),
            mig_req: v.mig_req(),
            pad_cnt: v.pad_cnt(),
            tver: v.tver(),
            pkey: v.pkey(),
            fecn: byte4 & field::FECN != 0,
            becn: byte4 & field::BECN != 0,
            resv6a: byte4 & field::RESV6A,
            dest_qp: Qpn::new((w >> 32) as u32),
            ack_req: byte8 & field::ACK_REQ != 0,
            resv7: byte8 & field::RESV7,
            psn: Psn::new(w as u32),
        }
    }

    /// The 12 wire bytes of this BTH (as [`Bth::emit`] writes them: fields wider than their
    /// wire field keep their low bits).
    #[inline(always)]
    pub fn to_bytes(&self) -> [u8; LEN] {
        let flag = |on: bool, mask: u8| if on { mask } else { 0 };
        let flags = flag(self.solicited, field::SE)
            | flag(self.mig_req, field::MIG)
            | ((self.pad_cnt << field::PAD_SHIFT) & field::PAD_MASK)
            | (self.tver & field::TVER_MASK);
        let ecn = flag(self.fecn, field::FECN)
            | flag(self.becn, field::BECN)
            | (self.resv6a & field::RESV6A);
        let ack = flag(self.ack_req, field::ACK_REQ) | (self.resv7 & field::RESV7);
        // Three big-endian words: OpCode|flags|P_Key, byte 4|DestQP, byte 8|PSN.
        let words = [
            (u32::from(self.opcode.0) << 24) | (u32::from(flags) << 16) | u32::from(self.pkey),
            (u32::from(ecn) << 24) | (self.dest_qp.value() & 0x00FF_FFFF),
            (u32::from(ack) << 24) | (self.psn.value() & 0x00FF_FFFF),
        ];
        let mut b = [0u8; LEN];
        for (dst, w) in b.chunks_exact_mut(4).zip(words) {
            dst.copy_from_slice(&w.to_be_bytes());
        }
        b
    }

    /// Writes the BTH to the start of `buf`; returns the bytes written.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let have = buf.len();
        match buf.first_chunk_mut::<LEN>() {
            Some(b) => {
                *b = self.to_bytes();
                Ok(LEN)
            }
            None => Err(Error::truncated(Header::Bth, LEN, have)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    // RC SEND_ONLY from rc_pingpong_s64_n5.pcap: P_Key 0xFFFF, DestQP 0x13, AckReq, PSN 0x922dee.
    const RC_SEND_ONLY: [u8; 12] = [
        0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x13, 0x80, 0x92, 0x2d, 0xee,
    ];

    #[test]
    fn parse_real_header() {
        let b = Bth::parse(&RC_SEND_ONLY).unwrap();
        assert_eq!(b.opcode, Opcode::RC_SEND_ONLY);
        assert_eq!(b.pkey, 0xffff);
        assert_eq!(b.dest_qp, Qpn::new(0x13));
        assert!(b.ack_req);
        assert_eq!(b.psn, Psn::new(0x922dee));
        assert_eq!(
            (b.pad_cnt, b.tver, b.solicited, b.mig_req),
            (0, 0, false, false)
        );
        let mut out = [0u8; 12];
        assert_eq!(b.emit(&mut out), Ok(12));
        assert_eq!(out, RC_SEND_ONLY);
    }

    #[test]
    fn every_bit_round_trips() {
        let all = [0xffu8; 12];
        let b = Bth::parse(&all).unwrap();
        let mut out = [0u8; 12];
        b.emit(&mut out).unwrap();
        assert_eq!(out, all);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Bth::parse(&RC_SEND_ONLY[..11]),
            Err(Error::Truncated {
                header: Header::Bth,
                need: 12,
                have: 11
            })
        );
        assert!(Bth::default().emit(&mut [0u8; 4]).is_err());
    }

    /// The word-wise `to_bytes` / `from_bytes` agree with the field-by-field view accessors,
    /// including out-of-range values that the setters truncate.
    #[test]
    fn bytes_agree_with_the_view() {
        use proptest::prelude::*;
        let fields = (
            any::<[u8; 4]>(),
            any::<[bool; 5]>(),
            any::<u16>(),
            any::<[u32; 2]>(),
        );
        proptest!(|((b, f, pkey, n) in fields)| {
            let h = Bth {
                opcode: Opcode(b[0]),
                solicited: f[0],
                mig_req: f[1],
                pad_cnt: b[1],
                tver: b[2],
                pkey,
                fecn: f[2],
                becn: f[3],
                resv6a: b[3],
                dest_qp: Qpn::new(n[0]),
                ack_req: f[4],
                resv7: b[1] ^ b[2],
                psn: Psn::new(n[1]),
            };
            let mut via_setters = [0x5au8; LEN];
            let mut v = BthView::new_unchecked(&mut via_setters[..]);
            v.set_opcode(h.opcode);
            v.set_solicited(h.solicited);
            v.set_mig_req(h.mig_req);
            v.set_pad_cnt(h.pad_cnt);
            v.set_tver(h.tver);
            v.set_pkey(h.pkey);
            v.set_fecn(h.fecn);
            v.set_becn(h.becn);
            v.set_resv6a(h.resv6a);
            v.set_dest_qp(h.dest_qp);
            v.set_ack_req(h.ack_req);
            v.set_resv7(h.resv7);
            v.set_psn(h.psn);
            prop_assert_eq!(h.to_bytes(), via_setters);
            let v = BthView::new_unchecked(&via_setters[..]);
            let back = Bth::from_bytes(&via_setters);
            prop_assert_eq!(
                (back.opcode, back.solicited, back.mig_req, back.pad_cnt, back.tver, back.pkey),
                (v.opcode(), v.solicited(), v.mig_req(), v.pad_cnt(), v.tver(), v.pkey())
            );
            prop_assert_eq!(
                (back.fecn, back.becn, back.resv6a, back.dest_qp, back.ack_req, back.resv7, back.psn),
                (v.fecn(), v.becn(), v.resv6a(), v.dest_qp(), v.ack_req(), v.resv7(), v.psn())
            );
        });
    }
}
