//! IPv4 header (RFC 791), 20 bytes plus up to 40 bytes of options; the outer header of RoCEv2
//! over IPv4.
//!
//! ```text
//!  byte 0     Version(7:4) IHL(3:0)          -- IHL in 4-byte words, 5..=15
//!  byte 1     TOS: DSCP(7:2) ECN(1:0)         -- masked by the ICRC
//!  byte 2-3   Total Length
//!  byte 4-5   Identification
//!  byte 6-7   Flags(15:13: reserved, DF, MF) Fragment Offset(12:0)
//!  byte 8     TTL                             -- masked by the ICRC
//!  byte 9     Protocol (17 = UDP)
//!  byte 10-11 Header Checksum                 -- masked by the ICRC
//!  byte 12-15 Source Address
//!  byte 16-19 Destination Address
//!  byte 20-   options (IHL*4 - 20 bytes)
//! ```
//!
//! Parsing checks Version = 4, IHL >= 5 and that the buffer holds IHL*4 bytes; the total length,
//! fragmentation and protocol are judged by the RoCEv2 packet parser. The header checksum is
//! kept verbatim by [`Ipv4::parse`] / [`Ipv4::emit`]; [`compute_checksum`], [`fill_checksum`]
//! and `checksum_ok` compute and check it. Options are not part of the plain struct: the view
//! reads them ([`Ipv4View::options`]) and callers that build headers with options write them
//! after the 20 bytes [`Ipv4::emit`] writes. For the ICRC, [`icrc_masked`] gives a copy of the
//! header with TOS, TTL and header checksum set to all ones (Linux rxe `rxe_icrc.c`).

use crate::bytes::{get_u16, set_u16};
use crate::error::{check_len, Error, Field, Header, Result};

/// Length of the IPv4 header without options.
pub const LEN: usize = 20;
/// Longest IPv4 header (IHL = 15).
pub const MAX_LEN: usize = 60;
/// Longest options field.
pub const MAX_OPTIONS_LEN: usize = MAX_LEN - LEN;
/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

/// Flag bit (in the 3-bit `flags` field): don't fragment.
pub const FLAG_DF: u8 = 0b010;
/// Flag bit (in the 3-bit `flags` field): more fragments.
pub const FLAG_MF: u8 = 0b001;

mod field {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: core::ops::Range<usize> = 12..16;
    pub const DST: core::ops::Range<usize> = 16..20;

    pub const FLAGS_SHIFT: u16 = 13;
    pub const FRAG_MASK: u16 = 0x1FFF;
}

