//! libFuzzer target `store_index`: see `waste_e2e::fuzz::store_index`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| waste_e2e::fuzz::store_index(data));
