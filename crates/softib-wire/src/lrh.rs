//! LRH — Local Route Header (IBA 7.7), 8 bytes, the first header of every native InfiniBand
//! packet. RoCEv2 has no LRH: Ethernet, IP and UDP take its place.
//!
//! ```text
//!  byte 0   VL(7:4) LVer(3:0)
//!  byte 1   SL(7:4) Resv2(3:2) LNH(1:0)
//!  byte 2-3 DLID
//!  byte 4   Resv5(7:3) PktLen(10:8)
//!  byte 5   PktLen(7:0)                      -- PktLen counts 4-byte words, LRH through ICRC
//!  byte 6-7 SLID
//! ```
//!
//! The ICRC treats the whole LRH as variant (routers rewrite it) and covers it as 8 bytes of
//! 0xFF, as RoCEv2 does (see [`crate::icrc`]); the VCRC covers it as sent, hop by hop.

use crate::bytes::{get_u16, set_u16};
use crate::error::{Header, Result};
use crate::field_macros::header_view;

/// Length of the LRH in bytes.
pub const LEN: usize = 8;

mod field {
    pub const VL_LVER: usize = 0;
    pub const SL_LNH: usize = 1;
    pub const DLID: usize = 2;
    pub const PKT_LEN: usize = 4;
    pub const SLID: usize = 6;

    pub const VL_SHIFT: u8 = 4;
    pub const VL_MASK: u8 = 0xF0;
    pub const LVER_MASK: u8 = 0x0F;
    pub const SL_SHIFT: u8 = 4;
    pub const SL_MASK: u8 = 0xF0;
    pub const RESV2_SHIFT: u8 = 2;
    pub const RESV2_MASK: u8 = 0x0C;
    pub const LNH_MASK: u8 = 0x03;
    /// Bits 7:3 of byte 4, as a mask over the 16-bit word at byte 4.
    pub const RESV5_SHIFT: u16 = 11;
    pub const RESV5_MASK: u16 = 0xF800;
    pub const PKT_LEN_MASK: u16 = 0x07FF;
}

/// LRH:LNH, the link next header: what follows the LRH (IBA Table 4-2 of the raw-datagram
/// chapter: bit 1 = IBA transport, bit 0 = GRH/IPv6 header follows). All four values are
/// defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Lnh {
    /// 00: raw EtherType datagram; a RWH follows.
    #[default]
    Raw = 0,
    /// 01: raw IPv6 datagram; an IPv6 header follows.
    Ipv6 = 1,
    /// 10: IBA local; the BTH follows.
    IbaLocal = 2,
    /// 11: IBA global; a GRH follows, then the BTH.
    IbaGlobal = 3,
}

impl Lnh {
    /// Decodes the low 2 bits of `v`.
    pub const fn from_bits(v: u8) -> Lnh {
        match v & field::LNH_MASK {
            0 => Lnh::Raw,
            1 => Lnh::Ipv6,
            2 => Lnh::IbaLocal,
            _ => Lnh::IbaGlobal,
        }
    }

    /// The 2-bit field value.
    pub const fn bits(self) -> u8 {
        self as u8
    }

    /// True when an IBA transport header (BTH) follows, possibly after a GRH.
    pub const fn is_iba_transport(self) -> bool {
        self.bits() & 0b10 != 0
    }

    /// True when a GRH (IBA global) or an IPv6 header (raw IPv6) follows the LRH.
    pub const fn has_grh(self) -> bool {
        self.bits() & 0b01 != 0
    }
}

header_view! {
    /// Zero-copy view of an LRH at the start of `buffer`.
    pub struct LrhView(Header::Lrh, "LRH", LEN);
}

