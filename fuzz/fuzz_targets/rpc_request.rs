//! Fuzz target: see `spawnd::fuzzing::rpc_request` for the input and the properties.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| spawnd::fuzzing::rpc_request(data));
