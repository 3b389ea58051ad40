//! Fuzzes `TransportPacket::parse` (BTH … pad, no ICRC): no panic; an accepted packet re-emits
//! to the same bytes and parses back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_wire::transport::{TransportHeaders, TransportPacket, MAX_PAYLOAD};

fuzz_target!(|data: &[u8]| {
    let headers = TransportHeaders::parse(data);
    let Ok(p) = TransportPacket::parse(data) else {
        return;
    };

    // The packet's headers are what the header parser alone finds, and they are the set the
    // opcode table lists.
    let (h, info, hlen) = headers.expect("TransportHeaders::parse failed on an accepted packet");
    assert_eq!(h, p.headers);
    assert_eq!(p.headers.check_header_set().ok(), Some(info));
    assert_eq!(p.headers.header_len(), Ok(hlen));
    assert_eq!(p.pad.len(), usize::from(p.headers.bth.pad_cnt));
    assert!(p.payload.len() <= MAX_PAYLOAD);
    assert!(info.payload || (p.payload.is_empty() && p.pad.is_empty()));
    assert_eq!(
        (hlen + p.payload.len() + p.pad.len()) % 4,
        0,
        "not a whole number of words"
    );

    let len = p.wire_len().expect("wire_len of a parsed packet");
    let out = softib_fuzz::check_reemit(data, len, |b| p.emit(b), "TransportPacket");
    assert_eq!(TransportPacket::parse(&out), Ok(p));

    // Rebuilding around the same payload gives the pad the parser saw (when the pad is zero).
    if info.payload && p.pad.iter().all(|&b| b == 0) {
        let rebuilt = TransportPacket::new(p.headers, p.payload);
        assert_eq!(rebuilt, p);
    }
});
