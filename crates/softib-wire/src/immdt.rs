//! ImmDt — Immediate Data Extended Transport Header (IBA 9.3), 4 bytes, carried by the
//! *_WITH_IMMEDIATE opcodes (on the last or only packet of the message).
//!
//! ```text
//!  byte 0-3 Immediate Data (opaque)
//! ```
//!
//! The immediate data is opaque to the transport and passes through unchanged. [`ImmDt::imm`]
//! holds the four wire bytes read as a big-endian `u32`, so `imm.to_be_bytes()` gives back the
//! bytes exactly as they were on the wire (the verbs `imm_data`, which is in network order).

use crate::error::Header;
use crate::field_macros::be_fields_header;

/// Length of the ImmDt in bytes.
pub const LEN: usize = 4;

mod field {
    pub const IMM: usize = 0;
}

be_fields_header! {
    /// Zero-copy view of an ImmDt at the start of `buffer`.
    pub struct ImmDtView;

    /// A parsed ImmDt.
    pub struct ImmDt(Header::ImmDt, "ImmDt", LEN) {
        /// Immediate data: the four wire bytes as a big-endian `u32`; `imm.to_be_bytes()` is
        /// what goes on the wire.
        pub imm: u32 = field::IMM, set_imm;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_macros::header_tests;
    use proptest::prelude::*;

    header_tests!(ImmDt, Header::ImmDt);

    // The test vectors hold no *_WITH_IMMEDIATE packet; these bytes follow the layout.
    const IMMDT: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];

    #[test]
    fn parse_known_header() {
        let h = ImmDt::parse(&IMMDT).unwrap();
        assert_eq!(h, ImmDt { imm: 0xdead_beef });
        assert_eq!(h.imm.to_be_bytes(), IMMDT);
        let mut out = [0u8; 4];
        assert_eq!(h.emit(&mut out), Ok(4));
        assert_eq!(out, IMMDT);
    }

    proptest! {
        #[test]
        fn fields_round_trip(imm in any::<u32>()) {
            let h = ImmDt { imm };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(ImmDt::parse(&out), Ok(h));
        }

        #[test]
        fn imm_is_the_wire_bytes(bytes in any::<[u8; LEN]>()) {
            prop_assert_eq!(ImmDt::parse(&bytes).unwrap().imm.to_be_bytes(), bytes);
        }
    }
}
