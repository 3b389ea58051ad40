//! GRH — Global Route Header (IBA 8.3), 40 bytes. In native InfiniBand it follows the LRH when
//! LRH:LNH is "IBA global" (and, as an IPv6 header, when LNH is "raw IPv6").
//!
//! The GRH has exactly the layout of an IPv6 header (RFC 8200): IPVer = Version, TClass =
//! Traffic Class, FlowLabel = Flow Label, PayLen = Payload Length, NxtHdr = Next Header,
//! HopLmt = Hop Limit, SGID/DGID = source/destination address. softib uses this module for the
//! IPv6 header of RoCEv2 packets as well.
//!
//! ```text
//!  byte 0   IPVer(7:4) TClass(7:4)(3:0)
//!  byte 1   TClass(3:0)(7:4) FlowLabel(19:16)(3:0)
//!  byte 2-3 FlowLabel(15:0)
//!  byte 4-5 PayLen                            -- bytes after the GRH through the ICRC
//!  byte 6   NxtHdr                            -- 0x1B: IBA transport (BTH follows)
//!  byte 7   HopLmt
//!  byte 8-23  SGID
//!  byte 24-39 DGID
//! ```
//!
//! For the ICRC, TClass, FlowLabel and HopLmt are replaced by all ones ([`icrc_masked`]).

use crate::bytes::{get_u16, get_u32, set_u16, set_u32};
use crate::error::{Error, Header, Result};
use crate::field_macros::header_view;

/// Length of the GRH in bytes.
pub const LEN: usize = 40;

/// GRH:NxtHdr value naming the IBA transport (a BTH follows the GRH).
pub const NXT_HDR_IBA: u8 = 0x1B;

/// GRH:IPVer value (6, as in IPv6).
pub const IP_VER: u8 = 6;

mod field {
    /// 32-bit word holding IPVer, TClass and FlowLabel.
    pub const WORD0: usize = 0;
    pub const PAY_LEN: usize = 4;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LMT: usize = 7;
    pub const SGID: usize = 8;
    pub const DGID: usize = 24;

    pub const IP_VER_SHIFT: u32 = 28;
    pub const IP_VER_MASK: u32 = 0xF000_0000;
    pub const TCLASS_SHIFT: u32 = 20;
    pub const TCLASS_MASK: u32 = 0x0FF0_0000;
    pub const FLOW_LABEL_MASK: u32 = 0x000F_FFFF;
}

/// Largest GRH:FlowLabel value (20 bits).
pub const FLOW_LABEL_MAX: u32 = field::FLOW_LABEL_MASK;

/// Returns the GRH (or IPv6 header) bytes as the ICRC covers them: TClass, FlowLabel and
/// HopLmt replaced by all ones; IPVer, PayLen, NxtHdr and both GIDs unchanged.
pub fn icrc_masked(bytes: &[u8; LEN]) -> [u8; LEN] {
    let mut out = *bytes;
    out[0] |= 0x0F;
    out[1] = 0xFF;
    out[2] = 0xFF;
    out[3] = 0xFF;
    out[field::HOP_LMT] = 0xFF;
    out
}

#[inline]
fn gid_at(b: &[u8], at: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g.copy_from_slice(&b[at..at + 16]);
    g
}

header_view! {
    /// Zero-copy view of a GRH at the start of `buffer`.
    pub struct GrhView(Header::Grh, "GRH", LEN);
}

impl<T: AsRef<[u8]>> GrhView<T> {
    fn word0(&self) -> u32 {
        get_u32(self.b(), field::WORD0)
    }

