//! Ethernet II header (IEEE 802.3), 14 bytes, optionally with one IEEE 802.1Q VLAN tag (18 bytes).
//!
//! ```text
//!  untagged:  bytes 0-5 destination MAC | 6-11 source MAC | 12-13 EtherType
//!  tagged:    bytes 0-5 destination MAC | 6-11 source MAC | 12-13 TPID 0x8100
//!             | 14-15 TCI: PCP(15:13) DEI(12) VID(11:0) | 16-17 EtherType
//! ```
//!
//! RoCEv2 frames carry EtherType [`ETHERTYPE_IPV4`] or [`ETHERTYPE_IPV6`]. Only one 802.1Q tag
//! (TPID [`ETHERTYPE_VLAN`]) is understood; any other TPID (for example 802.1ad 0x88A8) is
//! reported as the frame's EtherType. The frame check sequence is not part of this header and is
//! not handled by softib (captures and sockets hand frames over without it).

use crate::bytes::{get_u16, set_u16};
use crate::error::{check_len, Error, Field, Header, Result};

/// Length of an untagged Ethernet header.
pub const LEN: usize = 14;
/// Length of an Ethernet header carrying one 802.1Q tag.
pub const VLAN_LEN: usize = 18;
/// Shortest Ethernet frame on the wire, FCS excluded; shorter frames are padded with zeros.
pub const MIN_FRAME_LEN: usize = 60;

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// 802.1Q tag protocol identifier (TPID).
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_IPV6: u16 = 0x86DD;

mod field {
    pub const DST: core::ops::Range<usize> = 0..6;
    pub const SRC: core::ops::Range<usize> = 6..12;
    /// EtherType of an untagged frame, TPID of a tagged one.
    pub const TYPE_OR_TPID: usize = 12;
    pub const TCI: usize = 14;
    pub const INNER_TYPE: usize = 16;

    pub const PCP_SHIFT: u16 = 13;
    pub const DEI: u16 = 0x1000;
    pub const VID: u16 = 0x0FFF;
}

/// One 802.1Q tag control information (TCI) field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point, 0..=7.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier, 0..=4095.
    pub vid: u16,
}

impl VlanTag {
    /// Splits a 16-bit TCI into its fields.
    pub const fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> field::PCP_SHIFT) as u8,
            dei: tci & field::DEI != 0,
            vid: tci & field::VID,
        }
    }

    /// The 16-bit TCI (PCP and VID are truncated to 3 and 12 bits).
    pub const fn tci(&self) -> u16 {
        (((self.pcp & 0x7) as u16) << field::PCP_SHIFT)
            | if self.dei { field::DEI } else { 0 }
            | (self.vid & field::VID)
    }
}

/// Zero-copy view of an Ethernet header at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetView<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetView { buffer }
    }

    /// Wraps `buffer` after checking it holds the whole header (18 bytes when tagged).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds the whole header, including the 802.1Q tag if present.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        check_len(Header::Ethernet, b, LEN)?;
        if get_u16(b, field::TYPE_OR_TPID) == ETHERTYPE_VLAN {
            check_len(Header::Vlan, b, VLAN_LEN)?;
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn dst(&self) -> [u8; 6] {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.b()[field::DST]);
        a
    }
    pub fn src(&self) -> [u8; 6] {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.b()[field::SRC]);
        a
    }
    /// True when bytes 12-13 hold the 802.1Q TPID.
    pub fn has_vlan(&self) -> bool {
        get_u16(self.b(), field::TYPE_OR_TPID) == ETHERTYPE_VLAN
    }
    /// The 802.1Q tag, if the frame carries one.
    pub fn vlan(&self) -> Option<VlanTag> {
        if self.has_vlan() {
            Some(VlanTag::from_tci(get_u16(self.b(), field::TCI)))
        } else {
            None
        }
    }
    /// EtherType of the payload (after the tag, if any).
    pub fn ether_type(&self) -> u16 {
        if self.has_vlan() {
            get_u16(self.b(), field::INNER_TYPE)
        } else {
            get_u16(self.b(), field::TYPE_OR_TPID)
        }
    }
    /// 14, or 18 with an 802.1Q tag.
    pub fn header_len(&self) -> usize {
        if self.has_vlan() {
            VLAN_LEN
        } else {
            LEN
        }
    }
    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetView<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub fn set_dst(&mut self, mac: [u8; 6]) {
        self.bm()[field::DST].copy_from_slice(&mac);
    }
    pub fn set_src(&mut self, mac: [u8; 6]) {
        self.bm()[field::SRC].copy_from_slice(&mac);
    }
    /// Sets the payload EtherType, after the tag if the frame carries one.
    pub fn set_ether_type(&mut self, v: u16) {
        let at = if self.has_vlan() {
            field::INNER_TYPE
        } else {
            field::TYPE_OR_TPID
        };
        set_u16(self.bm(), at, v);
    }
    /// Rewrites the TCI of a tagged frame. An untagged frame has no room for a tag (adding one
    /// moves the payload): that is an error naming the EtherType found.
    pub fn set_vlan(&mut self, tag: VlanTag) -> Result<()> {
        if !self.has_vlan() {
            return Err(Error::BadField {
                field: Field::EtherType,
                value: get_u16(self.b(), field::TYPE_OR_TPID).into(),
            });
        }
        set_u16(self.bm(), field::TCI, tag.tci());
        Ok(())
    }
    /// The bytes after the header, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let at = self.header_len();
        &mut self.bm()[at..]
    }
}

