//! Fuzzes `softib_wire::cm::CmMad::parse` (and the MAD common header, and a REQ's IP CM
//! header): no panic; an accepted MAD re-emits to a stable form with the same header and
//! message.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| softib_fuzz::check_cm_mad(data));