    /// IPVer: 4 bits (6).
    pub fn ip_ver(&self) -> u8 {
        ((self.word0() & field::IP_VER_MASK) >> field::IP_VER_SHIFT) as u8
    }
    /// TClass: traffic class, 8 bits.
    pub fn tclass(&self) -> u8 {
        ((self.word0() & field::TCLASS_MASK) >> field::TCLASS_SHIFT) as u8
    }
    /// FlowLabel: 20 bits.
    pub fn flow_label(&self) -> u32 {
        self.word0() & field::FLOW_LABEL_MASK
    }
    /// PayLen: bytes after the GRH up to and including the ICRC.
    pub fn pay_len(&self) -> u16 {
        get_u16(self.b(), field::PAY_LEN)
    }
    pub fn nxt_hdr(&self) -> u8 {
        self.b()[field::NXT_HDR]
    }
    pub fn hop_lmt(&self) -> u8 {
        self.b()[field::HOP_LMT]
    }
    pub fn sgid(&self) -> [u8; 16] {
        gid_at(self.b(), field::SGID)
    }
    pub fn dgid(&self) -> [u8; 16] {
        gid_at(self.b(), field::DGID)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GrhView<T> {
    fn set_word0(&mut self, mask: u32, bits: u32) {
        let w = get_u32(self.b(), field::WORD0);
        set_u32(self.bm(), field::WORD0, (w & !mask) | (bits & mask));
    }

    /// Sets IPVer (low 4 bits of `v`).
    pub fn set_ip_ver(&mut self, v: u8) {
        self.set_word0(field::IP_VER_MASK, u32::from(v) << field::IP_VER_SHIFT);
    }
    pub fn set_tclass(&mut self, v: u8) {
        self.set_word0(field::TCLASS_MASK, u32::from(v) << field::TCLASS_SHIFT);
    }
    /// Sets FlowLabel (low 20 bits of `v`).
    pub fn set_flow_label(&mut self, v: u32) {
        self.set_word0(field::FLOW_LABEL_MASK, v);
    }
    pub fn set_pay_len(&mut self, v: u16) {
        set_u16(self.bm(), field::PAY_LEN, v);
    }
    pub fn set_nxt_hdr(&mut self, v: u8) {
        self.bm()[field::NXT_HDR] = v;
    }
    pub fn set_hop_lmt(&mut self, v: u8) {
        self.bm()[field::HOP_LMT] = v;
    }
    pub fn set_sgid(&mut self, v: &[u8; 16]) {
        self.bm()[field::SGID..field::SGID + 16].copy_from_slice(v);
    }
    pub fn set_dgid(&mut self, v: &[u8; 16]) {
        self.bm()[field::DGID..field::DGID + 16].copy_from_slice(v);
    }
}

/// A parsed GRH (or IPv6 header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Grh {
    /// IPVer: 4 bits (6).
    pub ip_ver: u8,
    /// TClass: traffic class.
    pub tclass: u8,
    /// FlowLabel: 20 bits.
    pub flow_label: u32,
    /// PayLen: bytes after the GRH up to and including the ICRC.
    pub pay_len: u16,
    /// NxtHdr: [`NXT_HDR_IBA`] when a BTH follows.
    pub nxt_hdr: u8,
    pub hop_lmt: u8,
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
}

impl Grh {
    pub const LEN: usize = LEN;

    /// Parses the GRH at the start of `buf`. Field values are not judged here; the packet
    /// parser checks IPVer, PayLen and NxtHdr against the rest of the packet.
    #[inline]
    pub fn parse(buf: &[u8]) -> Result<Grh> {
        match buf.first_chunk::<LEN>() {
            Some(h) => Ok(Grh::from_bytes(h)),
            None => Err(Error::truncated(Header::Grh, LEN, buf.len())),
        }
    }

    /// The GRH held by these 40 bytes.
    #[inline(always)]
    pub fn from_bytes(h: &[u8; LEN]) -> Grh {
        let v = GrhView::new_unchecked(h);
        Grh {
            ip_ver: v.ip_ver(),
            tclass: v.tclass(),
            flow_label: v.flow_label(),
            pay_len: v.pay_len(),
            nxt_hdr: v.nxt_hdr(),
            hop_lmt: v.hop_lmt(),
            sgid: v.sgid(),
            dgid: v.dgid(),
        }
    }

    /// The 40 bytes [`Grh::emit`] writes (fields wider than the wire field keep their low
    /// bits).
    #[inline(always)]
    pub fn to_bytes(&self) -> [u8; LEN] {
        let word0 = ((u32::from(self.ip_ver) << field::IP_VER_SHIFT) & field::IP_VER_MASK)
            | ((u32::from(self.tclass) << field::TCLASS_SHIFT) & field::TCLASS_MASK)
            | (self.flow_label & field::FLOW_LABEL_MASK);
        let mut h = [0u8; LEN];
        set_u32(&mut h, field::WORD0, word0);
        set_u16(&mut h, field::PAY_LEN, self.pay_len);
        h[field::NXT_HDR] = self.nxt_hdr;
        h[field::HOP_LMT] = self.hop_lmt;
        h[field::SGID..field::SGID + 16].copy_from_slice(&self.sgid);
        h[field::DGID..field::DGID + 16].copy_from_slice(&self.dgid);
        h
    }

    /// Writes the GRH to the start of `buf`; returns the bytes written. Fields wider than the
    /// wire field keep their low bits.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let have = buf.len();
        match buf.first_chunk_mut::<LEN>() {
            Some(h) => {
                *h = self.to_bytes();
                Ok(LEN)
            }
            None => Err(Error::truncated(Header::Grh, LEN, have)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use proptest::prelude::*;

    // IPv6 header of frame 9 of rc_pingpong_ipv6_s64_n3.pcap (RoCEv2 over IPv6, RC SEND_ONLY
    // with 64 bytes): traffic class 0, flow label 0, payload length 88 (8 UDP + 12 BTH + 64 +
    // 4 ICRC), next header UDP (17), hop limit 64, fe80::5054:ff:fe61:11 -> fe80::5054:ff:fe62:11.
    const ROCE_V6: [u8; 40] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x58, 0x11, 0x40, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x61, 0x00, 0x11, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x62, 0x00, 0x11,
    ];

    const GID_A: [u8; 16] = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x61, 0x00, 0x11,
    ];
    const GID_B: [u8; 16] = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x62, 0x00, 0x11,
    ];

