//! ImmDt — Immediate Data Extended Transport Header (IBA 9.3), 4 bytes, carried by the
//! *_WITH_IMMEDIATE opcodes (on the last or only packet of the message).
//!
//! ```text
//!  byte 0-3 Immediate Data (opaque)
//! ```
//!
//! The immediate data is opaque to the transport and passes through unchanged. [`ImmDt::imm`]
//! holds the four wire bytes read as a big-endian `u32`, so `imm.to_be_bytes()` gives back the
//! bytes exactly as they were on the wire (the verbs `imm_data`, which is in network order).

use crate::bytes::{get_u32, set_u32};
use crate::error::{check_len, Header, Result};

/// Length of the ImmDt in bytes.
pub const LEN: usize = 4;

mod field {
    pub const IMM: usize = 0;
}

/// Zero-copy view of an ImmDt at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImmDtView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ImmDtView<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        ImmDtView { buffer }
    }

    /// Wraps `buffer` after checking it holds a whole ImmDt.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds a whole ImmDt.
    pub fn check_len(&self) -> Result<()> {
        check_len(Header::ImmDt, self.buffer.as_ref(), LEN)
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Immediate data: the four wire bytes as a big-endian `u32`.
    pub fn imm(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::IMM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDtView<T> {
    /// Sets the immediate data; `v.to_be_bytes()` goes on the wire.
    pub fn set_imm(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::IMM, v);
    }
}

/// A parsed ImmDt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmDt {
    /// Immediate data: the four wire bytes as a big-endian `u32`.
    pub imm: u32,
}

impl ImmDt {
    pub const LEN: usize = LEN;

    /// Parses the ImmDt at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<ImmDt> {
        let v = ImmDtView::new_checked(buf)?;
        Ok(ImmDt { imm: v.imm() })
    }

    /// Writes the ImmDt to the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut v = ImmDtView::new_checked(buf)?;
        v.set_imm(self.imm);
        Ok(LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use proptest::prelude::*;

    // The test vectors hold no *_WITH_IMMEDIATE packet; these bytes follow the layout.
    const IMMDT: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];

    #[test]
    fn parse_known_header() {
        let h = ImmDt::parse(&IMMDT).unwrap();
        assert_eq!(h, ImmDt { imm: 0xdead_beef });
        assert_eq!(h.imm.to_be_bytes(), IMMDT);
        let mut out = [0u8; 4];
        assert_eq!(h.emit(&mut out), Ok(4));
        assert_eq!(out, IMMDT);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            ImmDt::parse(&IMMDT[..3]),
            Err(Error::Truncated {
                header: Header::ImmDt,
                need: 4,
                have: 3
            })
        );
        assert!(ImmDt::default().emit(&mut [0u8; 3]).is_err());
    }

    proptest! {
        #[test]
        fn bytes_round_trip(bytes in any::<[u8; LEN]>()) {
            let h = ImmDt::parse(&bytes).unwrap();
            prop_assert_eq!(h.imm.to_be_bytes(), bytes);
            let mut out = [0u8; LEN];
            prop_assert_eq!(h.emit(&mut out), Ok(LEN));
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn fields_round_trip(imm in any::<u32>()) {
            let h = ImmDt { imm };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(ImmDt::parse(&out), Ok(h));
        }

        #[test]
        fn parse_any_slice(bytes in proptest::collection::vec(any::<u8>(), 0..2 * LEN)) {
            match ImmDt::parse(&bytes) {
                Ok(h) => {
                    prop_assert!(bytes.len() >= LEN);
                    let mut out = [0u8; LEN];
                    h.emit(&mut out).unwrap();
                    prop_assert_eq!(&out[..], &bytes[..LEN]);
                }
                Err(e) => prop_assert_eq!(
                    e,
                    Error::Truncated { header: Header::ImmDt, need: LEN, have: bytes.len() }
                ),
            }
        }
    }
}
