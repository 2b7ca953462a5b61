//! libFuzzer target `safetensors`: see `waste_e2e::fuzz::safetensors`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| waste_e2e::fuzz::safetensors(data));
