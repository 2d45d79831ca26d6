//! Golden-file test for frame type 12 `device_reading` (the device and its processes read
//! by memwatch's own sampler at one instant). Earlier golden files are untouched; this
//! type has its own. Regenerate only for an intended change:
//! `MEMWATCH_UPDATE_GOLDEN=1 cargo test -p memwatch-wire --test golden_reading`.

use memwatch_wire::frame::{decode_payload, encode_preamble, frame_type};
use memwatch_wire::*;
use std::path::PathBuf;

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/reading-v1.mwcap")
}

fn reading() -> DeviceReading {
    DeviceReading {
        ts_ns: 5_000_000_123,
        device: 1,
        vendor: Vendor::Nvidia as u8,
        flags: DeviceReading::PROCESSES | DeviceReading::AT_FAILURE,
        used_bytes: 137 << 30,
        total_bytes: 143 << 30,
        source: "nvml".into(),
        uuid: "GPU-0d5e1f3a-0000-0000-0000-000000000001".into(),
        pci_bus_id: "00000000:18:00.0".into(),
        processes: vec![
            ProcessUse {
                pid: 4242,
                flags: ProcessUse::WATCHED | ProcessUse::BYTES_KNOWN,
                used_bytes: 26 << 30,
            },
            ProcessUse {
                pid: 999,
                flags: ProcessUse::BYTES_KNOWN,
                used_bytes: 110 << 30,
            },
            ProcessUse {
                pid: 1000,
                flags: 0,
                used_bytes: 0,
            },
        ],
    }
}

/// A reading whose processes were not read (the list is unknown, not empty).
fn without_processes() -> DeviceReading {
    DeviceReading {
        flags: 0,
        processes: Vec::new(),
        uuid: String::new(),
        pci_bus_id: String::new(),
        ..reading()
    }
}

fn encode_all() -> Vec<u8> {
    let mut out = encode_preamble().to_vec();
    for r in [reading(), without_processes()] {
        encode_record(&Record::DeviceReading(r), &mut out).unwrap();
    }
    out
}

#[test]
fn device_reading_frames_match_golden_bytes() {
    let bytes = encode_all();
    if std::env::var_os("MEMWATCH_UPDATE_GOLDEN").is_some() {
        std::fs::write(golden_path(), &bytes).unwrap();
    }
    let golden = std::fs::read(golden_path()).expect("golden file");
    assert_eq!(bytes, golden, "device_reading layout changed");
    let mut r = FrameReader::new(&golden[..], ReadMode::Strict).unwrap();
    assert_eq!(
        r.next_record().unwrap(),
        Some(Record::DeviceReading(reading()))
    );
    assert_eq!(
        r.next_record().unwrap(),
        Some(Record::DeviceReading(without_processes()))
    );
    assert_eq!(r.next_record().unwrap(), None);
}

#[test]
fn device_reading_layout_and_figures() {
    let mut out = Vec::new();
    encode_record(&Record::DeviceReading(reading()), &mut out).unwrap();
    assert_eq!(out[4], frame_type::DEVICE_READING);
    let p = &out[5..out.len() - 4];
    // ts, device, vendor, flags, used, total: the fixed head.
    assert_eq!(
        u64::from_le_bytes(p[0..8].try_into().unwrap()),
        5_000_000_123
    );
    assert_eq!(i32::from_le_bytes(p[8..12].try_into().unwrap()), 1);
    assert_eq!(p[12], Vendor::Nvidia as u8);
    assert_eq!(u32::from_le_bytes(p[13..17].try_into().unwrap()), 3);
    assert_eq!(u64::from_le_bytes(p[17..25].try_into().unwrap()), 137 << 30);
    // The process list is last: count, then 16 bytes per process.
    let n = u16::from_le_bytes(
        p[p.len() - 2 - 3 * 16..p.len() - 3 * 16]
            .try_into()
            .unwrap(),
    );
    assert_eq!(n, 3);
    assert_eq!(
        decode_payload(frame_type::DEVICE_READING, p).unwrap(),
        Record::DeviceReading(reading())
    );
    assert!(decode_payload(frame_type::DEVICE_READING, &p[..p.len() - 1]).is_err());
    // The watched tree's bytes at the instant; unknown when the list was not read or a
    // watched process's figure is missing.
    assert_eq!(reading().watched_bytes(), Some(26 << 30));
    assert_eq!(without_processes().watched_bytes(), None);
    assert_eq!(without_processes().process_list(), None);
    let mut r = reading();
    r.processes[0].flags = ProcessUse::WATCHED;
    assert_eq!(r.watched_bytes(), None);
    assert!(reading().at_failure() && !without_processes().at_failure());
}

/// A reader of an older version skips the frame (unknown types are counted, not fatal):
/// a capture with readings stays readable by builds that predate them.
#[test]
fn an_unknown_frame_type_is_skipped_as_older_readers_do() {
    let mut out = encode_preamble().to_vec();
    let mut frame = Vec::new();
    encode_record(&Record::DeviceReading(reading()), &mut frame).unwrap();
    // Same frame under a type number no version knows (CRC recomputed).
    frame[4] = 250;
    let crc = crc32fast::hash(&frame[4..frame.len() - 4]);
    let n = frame.len();
    frame[n - 4..].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&frame);
    encode_record(&Record::Dropped(Dropped::default()), &mut out).unwrap();
    let mut r = FrameReader::new(&out[..], ReadMode::Strict).unwrap();
    assert_eq!(
        r.next_record().unwrap(),
        Some(Record::Dropped(Dropped::default()))
    );
    assert_eq!(r.unknown_frames(), 1);
}
