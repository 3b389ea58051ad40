//! RWH — Raw Header (IBA 5.3), 4 bytes, follows the LRH of a raw EtherType datagram
//! (LRH:LNH = 00) and names the protocol of the payload.
//!
//! ```text
//!  byte 0-1 Resv16
//!  byte 2-3 EtherType
//! ```

use crate::error::Header;
use crate::field_macros::be_fields_header;

/// Length of the RWH in bytes.
pub const LEN: usize = 4;

mod field {
    pub const RESV16: usize = 0;
    pub const ETHER_TYPE: usize = 2;
}

be_fields_header! {
    /// Zero-copy view of a RWH at the start of `buffer`.
    pub struct RwhView;

    /// A parsed RWH.
    pub struct Rwh(Header::Rwh, "RWH", LEN) {
        /// Reserved bytes 0-1; zero on send, ignored on receipt.
        pub resv16: u16 = field::RESV16, set_resv16;
        /// EtherType of the payload (IEEE 802.3 Length/Type registry).
        pub ether_type: u16 = field::ETHER_TYPE, set_ether_type;
    }

    /// The EtherType is not judged here.
    fn parse;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_macros::header_tests;
    use proptest::prelude::*;

    header_tests!(Rwh, Header::Rwh);

    // No native IB capture exists among the test vectors; these bytes follow the layout:
    // reserved 0, EtherType 0x0800 (IPv4) carried as a raw EtherType datagram.
    const RWH_IPV4: [u8; 4] = [0x00, 0x00, 0x08, 0x00];

    #[test]
    fn parse_known_header() {
        let h = Rwh::parse(&RWH_IPV4).unwrap();
        assert_eq!(
            h,
            Rwh {
                resv16: 0,
                ether_type: 0x0800
            }
        );
        let mut out = [0u8; 4];
        assert_eq!(h.emit(&mut out), Ok(4));
        assert_eq!(out, RWH_IPV4);
        let h = Rwh::parse(&[0xAB, 0xCD, 0x86, 0xDD]).unwrap();
        assert_eq!((h.resv16, h.ether_type), (0xABCD, 0x86DD));
    }

    proptest! {
        #[test]
        fn fields_round_trip(resv16 in any::<u16>(), ether_type in any::<u16>()) {
            let h = Rwh { resv16, ether_type };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Rwh::parse(&out), Ok(h));
        }
    }
}
