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

use crate::bytes::{get_u16, get_u24, set_bit, set_u16, set_u24};
use crate::error::{check_len, Header, Result};
use crate::opcode::Opcode;
use crate::psn::{Psn, Qpn};

/// Length of the BTH in bytes.
pub const LEN: usize = 12;

mod field {
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

/// Zero-copy view of a BTH at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthView<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        BthView { buffer }
    }

    /// Wraps `buffer` after checking it holds a whole BTH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds a whole BTH.
    pub fn check_len(&self) -> Result<()> {
        check_len(Header::Bth, self.buffer.as_ref(), LEN)
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

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
        Qpn::new(get_u24(self.b(), field::DEST_QP))
    }
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK] & field::ACK_REQ != 0
    }
    pub fn resv7(&self) -> u8 {
        self.b()[field::ACK] & field::RESV7
    }
    pub fn psn(&self) -> Psn {
        Psn::new(get_u24(self.b(), field::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthView<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

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
        let v = BthView::new_checked(buf)?;
        Ok(Bth {
            opcode: v.opcode(),
            solicited: v.solicited(),
            mig_req: v.mig_req(),
            pad_cnt: v.pad_cnt(),
            tver: v.tver(),
            pkey: v.pkey(),
            fecn: v.fecn(),
            becn: v.becn(),
            resv6a: v.resv6a(),
            dest_qp: v.dest_qp(),
            ack_req: v.ack_req(),
            resv7: v.resv7(),
            psn: v.psn(),
        })
    }

    /// Writes the BTH to the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut v = BthView::new_checked(buf)?;
        v.set_opcode(self.opcode);
        v.set_solicited(self.solicited);
        v.set_mig_req(self.mig_req);
        v.set_pad_cnt(self.pad_cnt);
        v.set_tver(self.tver);
        v.set_pkey(self.pkey);
        v.set_fecn(self.fecn);
        v.set_becn(self.becn);
        v.set_resv6a(self.resv6a);
        v.set_dest_qp(self.dest_qp);
        v.set_ack_req(self.ack_req);
        v.set_resv7(self.resv7);
        v.set_psn(self.psn);
        Ok(LEN)
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
}
