//! Fuzz target: the live-range and total-bytes parsers never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use memwatch_analysis::xla::live_range;

fuzz_target!(|data: &[u8]| {
    let p = std::path::Path::new("fuzz");
    let _ = live_range::parse_live_range(data, p);
    let _ = live_range::parse_total_bytes(data, p);
});
