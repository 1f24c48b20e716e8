#![no_main]
//! See `warden_sim::fuzzing::stream` for the property this target checks (a whole simulated
//! server per input: slow; `framing` fuzzes the framing and classification directly).
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_sim::fuzzing::stream(data));
