//! FETH — Flush Extended Transport Header (IBA 1.5), 4 bytes, carried by FLUSH requests before
//! the RETH.
//!
//! ```text
//!  bits 31-6  Resv26
//!  bits 5-4   SEL (selectivity level)
//!  bits 3-0   PLT (placement type)
//! ```

use crate::bytes::{get_u32, set_u32};
use crate::error::{Header, Result};
use crate::field_macros::header_view;

/// Length of the FETH in bytes.
pub const LEN: usize = 4;

mod field {
    pub const WORD: usize = 0;

    pub const RESV26_SHIFT: u32 = 6;
    pub const RESV26_MASK: u32 = 0xFFFF_FFC0;
    pub const SEL_SHIFT: u32 = 4;
    pub const SEL_MASK: u32 = 0x0000_0030;
    pub const PLT_MASK: u32 = 0x0000_000F;
}

header_view! {
    /// Zero-copy view of a FETH at the start of `buffer`.
    pub struct FethView(Header::Feth, "FETH", LEN);
}

impl<T: AsRef<[u8]>> FethView<T> {
    fn word(&self) -> u32 {
        get_u32(self.b(), field::WORD)
    }

    /// Reserved bits 31:6, right-aligned (26 bits).
    pub fn resv26(&self) -> u32 {
        (self.word() & field::RESV26_MASK) >> field::RESV26_SHIFT
    }
    /// SEL: selectivity level, 2 bits.
    pub fn sel(&self) -> u8 {
        ((self.word() & field::SEL_MASK) >> field::SEL_SHIFT) as u8
    }
    /// PLT: placement type, 4 bits.
    pub fn plt(&self) -> u8 {
        (self.word() & field::PLT_MASK) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FethView<T> {
    fn set_word(&mut self, mask: u32, bits: u32) {
        let w = self.word();
        set_u32(self.bm(), field::WORD, (w & !mask) | (bits & mask));
    }

    /// Sets the reserved bits 31:6 (low 26 bits of `v`).
    pub fn set_resv26(&mut self, v: u32) {
        self.set_word(field::RESV26_MASK, v << field::RESV26_SHIFT);
    }
    /// Sets SEL (low 2 bits of `v`).
    pub fn set_sel(&mut self, v: u8) {
        self.set_word(field::SEL_MASK, u32::from(v) << field::SEL_SHIFT);
    }
    /// Sets PLT (low 4 bits of `v`).
    pub fn set_plt(&mut self, v: u8) {
        self.set_word(field::PLT_MASK, u32::from(v));
    }
}

/// A parsed FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Feth {
    /// Reserved bits 31:6 (26 bits); zero on send, ignored on receipt.
    pub resv26: u32,
    /// SEL: selectivity level, 2 bits.
    pub sel: u8,
    /// PLT: placement type, 4 bits.
    pub plt: u8,
}

impl Feth {
    pub const LEN: usize = LEN;

    /// Parses the FETH at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Feth> {
        let v = FethView::new_checked(buf)?;
        Ok(Feth {
            resv26: v.resv26(),
            sel: v.sel(),
            plt: v.plt(),
        })
    }

    /// Writes the FETH to the start of `buf`; returns the bytes written. Fields wider than the
    /// wire field keep their low bits.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut v = FethView::new_checked(buf)?;
        v.set_resv26(self.resv26);
        v.set_sel(self.sel);
        v.set_plt(self.plt);
        Ok(LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_macros::header_tests;
    use proptest::prelude::*;

    header_tests!(Feth, Header::Feth);

    // The test vectors hold no FLUSH (rxe 6.1 predates it); these bytes follow the layout:
    // reserved 0, SEL 1, PLT 2.
    const FETH: [u8; 4] = [0x00, 0x00, 0x00, 0x12];

    #[test]
    fn parse_known_header() {
        let h = Feth::parse(&FETH).unwrap();
        assert_eq!(
            h,
            Feth {
                resv26: 0,
                sel: 1,
                plt: 2
            }
        );
        let mut out = [0u8; 4];
        assert_eq!(h.emit(&mut out), Ok(4));
        assert_eq!(out, FETH);
    }

    #[test]
    fn field_boundaries() {
        let h = Feth::parse(&[0x80, 0x00, 0x00, 0x6F]).unwrap();
        assert_eq!((h.resv26, h.sel, h.plt), (0x200_0001, 2, 0xF));
        let wide = Feth {
            resv26: 0xFFFF_FFFF,
            sel: 0xFC,
            plt: 0xF0,
        };
        let mut out = [0u8; 4];
        wide.emit(&mut out).unwrap();
        assert_eq!(out, [0xFF, 0xFF, 0xFF, 0xC0]);
    }

    proptest! {
        #[test]
        fn fields_round_trip(resv26 in 0u32..1 << 26, sel in 0u8..4, plt in 0u8..16) {
            let h = Feth { resv26, sel, plt };
            let mut out = [0u8; LEN];
            h.emit(&mut out).unwrap();
            prop_assert_eq!(Feth::parse(&out), Ok(h));
        }
    }
}
