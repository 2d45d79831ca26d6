//! Fuzz target: the log parser never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;
use memwatch_analysis::log::{parse_log, LogReport};

fuzz_target!(|data: &[u8]| {
    let mut r = LogReport::default();
    let _ = parse_log(data, std::path::Path::new("fuzz"), &mut r);
});