impl<T: AsRef<[u8]>> LrhView<T> {
    /// VL: virtual lane.
    pub fn vl(&self) -> u8 {
        (self.b()[field::VL_LVER] & field::VL_MASK) >> field::VL_SHIFT
    }
    /// LVer: link version (0).
    pub fn lver(&self) -> u8 {
        self.b()[field::VL_LVER] & field::LVER_MASK
    }
    /// SL: service level.
    pub fn sl(&self) -> u8 {
        (self.b()[field::SL_LNH] & field::SL_MASK) >> field::SL_SHIFT
    }
    pub fn resv2(&self) -> u8 {
        (self.b()[field::SL_LNH] & field::RESV2_MASK) >> field::RESV2_SHIFT
    }
    pub fn lnh(&self) -> Lnh {
        Lnh::from_bits(self.b()[field::SL_LNH])
    }
    pub fn dlid(&self) -> u16 {
        get_u16(self.b(), field::DLID)
    }
    pub fn resv5(&self) -> u8 {
        ((get_u16(self.b(), field::PKT_LEN) & field::RESV5_MASK) >> field::RESV5_SHIFT) as u8
    }
    /// PktLen: packet length in 4-byte words, from the first LRH byte through the ICRC.
    pub fn pkt_len(&self) -> u16 {
        get_u16(self.b(), field::PKT_LEN) & field::PKT_LEN_MASK
    }
    pub fn slid(&self) -> u16 {
        get_u16(self.b(), field::SLID)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> LrhView<T> {
    /// Sets VL (low 4 bits of `v`).
    pub fn set_vl(&mut self, v: u8) {
        let b = &mut self.bm()[field::VL_LVER];
        *b = (*b & !field::VL_MASK) | ((v << field::VL_SHIFT) & field::VL_MASK);
    }
    /// Sets LVer (low 4 bits of `v`).
    pub fn set_lver(&mut self, v: u8) {
        let b = &mut self.bm()[field::VL_LVER];
        *b = (*b & !field::LVER_MASK) | (v & field::LVER_MASK);
    }
    /// Sets SL (low 4 bits of `v`).
    pub fn set_sl(&mut self, v: u8) {
        let b = &mut self.bm()[field::SL_LNH];
        *b = (*b & !field::SL_MASK) | ((v << field::SL_SHIFT) & field::SL_MASK);
    }
    /// Sets the reserved bits 3:2 of byte 1 (low 2 bits of `v`).
    pub fn set_resv2(&mut self, v: u8) {
        let b = &mut self.bm()[field::SL_LNH];
        *b = (*b & !field::RESV2_MASK) | ((v << field::RESV2_SHIFT) & field::RESV2_MASK);
    }
    pub fn set_lnh(&mut self, v: Lnh) {
        let b = &mut self.bm()[field::SL_LNH];
        *b = (*b & !field::LNH_MASK) | v.bits();
    }
    pub fn set_dlid(&mut self, v: u16) {
        set_u16(self.bm(), field::DLID, v);
    }
    /// Sets the reserved bits 7:3 of byte 4 (low 5 bits of `v`).
    pub fn set_resv5(&mut self, v: u8) {
        let w = get_u16(self.b(), field::PKT_LEN);
        let w =
            (w & !field::RESV5_MASK) | ((u16::from(v) << field::RESV5_SHIFT) & field::RESV5_MASK);
        set_u16(self.bm(), field::PKT_LEN, w);
    }
    /// Sets PktLen (low 11 bits of `v`).
    pub fn set_pkt_len(&mut self, v: u16) {
        let w = get_u16(self.b(), field::PKT_LEN);
        let w = (w & !field::PKT_LEN_MASK) | (v & field::PKT_LEN_MASK);
        set_u16(self.bm(), field::PKT_LEN, w);
    }
    pub fn set_slid(&mut self, v: u16) {
        set_u16(self.bm(), field::SLID, v);
    }
}

/// A parsed LRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Lrh {
    /// VL: virtual lane, 4 bits.
    pub vl: u8,
    /// LVer: link version, 4 bits (0).
    pub lver: u8,
    /// SL: service level, 4 bits.
    pub sl: u8,
    /// Reserved bits 3:2 of byte 1; zero on send, ignored on receipt.
    pub resv2: u8,
    pub lnh: Lnh,
    pub dlid: u16,
    /// Reserved bits 7:3 of byte 4; zero on send, ignored on receipt.
    pub resv5: u8,
    /// PktLen: 11 bits, packet length in 4-byte words from the LRH through the ICRC.
    pub pkt_len: u16,
    pub slid: u16,
}

impl Lrh {
    pub const LEN: usize = LEN;

    /// Parses the LRH at the start of `buf`. Field values are not judged here; the packet
    /// parser checks LVer and PktLen against the rest of the packet.
    pub fn parse(buf: &[u8]) -> Result<Lrh> {
        let v = LrhView::new_checked(buf)?;
        Ok(Lrh {
            vl: v.vl(),
            lver: v.lver(),
            sl: v.sl(),
            resv2: v.resv2(),
            lnh: v.lnh(),
            dlid: v.dlid(),
            resv5: v.resv5(),
            pkt_len: v.pkt_len(),
            slid: v.slid(),
        })
    }

