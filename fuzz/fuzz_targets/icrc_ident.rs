//! Fuzzes the receive side's IPv4 Identification solve over a whole frame
//! (`softib_wire::icrc::solve_roce_v4_frame_ident`, which writes the masked bits into the frame
//! for its ICRC pass and puts them back) and its form that keeps the pass over the headers
//! (`solve_roce_v4_frame_ident_cached`, fresh and with what it kept): no panic; the frame is left
//! exactly as it was; a guess (right, wrong, or made for another size) and what the cache
//! holds never change the answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_wire::icrc::{
    solve_roce_v4_frame_ident, solve_roce_v4_frame_ident_cached, Ipv4IdentShift, V4FramePrefix,
};

fuzz_target!(|data: &[u8]| {
    let mut frame = data.to_vec();
    let plain = solve_roce_v4_frame_ident(&mut frame, None);
    assert_eq!(frame, data, "the solve left the frame changed");
    let mut cache = V4FramePrefix::default();
    for _ in 0..2 {
        let cached = solve_roce_v4_frame_ident_cached(&mut frame, &mut cache, || None);
        assert_eq!(frame, data, "the cached solve left the frame changed");
        assert_eq!(cached, plain, "the cache changed the answer");
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
