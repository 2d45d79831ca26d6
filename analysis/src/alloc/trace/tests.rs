//! Tests of the trace readers: size and pool limits, the JSON-lines format (round trip,
//! dense slots, errors naming their line, the `device` field).

use super::*;

/// Sizes and pools beyond any device are input errors; at the limits every model
/// replays without overflowing (sizes near 2^63 panicked in debug builds and wrapped
/// in release builds).
#[test]
fn sizes_beyond_any_device_are_rejected_and_the_limits_replay() {
    let over = format!("{{\"op\":\"alloc\",\"id\":1,\"size\":{}}}\n", 1u64 << 63);
    let e = read_jsonl(over.as_bytes(), None).unwrap_err();
    assert!(e.to_string().contains("larger than any device"), "{e}");
    let at = MAX_ALLOC_BYTES;
    let t = read_jsonl(
        format!(
            "{{\"op\":\"alloc\",\"id\":1,\"size\":{at}}}\n{{\"op\":\"alloc\",\"id\":2,\"size\":{at}}}\n{{\"op\":\"free\",\"id\":1}}\n"
        )
        .as_bytes(),
        None,
    )
    .unwrap();
    for kind in crate::alloc::AllocatorKind::ALL {
        for preallocate in [false, true] {
            let spec = crate::alloc::ModelSpec {
                kind,
                limit: MAX_POOL_BYTES,
                preallocate,
                granularity: 2 << 20,
                device_free_bytes: None,
            };
            let r = crate::alloc::replay::replay_spec(&t, &spec, Default::default(), &mut |_| {});
            assert!(r.is_ok(), "{kind:?}");
        }
    }
}

/// A recorded pool beyond any device (a bfc_validate document's `bytes_limit`, an OOM
/// dump's regions) is an input error too.
#[test]
fn pools_beyond_any_device_are_rejected() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/h200/bfc/h200-jax0.11.2/bfc_seed11.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    assert!(read_validate_doc(&text).is_ok());
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["initial_stats"]["bytes_limit"] = serde_json::json!(MAX_POOL_BYTES + 1);
    let e = read_validate_doc(&doc.to_string()).unwrap_err();
    assert!(e.to_string().contains("bytes_limit"), "{e}");
    let oom = crate::log::BfcOom {
        rounded_bytes: 256,
        regions: vec![MAX_POOL_BYTES + 1],
        region_chunk_bytes: vec![MAX_POOL_BYTES + 1],
        ..Default::default()
    };
    let e = from_bfc_oom(&oom).unwrap_err();
    assert!(e.to_string().contains("larger than any device"), "{e}");
}

#[test]
fn jsonl_roundtrip_and_slots() {
    let t = read_jsonl(
        "{\"op\":\"alloc\",\"id\":7,\"size\":1048576,\"tag\":\"w\"}\n\n{\"op\":\"free\",\"id\":7}\n{\"op\":\"alloc\",\"id\":7,\"size\":5}\n"
            .as_bytes(),
        None,
    )
    .unwrap();
    assert_eq!(
        t.ops,
        vec![
            TraceOp::Alloc {
                slot: 0,
                size: 1048576
            },
            TraceOp::Free { slot: 0 },
            TraceOp::Alloc { slot: 0, size: 5 }
        ]
    );
    assert_eq!(t.tag(0), Some("w"));
    assert_eq!(t.tag(1), None);
    assert_eq!(t.alloc_ids, vec![7, 7]);
    assert_eq!(t.slots(), 1);
}

#[test]
fn jsonl_errors_name_the_line() {
    let e = read_jsonl(
        "{\"op\":\"alloc\",\"id\":1,\"size\":4}\n{oops\n".as_bytes(),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("line 2: not valid JSON"), "{e}");
    let e = read_jsonl("{\"op\":\"alloc\",\"id\":1}\n".as_bytes(), None).unwrap_err();
    assert!(e.to_string().contains("line 1: field `size`"), "{e}");
    let e = read_jsonl("{\"op\":\"alloc\",\"id\":1,\"size\":-4}\n".as_bytes(), None).unwrap_err();
    assert!(e.to_string().contains("line 1"), "{e}");
    let e = read_jsonl("{\"op\":\"free\",\"id\":3}\n".as_bytes(), None).unwrap_err();
    assert!(matches!(e, TraceError::FreeNotLive { line: 1, id: 3 }));
    let e = read_jsonl("{\"op\":\"grow\",\"id\":3}\n".as_bytes(), None).unwrap_err();
    assert!(matches!(e, TraceError::UnknownOp { line: 1, .. }));
    let e = read_jsonl("\n\n".as_bytes(), None).unwrap_err();
    assert!(matches!(e, TraceError::Empty));
}

/// `memwatch report --trace` names the device on every line; a replay of such a trace
/// must keep one device's events, never pool two devices together.
#[test]
fn jsonl_device_field_selects_one_device() {
    let two = "{\"op\":\"alloc\",\"id\":1,\"size\":100,\"device\":0}\n\
               {\"op\":\"alloc\",\"id\":2,\"size\":7,\"device\":1}\n\
               {\"op\":\"free\",\"id\":1,\"device\":0}\n\
               {\"op\":\"alloc\",\"id\":3,\"size\":50,\"device\":0}\n";
    let e = read_jsonl(two.as_bytes(), None).unwrap_err();
    assert!(
        matches!(&e, TraceError::SeveralTraceDevices { devices } if devices == "0, 1"),
        "{e}"
    );
    let t = read_jsonl(two.as_bytes(), Some(0)).unwrap();
    assert_eq!((t.len(), t.buffers()), (3, 2));
    let t = read_jsonl(two.as_bytes(), Some(1)).unwrap();
    assert_eq!((t.len(), t.buffers()), (1, 1));
    let e = read_jsonl(two.as_bytes(), Some(5)).unwrap_err();
    assert!(e.to_string().contains("device 0, 1"), "{e}");
    let mixed = "{\"op\":\"alloc\",\"id\":1,\"size\":1,\"device\":0}\n\
                 {\"op\":\"free\",\"id\":1}\n";
    let e = read_jsonl(mixed.as_bytes(), None).unwrap_err();
    assert!(
        matches!(e, TraceError::DeviceOnSomeLines { line: 2, named: 1 }),
        "{e}"
    );
    let plain = "{\"op\":\"alloc\",\"id\":1,\"size\":1}\n";
    assert_eq!(read_jsonl(plain.as_bytes(), None).unwrap().len(), 1);
    let e = read_jsonl(plain.as_bytes(), Some(0)).unwrap_err();
    assert!(e.to_string().contains("no `device` field"), "{e}");
}
