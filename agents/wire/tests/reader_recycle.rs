//! `FrameReader::recycle`: a reader whose events buffers are handed back and decoded into
//! again reads exactly the records a reader that allocates each one reads, on real
//! recorded captures and on a stream whose events frames shrink and grow.

use memwatch_wire::reader::{FrameReader, ReadMode};
use memwatch_wire::writer::FrameWriter;
use memwatch_wire::{Event, Record};
use std::path::PathBuf;

fn read_all(bytes: &[u8], recycle: bool) -> Vec<Record> {
    let mut reader = FrameReader::new(bytes, ReadMode::Strict).expect("preamble");
    let mut out = Vec::new();
    while let Some(record) = reader.next_record().expect("frame") {
        out.push(record.clone());
        if recycle {
            reader.recycle(record);
        }
    }
    out
}

#[test]
fn recorded_captures_read_the_same_with_recycled_buffers() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/oom-corpus");
    let mut read = 0;
    for name in ["cupy_limit", "torch_fraction", "jax_prealloc_off"] {
        let path = corpus.join(name).join("capture.mwcap");
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let fresh = read_all(&bytes, false);
        assert!(
            fresh.iter().any(|r| matches!(r, Record::Events(_))),
            "{}",
            path.display()
        );
        assert_eq!(read_all(&bytes, true), fresh, "{}", path.display());
        read += 1;
    }
    assert!(read >= 2, "the corpus captures are missing");
}

#[test]
fn events_frames_that_shrink_and_grow_decode_the_same() {
    let event = |i: u64| Event {
        ts_ns: i,
        ptr: 0x7f00_0000_0000 + i * 4096,
        size: 512 + i,
        ..Event::default()
    };
    let mut w = FrameWriter::new(Vec::new()).unwrap();
    let mut next = 0u64;
    for n in [5000u64, 3, 0, 7000, 1, 4999] {
        w.write_record(&Record::Events((next..next + n).map(event).collect()))
            .unwrap();
        next += n;
        w.write_record(&Record::Marker(Default::default())).unwrap();
    }
    let bytes = w.into_inner().unwrap();
    let fresh = read_all(&bytes, false);
    assert_eq!(fresh.len(), 12);
    assert_eq!(read_all(&bytes, true), fresh);
}

/// An events frame with bytes after its events (a valid CRC over them): refused as
/// trailing bytes, whether its buffer is a recycled one or not.
#[test]
fn an_events_frame_with_trailing_bytes_is_refused_with_or_without_a_recycled_buffer() {
    let events = |n: u64| {
        Record::Events(
            (0..n)
                .map(|i| Event {
                    ts_ns: i,
                    size: 64,
                    ..Event::default()
                })
                .collect(),
        )
    };
    let mut w = FrameWriter::new(Vec::new()).unwrap();
    // A first events frame, so the second is decoded into its recycled buffer.
    w.write_record(&events(300)).unwrap();
    let mut bytes = w.into_inner().unwrap();
    let mut frame = Vec::new();
    memwatch_wire::encode_record(&events(2), &mut frame).unwrap();
    // len:u32 type payload crc:u32 -> the same with 3 more payload bytes.
    let mut body = frame[4..frame.len() - 4].to_vec();
    body.extend_from_slice(&[1, 2, 3]);
    let at = bytes.len() as u64;
    bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&body);
    bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    for recycle in [false, true] {
        let mut reader = FrameReader::new(&bytes[..], ReadMode::Strict).expect("preamble");
        let first = reader
            .next_record()
            .expect("first frame")
            .expect("a record");
        assert_eq!(first, events(300));
        if recycle {
            reader.recycle(first);
        }
        let err = reader.next_record().expect_err("trailing bytes refused");
        // The strict reader names the frame's offset and the trailing bytes.
        let what = err.to_string();
        assert!(
            matches!(err, memwatch_wire::WireError::Damaged { offset, .. } if offset == at)
                && what.contains("3 unexpected bytes after the payload"),
            "recycle={recycle}: {err:?}"
        );
    }
}