/// Zero-copy view of an IPv4 header at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4View<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4View<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4View { buffer }
    }

    /// Wraps `buffer` after checking it holds the 20-byte base header and, when IHL >= 5, all
    /// IHL*4 bytes. Version and IHL values are judged by [`Ipv4::parse`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds the base header and the options IHL announces.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        check_len(Header::Ipv4, b, LEN)?;
        check_len(Header::Ipv4, b, self.header_len())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn version(&self) -> u8 {
        self.b()[field::VER_IHL] >> 4
    }
    /// IHL: header length in 4-byte words.
    pub fn ihl(&self) -> u8 {
        self.b()[field::VER_IHL] & 0x0F
    }
    /// IHL*4 (may be below 20 for a malformed header).
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }
    /// The TOS byte: DSCP (7:2) and ECN (1:0).
    pub fn dscp_ecn(&self) -> u8 {
        self.b()[field::TOS]
    }
    pub fn total_len(&self) -> u16 {
        get_u16(self.b(), field::TOTAL_LEN)
    }
    pub fn ident(&self) -> u16 {
        get_u16(self.b(), field::IDENT)
    }
    /// The 3 flag bits: reserved, DF ([`FLAG_DF`]), MF ([`FLAG_MF`]).
    pub fn flags(&self) -> u8 {
        (get_u16(self.b(), field::FLAGS_FRAG) >> field::FLAGS_SHIFT) as u8
    }
    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        get_u16(self.b(), field::FLAGS_FRAG) & field::FRAG_MASK
    }
    /// True when this is a fragment (MF set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.flags() & FLAG_MF != 0 || self.frag_offset() != 0
    }
    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }
    pub fn protocol(&self) -> u8 {
        self.b()[field::PROTOCOL]
    }
    pub fn checksum(&self) -> u16 {
        get_u16(self.b(), field::CHECKSUM)
    }
    pub fn src(&self) -> [u8; 4] {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.b()[field::SRC]);
        a
    }
    pub fn dst(&self) -> [u8; 4] {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.b()[field::DST]);
        a
    }
    /// Option bytes (empty when IHL <= 5).
    pub fn options(&self) -> &[u8] {
        let end = self.header_len().max(LEN);
        &self.b()[LEN..end]
    }
    /// The whole header, options included (the base 20 bytes when IHL < 5).
    pub fn header(&self) -> &[u8] {
        &self.b()[..self.header_len().max(LEN)]
    }
    /// True when the header checksum verifies (always false when IHL < 5).
    pub fn checksum_ok(&self) -> bool {
        self.ihl() >= 5 && ones_complement_sum(self.header(), None) == 0xFFFF
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4View<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets Version (low 4 bits of `v`).
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.bm()[field::VER_IHL];
        *b = (*b & 0x0F) | (v << 4);
    }
    /// Sets IHL (low 4 bits of `v`). The view's length checks were made for the old IHL.
    pub fn set_ihl(&mut self, v: u8) {
        let b = &mut self.bm()[field::VER_IHL];
        *b = (*b & 0xF0) | (v & 0x0F);
    }
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.bm()[field::TOS] = v;
    }
    pub fn set_total_len(&mut self, v: u16) {
        set_u16(self.bm(), field::TOTAL_LEN, v);
    }
    pub fn set_ident(&mut self, v: u16) {
        set_u16(self.bm(), field::IDENT, v);
    }
    /// Sets the 3 flag bits (low 3 bits of `v`).
    pub fn set_flags(&mut self, v: u8) {
        let cur = get_u16(self.b(), field::FLAGS_FRAG);
        let w = (cur & field::FRAG_MASK) | (u16::from(v & 0x7) << field::FLAGS_SHIFT);
        set_u16(self.bm(), field::FLAGS_FRAG, w);
    }
    /// Sets the fragment offset (low 13 bits of `v`).
    pub fn set_frag_offset(&mut self, v: u16) {
        let cur = get_u16(self.b(), field::FLAGS_FRAG);
        let w = (cur & !field::FRAG_MASK) | (v & field::FRAG_MASK);
        set_u16(self.bm(), field::FLAGS_FRAG, w);
    }
    pub fn set_ttl(&mut self, v: u8) {
        self.bm()[field::TTL] = v;
    }
    pub fn set_protocol(&mut self, v: u8) {
        self.bm()[field::PROTOCOL] = v;
    }
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.bm(), field::CHECKSUM, v);
    }
    pub fn set_src(&mut self, a: [u8; 4]) {
        self.bm()[field::SRC].copy_from_slice(&a);
    }
    pub fn set_dst(&mut self, a: [u8; 4]) {
        self.bm()[field::DST].copy_from_slice(&a);
    }
    /// Computes the header checksum over the current header and stores it; returns it.
    pub fn fill_checksum(&mut self) -> u16 {
        let c = compute_checksum(self.header());
        self.set_checksum(c);
        c
    }
}

/// A parsed IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ipv4 {
    /// Version (4).
    pub version: u8,
    /// IHL: header length in 4-byte words (options make it more than 5).
    pub ihl: u8,
    /// The TOS byte: DSCP (7:2) and ECN (1:0).
    pub dscp_ecn: u8,
    pub total_len: u16,
    pub ident: u16,
    /// 3 bits: reserved, DF, MF.
    pub flags: u8,
    /// 13 bits, in 8-byte units.
    pub frag_offset: u16,
    pub ttl: u8,
    pub protocol: u8,
    /// Header checksum as found / to be written verbatim (see [`fill_checksum`]).
    pub checksum: u16,
    pub src: [u8; 4],
    pub dst: [u8; 4],
}

impl Ipv4 {
    /// IHL*4: the fixed header plus the options.
    pub const fn header_len(&self) -> usize {
        self.ihl as usize * 4
    }

