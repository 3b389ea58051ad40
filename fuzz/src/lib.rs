//! Properties shared by softib's fuzz targets.
//!
//! Every target feeds untrusted bytes to one softib-wire parser. A parser must never panic
//! (a panic aborts the fuzzer and is reported as a crash). When it accepts the input, re-emitting
//! what it parsed must give back exactly the bytes it consumed, and parsing those bytes again must
//! give the same value.

use core::fmt::Debug;

use softib_wire::Result;

/// Bytes written before `emit` so that an emitter which relies on a zeroed buffer (for example
/// by OR-ing bits in) shows up as a mismatch.
const GARBAGE: u8 = 0xA5;

/// Largest header of the crate (IPv4 with 40 bytes of options) with room to spare.
const HEADER_BUF: usize = 128;

/// A fixed-position header: a plain struct with `parse` and `emit`.
pub trait WireHeader: Sized + Copy + PartialEq + Debug {
    fn parse(buf: &[u8]) -> Result<Self>;
    fn emit(&self, buf: &mut [u8]) -> Result<usize>;
    /// Bytes of the header that `emit` leaves to the caller, as found in `input` right after the
    /// `emitted` bytes (IPv4 options). Empty for headers the struct holds whole.
    fn caller_tail<'a>(&self, _input: &'a [u8], _emitted: usize) -> &'a [u8] {
        &[]
    }
}

macro_rules! wire_header {
    ($($t:path),* $(,)?) => {$(
        impl WireHeader for $t {
            fn parse(buf: &[u8]) -> Result<Self> {
                <$t>::parse(buf)
            }
            fn emit(&self, buf: &mut [u8]) -> Result<usize> {
                <$t>::emit(self, buf)
            }
        }
    )*};
}

wire_header!(
    softib_wire::lrh::Lrh,
    softib_wire::grh::Grh,
    softib_wire::bth::Bth,
    softib_wire::rdeth::Rdeth,
    softib_wire::deth::Deth,
    softib_wire::xrceth::Xrceth,
    softib_wire::feth::Feth,
    softib_wire::reth::Reth,
    softib_wire::atomic_eth::AtomicEth,
    softib_wire::aeth::Aeth,
    softib_wire::atomic_ack_eth::AtomicAckEth,
    softib_wire::immdt::ImmDt,
    softib_wire::ieth::Ieth,
    softib_wire::rwh::Rwh,
    softib_wire::ethernet::Ethernet,
    softib_wire::udp::Udp,
);

/// IPv4 options are not part of the plain struct: `emit` writes the 20-byte fixed header and the
/// caller writes the IHL*4 - 20 option bytes after it.
impl WireHeader for softib_wire::ipv4::Ipv4 {
    fn parse(buf: &[u8]) -> Result<Self> {
        softib_wire::ipv4::Ipv4::parse(buf)
    }
    fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        softib_wire::ipv4::Ipv4::emit(self, buf)
    }
    fn caller_tail<'a>(&self, input: &'a [u8], emitted: usize) -> &'a [u8] {
        input.get(emitted..self.header_len()).unwrap_or(&[])
    }
}

/// parse → emit → parse for one header at the start of `data`.
pub fn check_header<H: WireHeader>(data: &[u8]) {
    let Ok(h) = H::parse(data) else { return };

    let mut buf = [GARBAGE; HEADER_BUF];
    let n = h.emit(&mut buf).expect("emit of a parsed header failed");
    assert!(n > 0, "{h:?} emitted no bytes");
    assert!(
        n <= data.len(),
        "{h:?} emitted {n} bytes from a {}-byte input",
        data.len()
    );
    assert_eq!(
        &buf[..n],
        &data[..n],
        "re-emitted {h:?} differs from its input"
    );
    let tail = h.caller_tail(data, n);
    let whole = n + tail.len();
    buf[n..whole].copy_from_slice(tail);

    // Trailing bytes are ignored, and the emitted bytes parse back to the same value.
    assert_eq!(
        H::parse(&data[..whole]),
        Ok(h),
        "parse depends on bytes after the header"
    );
    assert_eq!(
        H::parse(&buf[..whole]),
        Ok(h),
        "re-parse of the emitted header differs"
    );

    // A short buffer is refused, not written past or panicked on.
    for short in 0..n {
        assert!(
            h.emit(&mut buf[..short]).is_err(),
            "{h:?} emitted into {short} bytes, needs {n}"
        );
    }
    for short in 0..whole {
        assert!(
            H::parse(&data[..short]).is_err(),
            "{h:?} parsed from {short} of {whole} bytes"
        );
    }
}

/// Emits with `emit` into a buffer of exactly `len` bytes (pre-filled with garbage), checks that
/// every byte matches `data`, and that one byte less is refused.
pub fn check_reemit(
    data: &[u8],
    len: usize,
    emit: impl Fn(&mut [u8]) -> Result<usize>,
    what: &str,
) -> Vec<u8> {
    assert_eq!(
        len,
        data.len(),
        "{what}: wire_len() disagrees with the parsed input length"
    );
    let mut out = vec![GARBAGE; len];
    let n =
        emit(&mut out).unwrap_or_else(|e| panic!("{what}: emit of a parsed packet failed: {e}"));
    assert_eq!(
        n, len,
        "{what}: emit wrote {n} bytes, wire_len() says {len}"
    );
    if out != data {
        let at = out.iter().zip(data).position(|(a, b)| a != b).unwrap_or(0);
        panic!("{what}: re-emitted bytes differ from the input, first at offset {at}");
    }
    if len > 0 {
        let mut short = vec![GARBAGE; len - 1];
        assert!(
            emit(&mut short).is_err(),
            "{what}: emit into {} of {len} bytes succeeded",
            len - 1
        );
    }
    out
}

/// A CM MAD (`softib_wire::cm::CmMad`): never a panic; an accepted MAD re-emits to the same
/// common header, parses again to the same message, and differs from the input only in bits
/// its layout reserves (re-emitting the re-emitted bytes changes nothing).
pub fn check_cm_mad(data: &[u8]) {
    use softib_wire::{cm::CmMad, mad};
    let _ = softib_wire::mad::MadHdr::parse(data);
    let Ok(m) = CmMad::parse(data) else {
        return;
    };
    // A REQ's private data may open with rdma_cm's IP CM header: it parses or is refused, and
    // what parses re-emits to the same 36 bytes.
    if let softib_wire::cm::CmMessage::Req(req) = &m.msg {
        if let Ok(h) = softib_wire::cm::IpCmHdr::parse(&req.private_data) {
            let mut b = [GARBAGE; softib_wire::cm::IpCmHdr::LEN];
            h.emit(&mut b).unwrap();
            // Byte 1's low nibble is reserved: emit writes it zero.
            assert_eq!(b[..2], [req.private_data[0], req.private_data[1] & 0xf0]);
            assert_eq!(b[2..], req.private_data[2..softib_wire::cm::IpCmHdr::LEN]);
        }
    }
    let mut out = [GARBAGE; mad::MAD_LEN];
    assert_eq!(m.emit(&mut out), Ok(mad::MAD_LEN));
    assert_eq!(out[..mad::LEN], data[..mad::LEN], "common header");
    let again = CmMad::parse(&out).expect("re-emitted MAD parses");
    assert_eq!(again, m);
    let mut out2 = [GARBAGE; mad::MAD_LEN];
    again.emit(&mut out2).unwrap();
    assert_eq!(out2, out);
}
