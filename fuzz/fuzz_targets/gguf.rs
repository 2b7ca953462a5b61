//! libFuzzer target `gguf`: see `waste_e2e::fuzz::gguf`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| waste_e2e::fuzz::gguf(data));
