//! Fuzz target: see `spawnd::fuzzing::client_hello` for the input and the properties.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| spawnd::fuzzing::client_hello(data));
