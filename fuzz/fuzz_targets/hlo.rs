//! Fuzz target: the HLO text parser never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = memwatch_analysis::xla::hlo::parse_hlo(data, std::path::Path::new("fuzz"));
});
