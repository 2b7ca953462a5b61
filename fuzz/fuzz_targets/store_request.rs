//! libFuzzer target `store_request`: see `waste_e2e::fuzz::store_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| waste_e2e::fuzz::store_request(data));
