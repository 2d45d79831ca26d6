//! Golden-file tests: pin the byte layout of format version 1, and check salvage reading
//! of truncated and corrupted streams.
//! Regenerate (only for an intended format change, with a version bump):
//! `MEMWATCH_UPDATE_GOLDEN=1 cargo test -p memwatch-wire --test golden`.

use memwatch_wire::*;
use std::path::PathBuf;

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v1.mwcap")
}

fn sample_records() -> Vec<Record> {
    vec![
        Record::ProcessStart(ProcessStart {
            pid: 4242,
            ppid: 1,
            mono_anchor_ns: 1_000_000_000,
            wall_anchor_unix_ns: 1_790_000_000_000_000_000,
            shim_version: "0.1.0".into(),
            hostname: "node-α".into(),
            argv: vec!["python3".into(), "train.py".into()],
            pid_ns: None,
        }),
        Record::DeviceInfo(DeviceInfo {
            pid: 4242,
            device: 0,
            vendor: Vendor::Amd as u8,
            total_bytes: 192 << 30,
            name: "AMD Instinct MI300X".into(),
            identity: None,
        }),
        Record::Events(vec![
            Event {
                ts_ns: 1_000_000_100,
                ptr: 0x7f00_0000_0000,
                size: 1 << 20,
                duration_ns: 1500,
                pid: 4242,
                tid: 4243,
                result: 0,
                device: 0,
                kind: EventKind::Alloc as u8,
                mem_kind: MemKind::Device as u8,
                api: Api::HipMalloc as u16,
                ..Event::default()
            },
            Event {
                ts_ns: 1_000_000_200,
                size: 1 << 40,
                duration_ns: 900,
                pid: 4242,
                tid: 4243,
                result: 2,
                device: 0,
                kind: EventKind::AllocFailed as u8,
                mem_kind: MemKind::Device as u8,
                api: Api::HipMalloc as u16,
                ..Event::default()
            },
            Event {
                ts_ns: 1_000_000_300,
                ptr: 0x7f00_0000_0000,
                stream: 0x55,
                pid: 4242,
                tid: 4244,
                device: 0,
                kind: EventKind::Free as u8,
                mem_kind: MemKind::StreamPool as u8,
                api: Api::CuMemFreeAsync as u16,
                ..Event::default()
            },
        ]),
        Record::Marker(Marker {
            pid: 4242,
            tid: 4243,
            ts_ns: 1_000_000_400,
            device: -1,
            text: "step 1".into(),
        }),
        Record::Dropped(Dropped {
            pid: 4242,
            ts_ns: 1_000_000_500,
            dropped_total: 3,
        }),
        Record::DeviceSample(DeviceSample {
            ts_ns: 1_000_000_550,
            device: 0,
            memory: 1,
            used_bytes: 5 << 30,
            total_bytes: 128 << 30,
            source: "sysfs".into(),
        }),
        Record::ProcessEnd(ProcessEnd {
            pid: 4242,
            ts_ns: 1_000_000_600,
            exit_code: 0,
        }),
    ]
}

fn encode_all(records: &[Record]) -> Vec<u8> {
    let mut w = FrameWriter::new(Vec::new()).unwrap();
    for r in records {
        w.write_record(r).unwrap();
    }
    w.into_inner().unwrap()
}

fn read_all(bytes: &[u8], mode: ReadMode) -> (Vec<Record>, Vec<Damage>) {
    let mut r = FrameReader::new(bytes, mode).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push(rec);
    }
    (out, r.damage().to_vec())
}

#[test]
fn encoding_matches_golden_file() {
    let bytes = encode_all(&sample_records());
    if std::env::var_os("MEMWATCH_UPDATE_GOLDEN").is_some() {
        std::fs::write(golden_path(), &bytes).unwrap();
    }
    let golden = std::fs::read(golden_path()).expect("golden file tests/golden/v1.mwcap");
    assert_eq!(bytes, golden, "format v1 byte layout changed");
}

#[test]
fn golden_file_decodes_to_sample() {
    let golden = std::fs::read(golden_path()).unwrap();
    let (records, damage) = read_all(&golden, ReadMode::Strict);
    assert!(damage.is_empty());
    assert_eq!(records, sample_records());
}

/// `pid_ns` was appended to `process_start` after format v1's golden file: that file's
/// process_start (without it) still decodes (to `None`), and a record with it carries
/// exactly 8 more bytes, read back unchanged.
#[test]
fn the_appended_pid_namespace_is_optional() {
    let Record::ProcessStart(old) = sample_records().remove(0) else {
        panic!("the sample starts with a process_start");
    };
    assert_eq!(old.pid_ns, None);
    for ns in [4026531836u64, 4026532448, u64::MAX] {
        let new = ProcessStart {
            pid_ns: Some(ns),
            ..old.clone()
        };
        let (a, b) = (
            encode_all(&[Record::ProcessStart(old.clone())]),
            encode_all(&[Record::ProcessStart(new.clone())]),
        );
        assert_eq!(b.len(), a.len() + 8);
        let (back, damage) = read_all(&b, ReadMode::Strict);
        assert!(damage.is_empty());
        assert_eq!(back, vec![Record::ProcessStart(new)]);
    }
}

