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
