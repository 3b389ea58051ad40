//! IETH — Invalidate Extended Transport Header (IBA 9.3), 4 bytes, carried by
//! SEND_LAST_WITH_INVALIDATE and SEND_ONLY_WITH_INVALIDATE.
//!
//! ```text
//!  byte 0-3 R_Key (the key the responder invalidates)
//! ```

use crate::bytes::{get_u32, set_u32};
use crate::error::{check_len, Header, Result};

/// Length of the IETH in bytes.
pub const LEN: usize = 4;

mod field {
    pub const RKEY: usize = 0;
}

/// Zero-copy view of an IETH at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IethView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IethView<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        IethView { buffer }
    }

    /// Wraps `buffer` after checking it holds a whole IETH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds a whole IETH.
    pub fn check_len(&self) -> Result<()> {
        check_len(Header::Ieth, self.buffer.as_ref(), LEN)
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::RKEY)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IethView<T> {
    pub fn set_rkey(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::RKEY, v);
    }
}

/// A parsed IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ieth {
    /// R_Key to invalidate.
    pub rkey: u32,
}

impl Ieth {
    pub const LEN: usize = LEN;

    /// Parses the IETH at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Ieth> {
        let v = IethView::new_checked(buf)?;
        Ok(Ieth { rkey: v.rkey() })
    }

    /// Writes the IETH to the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut v = IethView::new_checked(buf)?;
        v.set_rkey(self.rkey);
        Ok(LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use proptest::prelude::*;

    // The test vectors hold no SEND_WITH_INVALIDATE; these bytes follow the layout and carry
    // the R_Key the server of write_bw_s4096_n5.pcap advertised (0x000b97).
    const IETH: [u8; 4] = [0x00, 0x00, 0x0b, 0x97];

    #[test]
    fn parse_known_header() {
        let h = Ieth::parse(&IETH).unwrap();
        assert_eq!(h, Ieth { rkey: 0x0b97 });
        let mut out = [0u8; 4];
        assert_eq!(h.emit(&mut out), Ok(4));
        assert_eq!(out, IETH);
        assert_eq!(
            Ieth::parse(&[0x12, 0x34, 0x56, 0x78, 0x9a]).unwrap().rkey,
            0x1234_5678
        );
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Ieth::parse(&IETH[..3]),
            Err(Error::Truncated {
                header: Header::Ieth,
                need: 4,
                have: 3
            })
        );
        assert!(Ieth::default().emit(&mut [0u8; 3]).is_err());
    }

    proptest! {
        #[test]
        fn bytes_round_trip(bytes in any::<[u8; LEN]>()) {
            let h = Ieth::parse(&bytes).unwrap();
            let mut out = [0u8; LEN];
            prop_assert_eq!(h.emit(&mut out), Ok(LEN));
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn fields_round_trip(rkey in any::<u32>()) {
            let h = Ieth { rkey };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Ieth::parse(&out), Ok(h));
        }

        #[test]
        fn parse_any_slice(bytes in proptest::collection::vec(any::<u8>(), 0..2 * LEN)) {
            match Ieth::parse(&bytes) {
                Ok(h) => {
                    prop_assert!(bytes.len() >= LEN);
                    let mut out = [0u8; LEN];
                    h.emit(&mut out).unwrap();
                    prop_assert_eq!(&out[..], &bytes[..LEN]);
                }
                Err(e) => prop_assert_eq!(
                    e,
                    Error::Truncated { header: Header::Ieth, need: LEN, have: bytes.len() }
                ),
            }
        }
    }
}