    /// Parses the IPv4 header at the start of `buf`: Version must be 4, IHL at least 5, and the
    /// buffer must hold IHL*4 bytes. The checksum is not verified here (see
    /// [`Ipv4View::checksum_ok`]).
    #[inline]
    pub fn parse(buf: &[u8]) -> Result<Ipv4> {
        let Some(h) = buf.first_chunk::<LEN>() else {
            return Err(Error::truncated(Header::Ipv4, LEN, buf.len()));
        };
        let v = Ipv4View::new_unchecked(h);
        if v.version() != 4 {
            return Err(Error::BadField {
                field: Field::Ipv4Version,
                value: v.version().into(),
            });
        }
        if v.ihl() < 5 {
            return Err(Error::BadField {
                field: Field::Ipv4Ihl,
                value: v.ihl().into(),
            });
        }
        check_len(Header::Ipv4, buf, v.header_len())?;
        Ok(Ipv4::from_bytes(h))
    }

    /// The fixed 20-byte header held by these bytes, fields as found (nothing judged).
    #[inline(always)]
    pub fn from_bytes(h: &[u8; LEN]) -> Ipv4 {
        let v = Ipv4View::new_unchecked(h);
        Ipv4 {
            version: v.version(),
            ihl: v.ihl(),
            dscp_ecn: v.dscp_ecn(),
            total_len: v.total_len(),
            ident: v.ident(),
            flags: v.flags(),
            frag_offset: v.frag_offset(),
            ttl: v.ttl(),
            protocol: v.protocol(),
            checksum: v.checksum(),
            src: v.src(),
            dst: v.dst(),
        }
    }

    /// The 20 bytes [`Ipv4::emit`] writes: every field as given (fields wider than their wire
    /// field keep their low bits), IHL and the checksum too.
    #[inline(always)]
    pub fn to_bytes(&self) -> [u8; LEN] {
        let total_len = self.total_len.to_be_bytes();
        let ident = self.ident.to_be_bytes();
        let flags_frag = ((u16::from(self.flags & 0x7) << field::FLAGS_SHIFT)
            | (self.frag_offset & field::FRAG_MASK))
            .to_be_bytes();
        let checksum = self.checksum.to_be_bytes();
        [
            (self.version << 4) | (self.ihl & 0x0F),
            self.dscp_ecn,
            total_len[0],
            total_len[1],
            ident[0],
            ident[1],
            flags_frag[0],
            flags_frag[1],
            self.ttl,
            self.protocol,
            checksum[0],
            checksum[1],
            self.src[0],
            self.src[1],
            self.src[2],
            self.src[3],
            self.dst[0],
            self.dst[1],
            self.dst[2],
            self.dst[3],
        ]
    }

    /// The 20 bytes of [`Ipv4::to_bytes`] with the header checksum computed (as
    /// [`compute_checksum`] does) instead of taken from `checksum`; for headers without
    /// options. The sum is taken over five big-endian 32-bit words and folded, which gives the
    /// 16-bit ones' complement sum (RFC 1071).
    #[inline(always)]
    pub(crate) fn to_bytes_with_checksum(self) -> [u8; LEN] {
        let mut w = [
            (u32::from(self.version & 0x0F) << 28)
                | (u32::from(self.ihl & 0x0F) << 24)
                | (u32::from(self.dscp_ecn) << 16)
                | u32::from(self.total_len),
            (u32::from(self.ident) << 16)
                | (u32::from(self.flags & 0x7) << field::FLAGS_SHIFT)
                | u32::from(self.frag_offset & field::FRAG_MASK),
            // The checksum field counts as zero.
            (u32::from(self.ttl) << 24) | (u32::from(self.protocol) << 16),
            u32::from_be_bytes(self.src),
            u32::from_be_bytes(self.dst),
        ];
        let sum: u64 = w.iter().map(|&x| u64::from(x)).sum();
        // Fold 64 -> 32 -> 16 bits with end-around carry (2^16 = 1 modulo 0xFFFF).
        let sum = (sum & 0xFFFF_FFFF) + (sum >> 32);
        let sum = (sum & 0xFFFF_FFFF) + (sum >> 32);
        let sum = (sum & 0xFFFF) + (sum >> 16);
        let sum = (sum & 0xFFFF) + (sum >> 16);
        w[2] |= u32::from(!(sum as u16));
        let mut b = [0u8; LEN];
        for (dst, w) in b.chunks_exact_mut(4).zip(w) {
            dst.copy_from_slice(&w.to_be_bytes());
        }
        b
    }

