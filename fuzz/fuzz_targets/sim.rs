#![no_main]
//! See `warden_sim::fuzzing::sim` for the property this target checks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_sim::fuzzing::sim(data));
