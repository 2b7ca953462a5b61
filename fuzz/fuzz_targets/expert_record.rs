//! libFuzzer target `expert_record`: see `waste_e2e::fuzz::expert_record`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| waste_e2e::fuzz::expert_record(data));
