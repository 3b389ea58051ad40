//! The parts every header module shares, written once.
//!
//! - `header_view!` declares a header's zero-copy view (`XxxView<T: AsRef<[u8]>>`) with
//!   `new_unchecked`, `new_checked`, `check_len` and `into_inner`, and the private buffer
//!   accessors `b()` / `bm()` the module's getters and setters use. Headers with bit fields
//!   (LRH, FETH) use it alone and write their accessors, struct, `parse` and `emit` by hand.
//! - `be_fields_header!` builds a whole header whose fields are big-endian values on whole
//!   bytes (RDETH, XRCETH, DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, RWH): the
//!   view with one getter and one setter per field, and the plain struct with `LEN`, `parse`
//!   and `emit`. Each field is read and written through [`WireField`].
//! - `header_tests!` (tests only) adds the tests every header shares: any `LEN` bytes parse and
//!   re-emit byte-identically, a short buffer is `Truncated` for both `parse` and `emit`, and
//!   any slice either parses or is `Truncated`.
//!
//! The invoking module keeps what is its own: the layout diagram, `pub const LEN`, `mod field`
//! with the byte offsets, and the docs of the types and fields.

use crate::bytes::{get_u16, get_u24, get_u32, get_u64, set_u16, set_u24, set_u32, set_u64};
use crate::psn::{Eecn, Msn, Psn, Qpn, XrcSrqn};

/// A header field stored big-endian on whole bytes.
pub(crate) trait WireField: Sized {
    /// Reads the field that starts at byte `at` of `b`.
    fn read(b: &[u8], at: usize) -> Self;
    /// Writes the field so that it starts at byte `at` of `b`.
    fn write(self, b: &mut [u8], at: usize);
}

impl WireField for u8 {
    #[inline]
    fn read(b: &[u8], at: usize) -> u8 {
        b[at]
    }
    #[inline]
    fn write(self, b: &mut [u8], at: usize) {
        b[at] = self;
    }
}

/// Integers wider than a byte, through the `bytes` helpers.
macro_rules! int_field {
    ($($t:ty: $get:ident, $set:ident;)+) => {$(
        impl WireField for $t {
            #[inline]
            fn read(b: &[u8], at: usize) -> $t {
                $get(b, at)
            }
            #[inline]
            fn write(self, b: &mut [u8], at: usize) {
                $set(b, at, self)
            }
        }
    )+};
}

int_field! {
    u16: get_u16, set_u16;
    u32: get_u32, set_u32;
    u64: get_u64, set_u64;
}

/// The 24-bit transport numbers, stored in three bytes.
macro_rules! u24_field {
    ($($t:ty),+) => {$(
        impl WireField for $t {
            #[inline]
            fn read(b: &[u8], at: usize) -> $t {
                <$t>::new(get_u24(b, at))
            }
            #[inline]
            fn write(self, b: &mut [u8], at: usize) {
                set_u24(b, at, self.value())
            }
        }
    )+};
}

u24_field!(Psn, Qpn, Msn, Eecn, XrcSrqn);

