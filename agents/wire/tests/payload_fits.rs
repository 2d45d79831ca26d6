//! `frame::payload_fits` (the size check salvage resync makes before a checksum) agrees
//! with `decode_payload` on every frame of the golden files (all eleven frame types),
//! on every cut and extension of them, with counts and string lengths changed, and on
//! random bytes; and a frame after a long stretch of random bytes is still found.

use memwatch_wire::frame::{decode_payload, encode_preamble, payload_fits};
use memwatch_wire::*;
use proptest::prelude::*;
use std::path::PathBuf;

/// (type, payload) of every frame in the golden files.
fn golden_payloads() -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    for name in ["v1.mwcap", "pjrt-v1.mwcap", "backtrace-v1.mwcap"] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(name);
        let bytes = std::fs::read(&path).unwrap();
        let mut pos = 16;
        while pos < bytes.len() {
            let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
            out.push((bytes[pos + 4], bytes[pos + 5..pos + 4 + len].to_vec()));
            pos += 8 + len;
        }
    }
    out
}

fn agree(ty: u8, p: &[u8]) {
    assert_eq!(
        payload_fits(ty, p),
        decode_payload(ty, p).is_ok(),
        "type {ty}, {} bytes: {p:?}",
        p.len()
    );
}

#[test]
fn agrees_with_the_decoder_on_every_golden_frame_cut_extended_and_altered() {
    let frames = golden_payloads();
    let mut types: Vec<u8> = frames.iter().map(|f| f.0).collect();
    types.sort_unstable();
    types.dedup();
    assert_eq!(
        types,
        (1..=11).collect::<Vec<u8>>(),
        "every frame type is covered"
    );
    for (ty, p) in &frames {
        assert!(payload_fits(*ty, p), "type {ty} as encoded");
        for cut in 0..p.len() {
            agree(*ty, &p[..cut]);
        }
        for extra in 1..=80 {
            let mut q = p.clone();
            q.resize(p.len() + extra, 0);
            agree(*ty, &q);
        }
        // Every single byte changed to a few values (counts and lengths among them).
        for i in 0..p.len() {
            for v in [0u8, 1, 2, 0x7f, 0xff] {
                let mut q = p.clone();
                q[i] = v;
                agree(*ty, &q);
            }
        }
    }
}

#[test]
fn a_frame_after_a_long_random_stretch_is_found() {
    // 1 MiB of pseudo-random bytes, then a marker: salvage skips the bytes as one damage
    // and reads the marker.
    let mut bytes = encode_preamble().to_vec();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..(1 << 20) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.push(x as u8);
    }
    let marker = Record::Marker(Marker {
        pid: 1,
        tid: 2,
        ts_ns: 3,
        device: 0,
        text: "after the damage".into(),
    });
    encode_record(&marker, &mut bytes).unwrap();
    let mut r = FrameReader::new(&bytes[..], ReadMode::Salvage).unwrap();
    assert_eq!(r.next_record().unwrap(), Some(marker));
    assert_eq!(r.next_record().unwrap(), None);
    let skipped: u64 = r.damage().iter().map(|d| d.bytes_skipped).sum();
    assert_eq!(skipped, 1 << 20);
}

proptest! {
    #[test]
    fn agrees_with_the_decoder_on_random_bytes(
        ty in 0u8..=13,
        p in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        prop_assert_eq!(payload_fits(ty, &p), decode_payload(ty, &p).is_ok());
    }
}
