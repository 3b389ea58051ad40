//! VCRC — the 16-bit variant CRC that ends every native InfiniBand packet (not RoCE).
//!
//! It covers the whole packet from the first LRH byte through the ICRC (raw packets: through
//! the last payload byte), variant fields included, and is recomputed on every link hop (a
//! switch may change LRH:VL, a router the whole LRH).
//!
//! # Algorithm
//!
//! CRC-16 with polynomial 0x100B (x^16 + x^12 + x^3 + x + 1), initial value 0xFFFF, input and
//! output reflected, final XOR 0xFFFF ([`ALGORITHM`], computed by the `crc` crate with a
//! 16-lane table). Check value of `b"123456789"`: 0x0A3D. These are the parameters of Endace
//! DAG's reference code (`dagcrc.c`: `dagcrc_make_infiniband_vcrc_table_r` builds a reflected
//! table from 0xD008, the bit-reverse of 0x100B; `dagcrc_infiniband_vcrc16_r` starts from
//! 0xFFFF and XORs the result with 0xFFFF). The tests check the check value and that the table
//! form agrees with a bitwise reflected implementation of 0xD008.
//!
//! # Wire byte order
//!
//! Least significant byte first: `vcrc.to_le_bytes()` are the two VCRC bytes ([`put`],
//! [`get`]), the order the ICRC uses (verified on the Linux rxe captures, see [`crate::icrc`]).
//! No public source read here states the VCRC order outright: Wireshark's
//! `packet-infiniband.c` only displays the field, as a big-endian `FT_UINT16` (it shows the
//! ICRC big-endian too, although that one is sent least significant byte first — so Wireshark
//! shows both CRCs byte-swapped relative to the values computed here); the Linux IB drivers
//! leave the VCRC to the hardware; Mellanox `ibdump` captures contain it without interpreting
//! it. The choice rests on the IBA defining both CRCs the same way (reflected, sent from the
//! low-order bit), and on the property link receivers rely on: for a reflected CRC sent least
//! significant byte first, the CRC over packet ‖ VCRC is a constant ([`GOOD_RESIDUE`] after the
//! final XOR, register [`ALGORITHM`]`.residue` before it); the tests show that this holds for
//! that order and not for the other. It has not been checked against a capture from real
//! native IB hardware (none is available to softib).

use crc::{Algorithm, Crc, Digest, Table};

use crate::error::{check_len, Error, Header, Result};

/// Length of the VCRC in bytes.
pub const LEN: usize = 2;

/// CRC-16 parameters of the VCRC.
pub const ALGORITHM: Algorithm<u16> = Algorithm {
    width: 16,
    poly: 0x100B,
    init: 0xFFFF,
    refin: true,
    refout: true,
    xorout: 0xFFFF,
    check: 0x0A3D,
    residue: 0x556F,
};

/// The VCRC computed over a packet followed by its own correct VCRC (least significant byte
/// first): the same for every packet.
pub const GOOD_RESIDUE: u16 = 0xAA90;

static VCRC: Crc<u16, Table<16>> = Crc::<u16, Table<16>>::new(&ALGORITHM);

/// VCRC of `covered`: a native IB packet from the first LRH byte through the ICRC.
pub fn compute(covered: &[u8]) -> u16 {
    VCRC.checksum(covered)
}

/// An incremental VCRC computation, for a packet held in several pieces; `finalize()` gives
/// the same value as [`compute`] over the concatenation.
pub fn digest() -> Digest<'static, u16, Table<16>> {
    VCRC.digest()
}

/// Writes `vcrc` to the first 2 bytes of `buf` in wire order (least significant byte first);
/// returns 2.
pub fn put(buf: &mut [u8], vcrc: u16) -> Result<usize> {
    check_len(Header::Vcrc, buf, LEN)?;
    buf[..LEN].copy_from_slice(&vcrc.to_le_bytes());
    Ok(LEN)
}

/// Reads the VCRC from the first 2 bytes of `buf` (wire order, least significant byte first).
pub fn get(buf: &[u8]) -> Result<u16> {
    check_len(Header::Vcrc, buf, LEN)?;
    Ok(u16::from_le_bytes([buf[0], buf[1]]))
}

