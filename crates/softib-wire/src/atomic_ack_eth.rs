//! AtomicAckETH — Atomic Acknowledge Extended Transport Header (IBA 9.3), 8 bytes, carried
//! by ATOMIC_ACKNOWLEDGE after the AETH.
//!
//! ```text
//!  byte 0-7 Original Remote Data (the operand's value before the atomic operation)
//! ```

use crate::error::Header;
use crate::field_macros::be_fields_header;

/// Length of the AtomicAckETH in bytes.
pub const LEN: usize = 8;

mod field {
    pub const ORIG_REMOTE_DATA: usize = 0;
}

be_fields_header! {
    /// Zero-copy view of an AtomicAckETH at the start of `buffer`.
    pub struct AtomicAckEthView;

    /// A parsed AtomicAckETH.
    pub struct AtomicAckEth(Header::AtomicAckEth, "AtomicAckETH", LEN) {
        /// Original Remote Data: the operand's value before the atomic operation.
        pub orig_remote_data: u64 = field::ORIG_REMOTE_DATA, set_orig_remote_data;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aeth::Aeth;
    use crate::bth::Bth;
    use crate::field_macros::header_tests;
    use crate::opcode::Opcode;
    use crate::psn::{Msn, Psn, Qpn};
    use proptest::prelude::*;

    header_tests!(AtomicAckEth, Header::AtomicAckEth);

    // BTH + AETH + AtomicAckETH of the first RC ATOMIC_ACKNOWLEDGE in atomic_bw_fadd_n5.pcap
    // (frame 24): DestQP 0x21, PSN 0xc025b7 (the FETCH_ADD it answers), AETH 0x1f000001 (ACK,
    // MSN 1), then the operand's original value in network order.
    const ATOMIC_ACK: [u8; 24] = [
        0x12, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x21, 0x00, 0xc0, 0x25, 0xb7, 0x1f, 0x00, 0x00,
        0x01, 0xec, 0xe4, 0xcc, 0xb1, 0x02, 0x31, 0xc4, 0x67,
    ];
    const AT: usize = Bth::LEN + crate::aeth::LEN;

    #[test]
    fn parse_real_header() {
        let bth = Bth::parse(&ATOMIC_ACK).unwrap();
        assert_eq!(bth.opcode, Opcode::RC_ATOMIC_ACKNOWLEDGE);
        assert_eq!((bth.dest_qp, bth.psn), (Qpn::new(0x21), Psn::new(0xc025b7)));
        let aeth = Aeth::parse(&ATOMIC_ACK[Bth::LEN..]).unwrap();
        assert_eq!((aeth.syndrome, aeth.msn), (0x1f, Msn::new(1)));
        let h = AtomicAckEth::parse(&ATOMIC_ACK[AT..]).unwrap();
        assert_eq!(h.orig_remote_data, 0xece4_ccb1_0231_c467);
        let mut out = [0u8; 8];
        assert_eq!(h.emit(&mut out), Ok(8));
        assert_eq!(&out[..], &ATOMIC_ACK[AT..]);
    }

    proptest! {
        #[test]
        fn fields_round_trip(orig_remote_data in any::<u64>()) {
            let h = AtomicAckEth { orig_remote_data };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(AtomicAckEth::parse(&out), Ok(h));
        }
    }
}
