//! Fuzzes `NativePacket::parse` (LRH first, VCRC last): no panic; an accepted packet re-emits
//! byte for byte and parses back to the same value; the CRC checks agree with parse_verified.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_wire::native::NativePacket;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = NativePacket::parse(data) else {
        return;
    };

    let icrc_ok = p.icrc_ok();
    let vcrc_ok = p.vcrc_ok();
    assert_eq!(p.computed_icrc().is_some(), p.icrc().is_some());
    assert_eq!(
        NativePacket::parse_verified(data).is_ok(),
        icrc_ok && vcrc_ok
    );
    assert_eq!(
        usize::from(p.lrh.pkt_len) * 4 + 2,
        data.len(),
        "LRH:PktLen disagrees"
    );

    let len = data.len();
    let out = softib_fuzz::check_reemit(data, len, |b| p.emit(b), "NativePacket");
    let again = NativePacket::parse(&out).expect("re-emitted packet does not parse");
    assert_eq!(again, p);
    assert_eq!((again.icrc_ok(), again.vcrc_ok()), (icrc_ok, vcrc_ok));
});