    /// Writes the LRH to the start of `buf`; returns the bytes written. Fields wider than the
    /// wire field keep their low bits.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut v = LrhView::new_checked(buf)?;
        v.set_vl(self.vl);
        v.set_lver(self.lver);
        v.set_sl(self.sl);
        v.set_resv2(self.resv2);
        v.set_lnh(self.lnh);
        v.set_dlid(self.dlid);
        v.set_resv5(self.resv5);
        v.set_pkt_len(self.pkt_len);
        v.set_slid(self.slid);
        Ok(LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_macros::header_tests;
    use proptest::prelude::*;

    header_tests!(Lrh, Header::Lrh);

    // No native IB capture exists among the test vectors (rxe is RoCEv2 only); this LRH is
    // assembled bit by bit from the IBA layout: VL 0, LVer 0, SL 3, LNH IBA local, DLID 0x0004,
    // PktLen 22 words (8 LRH + 12 BTH + 64 payload + 4 ICRC = 88 bytes), SLID 0x0001.
    const LOCAL: [u8; 8] = [0x00, 0x32, 0x00, 0x04, 0x00, 0x16, 0x00, 0x01];

    #[test]
    fn parse_known_header() {
        let h = Lrh::parse(&LOCAL).unwrap();
        assert_eq!(
            h,
            Lrh {
                vl: 0,
                lver: 0,
                sl: 3,
                resv2: 0,
                lnh: Lnh::IbaLocal,
                dlid: 4,
                resv5: 0,
                pkt_len: 22,
                slid: 1,
            }
        );
        assert!(h.lnh.is_iba_transport() && !h.lnh.has_grh());
        let mut out = [0u8; 8];
        assert_eq!(h.emit(&mut out), Ok(8));
        assert_eq!(out, LOCAL);
    }

    #[test]
    fn field_boundaries() {
        // VL 0xA, LVer 0x5, SL 0xC, Resv2 0b10, LNH 11, DLID 0xBEEF, Resv5 0b10101,
        // PktLen 0x5A5, SLID 0xC0DE.
        let bytes = [0xA5, 0xCB, 0xBE, 0xEF, 0xAD, 0xA5, 0xC0, 0xDE];
        let h = Lrh::parse(&bytes).unwrap();
        assert_eq!((h.vl, h.lver, h.sl, h.resv2), (0xA, 0x5, 0xC, 0b10));
        assert_eq!(h.lnh, Lnh::IbaGlobal);
        assert_eq!(
            (h.dlid, h.resv5, h.pkt_len, h.slid),
            (0xBEEF, 0x15, 0x5A5, 0xC0DE)
        );
    }

    #[test]
    fn lnh_values_match_table_4_2() {
        // (LNH, IBA transport follows, GRH/IPv6 header follows)
        let table = [
            (Lnh::IbaGlobal, 0b11, true, true),
            (Lnh::IbaLocal, 0b10, true, false),
            (Lnh::Ipv6, 0b01, false, true),
            (Lnh::Raw, 0b00, false, false),
        ];
        for (lnh, bits, iba, grh) in table {
            assert_eq!(lnh.bits(), bits);
            assert_eq!(Lnh::from_bits(bits), lnh);
            assert_eq!(Lnh::from_bits(bits | 0xFC), lnh);
            assert_eq!((lnh.is_iba_transport(), lnh.has_grh()), (iba, grh));
        }
    }

    fn arb_lrh() -> impl Strategy<Value = Lrh> {
        (
            (0u8..16, 0u8..16, 0u8..16, 0u8..4, 0u8..4),
            (any::<u16>(), 0u8..32, 0u16..2048, any::<u16>()),
        )
            .prop_map(
                |((vl, lver, sl, resv2, lnh), (dlid, resv5, pkt_len, slid))| Lrh {
                    vl,
                    lver,
                    sl,
                    resv2,
                    lnh: Lnh::from_bits(lnh),
                    dlid,
                    resv5,
                    pkt_len,
                    slid,
                },
            )
    }

    proptest! {
        #[test]
        fn fields_round_trip(h in arb_lrh()) {
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Lrh::parse(&out), Ok(h));
        }
    }
}
