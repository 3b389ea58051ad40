//! RDETH — Reliable Datagram Extended Transport Header (IBA 9.3), 4 bytes, present in every
//! RD packet right after the BTH.
//!
//! ```text
//!  byte 0   Resv8
//!  byte 1-3 EECnxt (end-to-end context)
//! ```

use crate::error::Header;
use crate::field_macros::be_fields_header;
use crate::psn::Eecn;

/// Length of the RDETH in bytes.
pub const LEN: usize = 4;

mod field {
    pub const RESV8: usize = 0;
    pub const EECN: usize = 1;
}

be_fields_header! {
    /// Zero-copy view of an RDETH at the start of `buffer`.
    pub struct RdethView;

    /// A parsed RDETH.
    pub struct Rdeth(Header::Rdeth, "RDETH", LEN) {
        /// Reserved byte 0; zero on send, ignored on receipt.
        pub resv8: u8 = field::RESV8, set_resv8;
        /// EECnxt: the end-to-end context the packet belongs to.
        pub eecn: Eecn = field::EECN, set_eecn;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_macros::header_tests;
    use proptest::prelude::*;

    header_tests!(Rdeth, Header::Rdeth);

    // Linux rxe does not implement RD, so no capture holds an RDETH; these bytes follow the
    // layout: reserved 0, EECnxt 0x012345.
    const RDETH: [u8; 4] = [0x00, 0x01, 0x23, 0x45];

    #[test]
    fn parse_known_header() {
        let h = Rdeth::parse(&RDETH).unwrap();
        assert_eq!(
            h,
            Rdeth {
                resv8: 0,
                eecn: Eecn::new(0x012345)
            }
        );
        let mut out = [0u8; 4];
        assert_eq!(h.emit(&mut out), Ok(4));
        assert_eq!(out, RDETH);
        let h = Rdeth::parse(&[0xA5, 0xFF, 0xFF, 0xFE, 0x99]).unwrap();
        assert_eq!((h.resv8, h.eecn), (0xA5, Eecn::new(0xFF_FFFE)));
    }

    proptest! {
        #[test]
        fn fields_round_trip(resv8 in any::<u8>(), eecn in 0u32..1 << 24) {
            let h = Rdeth { resv8, eecn: Eecn::new(eecn) };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Rdeth::parse(&out), Ok(h));
        }
    }
}
