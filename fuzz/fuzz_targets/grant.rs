//! Fuzz target: see `spawnd::fuzzing::grant` for the input and the properties.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| spawnd::fuzzing::grant(data));
