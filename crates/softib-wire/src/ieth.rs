//! IETH — Invalidate Extended Transport Header (IBA 9.3), 4 bytes, carried by
//! SEND_LAST_WITH_INVALIDATE and SEND_ONLY_WITH_INVALIDATE.
//!
//! ```text
//!  byte 0-3 R_Key (the key the responder invalidates)
//! ```

use crate::error::Header;
use crate::field_macros::be_fields_header;

/// Length of the IETH in bytes.
pub const LEN: usize = 4;

mod field {
    pub const RKEY: usize = 0;
}

be_fields_header! {
    /// Zero-copy view of an IETH at the start of `buffer`.
    pub struct IethView;

    /// A parsed IETH.
    pub struct Ieth(Header::Ieth, "IETH", LEN) {
        /// R_Key to invalidate.
        pub rkey: u32 = field::RKEY, set_rkey;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_macros::header_tests;
    use proptest::prelude::*;

    header_tests!(Ieth, Header::Ieth);

    // The test vectors hold no SEND_WITH_INVALIDATE; these bytes follow the layout and carry
    // the R_Key the server of write_bw_s4096_n5.pcap advertised (0x000b97).
    const IETH: [u8; 4] = [0x00, 0x00, 0x0b, 0x97];

    #[test]
    fn parse_known_header() {
        let h = Ieth::parse(&IETH).unwrap();
        assert_eq!(h, Ieth { rkey: 0x0b97 });
        let mut out = [0u8; 4];
        assert_eq!(h.emit(&mut out), Ok(4));
        assert_eq!(out, IETH);
        assert_eq!(
            Ieth::parse(&[0x12, 0x34, 0x56, 0x78, 0x9a]).unwrap().rkey,
            0x1234_5678
        );
    }

    proptest! {
        #[test]
        fn fields_round_trip(rkey in any::<u32>()) {
            let h = Ieth { rkey };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Ieth::parse(&out), Ok(h));
        }
    }
}
