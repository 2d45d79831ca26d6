//! Fuzz target: a capture of any bytes never panics what reads captures: the loader,
//! `memwatch report`'s analysis, the `--trace` writer, and the replay reader with every
//! allocator model. The first byte picks the input's shape: even, the bytes follow the
//! preamble as they are (so mostly damage for the salvage path); odd, they are cut into
//! records that are each wrapped in a valid frame (length and CRC), so arbitrary payloads
//! reach the decoders and the analysis. The daemon's strict batch decoder must agree with
//! the salvaging file reader: where it accepts the frames, the reader yields the same
//! records and reports no damage.
#![no_main]
use libfuzzer_sys::fuzz_target;
use memwatch_analysis::alloc::trace::read_capture;
use memwatch_analysis::capture::{analyze, load_reader, write_trace, ReportOptions, TraceOptions};
use memwatch_wire::frame::encode_preamble;
use memwatch_wire::ingest::decode_frames_strict;
use memwatch_wire::{FrameReader, ReadMode, PREAMBLE_LEN};
use std::path::Path;

#[path = "common/models.rs"]
mod models;

/// `data` as frames: each is a type byte, a u16 payload length (cut to what is left) and
/// the payload, wrapped as len:u32 type payload crc:u32.
fn framed(mut data: &[u8], out: &mut Vec<u8>) {
    while data.len() >= 3 {
        let ty = data[0];
        let n = (u16::from_le_bytes([data[1], data[2]]) as usize).min(data.len() - 3);
        let body = &data[..1];
        let payload = &data[3..3 + n];
        let mut crc = crc32fast::Hasher::new();
        crc.update(body);
        crc.update(payload);
        out.extend_from_slice(&(1 + n as u32).to_le_bytes());
        out.push(ty);
        out.extend_from_slice(payload);
        out.extend_from_slice(&crc.finalize().to_le_bytes());
        data = &data[3 + n..];
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = encode_preamble().to_vec();
    if shape & 1 == 0 {
        bytes.extend_from_slice(rest);
    } else {
        framed(rest, &mut bytes);
    }
    if let Ok(strict) = decode_frames_strict(&bytes[PREAMBLE_LEN..]) {
        let mut reader = FrameReader::new(&bytes[..], ReadMode::Salvage).expect("preamble");
        let mut salvaged = Vec::new();
        while let Ok(Some(record)) = reader.next_record() {
            salvaged.push(record);
        }
        assert_eq!(salvaged, strict, "salvage and strict decoding disagree");
        assert!(
            reader.damage().is_empty(),
            "damage where strict decoding found none"
        );
    }
    let path = Path::new("fuzz.mwcap");
    if let Ok(loaded) = load_reader(&bytes[..], path, &mut |_| {}) {
        let _ = analyze(loaded, &ReportOptions::default());
    }
    if let Ok(loaded) = load_reader(&bytes[..], path, &mut |_| {}) {
        let _ = write_trace(loaded, &TraceOptions::default(), std::io::sink());
    }
    if let Ok(trace) = read_capture(&bytes[..], None) {
        models::replay_through_every_model(&trace);
    }
});
