//! Fuzzes `RocePacket::parse` (a whole Ethernet frame): no panic; an accepted frame re-emits
//! byte for byte, parses back to the same value, and is classified as RoCEv2.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_wire::roce::{classify, FrameClass, RocePacket};

fuzz_target!(|data: &[u8]| {
    let class = classify(data);
    let Ok(p) = RocePacket::parse(data) else {
        return;
    };
    assert_eq!(
        class,
        FrameClass::RoceV2,
        "a frame RocePacket accepts is not classified RoCEv2"
    );

    // The ICRC check must not panic, and parse_verified agrees with it.
    let ok = p.icrc_ok();
    assert_eq!(RocePacket::parse_verified(data).is_ok(), ok);

    let len = p.wire_len().expect("wire_len of a parsed frame");
    let out = softib_fuzz::check_reemit(data, len, |b| p.emit(b), "RocePacket");
    let again = RocePacket::parse(&out).expect("re-emitted frame does not parse");
    assert_eq!(again, p);
    assert_eq!(again.icrc_ok(), ok);
});