/// The device identity was appended to `device_info` after format v1's golden file: that
/// file's device_info (without it) still decodes (to `None`), and one with it carries the
/// two strings more, read back unchanged, whichever of them is known.
#[test]
fn the_appended_device_identity_is_optional() {
    let Some(Record::DeviceInfo(old)) = sample_records().into_iter().nth(1) else {
        panic!("the sample's second record is a device_info");
    };
    assert_eq!(old.identity, None);
    assert_eq!(old.identity(), DeviceIdentity::unknown());
    for (uuid, bus) in [
        ("GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "0000:18:00.0"),
        ("GPU-4b2c8e3f1d5a6b7c", ""),
        ("", "0000:c1:00.0"),
        ("", ""),
    ] {
        let new = DeviceInfo {
            identity: Some(DeviceIdentity {
                uuid: uuid.into(),
                pci_bus_id: bus.into(),
            }),
            ..old.clone()
        };
        let (a, b) = (
            encode_all(&[Record::DeviceInfo(old.clone())]),
            encode_all(&[Record::DeviceInfo(new.clone())]),
        );
        assert_eq!(b.len(), a.len() + 4 + uuid.len() + bus.len());
        let (back, damage) = read_all(&b, ReadMode::Strict);
        assert!(damage.is_empty());
        assert_eq!(back, vec![Record::DeviceInfo(new)]);
    }
}

#[test]
fn golden_layout_spot_checks() {
    let g = std::fs::read(golden_path()).unwrap();
    assert_eq!(&g[..8], b"MWCAP\0\r\n");
    assert_eq!(u16::from_le_bytes([g[8], g[9]]), 1);
    // First frame is process_start (type 1) right after the 16-byte preamble.
    assert_eq!(g[20], 1);
    assert_eq!(u32::from_le_bytes([g[21], g[22], g[23], g[24]]), 4242);
}

#[test]
fn truncated_stream_keeps_whole_frames_and_reports_loss() {
    let full = encode_all(&sample_records());
    for cut in PREAMBLE_LEN..full.len() {
        let (records, damage) = read_all(&full[..cut], ReadMode::Salvage);
        // Every record read is a prefix of the sample.
        assert_eq!(&sample_records()[..records.len()], &records[..]);
        let lost: u64 = damage.iter().map(|d| d.bytes_skipped).sum();
        let consumed = encode_all(&sample_records()[..records.len()]).len();
        assert_eq!(consumed as u64 + lost, cut as u64, "cut at {cut}");
        if consumed < cut {
            assert_eq!(damage.len(), 1);
            assert_eq!(damage[0].kind, DamageKind::Truncated);
        }
    }
}

#[test]
fn strict_mode_rejects_truncation() {
    let full = encode_all(&sample_records());
    let mut r = FrameReader::new(&full[..full.len() - 3], ReadMode::Strict).unwrap();
    let mut err = None;
    loop {
        match r.next_record() {
            Ok(Some(_)) => continue,
            Ok(None) => break,
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let msg = err.expect("strict reader must fail").to_string();
    assert!(msg.contains("cut off"), "{msg}");
}

#[test]
fn corrupt_byte_is_skipped_and_later_frames_survive() {
    let records = sample_records();
    let full = encode_all(&records);
    // Corrupt one byte inside the events frame (third frame).
    let first_two = encode_all(&records[..2]).len();
    let mut bad = full.clone();
    bad[first_two + 20] ^= 0xff;
    let (got, damage) = read_all(&bad, ReadMode::Salvage);
    assert_eq!(damage.len(), 1);
    assert_eq!(damage[0].kind, DamageKind::ChecksumMismatch);
    assert_eq!(damage[0].offset, first_two as u64);
    let mut expected = records.clone();
    expected.remove(2);
    assert_eq!(got, expected);
}

#[test]
fn garbage_is_not_a_capture() {
    assert!(matches!(
        FrameReader::new(&b"hello world, not a capture"[..], ReadMode::Salvage),
        Err(WireError::BadMagic)
    ));
    assert!(matches!(
        FrameReader::new(&b"MWCAP"[..], ReadMode::Salvage),
        Err(WireError::ShortPreamble { got: 5 })
    ));
}

#[test]
fn unknown_frame_types_are_skipped() {
    let mut bytes = encode_all(&sample_records()[..1]);
    // Append a frame of type 200 with a valid CRC.
    let payload = [200u8, 1, 2, 3];
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&payload);
    bytes.extend_from_slice(&crc32fast_hash(&payload).to_le_bytes());
    let mut tail = Vec::new();
    encode_record(&sample_records()[4], &mut tail).unwrap();
    bytes.extend_from_slice(&tail);
    let mut r = FrameReader::new(&bytes[..], ReadMode::Strict).unwrap();
    let mut n = 0;
    while r.next_record().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 2);
    assert_eq!(r.unknown_frames(), 1);
}

fn crc32fast_hash(b: &[u8]) -> u32 {
    // CRC-32/ISO-HDLC, bitwise, independent of the crate under test.
    let mut crc = 0xffff_ffffu32;
    for &byte in b {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let mut bytes = memwatch_wire::frame::encode_preamble().to_vec();
            bytes.extend_from_slice(&data);
            let mut r = FrameReader::new(&bytes[..], ReadMode::Salvage).unwrap();
            while let Ok(Some(_)) = r.next_record() {}
        }

        #[test]
        fn events_round_trip(sizes in proptest::collection::vec(any::<u64>(), 0..200)) {
            let events: Vec<Event> = sizes.iter().enumerate().map(|(i, &s)| Event {
                ts_ns: i as u64, size: s, ptr: s ^ 0xabc, device: (i % 8) as i32,
                kind: 1, mem_kind: 1, api: 1, ..Event::default()
            }).collect();
            let bytes = encode_all(&[Record::Events(events.clone())]);
            let (recs, dmg) = read_all(&bytes, ReadMode::Strict);
            prop_assert!(dmg.is_empty());
            prop_assert_eq!(recs, vec![Record::Events(events)]);
        }
    }
}
