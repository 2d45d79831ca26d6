//! Damaged and foreign files: a truncated capture keeps its whole frames and reports
//! the loss, a corrupt frame is skipped, a file that is no capture is an error naming
//! it, an empty capture is valid.

use std::path::Path;

use memwatch_analysis::capture::*;
use memwatch_wire::*;

use crate::fixtures::*;

#[test]
fn truncated_capture_keeps_whole_frames_and_reports_loss() {
    let full = encode(&scenario());
    let cut = full.len() - 5; // inside the last process_end frame
    let l = load(&full[..cut]);
    assert_eq!(l.damage.len(), 1);
    assert_eq!(l.damage[0].kind, "stream ends inside a frame (cut off)");
    let last_frame_len = {
        let mut v = Vec::new();
        encode_record(scenario().last().unwrap(), &mut v).unwrap();
        v.len() as u64
    };
    assert_eq!(l.damage[0].bytes_lost, last_frame_len - 5);
    assert_eq!(l.damage[0].offset, full.len() as u64 - last_frame_len);
    let r = analyze(l, &ReportOptions::default());
    // Process 10's end was lost; everything else is there.
    assert_eq!(r.processes[0].exit_code, None);
    assert_eq!(r.processes[0].peak_bytes, 2800);
    assert_eq!(r.processes[1].exit_code, Some(0));
}

#[test]
fn corrupt_frame_is_skipped_and_the_rest_survives() {
    let recs = scenario();
    let mut bytes = encode(&recs);
    let before = encode(&recs[..5]).len(); // offset of the thread-1 events frame
    bytes[before + 30] ^= 0xff;
    let r = report(&bytes);
    assert_eq!(r.damage.len(), 1);
    assert_eq!(r.damage[0].offset, before as u64);
    assert_eq!(r.damage[0].kind, "checksum mismatch");
    let lost = encode(&recs[..6]).len() - before;
    assert_eq!(r.damage[0].bytes_lost, lost as u64);
    // Thread 1's events are gone: device 0 of process 10 has none; device 1 is intact.
    let a = &r.processes[0];
    assert_eq!(a.devices[0].alloc_count, 0);
    assert_eq!(a.devices[1].peak_bytes, 2000);
    assert_eq!(a.exit_code, Some(3));
}

#[test]
fn not_a_capture_is_an_error_naming_the_file() {
    let err = load_reader(
        &b"{\"op\":\"alloc\"}\n"[..],
        Path::new("x.jsonl"),
        &mut |_| {},
    )
    .err()
    .unwrap();
    assert!(matches!(err, CaptureError::NotACapture { .. }));
    let msg = err.to_string();
    assert!(msg.starts_with("x.jsonl: not a memwatch capture"), "{msg}");
    let err = load_path(Path::new("/nonexistent/y.mwcap"), &mut |_| {})
        .err()
        .unwrap();
    assert!(err.to_string().contains("/nonexistent/y.mwcap"));
}

#[test]
fn empty_capture_is_valid() {
    let r = report(&encode(&[]));
    assert!(r.processes.is_empty());
    assert!(r.damage.is_empty());
    assert_eq!(r.events, 0);
}
