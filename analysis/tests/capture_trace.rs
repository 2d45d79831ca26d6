//! Captures (.mwcap) as replay traces: device-occupying alloc/free events of one device.

use memwatch_analysis::alloc::replay::{replay, ReplayOptions};
use memwatch_analysis::alloc::trace::{read_any, TraceError, TraceOp};
use memwatch_analysis::alloc::{build, AllocatorKind, ModelSpec};
use memwatch_wire::{Api, DeviceInfo, Event, EventKind, FrameWriter, MemKind, Record, Vendor};

fn ev(kind: EventKind, mem: MemKind, ptr: u64, size: u64, device: i32) -> Event {
    Event {
        ptr,
        size,
        pid: 42,
        device,
        ..Event::new(kind, mem, Api::Unknown)
    }
}

fn capture(events: Vec<Event>) -> Vec<u8> {
    let mut w = FrameWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::DeviceInfo(DeviceInfo {
        pid: 42,
        device: 0,
        vendor: Vendor::Nvidia.code(),
        total_bytes: 150_156_083_200,
        name: "NVIDIA H200".into(),
        identity: None,
    }))
    .unwrap();
    w.write_record(&Record::Events(events)).unwrap();
    w.into_inner().unwrap()
}

#[test]
fn capture_events_become_a_trace() {
    let bytes = capture(vec![
        ev(EventKind::Alloc, MemKind::Device, 0x1000, 4 << 20, 0),
        ev(EventKind::Alloc, MemKind::HostPinned, 0x9000, 1 << 30, 0), // host: ignored
        ev(EventKind::Alloc, MemKind::StreamPool, 0x2000, 1 << 20, 0),
        ev(EventKind::AllocFailed, MemKind::Device, 0, 1 << 40, 0), // not live: ignored
        ev(EventKind::Free, MemKind::Device, 0x1000, 0, 0),
        ev(EventKind::Free, MemKind::Device, 0x7777, 0, 0), // allocated before the capture
        ev(EventKind::Alloc, MemKind::Device, 0x1000, 8 << 20, 0), // pointer reused
    ]);
    let t = read_any(&bytes, None).unwrap();
    assert_eq!(t.meta.format, "mwcap");
    assert_eq!(t.meta.device_total_bytes, Some(150_156_083_200));
    assert_eq!(
        t.ops,
        vec![
            TraceOp::Alloc {
                slot: 0,
                size: 4 << 20
            },
            TraceOp::Alloc {
                slot: 1,
                size: 1 << 20
            },
            TraceOp::Free { slot: 0 },
            TraceOp::Alloc {
                slot: 0,
                size: 8 << 20
            },
        ]
    );
    let spec = ModelSpec {
        kind: AllocatorKind::Bfc,
        limit: 16 << 20,
        preallocate: true,
        granularity: 2 << 20,
        device_free_bytes: None,
    };
    let mut m = build(&spec);
    let r = replay(&t, m.as_mut(), ReplayOptions::default(), &mut |_| {}).unwrap();
    assert!(r.fits);
    // The 8 MiB request finds the 4 MiB hole too small and takes the 11 MiB central gap
    // whole (under twice the request, remainder under 128 MiB: not split, as on the H200).
    assert_eq!(r.peak_bytes_in_use, 12 << 20);
}

#[test]
fn several_devices_need_a_choice() {
    let bytes = capture(vec![
        ev(EventKind::Alloc, MemKind::Device, 0x1000, 1 << 20, 0),
        ev(EventKind::Alloc, MemKind::Device, 0x1000, 2 << 20, 1),
    ]);
    assert!(matches!(
        read_any(&bytes, None),
        Err(TraceError::SeveralDevices { .. })
    ));
    let t = read_any(&bytes, Some(1)).unwrap();
    assert_eq!(
        t.ops,
        vec![TraceOp::Alloc {
            slot: 0,
            size: 2 << 20
        }]
    );
}
