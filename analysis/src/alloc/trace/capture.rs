//! memwatch capture files (`.mwcap`) as traces: the successful allocations and frees
//! of one device's memory, read with `memwatch-wire`'s salvaging `FrameReader`, and
//! what the capture lost (drops, gaps).

use std::collections::HashMap;
use std::io::Read;

use memwatch_wire::{EventKind, FrameReader, MemKind, ReadMode, Record};

use super::{pick_device, Builder, CaptureGaps, Trace, TraceError};

/// Reads a memwatch capture: successful allocations and frees of memory kinds that occupy
/// device memory, of one device (`device`, or the only one present). Damaged frames are
/// skipped (salvage mode), like every other capture reader.
pub fn read_capture<R: Read>(src: R, device: Option<i32>) -> Result<Trace, TraceError> {
    let mut reader =
        FrameReader::new(src, ReadMode::Salvage).map_err(|e| TraceError::Capture(e.to_string()))?;
    let mut events = Vec::new();
    let mut infos: HashMap<i32, (u64, String)> = HashMap::new();
    let mut dropped: HashMap<u32, u64> = HashMap::new();
    while let Some(rec) = reader
        .next_record()
        .map_err(|e| TraceError::Capture(e.to_string()))?
    {
        match rec {
            Record::Events(evs) => events.extend(evs),
            Record::DeviceInfo(d) => {
                infos.insert(d.device, (d.total_bytes, d.name));
            }
            Record::Dropped(d) => {
                let n = dropped.entry(d.pid).or_default();
                *n = (*n).max(d.dropped_total);
            }
            _ => {}
        }
    }
    let gaps = CaptureGaps {
        damaged_regions: reader.damage().len(),
        damaged_bytes: reader.damage().iter().map(|d| d.bytes_skipped).sum(),
        first_damage_offset: reader.damage().first().map(|d| d.offset),
        dropped_events: dropped.values().sum(),
    };
    let relevant = |e: &memwatch_wire::Event| {
        matches!(e.kind(), Some(EventKind::Alloc) | Some(EventKind::Free))
            && e.mem_kind().is_some_and(MemKind::occupies_device_memory)
    };
    let device = pick_device(
        events.iter().filter(|e| relevant(e)).map(|e| e.device),
        device,
        |devices| TraceError::SeveralDevices { devices },
    )?;
    let mut b = Builder::default();
    // Key frees by (pid, ptr): pointers are per process.
    let mut ptr_ids: HashMap<(u32, u64), u64> = HashMap::new();
    let mut next_id = 0u64;
    for (i, e) in events.iter().enumerate() {
        if !relevant(e) || e.device != device {
            continue;
        }
        match e.kind() {
            Some(EventKind::Alloc) => {
                let id = next_id;
                next_id += 1;
                if let Some(old) = ptr_ids.insert((e.pid, e.ptr), id) {
                    // The pointer was reused without a recorded free (dropped events): end
                    // the old buffer first so the live set stays truthful.
                    b.free(old, i + 1)?;
                }
                b.alloc(id, e.size, None, i + 1)?;
            }
            Some(EventKind::Free) => {
                // Frees of pointers allocated before the capture started are ignored.
                if let Some(id) = ptr_ids.remove(&(e.pid, e.ptr)) {
                    b.free(id, i + 1)?;
                }
            }
            _ => {}
        }
    }
    if b.ops.is_empty() {
        return Err(TraceError::Empty);
    }
    let mut t = b.finish("mwcap");
    t.meta.gaps = gaps;
    if let Some((total, name)) = infos.get(&device) {
        t.meta.device_total_bytes = Some(*total);
        t.meta.device_name = Some(name.clone());
    }
    Ok(t)
}
