//! Fuzzes `RocePacket::parse` (a whole Ethernet frame): no panic; an accepted frame re-emits
//! byte for byte, parses back to the same value, and is classified as RoCEv2. The express
//! read (`RocePacket::parse_express`) takes only frames the parse accepts, and reads them as
//! it does; the express read of their UDP datagram (`ExpressPacket::parse_datagram`) reads
//! the same packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_wire::roce::{classify, ExpressPacket, FrameClass, IpHeader, RocePacket};

fuzz_target!(|data: &[u8]| {
    let class = classify(data);
    let express = RocePacket::parse_express(data);
    let Ok(p) = RocePacket::parse(data) else {
        assert!(express.is_none(), "parse_express read a frame the parse refuses");
        return;
    };
    if let Some(e) = express {
        let x = e.packet;
        let h = &p.transport.headers;
        assert_eq!(
            (x.bth, x.reth, x.immdt, x.aeth, x.payload),
            (h.bth, h.reth, h.immdt, h.aeth, p.transport.payload)
        );
        let IpHeader::V4(ip) = &p.ip else {
            panic!("parse_express read a frame that is not IPv4");
        };
        assert_eq!((x.src, x.dst), (ip.src, ip.dst));
        assert!(p.eth.vlan.is_none() && p.ip_options.is_empty());
        assert_eq!(e.icrc_ok(), p.icrc_ok());
        // The same packet read from the frame's UDP datagram where it lies.
        // (An express frame is untagged IPv4 without options: 42 bytes of headers.)
        let datagram = &data[42..34 + usize::from(p.udp.length)];
        assert_eq!(ExpressPacket::parse_datagram(x.src, x.dst, datagram), Some(x));
    }
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
