//! Fuzzes `softib_wire::rdeth::Rdeth::parse`: no panic; an accepted header re-emits to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softib_fuzz::check_header::<softib_wire::rdeth::Rdeth>(data));