/// What [`Ethernet::check`] found at the start of a frame.
pub(crate) struct CheckedEthernet<'a> {
    /// The first 14 bytes of the header.
    pub header: &'a [u8; LEN],
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// The payload EtherType (after the tag, if any).
    pub ether_type: u16,
    /// The bytes after the header.
    pub payload: &'a [u8],
}

/// A parsed Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ethernet {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    /// EtherType of the payload (the inner one when tagged).
    pub ether_type: u16,
    /// The 802.1Q tag (TPID 0x8100), if any.
    pub vlan: Option<VlanTag>,
}

impl Ethernet {
    /// 14, or 18 with an 802.1Q tag.
    pub const fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            VLAN_LEN
        } else {
            LEN
        }
    }

    /// The checks of [`Ethernet::parse`], splitting the frame at the end of the header.
    #[inline(always)]
    pub(crate) fn check(buf: &[u8]) -> Result<CheckedEthernet<'_>> {
        let Some((h, rest)) = buf.split_first_chunk::<LEN>() else {
            return Err(Error::truncated(Header::Ethernet, LEN, buf.len()));
        };
        let type_or_tpid = get_u16(h, field::TYPE_OR_TPID);
        if type_or_tpid != ETHERTYPE_VLAN {
            return Ok(CheckedEthernet {
                header: h,
                vlan: None,
                ether_type: type_or_tpid,
                payload: rest,
            });
        }
        let Some((tag, rest)) = rest.split_first_chunk::<{ VLAN_LEN - LEN }>() else {
            return Err(Error::truncated(Header::Vlan, VLAN_LEN, buf.len()));
        };
        Ok(CheckedEthernet {
            header: h,
            vlan: Some(VlanTag::from_tci(u16::from_be_bytes([tag[0], tag[1]]))),
            ether_type: u16::from_be_bytes([tag[2], tag[3]]),
            payload: rest,
        })
    }

    /// The header [`Ethernet::check`] accepted: `header` holds its first 14 bytes, `vlan` the
    /// 802.1Q tag if it has one, `ether_type` the EtherType `check` returned.
    #[inline(always)]
    pub(crate) fn from_checked(
        header: &[u8; LEN],
        vlan: Option<VlanTag>,
        ether_type: u16,
    ) -> Ethernet {
        let [dst @ .., _, _, _, _, _, _, _, _] = header;
        let [_, _, _, _, _, _, src @ .., _, _] = header;
        Ethernet {
            dst: *dst,
            src: *src,
            ether_type,
            vlan,
        }
    }

    /// Parses the Ethernet header at the start of `buf`.
    #[inline]
    pub fn parse(buf: &[u8]) -> Result<Ethernet> {
        let Some(h) = buf.first_chunk::<LEN>() else {
            return Err(Error::truncated(Header::Ethernet, LEN, buf.len()));
        };
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&h[field::DST]);
        src.copy_from_slice(&h[field::SRC]);
        let type_or_tpid = get_u16(h, field::TYPE_OR_TPID);
        if type_or_tpid != ETHERTYPE_VLAN {
            return Ok(Ethernet {
                dst,
                src,
                ether_type: type_or_tpid,
                vlan: None,
            });
        }
        let Some(h) = buf.first_chunk::<VLAN_LEN>() else {
            return Err(Error::truncated(Header::Vlan, VLAN_LEN, buf.len()));
        };
        Ok(Ethernet {
            dst,
            src,
            ether_type: get_u16(h, field::INNER_TYPE),
            vlan: Some(VlanTag::from_tci(get_u16(h, field::TCI))),
        })
    }

    /// Writes the header to the start of `buf`; returns the bytes written (14 or 18).
    #[inline(always)]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let have = buf.len();
        match self.vlan {
            None => {
                let Some(h) = buf.first_chunk_mut::<LEN>() else {
                    return Err(Error::truncated(Header::Ethernet, LEN, have));
                };
                h[field::DST].copy_from_slice(&self.dst);
                h[field::SRC].copy_from_slice(&self.src);
                set_u16(h, field::TYPE_OR_TPID, self.ether_type);
                Ok(LEN)
            }
            Some(tag) => {
                let Some(h) = buf.first_chunk_mut::<VLAN_LEN>() else {
                    return Err(Error::truncated(Header::Vlan, VLAN_LEN, have));
                };
                h[field::DST].copy_from_slice(&self.dst);
                h[field::SRC].copy_from_slice(&self.src);
                set_u16(h, field::TYPE_OR_TPID, ETHERTYPE_VLAN);
                set_u16(h, field::TCI, tag.tci());
                set_u16(h, field::INNER_TYPE, self.ether_type);
                Ok(VLAN_LEN)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // First 14 bytes of a RoCEv2 frame from rc_pingpong_s64_n5.pcap: 52:54:00:61:00:11 (client)
    // to 52:54:00:62:00:11 (server), IPv4.
    const UNTAGGED: [u8; 14] = [
        0x52, 0x54, 0x00, 0x62, 0x00, 0x11, 0x52, 0x54, 0x00, 0x61, 0x00, 0x11, 0x08, 0x00,
    ];

    #[test]
    fn parse_untagged() {
        let e = Ethernet::parse(&UNTAGGED).unwrap();
        assert_eq!(e.dst, [0x52, 0x54, 0x00, 0x62, 0x00, 0x11]);
        assert_eq!(e.src, [0x52, 0x54, 0x00, 0x61, 0x00, 0x11]);
        assert_eq!(e.ether_type, ETHERTYPE_IPV4);
        assert_eq!(e.vlan, None);
        assert_eq!(e.header_len(), 14);
        let mut out = [0u8; 14];
        assert_eq!(e.emit(&mut out), Ok(14));
        assert_eq!(out, UNTAGGED);
    }

    #[test]
    fn tagged_round_trip() {
        let e = Ethernet {
            dst: [1, 2, 3, 4, 5, 6],
            src: [7, 8, 9, 10, 11, 12],
            ether_type: ETHERTYPE_IPV6,
            vlan: Some(VlanTag {
                pcp: 5,
                dei: true,
                vid: 0x123,
            }),
        };
        let mut buf = [0u8; 20];
        assert_eq!(e.emit(&mut buf), Ok(18));
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0xb1, 0x23, 0x86, 0xdd]);
        assert_eq!(Ethernet::parse(&buf), Ok(e));
        let v = EthernetView::new_checked(&buf[..]).unwrap();
        assert!(v.has_vlan());
        assert_eq!(v.header_len(), 18);
        assert_eq!(v.payload(), &[0, 0]);
    }

    #[test]
    fn view_setters() {
        let mut buf = [0u8; 18];
        buf[12] = 0x81;
        let mut v = EthernetView::new_checked(&mut buf[..]).unwrap();
        v.set_ether_type(ETHERTYPE_ARP);
        v.set_vlan(VlanTag::from_tci(0xffff)).unwrap();
        v.set_dst([0xff; 6]);
        v.set_src([0xaa; 6]);
        assert_eq!(v.ether_type(), ETHERTYPE_ARP);
        assert_eq!(
            v.vlan(),
            Some(VlanTag {
                pcp: 7,
                dei: true,
                vid: 0xfff
            })
        );
        assert_eq!(&buf[12..], &[0x81, 0x00, 0xff, 0xff, 0x08, 0x06]);

        let mut plain = UNTAGGED;
        let mut v = EthernetView::new_checked(&mut plain[..]).unwrap();
        assert_eq!(
            v.set_vlan(VlanTag::default()),
            Err(Error::BadField {
                field: Field::EtherType,
                value: 0x0800
            })
        );
        v.set_ether_type(ETHERTYPE_IPV6);
        assert_eq!(&plain[12..], &[0x86, 0xdd]);
    }

    #[test]
    fn tci_packs_fields() {
        for tci in [0u16, 1, 0x0fff, 0x1000, 0xe000, 0xffff, 0x6a5c] {
            assert_eq!(VlanTag::from_tci(tci).tci(), tci);
        }
    }

    #[test]
    fn truncated_headers() {
        assert_eq!(
            Ethernet::parse(&UNTAGGED[..13]),
            Err(Error::Truncated {
                header: Header::Ethernet,
                need: 14,
                have: 13
            })
        );
        let mut tagged = [0u8; 17];
        tagged[12] = 0x81;
        assert_eq!(
            Ethernet::parse(&tagged),
            Err(Error::Truncated {
                header: Header::Vlan,
                need: 18,
                have: 17
            })
        );
        let e = Ethernet {
            vlan: Some(VlanTag::default()),
            ..Ethernet::default()
        };
        assert!(e.emit(&mut [0u8; 17]).is_err());
        assert!(Ethernet::default().emit(&mut [0u8; 13]).is_err());
    }

    /// The split-up checks of the packet parser agree with `Ethernet::parse`.
    #[test]
    fn check_and_from_checked_agree_with_parse() {
        let mut tagged = [0u8; 20];
        tagged[..12].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        tagged[12..18].copy_from_slice(&[0x81, 0x00, 0xb1, 0x23, 0x86, 0xdd]);
        for frame in [
            &UNTAGGED[..],
            &UNTAGGED[..13],
            &tagged[..],
            &tagged[..17],
            &tagged[..18],
        ] {
            let split = Ethernet::check(frame).map(|c| {
                let len = if c.vlan.is_some() { 18 } else { 14 };
                assert_eq!(c.payload.len(), frame.len() - len);
                Ethernet::from_checked(c.header, c.vlan, c.ether_type)
            });
            assert_eq!(split, Ethernet::parse(frame));
        }
    }
}