    /// Writes the 20-byte fixed header to the start of `buf`, every field as given (IHL and the
    /// checksum too); returns 20. When IHL > 5 the caller writes the IHL*4 - 20 option bytes
    /// after it (they are not part of this struct; [`Ipv4View::options`] reads them).
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let have = buf.len();
        match buf.first_chunk_mut::<LEN>() {
            Some(h) => {
                *h = self.to_bytes();
                Ok(LEN)
            }
            None => Err(Error::truncated(Header::Ipv4, LEN, have)),
        }
    }
}

/// 16-bit ones' complement sum of `bytes` (big-endian words, an odd last byte padded with
/// zero), folded, not complemented; the word at byte offset `skip` counts as zero.
fn ones_complement_sum(bytes: &[u8], skip: Option<usize>) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = bytes.chunks_exact(2);
    for (i, w) in (&mut chunks).enumerate() {
        if Some(i * 2) != skip {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// The header checksum of a header whose other words have the ones' complement sum `sum`
/// (folded), with `words` added to it: the complement of the folded total (RFC 1071; with the
/// complement of an old checksum and of an old word as `sum` and a word, RFC 1624's update).
#[inline(always)]
pub fn checksum_adding<const N: usize>(sum: u16, words: [u16; N]) -> u16 {
    let mut s = u32::from(sum);
    for w in words {
        s += u32::from(w);
    }
    // At most N + 1 words: two folds with end-around carry suffice for N < 65 536.
    let s = (s & 0xFFFF) + (s >> 16);
    let s = (s & 0xFFFF) + (s >> 16);
    !(s as u16)
}

/// The header checksum for `header` (IHL*4 bytes): the ones' complement of the ones' complement
/// sum of its 16-bit words, the checksum field itself counted as zero.
pub fn compute_checksum(header: &[u8]) -> u16 {
    !ones_complement_sum(header, Some(field::CHECKSUM))
}

/// Computes the header checksum of the IPv4 header at the start of `buf` over IHL*4 bytes and
/// stores it; returns it. For headers softib builds (IHL at least 5).
///
/// # Panics
///
/// If `buf` is shorter than 20 bytes or than IHL*4.
pub fn fill_checksum(buf: &mut [u8]) -> u16 {
    let len = usize::from(buf[field::VER_IHL] & 0x0F) * 4;
    let len = len.max(LEN);
    let c = compute_checksum(&buf[..len]);
    set_u16(buf, field::CHECKSUM, c);
    c
}

/// A copy of the first 20 bytes of `header` with the fields the ICRC treats as variant —
/// TOS (DSCP and ECN), TTL and header checksum — set to all ones. Options, if any, are not
/// masked: the ICRC covers `header[20..]` as it is. Bytes missing from a short `header` are
/// left zero; the caller checks lengths.
pub fn icrc_masked(header: &[u8]) -> [u8; LEN] {
    let mut m = [0u8; LEN];
    let n = header.len().min(LEN);
    m[..n].copy_from_slice(&header[..n]);
    m[field::TOS] = 0xFF;
    m[field::TTL] = 0xFF;
    m[field::CHECKSUM] = 0xFF;
    m[field::CHECKSUM + 1] = 0xFF;
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    // IPv4 header of the first RC SEND_ONLY in rc_pingpong_s64_n5.pcap:
    // 10.99.0.2 -> 10.99.0.3, ID 0xe80e, DF, TTL 64, UDP, checksum 0x3da8.
    const REAL: [u8; 20] = [
        0x45, 0x00, 0x00, 0x6c, 0xe8, 0x0e, 0x40, 0x00, 0x40, 0x11, 0x3d, 0xa8, 0x0a, 0x63, 0x00,
        0x02, 0x0a, 0x63, 0x00, 0x03,
    ];

    /// The checksum from a partial sum and the words left out is the checksum of the header,
    /// for the real header and for every total length and Identification on a grid.
    #[test]
    fn checksum_adding_matches_the_full_checksum() {
        let mut h = REAL;
        for total in (0..=u16::MAX).step_by(251) {
            for ident in (0..=u16::MAX).step_by(257) {
                h[2..4].copy_from_slice(&total.to_be_bytes());
                h[4..6].copy_from_slice(&ident.to_be_bytes());
                let mut rest = h;
                rest[2..6].fill(0);
                let sum = !compute_checksum(&rest);
                assert_eq!(checksum_adding(sum, [total, ident]), compute_checksum(&h));
            }
        }
        assert_eq!(checksum_adding(!compute_checksum(&REAL), []), 0x3da8);
    }

    #[test]
    fn parse_real_header() {
        let h = Ipv4::parse(&REAL).unwrap();
        assert_eq!((h.version, h.ihl, h.dscp_ecn), (4, 5, 0));
        assert_eq!(h.total_len, 0x6c);
        assert_eq!(h.ident, 0xe80e);
        assert_eq!((h.flags, h.frag_offset), (FLAG_DF, 0));
        assert_eq!((h.ttl, h.protocol, h.checksum), (64, PROTOCOL_UDP, 0x3da8));
        assert_eq!(h.src, [10, 99, 0, 2]);
        assert_eq!(h.dst, [10, 99, 0, 3]);
        assert_eq!(h.header_len(), 20);
        let mut out = [0u8; 20];
        assert_eq!(h.emit(&mut out), Ok(20));
        assert_eq!(out, REAL);

        let v = Ipv4View::new_checked(&REAL[..]).unwrap();
        assert!(v.checksum_ok());
        assert!(!v.is_fragment());
        assert_eq!(compute_checksum(&REAL), 0x3da8);
    }

    /// Every IPv4 header in the rxe captures (RoCEv2, TCP exchange) has a valid checksum, and
    /// recomputing it gives the value on the wire.
    #[test]
    fn capture_checksums_verify() {
        use crate::pcap::PcapReader;
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/testvectors/rxe"
        );
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "pcap") {
                continue;
            }
            let data = std::fs::read(&path).unwrap();
            for rec in PcapReader::new(&data).unwrap() {
                let f = rec.unwrap().data;
                if f[12..14] != [0x08, 0x00] {
                    continue;
                }
                let h = Ipv4::parse(&f[14..]).unwrap();
                let v = Ipv4View::new_checked(&f[14..]).unwrap();
                assert!(v.checksum_ok(), "{}: {:02x?}", path.display(), v.header());
                assert_eq!(compute_checksum(v.header()), h.checksum);
                n += 1;
            }
        }
        assert!(n > 400, "only {n} IPv4 headers");
    }

    #[test]
    fn checksum_detects_changes_and_fill_repairs() {
        let mut b = REAL;
        b[15] ^= 0x01;
        assert!(!Ipv4View::new_checked(&b[..]).unwrap().checksum_ok());
        assert_eq!(fill_checksum(&mut b), compute_checksum(&b));
        assert!(Ipv4View::new_checked(&b[..]).unwrap().checksum_ok());
        assert_ne!(get_u16(&b, 10), 0x3da8);
    }

    #[test]
    fn options_are_read_and_count_in_checksum() {
        let mut b = [0u8; 28];
        b[..20].copy_from_slice(&REAL);
        b[0] = 0x47;
        b[20..24].copy_from_slice(&[0x94, 0x04, 0x00, 0x00]); // Router Alert
        b[24] = 0x01; // NOP padding
        fill_checksum(&mut b);
        let h = Ipv4::parse(&b).unwrap();
        assert_eq!(h.ihl, 7);
        assert_eq!(h.header_len(), 28);
        let v = Ipv4View::new_checked(&b[..]).unwrap();
        assert_eq!(v.options(), &b[20..28]);
        assert_eq!(v.header(), &b[..]);
        // emit writes the fixed part; the options follow it unchanged.
        let mut out = b;
        out[..20].fill(0);
        assert_eq!(h.emit(&mut out), Ok(20));
        assert_eq!(out, b);
        assert!(Ipv4View::new_checked(&b[..]).unwrap().checksum_ok());
        b[25] = 0x07;
        assert!(!Ipv4View::new_checked(&b[..]).unwrap().checksum_ok());
        // Truncated options.
        assert_eq!(
            Ipv4::parse(&b[..27]),
            Err(Error::Truncated {
                header: Header::Ipv4,
                need: 28,
                have: 27
            })
        );
    }

    #[test]
    fn every_bit_round_trips() {
        let mut all = [0xffu8; 60];
        all[0] = 0x4f;
        let h = Ipv4::parse(&all).unwrap();
        assert_eq!((h.flags, h.frag_offset, h.ihl), (7, 0x1fff, 15));
        let mut out = [0u8; 20];
        assert_eq!(h.emit(&mut out), Ok(20));
        assert_eq!(out, all[..20]);
    }

    #[test]
    fn bad_version_and_ihl() {
        let mut b = REAL;
        b[0] = 0x65;
        assert_eq!(
            Ipv4::parse(&b),
            Err(Error::BadField {
                field: Field::Ipv4Version,
                value: 6
            })
        );
        b[0] = 0x44;
        assert_eq!(
            Ipv4::parse(&b),
            Err(Error::BadField {
                field: Field::Ipv4Ihl,
                value: 4
            })
        );
        assert!(!Ipv4View::new_checked(&b[..]).unwrap().checksum_ok());
        assert_eq!(
            Ipv4View::new_checked(&b[..]).unwrap().options(),
            &[] as &[u8]
        );
        assert_eq!(
            Ipv4::parse(&REAL[..19]),
            Err(Error::Truncated {
                header: Header::Ipv4,
                need: 20,
                have: 19
            })
        );
    }

    #[test]
    fn emit_needs_room() {
        let h = Ipv4::parse(&REAL).unwrap();
        assert!(h.emit(&mut [0u8; 19]).is_err());
    }

    #[test]
    fn view_setters_touch_only_their_bits() {
        let mut b = REAL;
        let mut v = Ipv4View::new_checked(&mut b[..]).unwrap();
        v.set_flags(FLAG_MF);
        assert_eq!((v.flags(), v.frag_offset()), (FLAG_MF, 0));
        v.set_frag_offset(0x1234);
        assert_eq!((v.flags(), v.frag_offset()), (FLAG_MF, 0x1234));
        assert!(v.is_fragment());
        v.set_version(4);
        v.set_ihl(5);
        assert_eq!((v.version(), v.ihl()), (4, 5));
    }

    #[test]
    fn icrc_mask_sets_variant_fields() {
        let m = icrc_masked(&REAL);
        let mut want = REAL;
        want[1] = 0xff;
        want[8] = 0xff;
        want[10] = 0xff;
        want[11] = 0xff;
        assert_eq!(m, want);
    }

    /// `to_bytes` keeps the low bits of over-wide fields, as the setters do, and
    /// `to_bytes_with_checksum` differs from it only by the computed checksum.
    #[test]
    fn to_bytes_agrees_with_the_setters_and_checksum() {
        use proptest::prelude::*;
        let fields = (
            any::<[u8; 6]>(),
            any::<[u16; 4]>(),
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
        );
        proptest!(|((b, w, src, dst) in fields)| {
            let h = Ipv4 {
                version: b[0],
                ihl: b[1],
                dscp_ecn: b[2],
                total_len: w[0],
                ident: w[1],
                flags: b[3],
                frag_offset: w[2],
                ttl: b[4],
                protocol: b[5],
                checksum: w[3],
                src,
                dst,
            };
            let mut via_setters = [0x5au8; LEN];
            let mut v = Ipv4View::new_unchecked(&mut via_setters[..]);
            v.set_version(h.version);
            v.set_ihl(h.ihl);
            v.set_dscp_ecn(h.dscp_ecn);
            v.set_total_len(h.total_len);
            v.set_ident(h.ident);
            v.set_flags(h.flags);
            v.set_frag_offset(h.frag_offset);
            v.set_ttl(h.ttl);
            v.set_protocol(h.protocol);
            v.set_checksum(h.checksum);
            v.set_src(h.src);
            v.set_dst(h.dst);
            prop_assert_eq!(h.to_bytes(), via_setters);
            let with = h.to_bytes_with_checksum();
            let mut expect = h.to_bytes();
            let c = compute_checksum(&expect);
            expect[10..12].copy_from_slice(&c.to_be_bytes());
            prop_assert_eq!(with, expect);
            prop_assert!(h.ihl & 0x0F != 5 || Ipv4View::new_unchecked(&with[..]).checksum_ok());
        });
    }
}
