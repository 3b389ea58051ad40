//! AtomicAckETH — Atomic Acknowledge Extended Transport Header (IBA 9.3), 8 bytes, carried
//! by ATOMIC_ACKNOWLEDGE after the AETH.
//!
//! ```text
//!  byte 0-7 Original Remote Data (the operand's value before the atomic operation)
//! ```

use crate::bytes::{get_u64, set_u64};
use crate::error::{check_len, Header, Result};

/// Length of the AtomicAckETH in bytes.
pub const LEN: usize = 8;

mod field {
    pub const ORIG_REMOTE_DATA: usize = 0;
}

/// Zero-copy view of an AtomicAckETH at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicAckEthView<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicAckEthView<T> {
    /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        AtomicAckEthView { buffer }
    }

    /// Wraps `buffer` after checking it holds a whole AtomicAckETH.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Checks that the buffer holds a whole AtomicAckETH.
    pub fn check_len(&self) -> Result<()> {
        check_len(Header::AtomicAckEth, self.buffer.as_ref(), LEN)
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Original Remote Data: the operand's value before the atomic operation.
    pub fn orig_remote_data(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::ORIG_REMOTE_DATA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEthView<T> {
    pub fn set_orig_remote_data(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::ORIG_REMOTE_DATA, v);
    }
}

/// A parsed AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEth {
    /// Original Remote Data: the operand's value before the atomic operation.
    pub orig_remote_data: u64,
}

impl AtomicAckEth {
    pub const LEN: usize = LEN;

    /// Parses the AtomicAckETH at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<AtomicAckEth> {
        let v = AtomicAckEthView::new_checked(buf)?;
        Ok(AtomicAckEth {
            orig_remote_data: v.orig_remote_data(),
        })
    }

    /// Writes the AtomicAckETH to the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut v = AtomicAckEthView::new_checked(buf)?;
        v.set_orig_remote_data(self.orig_remote_data);
        Ok(LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aeth::Aeth;
    use crate::bth::Bth;
    use crate::error::Error;
    use crate::opcode::Opcode;
    use crate::psn::{Msn, Psn, Qpn};
    use proptest::prelude::*;

    // BTH + AETH + AtomicAckETH of the first RC ATOMIC_ACKNOWLEDGE in atomic_bw_fadd_n5.pcap
    // (frame 24): DestQP 0x21, PSN 0xc025b7 (the FETCH_ADD it answers), AETH 0x1f000001 (ACK,
    // MSN 1), then the operand's original value in network order.
    const ATOMIC_ACK: [u8; 24] = [
        0x12, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x21, 0x00, 0xc0, 0x25, 0xb7, 0x1f, 0x00, 0x00,
        0x01, 0xec, 0xe4, 0xcc, 0xb1, 0x02, 0x31, 0xc4, 0x67,
    ];
    const AT: usize = Bth::LEN + crate::aeth::LEN;

    #[test]
    fn parse_real_header() {
        let bth = Bth::parse(&ATOMIC_ACK).unwrap();
        assert_eq!(bth.opcode, Opcode::RC_ATOMIC_ACKNOWLEDGE);
        assert_eq!((bth.dest_qp, bth.psn), (Qpn::new(0x21), Psn::new(0xc025b7)));
        let aeth = Aeth::parse(&ATOMIC_ACK[Bth::LEN..]).unwrap();
        assert_eq!((aeth.syndrome, aeth.msn), (0x1f, Msn::new(1)));
        let h = AtomicAckEth::parse(&ATOMIC_ACK[AT..]).unwrap();
        assert_eq!(h.orig_remote_data, 0xece4_ccb1_0231_c467);
        let mut out = [0u8; 8];
        assert_eq!(h.emit(&mut out), Ok(8));
        assert_eq!(&out[..], &ATOMIC_ACK[AT..]);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            AtomicAckEth::parse(&ATOMIC_ACK[AT + 1..]),
            Err(Error::Truncated {
                header: Header::AtomicAckEth,
                need: 8,
                have: 7
            })
        );
        assert!(AtomicAckEth::default().emit(&mut [0u8; 7]).is_err());
    }

    proptest! {
        #[test]
        fn bytes_round_trip(bytes in any::<[u8; LEN]>()) {
            let h = AtomicAckEth::parse(&bytes).unwrap();
            let mut out = [0u8; LEN];
            prop_assert_eq!(h.emit(&mut out), Ok(LEN));
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn fields_round_trip(orig_remote_data in any::<u64>()) {
            let h = AtomicAckEth { orig_remote_data };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(AtomicAckEth::parse(&out), Ok(h));
        }

        #[test]
        fn parse_any_slice(bytes in proptest::collection::vec(any::<u8>(), 0..2 * LEN)) {
            match AtomicAckEth::parse(&bytes) {
                Ok(h) => {
                    prop_assert!(bytes.len() >= LEN);
                    let mut out = [0u8; LEN];
                    h.emit(&mut out).unwrap();
                    prop_assert_eq!(&out[..], &bytes[..LEN]);
                }
                Err(e) => prop_assert_eq!(
                    e,
                    Error::Truncated { header: Header::AtomicAckEth, need: LEN, have: bytes.len() }
                ),
            }
        }
    }
}
