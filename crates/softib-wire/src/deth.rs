//! DETH — Datagram Extended Transport Header (IBA 9.3), 8 bytes, present in every UD and RD
//! packet (after the RDETH on RD).
//!
//! ```text
//!  byte 0-3 Q_Key
//!  byte 4   Resv8
//!  byte 5-7 SrcQP
//! ```

use crate::error::Header;
use crate::field_macros::be_fields_header;
use crate::psn::Qpn;

/// Length of the DETH in bytes.
pub const LEN: usize = 8;

mod field {
    pub const QKEY: usize = 0;
    pub const RESV8: usize = 4;
    pub const SRC_QP: usize = 5;
}

be_fields_header! {
    /// Zero-copy view of a DETH at the start of `buffer`.
    pub struct DethView;

    /// A parsed DETH.
    pub struct Deth(Header::Deth, "DETH", LEN) {
        /// Q_Key: the key the destination QP must hold.
        pub qkey: u32 = field::QKEY, set_qkey;
        /// Reserved byte 4; zero on send, ignored on receipt.
        pub resv8: u8 = field::RESV8, set_resv8;
        /// SrcQP: the sending queue pair.
        pub src_qp: Qpn = field::SRC_QP, set_src_qp;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bth::Bth;
    use crate::field_macros::header_tests;
    use crate::opcode::Opcode;
    use crate::psn::Psn;
    use proptest::prelude::*;

    header_tests!(Deth, Header::Deth);

    // BTH + DETH of the first UD SEND_ONLY in ud_pingpong_s64_n5.pcap (frame 10, client to
    // server): DestQP 0x17, PSN 0x9b9969 (client log: "QPN 0x000017, PSN 0x9b9969"), Q_Key
    // 0x11111111 (ibv_ud_pingpong's fixed Q_Key), SrcQP 0x000017 (the client's QPN).
    const UD_SEND: [u8; 20] = [
        0x64, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x17, 0x00, 0x9b, 0x99, 0x69, 0x11, 0x11, 0x11,
        0x11, 0x00, 0x00, 0x00, 0x17,
    ];
    const UD_DETH: &[u8] = UD_SEND.split_at(Bth::LEN).1;

    #[test]
    fn parse_real_header() {
        let bth = Bth::parse(&UD_SEND).unwrap();
        assert_eq!(bth.opcode, Opcode::UD_SEND_ONLY);
        assert_eq!((bth.dest_qp, bth.psn), (Qpn::new(0x17), Psn::new(0x9b9969)));
        let h = Deth::parse(UD_DETH).unwrap();
        assert_eq!(
            h,
            Deth {
                qkey: 0x1111_1111,
                resv8: 0,
                src_qp: Qpn::new(0x17)
            }
        );
        let mut out = [0u8; 8];
        assert_eq!(h.emit(&mut out), Ok(8));
        assert_eq!(&out[..], UD_DETH);
    }

    #[test]
    fn field_boundaries() {
        // CM MADs over RoCEv2 use Q_Key 0x80010000 to QP 1.
        let h = Deth::parse(&[0x80, 0x01, 0x00, 0x00, 0x5A, 0xAB, 0xCD, 0xEF]).unwrap();
        assert_eq!(
            (h.qkey, h.resv8, h.src_qp),
            (0x8001_0000, 0x5A, Qpn::new(0xABCDEF))
        );
    }

    proptest! {
        #[test]
        fn fields_round_trip(qkey in any::<u32>(), resv8 in any::<u8>(), src_qp in 0u32..1 << 24) {
            let h = Deth { qkey, resv8, src_qp: Qpn::new(src_qp) };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Deth::parse(&out), Ok(h));
        }
    }
}
