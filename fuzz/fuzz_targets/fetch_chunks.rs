//! libFuzzer target `fetch_chunks`: see `waste_e2e::fuzz::fetch_chunks`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| waste_e2e::fuzz::fetch_chunks(data));
