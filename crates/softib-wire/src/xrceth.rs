//! XRCETH — XRC Extended Transport Header (IBA annex A14), 4 bytes, present in XRC request
//! packets right after the BTH (and before any RETH, AtomicETH, ImmDt or IETH).
//!
//! ```text
//!  byte 0   Resv8
//!  byte 1-3 XRCSRQ (XRC shared receive queue number)
//! ```

use crate::error::Header;
use crate::field_macros::be_fields_header;
use crate::psn::XrcSrqn;

/// Length of the XRCETH in bytes.
pub const LEN: usize = 4;

mod field {
    pub const RESV8: usize = 0;
    pub const XRCSRQ: usize = 1;
}

be_fields_header! {
    /// Zero-copy view of an XRCETH at the start of `buffer`.
    pub struct XrcethView;

    /// A parsed XRCETH.
    pub struct Xrceth(Header::Xrceth, "XRCETH", LEN) {
        /// Reserved byte 0; zero on send, ignored on receipt.
        pub resv8: u8 = field::RESV8, set_resv8;
        /// XRCSRQ: the XRC shared receive queue the request is for.
        pub xrcsrq: XrcSrqn = field::XRCSRQ, set_xrcsrq;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_macros::header_tests;
    use proptest::prelude::*;

    header_tests!(Xrceth, Header::Xrceth);

    // The test vectors hold no XRC traffic (ibv_xsrq_pingpong fails on rxe 6.1), so these
    // bytes follow the layout: reserved 0, XRCSRQ 0x012345.
    const XRCETH: [u8; 4] = [0x00, 0x01, 0x23, 0x45];

    #[test]
    fn parse_known_header() {
        let h = Xrceth::parse(&XRCETH).unwrap();
        assert_eq!(
            h,
            Xrceth {
                resv8: 0,
                xrcsrq: XrcSrqn::new(0x012345)
            }
        );
        let mut out = [0u8; 4];
        assert_eq!(h.emit(&mut out), Ok(4));
        assert_eq!(out, XRCETH);
        let h = Xrceth::parse(&[0xA5, 0xFF, 0xFF, 0xFE, 0x99]).unwrap();
        assert_eq!((h.resv8, h.xrcsrq), (0xA5, XrcSrqn::new(0xFF_FFFE)));
    }

    proptest! {
        #[test]
        fn fields_round_trip(resv8 in any::<u8>(), xrcsrq in 0u32..1 << 24) {
            let h = Xrceth { resv8, xrcsrq: XrcSrqn::new(xrcsrq) };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Xrceth::parse(&out), Ok(h));
        }
    }
}
