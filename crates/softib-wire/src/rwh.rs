//! RWH — Raw Header (IBA 5.3), 4 bytes, follows the LRH of a raw EtherType datagram
//! (LRH:LNH = 00) and names the protocol of the payload.
//!
//! ```text
//!  byte 0-1 Resv16
//!  byte 2-3 EtherType
//! ```

use crate::bytes::{get_u16, set_u16};
use crate::error::{check_len, Header, Result};

/// Length of the RWH in bytes.
pub const LEN: usize = 4;

mod field {
    pub const RESV16: usize = 0;
    pub const ETHER_TYPE: usize = 2;
}

/// Zero-copy view of a RWH at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RwhView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RwhView<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        RwhView { buffer }
    }

    /// Wraps `buffer` after checking it holds a whole RWH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds a whole RWH.
    pub fn check_len(&self) -> Result<()> {
        check_len(Header::Rwh, self.buffer.as_ref(), LEN)
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn resv16(&self) -> u16 {
        get_u16(self.b(), field::RESV16)
    }
    /// EtherType of the payload (IEEE 802.3 Length/Type registry).
    pub fn ether_type(&self) -> u16 {
        get_u16(self.b(), field::ETHER_TYPE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RwhView<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub fn set_resv16(&mut self, v: u16) {
        set_u16(self.bm(), field::RESV16, v);
    }
    pub fn set_ether_type(&mut self, v: u16) {
        set_u16(self.bm(), field::ETHER_TYPE, v);
    }
}

/// A parsed RWH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rwh {
    /// Reserved bytes 0-1; zero on send, ignored on receipt.
    pub resv16: u16,
    /// EtherType of the payload.
    pub ether_type: u16,
}

impl Rwh {
    pub const LEN: usize = LEN;

    /// Parses the RWH at the start of `buf`. The EtherType is not judged here.
    pub fn parse(buf: &[u8]) -> Result<Rwh> {
        let v = RwhView::new_checked(buf)?;
        Ok(Rwh {
            resv16: v.resv16(),
            ether_type: v.ether_type(),
        })
    }

    /// Writes the RWH to the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut v = RwhView::new_checked(buf)?;
        v.set_resv16(self.resv16);
        v.set_ether_type(self.ether_type);
        Ok(LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use proptest::prelude::*;

    // No native IB capture exists among the test vectors; these bytes follow the layout:
    // reserved 0, EtherType 0x0800 (IPv4) carried as a raw EtherType datagram.
    const RWH_IPV4: [u8; 4] = [0x00, 0x00, 0x08, 0x00];

    #[test]
    fn parse_known_header() {
        let h = Rwh::parse(&RWH_IPV4).unwrap();
        assert_eq!(
            h,
            Rwh {
                resv16: 0,
                ether_type: 0x0800
            }
        );
        let mut out = [0u8; 4];
        assert_eq!(h.emit(&mut out), Ok(4));
        assert_eq!(out, RWH_IPV4);
        let h = Rwh::parse(&[0xAB, 0xCD, 0x86, 0xDD]).unwrap();
        assert_eq!((h.resv16, h.ether_type), (0xABCD, 0x86DD));
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Rwh::parse(&RWH_IPV4[..3]),
            Err(Error::Truncated {
                header: Header::Rwh,
                need: 4,
                have: 3
            })
        );
        assert!(Rwh::default().emit(&mut [0u8; 3]).is_err());
    }

    proptest! {
        #[test]
        fn bytes_round_trip(bytes in any::<[u8; LEN]>()) {
            let h = Rwh::parse(&bytes).unwrap();
            let mut out = [0u8; LEN];
            prop_assert_eq!(h.emit(&mut out), Ok(LEN));
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn fields_round_trip(resv16 in any::<u16>(), ether_type in any::<u16>()) {
            let h = Rwh { resv16, ether_type };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Rwh::parse(&out), Ok(h));
        }

        #[test]
        fn parse_any_slice(bytes in proptest::collection::vec(any::<u8>(), 0..2 * LEN)) {
            match Rwh::parse(&bytes) {
                Ok(h) => {
                    prop_assert!(bytes.len() >= LEN);
                    let mut out = [0u8; LEN];
                    h.emit(&mut out).unwrap();
                    prop_assert_eq!(&out[..], &bytes[..LEN]);
                }
                Err(e) => prop_assert_eq!(
                    e,
                    Error::Truncated { header: Header::Rwh, need: LEN, have: bytes.len() }
                ),
            }
        }
    }
}
