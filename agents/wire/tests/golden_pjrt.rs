//! Golden-file test for the PJRT frame types (8 `pjrt_executable`, 9 `pjrt_memory_stats`)
//! and the PJRT event vocabulary (Api 3001.., MemKind 9). The original `v1.mwcap` golden
//! file is untouched; these types have their own file. Regenerate only for an intended
//! change: `MEMWATCH_UPDATE_GOLDEN=1 cargo test -p memwatch-wire --test golden_pjrt`.

use memwatch_wire::frame::{decode_payload, encode_preamble, frame_type};
use memwatch_wire::*;
use std::path::PathBuf;

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/pjrt-v1.mwcap")
}

fn exe() -> PjrtExecutable {
    PjrtExecutable {
        pid: 7,
        ts_ns: 1000,
        handle: 0x5555_0000_1000,
        flags: PjrtExecutable::FLAG_STATS,
        stats: CompiledMemoryStats {
            generated_code: 4096,
            argument: 50_348_032,
            output: 50_331_650,
            alias: 0,
            temp: 268_435_456,
            host_generated_code: 0,
            host_argument: 0,
            host_output: 0,
            host_alias: 0,
            host_temp: -1,
        },
        devices: vec![0, 1],
        name: "jit_model".into(),
        fingerprint: "a1b2".into(),
    }
}

fn stats() -> PjrtMemoryStats {
    PjrtMemoryStats {
        pid: 7,
        ts_ns: 2000,
        device: 1,
        flags: 0xff,
        bytes_in_use: 1 << 30,
        peak_bytes_in_use: 3 << 30,
        largest_free_block: 5 << 30,
        pool_bytes: 6 << 30,
        peak_pool_bytes: 6 << 30,
        bytes_limit: 100 << 30,
        num_allocs: 42,
        largest_alloc_size: 1 << 28,
    }
}

fn sample() -> Vec<Record> {
    vec![
        Record::PjrtExecutable(exe()),
        Record::PjrtMemoryStats(stats()),
        Record::Events(vec![Event {
            ts_ns: 1500,
            ptr: 0x5555_0000_1000,
            duration_ns: 800,
            aux: 800,
            pid: 7,
            tid: 8,
            result: 8,
            device: 1,
            kind: EventKind::ApiSpan as u8,
            api: Api::PjrtExecute as u16,
            ..Event::default()
        }]),
    ]
}

fn encode_all() -> Vec<u8> {
    let mut out = encode_preamble().to_vec();
    for r in sample() {
        encode_record(&r, &mut out).unwrap();
    }
    out
}

#[test]
fn pjrt_frames_match_golden_bytes() {
    let bytes = encode_all();
    if std::env::var_os("MEMWATCH_UPDATE_GOLDEN").is_some() {
        std::fs::write(golden_path(), &bytes).unwrap();
    }
    let golden = std::fs::read(golden_path()).expect("golden file");
    assert_eq!(bytes, golden, "PJRT frame layout changed");
}

#[test]
fn pjrt_executable_layout_is_as_documented() {
    let mut out = Vec::new();
    encode_record(&Record::PjrtExecutable(exe()), &mut out).unwrap();
    // len, type
    assert_eq!(out[4], frame_type::PJRT_EXECUTABLE);
    let p = &out[5..out.len() - 4];
    assert_eq!(u32::from_le_bytes(p[0..4].try_into().unwrap()), 7);
    assert_eq!(u64::from_le_bytes(p[4..12].try_into().unwrap()), 1000);
    assert_eq!(
        u64::from_le_bytes(p[12..20].try_into().unwrap()),
        0x5555_0000_1000
    );
    assert_eq!(u32::from_le_bytes(p[20..24].try_into().unwrap()), 1);
    // ten i64 counts: argument is the second
    assert_eq!(
        i64::from_le_bytes(p[32..40].try_into().unwrap()),
        50_348_032
    );
    assert_eq!(i64::from_le_bytes(p[96..104].try_into().unwrap()), -1);
    assert_eq!(u16::from_le_bytes(p[104..106].try_into().unwrap()), 2);
    assert_eq!(i32::from_le_bytes(p[110..114].try_into().unwrap()), 1);
    assert_eq!(u16::from_le_bytes(p[114..116].try_into().unwrap()), 9);
    assert_eq!(&p[116..125], b"jit_model");
    assert_eq!(p.len(), 125 + 2 + 4);
    assert_eq!(
        decode_payload(frame_type::PJRT_EXECUTABLE, p).unwrap(),
        Record::PjrtExecutable(exe())
    );
}

#[test]
fn pjrt_memory_stats_layout_and_round_trip() {
    let mut out = Vec::new();
    encode_record(&Record::PjrtMemoryStats(stats()), &mut out).unwrap();
    assert_eq!(out[4], frame_type::PJRT_MEMORY_STATS);
    let p = &out[5..out.len() - 4];
    assert_eq!(p.len(), 4 + 8 + 4 + 4 + 8 * 8);
    assert_eq!(i64::from_le_bytes(p[20..28].try_into().unwrap()), 1 << 30);
    assert_eq!(
        decode_payload(frame_type::PJRT_MEMORY_STATS, p).unwrap(),
        Record::PjrtMemoryStats(stats())
    );
    // a cut payload is an error, not a panic
    assert!(decode_payload(frame_type::PJRT_MEMORY_STATS, &p[..30]).is_err());
    assert!(decode_payload(frame_type::PJRT_EXECUTABLE, &p[..30]).is_err());
}

#[test]
fn pjrt_stream_reads_back() {
    let bytes = encode_all();
    let mut r = FrameReader::new(&bytes[..], ReadMode::Strict).unwrap();
    let mut got = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        got.push(rec);
    }
    assert_eq!(got, sample());
    assert_eq!(Api::from_u16(3004), Api::PjrtExecute);
    assert_eq!(MemKind::from_u8(9), Some(MemKind::PjrtBuffer));
    assert!(!MemKind::PjrtBuffer.occupies_device_memory());
}

#[test]
fn salvage_resumes_at_a_pjrt_frame_after_damage() {
    // Damage right before PJRT frames (types 8, 9): salvage reading must resume at the
    // first of them, not skip every frame up to the next of the original types 1-7.
    let mut bytes = encode_preamble().to_vec();
    let mut start = Vec::new();
    encode_record(
        &Record::ProcessStart(ProcessStart {
            pid: 7,
            ppid: 1,
            mono_anchor_ns: 1,
            wall_anchor_unix_ns: 2,
            shim_version: "t".into(),
            hostname: "h".into(),
            argv: vec!["a".into()],
            pid_ns: None,
        }),
        &mut start,
    )
    .unwrap();
    let cut = start.len() - 3; // a frame whose tail was overwritten
    bytes.extend_from_slice(&start[..cut]);
    bytes.extend_from_slice(&[0xee, 0xee, 0xee]);
    for r in sample() {
        encode_record(&r, &mut bytes).unwrap();
    }
    let mut r = FrameReader::new(&bytes[..], ReadMode::Salvage).unwrap();
    let mut got = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        got.push(rec);
    }
    assert_eq!(got, sample(), "every frame after the damaged one is read");
    assert_eq!(r.damage().len(), 1);
    assert_eq!(r.damage()[0].kind, DamageKind::ChecksumMismatch);
    assert_eq!(r.damage()[0].bytes_skipped, start.len() as u64);
}
