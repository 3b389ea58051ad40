//! Fuzzes the receive side's IPv4 Identification solve over a whole frame
//! (`softib_wire::icrc::solve_roce_v4_frame_ident`, which writes the masked bits into the frame
//! for its ICRC pass and puts them back) and over the UDP datagram alone after a pass over its
//! headers (`solve_roce_v4_udp_ident`, as the UDP runtime calls it): no panic; the frame
//! is left exactly as it was; a guess (right, wrong, or made for another size) never changes
//! the answer; where the frame has the layout, both solves answer alike.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_wire::icrc::{
    solve_roce_v4_frame_ident, solve_roce_v4_udp_ident, v4_headers_pass, Ipv4IdentShift,
};

fuzz_target!(|data: &[u8]| {
    let mut frame = data.to_vec();
    let plain = solve_roce_v4_frame_ident(&mut frame, None);
    assert_eq!(frame, data, "the solve left the frame changed");
    // Ethernet 14, IPv4 20 (at 14), the UDP datagram from 34 to the end its length says.
    if let (Some(ip), Some(udp)) = (
        frame.get(14..34).and_then(|b| <&[u8; 20]>::try_from(b).ok()),
        frame.get(34..42).and_then(|b| <&[u8; 8]>::try_from(b).ok()),
    ) {
        let headers = v4_headers_pass(ip, udp);
        let given = u16::from_be_bytes([ip[4], ip[5]]);
        let end = 34 + usize::from(u16::from_be_bytes([udp[4], udp[5]]));
        let layout = frame[12..14] == [0x08, 0x00] && ip[0] == 0x45;
        if let Some(datagram) = frame.get_mut(34..end) {
            let alone = solve_roce_v4_udp_ident(&headers, given, datagram, || None);
            assert_eq!(frame, data, "the datagram solve left the frame changed");
            if layout {
                assert_eq!(alone.ok(), plain.as_ref().ok().copied(), "the datagram solve answered otherwise");
            }
        }
    }
    // UDP payload length of a plain layout (Ethernet 14 + IPv4 20 + UDP 8), and a guess taken
    // from the input.
    let payload = data.len().saturating_sub(42);
    let guess = u16::from_le_bytes([
        data.first().copied().unwrap_or(0),
        data.get(1).copied().unwrap_or(0),
    ]);
    for len in [payload, payload + 4] {
        for max in [0u8, 63, 255] {
            let deltas = Ipv4IdentShift::new(20, len).deltas(max);
            let hinted = solve_roce_v4_frame_ident(&mut frame, Some((&deltas, guess)));
            assert_eq!(frame, data, "the hinted solve left the frame changed");
            assert_eq!(hinted, plain, "a guess changed the answer");
        }
    }
});
