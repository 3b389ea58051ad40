//! XRCETH — XRC Extended Transport Header (IBA annex A14), 4 bytes, present in XRC request
//! packets right after the BTH (and before any RETH, AtomicETH, ImmDt or IETH).
//!
//! ```text
//!  byte 0   Resv8
//!  byte 1-3 XRCSRQ (XRC shared receive queue number)
//! ```

use crate::bytes::{get_u24, set_u24};
use crate::error::{check_len, Header, Result};
use crate::psn::XrcSrqn;

/// Length of the XRCETH in bytes.
pub const LEN: usize = 4;

mod field {
    pub const RESV8: usize = 0;
    pub const XRCSRQ: usize = 1;
}

/// Zero-copy view of an XRCETH at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XrcethView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> XrcethView<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        XrcethView { buffer }
    }

    /// Wraps `buffer` after checking it holds a whole XRCETH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds a whole XRCETH.
    pub fn check_len(&self) -> Result<()> {
        check_len(Header::Xrceth, self.buffer.as_ref(), LEN)
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn resv8(&self) -> u8 {
        self.b()[field::RESV8]
    }
    /// XRCSRQ: the XRC shared receive queue the request is for.
    pub fn xrcsrq(&self) -> XrcSrqn {
        XrcSrqn::new(get_u24(self.b(), field::XRCSRQ))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> XrcethView<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub fn set_resv8(&mut self, v: u8) {
        self.bm()[field::RESV8] = v;
    }
    pub fn set_xrcsrq(&mut self, v: XrcSrqn) {
        set_u24(self.bm(), field::XRCSRQ, v.value());
    }
}

/// A parsed XRCETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Xrceth {
    /// Reserved byte 0; zero on send, ignored on receipt.
    pub resv8: u8,
    /// XRCSRQ: XRC shared receive queue number.
    pub xrcsrq: XrcSrqn,
}

impl Xrceth {
    pub const LEN: usize = LEN;

    /// Parses the XRCETH at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Xrceth> {
        let v = XrcethView::new_checked(buf)?;
        Ok(Xrceth {
            resv8: v.resv8(),
            xrcsrq: v.xrcsrq(),
        })
    }

    /// Writes the XRCETH to the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut v = XrcethView::new_checked(buf)?;
        v.set_resv8(self.resv8);
        v.set_xrcsrq(self.xrcsrq);
        Ok(LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use proptest::prelude::*;

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

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Xrceth::parse(&XRCETH[..3]),
            Err(Error::Truncated {
                header: Header::Xrceth,
                need: 4,
                have: 3
            })
        );
        assert!(Xrceth::default().emit(&mut [0u8; 3]).is_err());
    }

    proptest! {
        #[test]
        fn bytes_round_trip(bytes in any::<[u8; LEN]>()) {
            let h = Xrceth::parse(&bytes).unwrap();
            let mut out = [0u8; LEN];
            prop_assert_eq!(h.emit(&mut out), Ok(LEN));
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn fields_round_trip(resv8 in any::<u8>(), xrcsrq in 0u32..1 << 24) {
            let h = Xrceth { resv8, xrcsrq: XrcSrqn::new(xrcsrq) };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Xrceth::parse(&out), Ok(h));
        }

        #[test]
        fn parse_any_slice(bytes in proptest::collection::vec(any::<u8>(), 0..2 * LEN)) {
            match Xrceth::parse(&bytes) {
                Ok(h) => {
                    prop_assert!(bytes.len() >= LEN);
                    let mut out = [0u8; LEN];
                    h.emit(&mut out).unwrap();
                    prop_assert_eq!(&out[..], &bytes[..LEN]);
                }
                Err(e) => prop_assert_eq!(
                    e,
                    Error::Truncated { header: Header::Xrceth, need: LEN, have: bytes.len() }
                ),
            }
        }
    }
}