/// Declares a header's zero-copy view:
///
/// ```text
/// header_view! {
///     /// Zero-copy view of an LRH at the start of `buffer`.
///     pub struct LrhView(Header::Lrh, "LRH", LEN);
/// }
/// ```
///
/// The arguments are the `Header` named in `Truncated` errors, the header's name for the docs
/// and its length in bytes.
macro_rules! header_view {
    (
        $(#[$meta:meta])*
        pub struct $view:ident($header:path, $text:literal, $len:expr);
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// Wraps `buffer` without checking its length; accessors may panic on a short buffer.
            pub const fn new_unchecked(buffer: T) -> Self {
                $view { buffer }
            }

            #[doc = concat!("Wraps `buffer` after checking it holds a whole ", $text, ".")]
            pub fn new_checked(buffer: T) -> $crate::error::Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            #[doc = concat!("Checks that the buffer holds a whole ", $text, ".")]
            pub fn check_len(&self) -> $crate::error::Result<()> {
                $crate::error::check_len($header, self.buffer.as_ref(), $len)
            }

            /// Returns the underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            fn b(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            fn bm(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}

/// Builds a header made of big-endian fields on whole bytes: its view (see `header_view!`) with
/// a getter and a setter per field, and the plain struct with `LEN`, `parse` and `emit`.
///
/// ```text
/// be_fields_header! {
///     /// Zero-copy view of an RDETH at the start of `buffer`.
///     pub struct RdethView;
///
///     /// A parsed RDETH.
///     pub struct Rdeth(Header::Rdeth, "RDETH", LEN) {
///         /// Reserved byte 0; zero on send, ignored on receipt.
///         pub resv8: u8 = field::RESV8, set_resv8;
///         /// EECnxt: the end-to-end context the packet belongs to.
///         pub eecn: Eecn = field::EECN, set_eecn;
///     }
///
///     /// Optional: more docs for `parse`.
///     fn parse;
/// }
/// ```
///
/// Each field line is `pub name: Type = byte offset, setter name;`, the type one that
/// implements [`WireField`]; its docs go on both the struct field and the view's getter. `parse`
/// and `emit` handle the fields in the order given, which is also the struct's field order.
macro_rules! be_fields_header {
    (
        $(#[$view_meta:meta])*
        pub struct $view:ident;

        $(#[$meta:meta])*
        pub struct $name:ident($header:path, $text:literal, $len:expr) {
            $(
                $(#[$field_meta:meta])*
                pub $field:ident: $ty:ty = $at:expr, $set:ident;
            )+
        }
        $(
            $(#[$parse_meta:meta])*
            fn parse;
        )?
    ) => {
        $crate::field_macros::header_view! {
            $(#[$view_meta])*
            pub struct $view($header, $text, $len);
        }

        impl<T: AsRef<[u8]>> $view<T> {
            $(
                $(#[$field_meta])*
                pub fn $field(&self) -> $ty {
                    $crate::field_macros::WireField::read(self.b(), $at)
                }
            )+
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = concat!(
                    "Sets [`", stringify!($field), "`](Self::", stringify!($field), ")."
                )]
                pub fn $set(&mut self, v: $ty) {
                    $crate::field_macros::WireField::write(v, self.bm(), $at);
                }
            )+
        }

        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name {
            $(
                $(#[$field_meta])*
                pub $field: $ty,
            )+
        }

        impl $name {
            pub const LEN: usize = $len;

            #[doc = concat!("Parses the ", $text, " at the start of `buf`.")]
            $($(#[$parse_meta])*)?
            pub fn parse(buf: &[u8]) -> $crate::error::Result<$name> {
                let v = $view::new_checked(buf)?;
                Ok($name {
                    $($field: v.$field(),)+
                })
            }

            #[doc = concat!(
                "Writes the ", $text, " to the start of `buf`; returns the bytes written."
            )]
            pub fn emit(&self, buf: &mut [u8]) -> $crate::error::Result<usize> {
                let mut v = $view::new_checked(buf)?;
                $(v.$set(self.$field);)+
                Ok($len)
            }
        }
    };
}

/// The tests every header shares, for a header struct `$name` with `LEN`, `parse`, `emit` and
/// `Default`, whose errors name `$header`. Invoked inside the module's `mod tests`.
#[cfg(test)]
macro_rules! header_tests {
    ($name:ident, $header:path) => {
        #[test]
        fn short_buffer_is_truncated() {
            let bytes = [0xA5u8; $name::LEN];
            let mut out = [0u8; $name::LEN];
            for have in 0..$name::LEN {
                let err = $crate::error::Error::Truncated {
                    header: $header,
                    need: $name::LEN,
                    have,
                };
                assert_eq!($name::parse(&bytes[..have]), Err(err));
                assert_eq!($name::default().emit(&mut out[..have]), Err(err));
            }
            assert_eq!(out, [0u8; $name::LEN], "a failed emit wrote bytes");
        }

        proptest::proptest! {
            #[test]
            fn bytes_round_trip(bytes in proptest::prelude::any::<[u8; $name::LEN]>()) {
                let h = $name::parse(&bytes).unwrap();
                let mut out = [0u8; $name::LEN];
                proptest::prop_assert_eq!(h.emit(&mut out), Ok($name::LEN));
                proptest::prop_assert_eq!(out, bytes);
            }

            #[test]
            fn parse_any_slice(
                bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2 * $name::LEN)
            ) {
                match $name::parse(&bytes) {
                    Ok(h) => {
                        proptest::prop_assert!(bytes.len() >= $name::LEN);
                        let mut out = [0u8; $name::LEN];
                        h.emit(&mut out).unwrap();
                        proptest::prop_assert_eq!(&out[..], &bytes[..$name::LEN]);
                    }
                    Err(e) => proptest::prop_assert_eq!(
                        e,
                        $crate::error::Error::Truncated {
                            header: $header,
                            need: $name::LEN,
                            have: bytes.len(),
                        }
                    ),
                }
            }
        }
    };
}

pub(crate) use be_fields_header;
pub(crate) use header_view;

#[cfg(test)]
pub(crate) use header_tests;
