//! Golden-file test for the frame types 10 `backtrace` and 11 `module_map` (sampled
//! native stacks, MEMWATCH_BACKTRACE_EVERY_BYTES). Earlier golden files are untouched;
//! these types have their own. Regenerate only for an intended change:
//! `MEMWATCH_UPDATE_GOLDEN=1 cargo test -p memwatch-wire --test golden_backtrace`.

use memwatch_wire::frame::{decode_payload, encode_preamble, frame_type};
use memwatch_wire::*;
use std::path::PathBuf;

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/backtrace-v1.mwcap")
}

fn bt() -> Backtrace {
    Backtrace {
        pid: 7,
        tid: 9,
        ts_ns: 1500,
        ptr: 0x7f00_0000_1000,
        frames: vec![0x5555_5555_1234, 0x5555_5555_2000, 0x7fff_0000_0042],
    }
}

fn map() -> ModuleMap {
    ModuleMap {
        pid: 7,
        ts_ns: 1400,
        modules: vec![
            Module {
                start: 0x5555_5555_0000,
                end: 0x5555_5556_0000,
                bias: 0x5555_5555_0000,
                path: "/usr/bin/app".into(),
            },
            Module {
                start: 0x7fff_0000_0000,
                end: 0x7fff_0010_0000,
                bias: 0x7fff_0000_0000,
                path: "/lib/libx.so".into(),
            },
        ],
    }
}

fn encode_all() -> Vec<u8> {
    let mut out = encode_preamble().to_vec();
    for r in [Record::ModuleMap(map()), Record::Backtrace(bt())] {
        encode_record(&r, &mut out).unwrap();
    }
    out
}

#[test]
fn backtrace_frames_match_golden_bytes() {
    let bytes = encode_all();
    if std::env::var_os("MEMWATCH_UPDATE_GOLDEN").is_some() {
        std::fs::write(golden_path(), &bytes).unwrap();
    }
    let golden = std::fs::read(golden_path()).expect("golden file");
    assert_eq!(bytes, golden, "backtrace / module map layout changed");
    let mut r = FrameReader::new(&golden[..], ReadMode::Strict).unwrap();
    assert_eq!(r.next_record().unwrap(), Some(Record::ModuleMap(map())));
    assert_eq!(r.next_record().unwrap(), Some(Record::Backtrace(bt())));
    assert_eq!(r.next_record().unwrap(), None);
}

#[test]
fn backtrace_layout_is_as_documented() {
    let mut out = Vec::new();
    encode_record(&Record::Backtrace(bt()), &mut out).unwrap();
    assert_eq!(out[4], frame_type::BACKTRACE);
    let p = &out[5..out.len() - 4];
    assert_eq!(p.len(), 4 + 4 + 8 + 8 + 2 + 3 * 8);
    assert_eq!(u32::from_le_bytes(p[4..8].try_into().unwrap()), 9);
    assert_eq!(u16::from_le_bytes(p[24..26].try_into().unwrap()), 3);
    assert_eq!(
        u64::from_le_bytes(p[26..34].try_into().unwrap()),
        0x5555_5555_1234
    );
    assert_eq!(
        decode_payload(frame_type::BACKTRACE, p).unwrap(),
        Record::Backtrace(bt())
    );
    assert!(decode_payload(frame_type::BACKTRACE, &p[..30]).is_err());
}

#[test]
fn module_map_layout_and_round_trip() {
    let mut out = Vec::new();
    encode_record(&Record::ModuleMap(map()), &mut out).unwrap();
    assert_eq!(out[4], frame_type::MODULE_MAP);
    let p = &out[5..out.len() - 4];
    assert_eq!(u16::from_le_bytes(p[12..14].try_into().unwrap()), 2);
    assert_eq!(
        u64::from_le_bytes(p[22..30].try_into().unwrap()),
        0x5555_5556_0000
    );
    assert_eq!(u16::from_le_bytes(p[38..40].try_into().unwrap()), 12);
    assert_eq!(&p[40..52], b"/usr/bin/app");
    assert_eq!(
        decode_payload(frame_type::MODULE_MAP, p).unwrap(),
        Record::ModuleMap(map())
    );
    assert!(decode_payload(frame_type::MODULE_MAP, &p[..20]).is_err());
}