    #[test]
    fn parse_real_ipv6_header() {
        let g = Grh::parse(&ROCE_V6).unwrap();
        assert_eq!(
            g,
            Grh {
                ip_ver: 6,
                tclass: 0,
                flow_label: 0,
                pay_len: 88,
                nxt_hdr: 17,
                hop_lmt: 64,
                sgid: GID_A,
                dgid: GID_B,
            }
        );
        let mut out = [0u8; 40];
        assert_eq!(g.emit(&mut out), Ok(40));
        assert_eq!(out, ROCE_V6);
    }

    #[test]
    fn word0_field_boundaries() {
        let g = Grh {
            ip_ver: IP_VER,
            tclass: 0xAB,
            flow_label: 0xC_DEF0,
            nxt_hdr: NXT_HDR_IBA,
            ..Grh::default()
        };
        let mut out = [0u8; 40];
        g.emit(&mut out).unwrap();
        assert_eq!(&out[..8], &[0x6A, 0xBC, 0xDE, 0xF0, 0x00, 0x00, 0x1B, 0x00]);
        // Over-wide values keep their low bits and leave neighbours alone.
        let wide = Grh {
            ip_ver: 0xF6,
            flow_label: 0xFFF0_0001,
            ..Grh::default()
        };
        wide.emit(&mut out).unwrap();
        assert_eq!(&out[..4], &[0x60, 0x00, 0x00, 0x01]);
    }

    #[test]
    fn icrc_mask_covers_tclass_flow_label_hop_limit() {
        let m = icrc_masked(&ROCE_V6);
        assert_eq!(&m[..8], &[0x6F, 0xFF, 0xFF, 0xFF, 0x00, 0x58, 0x11, 0xFF]);
        assert_eq!(&m[8..], &ROCE_V6[8..]);
        let g = Grh::parse(&m).unwrap();
        assert_eq!(
            (g.ip_ver, g.tclass, g.flow_label, g.hop_lmt),
            (6, 0xFF, FLOW_LABEL_MAX, 0xFF)
        );
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Grh::parse(&ROCE_V6[..39]),
            Err(Error::Truncated {
                header: Header::Grh,
                need: 40,
                have: 39
            })
        );
        assert!(Grh::default().emit(&mut [0u8; 39]).is_err());
    }

    fn arb_grh() -> impl Strategy<Value = Grh> {
        (
            0u8..16,
            any::<u8>(),
            0u32..=FLOW_LABEL_MAX,
            any::<u16>(),
            any::<u8>(),
            any::<u8>(),
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
        )
            .prop_map(
                |(ip_ver, tclass, flow_label, pay_len, nxt_hdr, hop_lmt, sgid, dgid)| Grh {
                    ip_ver,
                    tclass,
                    flow_label,
                    pay_len,
                    nxt_hdr,
                    hop_lmt,
                    sgid,
                    dgid,
                },
            )
    }

    proptest! {
        #[test]
        fn bytes_round_trip(bytes in any::<[u8; LEN]>()) {
            let g = Grh::parse(&bytes).unwrap();
            let mut out = [0u8; LEN];
            prop_assert_eq!(g.emit(&mut out), Ok(LEN));
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn fields_round_trip(g in arb_grh()) {
            let mut out = [0u8; LEN];
            g.emit(&mut out).unwrap();
            prop_assert_eq!(Grh::parse(&out), Ok(g));
        }

        #[test]
        fn parse_any_slice(bytes in proptest::collection::vec(any::<u8>(), 0..2 * LEN)) {
            match Grh::parse(&bytes) {
                Ok(g) => {
                    prop_assert!(bytes.len() >= LEN);
                    let mut out = [0u8; LEN];
                    g.emit(&mut out).unwrap();
                    prop_assert_eq!(&out[..], &bytes[..LEN]);
                }
                Err(e) => prop_assert_eq!(
                    e,
                    Error::Truncated { header: Header::Grh, need: LEN, have: bytes.len() }
                ),
            }
        }
    }

    /// `to_bytes` keeps the low bits of over-wide fields, as the setters do.
    #[test]
    fn to_bytes_agrees_with_the_setters() {
        proptest!(|(g in arb_grh(), ver in any::<u8>(), flow in any::<u32>())| {
            let g = Grh { ip_ver: ver, flow_label: flow, ..g };
            let mut via_setters = [0xa5u8; LEN];
            let mut v = GrhView::new_unchecked(&mut via_setters[..]);
            v.set_ip_ver(g.ip_ver);
            v.set_tclass(g.tclass);
            v.set_flow_label(g.flow_label);
            v.set_pay_len(g.pay_len);
            v.set_nxt_hdr(g.nxt_hdr);
            v.set_hop_lmt(g.hop_lmt);
            v.set_sgid(&g.sgid);
            v.set_dgid(&g.dgid);
            prop_assert_eq!(g.to_bytes(), via_setters);
        });
    }
}
