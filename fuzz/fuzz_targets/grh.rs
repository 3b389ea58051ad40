//! Fuzzes `softib_wire::grh::Grh::parse`: no panic; an accepted header re-emits to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softib_fuzz::check_header::<softib_wire::grh::Grh>(data));
