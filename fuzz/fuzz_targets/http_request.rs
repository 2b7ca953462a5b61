//! libFuzzer target `http_request`: see `waste_e2e::fuzz::http_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| waste_e2e::fuzz::http_request(data));
