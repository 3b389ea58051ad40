//! RETH — RDMA Extended Transport Header (IBA 9.3), 16 bytes, carried by the first (or only)
//! packet of an RDMA WRITE, by RDMA READ requests, FLUSH and ATOMIC WRITE.
//!
//! ```text
//!  byte 0-7   VA (virtual address)
//!  byte 8-11  R_Key
//!  byte 12-15 DMA Length
//! ```

use crate::error::Header;
use crate::field_macros::be_fields_header;

/// Length of the RETH in bytes.
pub const LEN: usize = 16;

mod field {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const DMA_LEN: usize = 12;
}

be_fields_header! {
    /// Zero-copy view of a RETH at the start of `buffer`.
    pub struct RethView;

    /// A parsed RETH.
    pub struct Reth(Header::Reth, "RETH", LEN) {
        /// VA: remote virtual address.
        pub va: u64 = field::VA, set_va;
        /// R_Key of the remote memory region.
        pub rkey: u32 = field::RKEY, set_rkey;
        /// DMA Length: bytes of the whole message.
        pub dma_len: u32 = field::DMA_LEN, set_dma_len;
    }

    /// The DMA length is not judged here.
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

    header_tests!(Reth, Header::Reth);

    // BTH + RETH of the first RC RDMA_WRITE_FIRST in write_bw_s4096_n5.pcap (frame 19): QPN
    // 0x1a, client PSN 0x0b87b3; the server advertised "RKey 0x000b97 VAddr 0x0055eeb7aa5000";
    // the message is 4096 bytes (-s 4096).
    const WRITE_BW: [u8; 28] = [
        0x06, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x1a, 0x00, 0x0b, 0x87, 0xb3, 0x00, 0x00, 0x55,
        0xee, 0xb7, 0xaa, 0x50, 0x00, 0x00, 0x00, 0x0b, 0x97, 0x00, 0x00, 0x10, 0x00,
    ];
    // BTH + RETH of the first RDMA_WRITE_FIRST in loss_write_bw_s4096_n10.pcap (frame 19): QPN
    // 0x2f, client PSN 0xc304fc; server "RKey 0x00228b VAddr 0x00558282cb0000".
    const LOSS_WRITE_BW: [u8; 28] = [
        0x06, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x2f, 0x00, 0xc3, 0x04, 0xfc, 0x00, 0x00, 0x55,
        0x82, 0x82, 0xcb, 0x00, 0x00, 0x00, 0x00, 0x22, 0x8b, 0x00, 0x00, 0x10, 0x00,
    ];

    #[test]
    fn parse_real_headers() {
        for (pkt, qpn, psn, va, rkey) in [
            (WRITE_BW, 0x1a, 0x0b87b3, 0x0000_55ee_b7aa_5000, 0x0b97),
            (LOSS_WRITE_BW, 0x2f, 0xc304fc, 0x0000_5582_82cb_0000, 0x228b),
        ] {
            let bth = Bth::parse(&pkt).unwrap();
            assert_eq!(bth.opcode, Opcode::RC_RDMA_WRITE_FIRST);
            assert_eq!((bth.dest_qp, bth.psn), (Qpn::new(qpn), Psn::new(psn)));
            let bytes = &pkt[Bth::LEN..];
            let h = Reth::parse(bytes).unwrap();
            assert_eq!(
                h,
                Reth {
                    va,
                    rkey,
                    dma_len: 4096
                }
            );
            let mut out = [0u8; 16];
            assert_eq!(h.emit(&mut out), Ok(16));
            assert_eq!(&out[..], bytes);
        }
    }

    proptest! {
        #[test]
        fn fields_round_trip(va in any::<u64>(), rkey in any::<u32>(), dma_len in any::<u32>()) {
            let h = Reth { va, rkey, dma_len };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Reth::parse(&out), Ok(h));
        }
    }
}
