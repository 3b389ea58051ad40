//! DETH — Datagram Extended Transport Header (IBA 9.3), 8 bytes, present in every UD and RD
//! packet (after the RDETH on RD).
//!
//! ```text
//!  byte 0-3 Q_Key
//!  byte 4   Resv8
//!  byte 5-7 SrcQP
//! ```

use crate::bytes::{get_u24, get_u32, set_u24, set_u32};
use crate::error::{check_len, Header, Result};
use crate::psn::Qpn;

/// Length of the DETH in bytes.
pub const LEN: usize = 8;

mod field {
    pub const QKEY: usize = 0;
    pub const RESV8: usize = 4;
    pub const SRC_QP: usize = 5;
}

/// Zero-copy view of a DETH at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DethView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DethView<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        DethView { buffer }
    }

    /// Wraps `buffer` after checking it holds a whole DETH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds a whole DETH.
    pub fn check_len(&self) -> Result<()> {
        check_len(Header::Deth, self.buffer.as_ref(), LEN)
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Q_Key: the key the destination QP must hold.
    pub fn qkey(&self) -> u32 {
        get_u32(self.b(), field::QKEY)
    }
    pub fn resv8(&self) -> u8 {
        self.b()[field::RESV8]
    }
    /// SrcQP: the sending queue pair.
    pub fn src_qp(&self) -> Qpn {
        Qpn::new(get_u24(self.b(), field::SRC_QP))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DethView<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub fn set_qkey(&mut self, v: u32) {
        set_u32(self.bm(), field::QKEY, v);
    }
    pub fn set_resv8(&mut self, v: u8) {
        self.bm()[field::RESV8] = v;
    }
    pub fn set_src_qp(&mut self, v: Qpn) {
        set_u24(self.bm(), field::SRC_QP, v.value());
    }
}

/// A parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Deth {
    /// Q_Key.
    pub qkey: u32,
    /// Reserved byte 4; zero on send, ignored on receipt.
    pub resv8: u8,
    /// SrcQP: the sending queue pair.
    pub src_qp: Qpn,
}

impl Deth {
    pub const LEN: usize = LEN;

    /// Parses the DETH at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Deth> {
        let v = DethView::new_checked(buf)?;
        Ok(Deth {
            qkey: v.qkey(),
            resv8: v.resv8(),
            src_qp: v.src_qp(),
        })
    }

    /// Writes the DETH to the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut v = DethView::new_checked(buf)?;
        v.set_qkey(self.qkey);
        v.set_resv8(self.resv8);
        v.set_src_qp(self.src_qp);
        Ok(LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bth::Bth;
    use crate::error::Error;
    use crate::opcode::Opcode;
    use crate::psn::Psn;
    use proptest::prelude::*;

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

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Deth::parse(&UD_DETH[..7]),
            Err(Error::Truncated {
                header: Header::Deth,
                need: 8,
                have: 7
            })
        );
        assert!(Deth::default().emit(&mut [0u8; 7]).is_err());
    }

    proptest! {
        #[test]
        fn bytes_round_trip(bytes in any::<[u8; LEN]>()) {
            let h = Deth::parse(&bytes).unwrap();
            let mut out = [0u8; LEN];
            prop_assert_eq!(h.emit(&mut out), Ok(LEN));
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn fields_round_trip(qkey in any::<u32>(), resv8 in any::<u8>(), src_qp in 0u32..1 << 24) {
            let h = Deth { qkey, resv8, src_qp: Qpn::new(src_qp) };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Deth::parse(&out), Ok(h));
        }

        #[test]
        fn parse_any_slice(bytes in proptest::collection::vec(any::<u8>(), 0..2 * LEN)) {
            match Deth::parse(&bytes) {
                Ok(h) => {
                    prop_assert!(bytes.len() >= LEN);
                    let mut out = [0u8; LEN];
                    h.emit(&mut out).unwrap();
                    prop_assert_eq!(&out[..], &bytes[..LEN]);
                }
                Err(e) => prop_assert_eq!(
                    e,
                    Error::Truncated { header: Header::Deth, need: LEN, have: bytes.len() }
                ),
            }
        }
    }
}
