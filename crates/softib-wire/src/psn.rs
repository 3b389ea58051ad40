//! 24-bit transport numbers: packet sequence numbers, queue pair numbers, message sequence numbers.
//!
//! PSN arithmetic is modulo 2^24 (IBA 9.7.1). Comparisons are only meaningful inside a window of
//! 2^23, which is why [`Psn::distance`] returns a signed value in `-2^23 .. 2^23`.

use core::fmt;

/// Mask of a 24-bit field.
pub const MASK24: u32 = 0x00FF_FFFF;

macro_rules! u24_newtype {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        pub struct $name(u32);

        impl $name {
            /// Largest representable value, 2^24 - 1.
            pub const MAX: $name = $name(MASK24);
            /// Builds a value, keeping the low 24 bits.
            #[inline]
            pub const fn new(v: u32) -> Self {
                $name(v & MASK24)
            }
            /// The raw 24-bit value.
            #[inline]
            pub const fn value(self) -> u32 {
                self.0
            }
        }

        impl From<$name> for u32 {
            #[inline]
            fn from(v: $name) -> u32 {
                v.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#08x})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#08x}", self.0)
            }
        }
    };
}

u24_newtype!(
    /// Packet sequence number (BTH:PSN), 24 bits, wraps modulo 2^24.
    Psn
);
u24_newtype!(
    /// Queue pair number (BTH:DestQP, DETH:SrcQP), 24 bits.
    Qpn
);
u24_newtype!(
    /// Message sequence number (AETH:MSN), 24 bits, wraps modulo 2^24.
    Msn
);
u24_newtype!(
    /// End-to-end context number (RDETH:EECnxt), 24 bits.
    Eecn
);
u24_newtype!(
    /// XRC shared receive queue number (XRCETH:XRCSRQ), 24 bits.
    XrcSrqn
);

impl Psn {
    /// Half the PSN space: the size of the valid (and of the invalid) region.
    pub const HALF: u32 = 1 << 23;

    /// `self + n` modulo 2^24.
    #[inline]
    pub const fn add(self, n: u32) -> Psn {
        Psn((self.0.wrapping_add(n)) & MASK24)
    }

    /// `self - n` modulo 2^24.
    #[inline]
    pub const fn sub(self, n: u32) -> Psn {
        Psn((self.0.wrapping_sub(n)) & MASK24)
    }

    /// The next PSN.
    #[inline]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Signed distance `self - other` folded into `-2^23 ..= 2^23 - 1`.
    #[inline]
    pub const fn distance(self, other: Psn) -> i32 {
        let d = self.0.wrapping_sub(other.0) & MASK24;
        // Sign-extend from 24 bits.
        ((d << 8) as i32) >> 8
    }

    /// True when `self` comes before `other` in the 2^23 window.
    #[inline]
    pub const fn before(self, other: Psn) -> bool {
        self.distance(other) < 0
    }
}

impl Msn {
    /// `self + n` modulo 2^24.
    #[inline]
    pub const fn add(self, n: u32) -> Msn {
        Msn((self.0.wrapping_add(n)) & MASK24)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps() {
        assert_eq!(Psn::MAX.next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::MAX);
        assert_eq!(Psn::new(5).distance(Psn::MAX), 6);
        assert_eq!(Psn::MAX.distance(Psn::new(5)), -6);
        assert!(Psn::MAX.before(Psn::new(0)));
        assert_eq!(
            Psn::new(Psn::HALF).distance(Psn::new(0)),
            -(Psn::HALF as i32)
        );
        assert_eq!(
            Psn::new(Psn::HALF - 1).distance(Psn::new(0)),
            Psn::HALF as i32 - 1
        );
    }

    #[test]
    fn new_masks_to_24_bits() {
        assert_eq!(Qpn::new(0x1234_5678).value(), 0x34_5678);
    }
}
