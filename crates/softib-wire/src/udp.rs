//! UDP header (RFC 768), 8 bytes; RoCEv2 packets go to destination port [`ROCEV2_PORT`] (4791).
//!
//! ```text
//!  byte 0-1 Source Port        -- RoCEv2: chosen per QP for ECMP entropy (rxe: 0xC000 | hash(QPN))
//!  byte 2-3 Destination Port   -- 4791
//!  byte 4-5 Length             -- UDP header + BTH .. ICRC
//!  byte 6-7 Checksum           -- masked by the ICRC; rxe sends 0
//! ```
//!
//! Field values are not judged here: the RoCEv2 packet parser checks the port and the length.

use crate::bytes::{get_u16, set_u16};
use crate::error::{Error, Header, Result};
use crate::field_macros::header_view;

/// Length of the UDP header.
pub const LEN: usize = 8;
/// IANA-assigned UDP destination port of RoCEv2.
pub const ROCEV2_PORT: u16 = 4791;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

header_view! {
    /// Zero-copy view of a UDP header at the start of `buffer`.
    pub struct UdpView(Header::Udp, "UDP header", LEN);
}

impl<T: AsRef<[u8]>> UdpView<T> {
    pub fn src_port(&self) -> u16 {
        get_u16(self.b(), field::SRC_PORT)
    }
    pub fn dst_port(&self) -> u16 {
        get_u16(self.b(), field::DST_PORT)
    }
    /// Length of the UDP header and its payload, in bytes.
    pub fn length(&self) -> u16 {
        get_u16(self.b(), field::LENGTH)
    }
    pub fn checksum(&self) -> u16 {
        get_u16(self.b(), field::CHECKSUM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpView<T> {
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.bm(), field::SRC_PORT, v);
    }
    pub fn set_dst_port(&mut self, v: u16) {
        set_u16(self.bm(), field::DST_PORT, v);
    }
    pub fn set_length(&mut self, v: u16) {
        set_u16(self.bm(), field::LENGTH, v);
    }
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.bm(), field::CHECKSUM, v);
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Udp {
    pub src_port: u16,
    pub dst_port: u16,
    /// Header + payload length in bytes.
    pub length: u16,
    /// As found / to be written verbatim; 0 means "no checksum" over IPv4.
    pub checksum: u16,
}

impl Udp {
    pub const LEN: usize = LEN;

    /// Parses the UDP header at the start of `buf`.
    #[inline]
    pub fn parse(buf: &[u8]) -> Result<Udp> {
        match buf.first_chunk::<LEN>() {
            Some(h) => Ok(Udp::from_bytes(h)),
            None => Err(Error::truncated(Header::Udp, LEN, buf.len())),
        }
    }

    /// The UDP header held by these 8 bytes.
    #[inline(always)]
    pub fn from_bytes(h: &[u8; LEN]) -> Udp {
        // All four fields at once: swap the bytes of every 16-bit word of the header.
        let w = u64::from_le_bytes(*h);
        let w = ((w & 0x00FF_00FF_00FF_00FF) << 8) | ((w >> 8) & 0x00FF_00FF_00FF_00FF);
        Udp {
            src_port: w as u16,
            dst_port: (w >> 16) as u16,
            length: (w >> 32) as u16,
            checksum: (w >> 48) as u16,
        }
    }

    /// The 8 bytes [`Udp::emit`] writes.
    #[inline(always)]
    pub fn to_bytes(&self) -> [u8; LEN] {
        let [s0, s1] = self.src_port.to_be_bytes();
        let [d0, d1] = self.dst_port.to_be_bytes();
        let [l0, l1] = self.length.to_be_bytes();
        let [c0, c1] = self.checksum.to_be_bytes();
        [s0, s1, d0, d1, l0, l1, c0, c1]
    }

    /// Writes the header to the start of `buf`; returns the bytes written.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let have = buf.len();
        match buf.first_chunk_mut::<LEN>() {
            Some(h) => {
                *h = self.to_bytes();
                Ok(LEN)
            }
            None => Err(Error::truncated(Header::Udp, LEN, have)),
        }
    }
}

/// A copy of the first 8 bytes of `header` with the checksum set to all ones, as the ICRC covers
/// it. Bytes missing from a short `header` are left zero; the caller checks lengths.
pub fn icrc_masked(header: &[u8]) -> [u8; LEN] {
    let mut m = [0u8; LEN];
    let n = header.len().min(LEN);
    m[..n].copy_from_slice(&header[..n]);
    m[field::CHECKSUM] = 0xFF;
    m[field::CHECKSUM + 1] = 0xFF;
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    // UDP header of the first RC SEND_ONLY in rc_pingpong_s64_n5.pcap: 0xc169 -> 4791, 88 bytes.
    const REAL: [u8; 8] = [0xc1, 0x69, 0x12, 0xb7, 0x00, 0x58, 0x00, 0x00];

    #[test]
    fn parse_real_header() {
        let u = Udp::parse(&REAL).unwrap();
        assert_eq!(
            u,
            Udp {
                src_port: 0xc169,
                dst_port: ROCEV2_PORT,
                length: 88,
                checksum: 0
            }
        );
        let mut out = [0u8; 8];
        assert_eq!(u.emit(&mut out), Ok(8));
        assert_eq!(out, REAL);
    }

    #[test]
    fn every_bit_round_trips() {
        let all = [0xa5u8; 8];
        let mut out = [0u8; 8];
        Udp::parse(&all).unwrap().emit(&mut out).unwrap();
        assert_eq!(out, all);
    }

    #[test]
    fn short_buffers() {
        assert_eq!(
            Udp::parse(&REAL[..7]),
            Err(Error::Truncated {
                header: Header::Udp,
                need: 8,
                have: 7
            })
        );
        assert!(Udp::default().emit(&mut [0u8; 7]).is_err());
    }

    #[test]
    fn icrc_mask_sets_checksum_only() {
        assert_eq!(
            icrc_masked(&REAL),
            [0xc1, 0x69, 0x12, 0xb7, 0x00, 0x58, 0xff, 0xff]
        );
    }

    #[test]
    fn bytes_agree_with_the_view() {
        use proptest::prelude::*;
        proptest!(|(b in any::<[u8; LEN]>())| {
            let v = UdpView::new_unchecked(&b[..]);
            let u = Udp::from_bytes(&b);
            prop_assert_eq!(
                (u.src_port, u.dst_port, u.length, u.checksum),
                (v.src_port(), v.dst_port(), v.length(), v.checksum())
            );
            prop_assert_eq!(u.to_bytes(), b);
        });
    }
}
