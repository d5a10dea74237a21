//! Fuzz target: see `spawnd::fuzzing::dns_query` for the input and the properties.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| spawnd::fuzzing::dns_query(data));
