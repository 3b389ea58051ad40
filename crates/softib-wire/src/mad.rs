//! MAD — the common header of a Management Datagram (IBA 13.4.2), 24 bytes, at the start of
//! the 256-byte payload of every UD packet to QP0 (SMI) or QP1 (GSI). The class-specific data
//! follows it; for the Communication Manager class that is a [`crate::cm`] message.
//!
//! ```text
//!  byte 0     BaseVersion (1)
//!  byte 1     MgmtClass (0x07: Communication Management)
//!  byte 2     ClassVersion (2 for the CM)
//!  byte 3     R (bit 7: response) | Method (bits 6-0)
//!  byte 4-5   Status
//!  byte 6-7   ClassSpecific
//!  byte 8-15  TransactionID
//!  byte 16-17 AttributeID
//!  byte 18-19 Reserved
//!  byte 20-23 AttributeModifier
//! ```
//!
//! Source of the layout: the IBA's Table 143 as transcribed in Linux `include/rdma/ib_mad.h`
//! (`struct ib_mad_hdr`) and Wireshark's `packet-infiniband.c` (`parse_MAD_Common`).

use crate::error::Header;
use crate::field_macros::be_fields_header;

/// Length of the MAD common header in bytes.
pub const LEN: usize = 24;
/// Length of a whole MAD (header and class data), the UD payload to QP0/QP1.
pub const MAD_LEN: usize = 256;
/// Length of the class data after the common header.
pub const DATA_LEN: usize = MAD_LEN - LEN;

/// BaseVersion of every MAD this library sends.
pub const BASE_VERSION: u8 = 1;
/// MgmtClass of the Communication Manager.
pub const CLASS_CM: u8 = 0x07;
/// ClassVersion of the Communication Manager (IBA 1.2 and later).
pub const CM_CLASS_VERSION: u8 = 2;

/// Methods (IBA Table 144); a response has the R bit ([`method::RESPONSE`]) set.
pub mod method {
    /// Get: read an attribute.
    pub const GET: u8 = 0x01;
    /// Set: write an attribute.
    pub const SET: u8 = 0x02;
    /// Send: a datagram with no response (every CM message).
    pub const SEND: u8 = 0x03;
    /// Trap: an unsolicited notice.
    pub const TRAP: u8 = 0x05;
    /// Report.
    pub const REPORT: u8 = 0x06;
    /// TrapRepress.
    pub const TRAP_REPRESS: u8 = 0x07;
    /// The R bit: this MAD answers a request.
    pub const RESPONSE: u8 = 0x80;
    /// GetResp: the answer to a Get or Set.
    pub const GET_RESP: u8 = GET | RESPONSE;
}

/// MAD Status bits and codes (IBA Table 145).
pub mod status {
    /// Busy: the request was discarded for now.
    pub const BUSY: u16 = 0x0001;
    /// Redirect required.
    pub const REDIRECT: u16 = 0x0002;
    /// The class or class version is not supported.
    pub const BAD_VERSION: u16 = 0x0004;
    /// The method is not supported.
    pub const METHOD_UNSUPPORTED: u16 = 0x0008;
    /// The method/attribute combination is not supported.
    pub const METHOD_ATTR_UNSUPPORTED: u16 = 0x000C;
    /// An attribute field holds an invalid value.
    pub const INVALID_FIELD: u16 = 0x001C;
}

pub(crate) mod field {
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: usize = 4;
    pub const CLASS_SPECIFIC: usize = 6;
    pub const TRANSACTION_ID: usize = 8;
    pub const ATTRIBUTE_ID: usize = 16;
    pub const RESV: usize = 18;
    pub const ATTRIBUTE_MODIFIER: usize = 20;
}

be_fields_header! {
    /// Zero-copy view of a MAD common header at the start of `buffer`.
    pub struct MadHdrView;

    /// A parsed MAD common header.
    pub struct MadHdr(Header::Mad, "MAD common header", LEN) {
        /// BaseVersion: 1.
        pub base_version: u8 = field::BASE_VERSION, set_base_version;
        /// MgmtClass: which management class the data belongs to.
        pub mgmt_class: u8 = field::MGMT_CLASS, set_mgmt_class;
        /// ClassVersion.
        pub class_version: u8 = field::CLASS_VERSION, set_class_version;
        /// The R bit (0x80) and the Method ([`method`]).
        pub method: u8 = field::METHOD, set_method;
        /// Status of a response ([`status`]); zero in requests.
        pub status: u16 = field::STATUS, set_status;
        /// ClassSpecific; zero for the CM.
        pub class_specific: u16 = field::CLASS_SPECIFIC, set_class_specific;
        /// TransactionID: chosen by the requester, echoed by the responder.
        pub transaction_id: u64 = field::TRANSACTION_ID, set_transaction_id;
        /// AttributeID: which message of the class (for the CM, [`crate::cm::AttrId`]).
        pub attribute_id: u16 = field::ATTRIBUTE_ID, set_attribute_id;
        /// Reserved; zero on send, ignored on receipt.
        pub resv: u16 = field::RESV, set_resv;
        /// AttributeModifier; zero for the CM messages.
        pub attribute_modifier: u32 = field::ATTRIBUTE_MODIFIER, set_attribute_modifier;
    }
}

impl MadHdr {
    /// The header of a CM message with attribute `attribute_id` (method Send).
    pub fn cm_send(attribute_id: u16, transaction_id: u64) -> MadHdr {
        MadHdr {
            base_version: BASE_VERSION,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            resv: 0,
            attribute_modifier: 0,
        }
    }

    /// True for a response (the R bit of the method byte).
    pub fn is_response(&self) -> bool {
        self.method & method::RESPONSE != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_macros::header_tests;
    use proptest::prelude::*;

    header_tests!(MadHdr, Header::Mad);

    #[test]
    fn cm_send_layout() {
        let h = MadHdr::cm_send(0x0010, 0x0102_0304_0506_0708);
        let mut out = [0u8; LEN];
        assert_eq!(h.emit(&mut out), Ok(LEN));
        assert_eq!(
            out,
            [1, 0x07, 2, 0x03, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x10, 0, 0, 0, 0, 0, 0]
        );
        assert!(!h.is_response());
        let r = MadHdr {
            method: method::GET_RESP,
            ..h
        };
        assert!(r.is_response());
    }

    proptest! {
        #[test]
        fn fields_round_trip(b in proptest::array::uniform24(any::<u8>())) {
            let h = MadHdr::parse(&b).unwrap();
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(out, b);
        }
    }
}
