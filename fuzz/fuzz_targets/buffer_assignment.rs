//! Fuzz target: the buffer-assignment parser and the memory_analysis() totals never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use memwatch_analysis::xla::{buffer_assignment, memory_totals};

fuzz_target!(|data: &[u8]| {
    if let Ok(ba) = buffer_assignment::parse_buffer_assignment(data, std::path::Path::new("fuzz")) {
        let _ = memory_totals(&ba);
    }
});
