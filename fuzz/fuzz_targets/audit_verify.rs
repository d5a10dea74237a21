//! Fuzz target: see `spawnd::fuzzing::audit_verify` for the input and the properties.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| spawnd::fuzzing::audit_verify(data));
