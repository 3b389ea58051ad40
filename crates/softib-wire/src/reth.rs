//! RETH — RDMA Extended Transport Header (IBA 9.3), 16 bytes, carried by the first (or only)
//! packet of an RDMA WRITE, by RDMA READ requests, FLUSH and ATOMIC WRITE.
//!
//! ```text
//!  byte 0-7   VA (virtual address)
//!  byte 8-11  R_Key
//!  byte 12-15 DMA Length
//! ```

use crate::bytes::{get_u32, get_u64, set_u32, set_u64};
use crate::error::{check_len, Header, Result};

/// Length of the RETH in bytes.
pub const LEN: usize = 16;

mod field {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const DMA_LEN: usize = 12;
}

/// Zero-copy view of a RETH at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RethView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RethView<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        RethView { buffer }
    }

    /// Wraps `buffer` after checking it holds a whole RETH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds a whole RETH.
    pub fn check_len(&self) -> Result<()> {
        check_len(Header::Reth, self.buffer.as_ref(), LEN)
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// VA: remote virtual address.
    pub fn va(&self) -> u64 {
        get_u64(self.b(), field::VA)
    }
    /// R_Key of the remote memory region.
    pub fn rkey(&self) -> u32 {
        get_u32(self.b(), field::RKEY)
    }
    /// DMA Length: bytes of the whole message.
    pub fn dma_len(&self) -> u32 {
        get_u32(self.b(), field::DMA_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RethView<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub fn set_va(&mut self, v: u64) {
        set_u64(self.bm(), field::VA, v);
    }
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.bm(), field::RKEY, v);
    }
    pub fn set_dma_len(&mut self, v: u32) {
        set_u32(self.bm(), field::DMA_LEN, v);
    }
}

/// A parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Reth {
    /// VA: remote virtual address.
    pub va: u64,
    /// R_Key of the remote memory region.
    pub rkey: u32,
    /// DMA Length: bytes of the whole message.
    pub dma_len: u32,
}

impl Reth {
    pub const LEN: usize = LEN;

    /// Parses the RETH at the start of `buf`. The DMA length is not judged here.
    pub fn parse(buf: &[u8]) -> Result<Reth> {
        let v = RethView::new_checked(buf)?;
        Ok(Reth {
            va: v.va(),
            rkey: v.rkey(),
            dma_len: v.dma_len(),
        })
    }

    /// Writes the RETH to the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut v = RethView::new_checked(buf)?;
        v.set_va(self.va);
        v.set_rkey(self.rkey);
        v.set_dma_len(self.dma_len);
        Ok(LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bth::Bth;
    use crate::error::Error;
    use crate::opcode::Opcode;
    use crate::psn::{Psn, Qpn};
    use proptest::prelude::*;

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

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Reth::parse(&WRITE_BW[12..27]),
            Err(Error::Truncated {
                header: Header::Reth,
                need: 16,
                have: 15
            })
        );
        assert!(Reth::default().emit(&mut [0u8; 15]).is_err());
    }

    proptest! {
        #[test]
        fn bytes_round_trip(bytes in any::<[u8; LEN]>()) {
            let h = Reth::parse(&bytes).unwrap();
            let mut out = [0u8; LEN];
            prop_assert_eq!(h.emit(&mut out), Ok(LEN));
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn fields_round_trip(va in any::<u64>(), rkey in any::<u32>(), dma_len in any::<u32>()) {
            let h = Reth { va, rkey, dma_len };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Reth::parse(&out), Ok(h));
        }

        #[test]
        fn parse_any_slice(bytes in proptest::collection::vec(any::<u8>(), 0..2 * LEN)) {
            match Reth::parse(&bytes) {
                Ok(h) => {
                    prop_assert!(bytes.len() >= LEN);
                    let mut out = [0u8; LEN];
                    h.emit(&mut out).unwrap();
                    prop_assert_eq!(&out[..], &bytes[..LEN]);
                }
                Err(e) => prop_assert_eq!(
                    e,
                    Error::Truncated { header: Header::Reth, need: LEN, have: bytes.len() }
                ),
            }
        }
    }
}
