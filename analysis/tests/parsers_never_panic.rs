//! Arbitrary bytes never panic any parser (they return Ok or a ParseError naming a line).
//! Stands in for a cargo-fuzz run in CI (see fuzz/ for the libFuzzer targets).

use memwatch_analysis::log::{parse_log, LogReport};
use memwatch_analysis::xla::{buffer_assignment, hlo, live_range};
use proptest::prelude::*;
use std::path::Path;

/// Bytes biased towards the formats' own tokens so the parsers get past their headers.
fn inputs() -> impl Strategy<Value = Vec<u8>> {
    let tokens = prop::sample::select(vec![
        "BufferAssignment:\n", "allocation 0: size 8, parameter 1, shape |f32[2]| at ShapeIndex {}, maybe-live-out:\n",
        " value: <1 a{0} @0> (size=4,offset=0): f32[1]{0}\n", "HloModule m\n", "ENTRY %e (a: f32[]) -> f32[] {\n",
        "  %a = f32[] parameter(0), metadata={op_name=\"x\\\"\" stack_frame_id=1}\n", "}\n", "StackFrames\n1 {file_location_id=1}\n",
        "HloLiveRange (max 3):\n", "  BufferLiveRange:\n", "    a{}:0-2\n", "  Live ranges at 1 (peak):\n", "    a{}: 4 bytes (cumulative: 4 bytes)\n",
        "W1121 23:04:04.075047 2389 bfc_allocator.cc:598] Allocator (G) ran out of memory trying to allocate 3.25GiB (rounded to 3) from the lower end\n",
        "I1 00:00:00.1 1 b.cc:1] InUse at ff of size 256 tag lower allocation_annotation xla.execute{executable=j} next 1\n",
        "Stats: \n", "Limit: 3.50GiB\n", "│ AllocatorStats\n", "│ bytes_limit: 12\n", "MEMORY_STATS {'bytes_limit': 1}\n", "Memory Space: default (color=0)\n", "  1.0KiB(1%); 1.0KiB; 0; 1; f32[2]\n", "  cumulative_size; size; offset; used_by_n_values; shapes_list\n",
        "(", ")", "{", "}", "\"", "\\", "|", ":", ",", " ", "\n", "\u{ff}", "\0",
    ]);
    prop::collection::vec(
        prop_oneof![
            tokens.prop_map(|t| t.as_bytes().to_vec()),
            prop::collection::vec(any::<u8>(), 0..16)
        ],
        0..40,
    )
    .prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    #[test]
    fn no_parser_panics(data in inputs()) {
        let p = Path::new("fuzz");
        let _ = buffer_assignment::parse_buffer_assignment(&data[..], p);
        let _ = hlo::parse_hlo(&data[..], p);
        let _ = live_range::parse_live_range(&data[..], p);
        let _ = live_range::parse_total_bytes(&data[..], p);
        let _ = memwatch_analysis::xla::usage_report::parse_usage_report(&data[..], p);
        let mut r = LogReport::default();
        let _ = parse_log(&data[..], p, &mut r);
        if let Ok(ba) = buffer_assignment::parse_buffer_assignment(&data[..], p) {
            let _ = memwatch_analysis::xla::memory_totals(&ba);
        }
    }
}
