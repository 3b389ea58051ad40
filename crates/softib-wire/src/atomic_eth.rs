//! AtomicETH — Atomic Extended Transport Header (IBA 9.3), 28 bytes, carried by
//! COMPARE_SWAP and FETCH_ADD requests. The fields are packed with no padding, so the 64-bit
//! data fields are not 8-byte aligned.
//!
//! ```text
//!  byte 0-7   VA (virtual address, 8-byte aligned in a valid request)
//!  byte 8-11  R_Key
//!  byte 12-19 Swap Data (COMPARE_SWAP) or Add Data (FETCH_ADD)
//!  byte 20-27 Compare Data (COMPARE_SWAP; ignored by FETCH_ADD)
//! ```

use crate::error::Header;
use crate::field_macros::be_fields_header;

/// Length of the AtomicETH in bytes.
pub const LEN: usize = 28;

mod field {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const SWAP_ADD: usize = 12;
    pub const COMPARE: usize = 20;
}

be_fields_header! {
    /// Zero-copy view of an AtomicETH at the start of `buffer`.
    pub struct AtomicEthView;

    /// A parsed AtomicETH.
    pub struct AtomicEth(Header::AtomicEth, "AtomicETH", LEN) {
        /// VA: remote virtual address of the 8-byte operand.
        pub va: u64 = field::VA, set_va;
        /// R_Key of the remote memory region.
        pub rkey: u32 = field::RKEY, set_rkey;
        /// Swap Data (COMPARE_SWAP) or Add Data (FETCH_ADD).
        pub swap_add: u64 = field::SWAP_ADD, set_swap_add;
        /// Compare Data (COMPARE_SWAP).
        pub compare: u64 = field::COMPARE, set_compare;
    }

    /// VA alignment is not judged here.
    fn parse;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bth::Bth;
    use crate::field_macros::header_tests;
    use crate::opcode::Opcode;
    use crate::psn::{Psn, Qpn};
    use proptest::prelude::*;

    header_tests!(AtomicEth, Header::AtomicEth);

    // BTH + AtomicETH of the first two RC FETCH_ADD requests in atomic_bw_fadd_n5.pcap (frames
    // 19 and 20): DestQP 0x21, AckReq, PSN 0xc025b7 and 0xc025b8 (client log: "QPN 0x0021 PSN
    // 0xc025b7"). The server's perftest exchange in the same capture (TCP frame 14) reads
    // "0000:0080:000021:95dd23:00001239:00005654684e1000:..." = RKey 0x1239, VAddr
    // 0x5654684e1000; ib_atomic_bw adds 1 and steps the address by 64 bytes per operation.
    const FADD_0: [u8; 40] = [
        0x14, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x21, 0x80, 0xc0, 0x25, 0xb7, 0x00, 0x00, 0x56,
        0x54, 0x68, 0x4e, 0x10, 0x00, 0x00, 0x00, 0x12, 0x39, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    const FADD_1: [u8; 40] = [
        0x14, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x21, 0x80, 0xc0, 0x25, 0xb8, 0x00, 0x00, 0x56,
        0x54, 0x68, 0x4e, 0x10, 0x40, 0x00, 0x00, 0x12, 0x39, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn parse_real_headers() {
        for (pkt, psn, va) in [
            (FADD_0, 0xc025b7, 0x0000_5654_684e_1000),
            (FADD_1, 0xc025b8, 0x0000_5654_684e_1040),
        ] {
            let bth = Bth::parse(&pkt).unwrap();
            assert_eq!(bth.opcode, Opcode::RC_FETCH_ADD);
            assert!(bth.ack_req);
            assert_eq!((bth.dest_qp, bth.psn), (Qpn::new(0x21), Psn::new(psn)));
            let bytes = &pkt[Bth::LEN..];
            let h = AtomicEth::parse(bytes).unwrap();
            assert_eq!(
                h,
                AtomicEth {
                    va,
                    rkey: 0x1239,
                    swap_add: 1,
                    compare: 0
                }
            );
            let mut out = [0u8; 28];
            assert_eq!(h.emit(&mut out), Ok(28));
            assert_eq!(&out[..], bytes);
        }
    }

    #[test]
    fn packed_offsets() {
        let h = AtomicEth {
            va: 0x0102_0304_0506_0708,
            rkey: 0x090A_0B0C,
            swap_add: 0x0D0E_0F10_1112_1314,
            compare: 0x1516_1718_191A_1B1C,
        };
        let mut out = [0u8; 28];
        h.emit(&mut out).unwrap();
        let expect: Vec<u8> = (1u8..=28).collect();
        assert_eq!(&out[..], &expect[..]);
    }

    proptest! {
        #[test]
        fn fields_round_trip(
            va in any::<u64>(),
            rkey in any::<u32>(),
            swap_add in any::<u64>(),
            compare in any::<u64>(),
        ) {
            let h = AtomicEth { va, rkey, swap_add, compare };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(AtomicEth::parse(&out), Ok(h));
        }
    }
}