/// Checks the VCRC in the last 2 bytes of `packet` (a whole native IB packet, LRH .. VCRC).
pub fn verify(packet: &[u8]) -> Result<()> {
    let have = packet.len();
    if have < LEN {
        return Err(Error::truncated(Header::Vcrc, LEN, have));
    }
    let (covered, tail) = packet.split_at(have - LEN);
    let found = get(tail)?;
    let computed = compute(covered);
    if computed == found {
        Ok(())
    } else {
        Err(Error::Vcrc { computed, found })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bitwise reflected CRC with polynomial 0xD008 (bit-reverse of 0x100B), init and final
    /// XOR 0xFFFF: the reference definition, one bit at a time.
    fn bitwise(data: &[u8]) -> u16 {
        let mut c: u16 = 0xFFFF;
        for &b in data {
            c ^= u16::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0xD008
                } else {
                    c >> 1
                };
            }
        }
        c ^ 0xFFFF
    }

    #[test]
    fn check_value() {
        assert_eq!(compute(b"123456789"), 0x0A3D);
        assert_eq!(bitwise(b"123456789"), 0x0A3D);
        assert_eq!(0x100Bu16.reverse_bits(), 0xD008);
    }

    #[test]
    fn residue_holds_for_lsb_first_only() {
        // A native-IB-shaped packet: LRH (VL 0, LNH 2, PktLen 8 words), BTH, 8 bytes, ICRC.
        let mut pkt = vec![
            0x00, 0x02, 0x00, 0x05, 0x00, 0x08, 0x00, 0x03, 0x04, 0x00, 0xff, 0xff, 0x00, 0x00,
            0x00, 0x13, 0x80, 0x92, 0x2d, 0xee, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        let icrc = crate::icrc::native(None, &pkt[8..]);
        pkt.extend_from_slice(&icrc.to_le_bytes());
        let v = compute(&pkt);
        let mut le = pkt.clone();
        le.extend_from_slice(&v.to_le_bytes());
        assert_eq!(compute(&le), GOOD_RESIDUE);
        assert_eq!(verify(&le), Ok(()));
        let mut be = pkt.clone();
        be.extend_from_slice(&v.to_be_bytes());
        assert_ne!(compute(&be), GOOD_RESIDUE);
        assert_eq!(
            verify(&be),
            Err(Error::Vcrc {
                computed: v,
                found: v.swap_bytes()
            })
        );
        // Unlike the ICRC, the VCRC covers the LRH's variant fields.
        let mut vl = le.clone();
        vl[0] |= 0xf0;
        assert!(verify(&vl).is_err());
    }

    #[test]
    fn put_get_and_short_buffers() {
        let mut b = [0u8; 3];
        assert_eq!(put(&mut b, 0xBEEF), Ok(2));
        assert_eq!(b, [0xEF, 0xBE, 0]);
        assert_eq!(get(&b), Ok(0xBEEF));
        assert!(put(&mut [0u8; 1], 0).is_err());
        assert!(get(&[1]).is_err());
        assert_eq!(
            verify(&[0x12]),
            Err(Error::Truncated {
                header: Header::Vcrc,
                need: 2,
                have: 1
            })
        );
        // The empty packet's VCRC is the complemented initial value.
        assert_eq!(compute(&[]), 0);
        assert_eq!(verify(&[0, 0]), Ok(()));
    }

    proptest! {
        #[test]
        fn table_digest_and_bitwise_agree(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            cut in 0usize..300,
        ) {
            let v = compute(&data);
            prop_assert_eq!(v, bitwise(&data));
            let cut = cut.min(data.len());
            let mut d = digest();
            d.update(&data[..cut]);
            d.update(&data[cut..]);
            prop_assert_eq!(d.finalize(), v);
            let mut with = data.clone();
            with.extend_from_slice(&v.to_le_bytes());
            prop_assert_eq!(compute(&with), GOOD_RESIDUE);
        }
    }
}
