//! Fuzz target: any bytes given to the PyTorch snapshot reader never panic it, nor the
//! replay and report of whatever it accepts, nor the capture records made from it. The
//! first byte picks the input's shape: even, the bytes are the pickle as they are; odd,
//! they follow the protocol-4 header and the opening of a real snapshot (a dict whose
//! `device_traces` list of lists is being built), so mutations reach the streaming
//! paths and the decoders of trace entries and segments.
#![no_main]
use libfuzzer_sys::fuzz_target;
use memwatch_analysis::torch::pickle::load_plain;
use memwatch_analysis::torch::{report, scan_reader, to_records, ReportOptions};
use std::path::Path;

/// `{'segments': [], 'device_traces': [[` as Python's pickler writes it.
const OPENING: &[u8] =
    b"\x80\x04}\x94(\x8c\x08segments\x94]\x94\x8c\x0ddevice_traces\x94]\x94]\x94(";

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let input: Vec<u8> = if shape % 2 == 0 {
        rest.to_vec()
    } else {
        [OPENING, rest].concat()
    };
    let _ = load_plain(&input[..]);
    if let Ok(scan) = scan_reader(&input[..], Path::new("fuzz"), input.len() as u64) {
        let _ = report(&scan, &ReportOptions::default());
        let _ = to_records::<()>(&scan, "fuzz", &mut |_| Ok(()));
    }
});
