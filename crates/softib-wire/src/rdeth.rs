//! RDETH — Reliable Datagram Extended Transport Header (IBA 9.3), 4 bytes, present in every
//! RD packet right after the BTH.
//!
//! ```text
//!  byte 0   Resv8
//!  byte 1-3 EECnxt (end-to-end context)
//! ```

use crate::bytes::{get_u24, set_u24};
use crate::error::{check_len, Header, Result};
use crate::psn::Eecn;

/// Length of the RDETH in bytes.
pub const LEN: usize = 4;

mod field {
    pub const RESV8: usize = 0;
    pub const EECN: usize = 1;
}

/// Zero-copy view of an RDETH at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdethView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RdethView<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        RdethView { buffer }
    }

    /// Wraps `buffer` after checking it holds a whole RDETH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds a whole RDETH.
    pub fn check_len(&self) -> Result<()> {
        check_len(Header::Rdeth, self.buffer.as_ref(), LEN)
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
    /// EECnxt: the end-to-end context the packet belongs to.
    pub fn eecn(&self) -> Eecn {
        Eecn::new(get_u24(self.b(), field::EECN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RdethView<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub fn set_resv8(&mut self, v: u8) {
        self.bm()[field::RESV8] = v;
    }
    pub fn set_eecn(&mut self, v: Eecn) {
        set_u24(self.bm(), field::EECN, v.value());
    }
}

/// A parsed RDETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rdeth {
    /// Reserved byte 0; zero on send, ignored on receipt.
    pub resv8: u8,
    /// EECnxt: end-to-end context.
    pub eecn: Eecn,
}

impl Rdeth {
    pub const LEN: usize = LEN;

    /// Parses the RDETH at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Rdeth> {
        let v = RdethView::new_checked(buf)?;
        Ok(Rdeth {
            resv8: v.resv8(),
            eecn: v.eecn(),
        })
    }

    /// Writes the RDETH to the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut v = RdethView::new_checked(buf)?;
        v.set_resv8(self.resv8);
        v.set_eecn(self.eecn);
        Ok(LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use proptest::prelude::*;

    // Linux rxe does not implement RD, so no capture holds an RDETH; these bytes follow the
    // layout: reserved 0, EECnxt 0x012345.
    const RDETH: [u8; 4] = [0x00, 0x01, 0x23, 0x45];

    #[test]
    fn parse_known_header() {
        let h = Rdeth::parse(&RDETH).unwrap();
        assert_eq!(
            h,
            Rdeth {
                resv8: 0,
                eecn: Eecn::new(0x012345)
            }
        );
        let mut out = [0u8; 4];
        assert_eq!(h.emit(&mut out), Ok(4));
        assert_eq!(out, RDETH);
        let h = Rdeth::parse(&[0xA5, 0xFF, 0xFF, 0xFE, 0x99]).unwrap();
        assert_eq!((h.resv8, h.eecn), (0xA5, Eecn::new(0xFF_FFFE)));
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Rdeth::parse(&RDETH[..3]),
            Err(Error::Truncated {
                header: Header::Rdeth,
                need: 4,
                have: 3
            })
        );
        assert!(Rdeth::default().emit(&mut [0u8; 3]).is_err());
    }

    proptest! {
        #[test]
        fn bytes_round_trip(bytes in any::<[u8; LEN]>()) {
            let h = Rdeth::parse(&bytes).unwrap();
            let mut out = [0u8; LEN];
            prop_assert_eq!(h.emit(&mut out), Ok(LEN));
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn fields_round_trip(resv8 in any::<u8>(), eecn in 0u32..1 << 24) {
            let h = Rdeth { resv8, eecn: Eecn::new(eecn) };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Rdeth::parse(&out), Ok(h));
        }

        #[test]
        fn parse_any_slice(bytes in proptest::collection::vec(any::<u8>(), 0..2 * LEN)) {
            match Rdeth::parse(&bytes) {
                Ok(h) => {
                    prop_assert!(bytes.len() >= LEN);
                    let mut out = [0u8; LEN];
                    h.emit(&mut out).unwrap();
                    prop_assert_eq!(&out[..], &bytes[..LEN]);
                }
                Err(e) => prop_assert_eq!(
                    e,
                    Error::Truncated { header: Header::Rdeth, need: LEN, have: bytes.len() }
                ),
            }
        }
    }
}
