//! Fuzz target: the live-range, total-bytes and memory-usage-report parsers never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use memwatch_analysis::xla::live_range;

fuzz_target!(|data: &[u8]| {
    let p = std::path::Path::new("fuzz");
    let _ = live_range::parse_live_range(data, p);
    let _ = live_range::parse_total_bytes(data, p);
    let _ = memwatch_analysis::xla::usage_report::parse_usage_report(data, p);
});
