//! The `pjrt_executable` frames: one per loaded executable, written by the sink (under
//! its lock) once the compiling thread has described it (`registry`).

use super::registry;
use memwatch_wire::{encode_record, PjrtExecutable, Record};

/// Encodes `pjrt_executable` frames for executables not yet written (sink, under its
/// lock). `write` returns whether the bytes were delivered.
pub fn pending_frames(mut write: impl FnMut(&[u8]) -> bool) {
    let conv = crate::clock::Converter::sample();
    let pid = crate::record::state::pid();
    registry::drain_new_execs(|handle, i| {
        let x = PjrtExecutable {
            pid,
            ts_ns: conv.ts(i.ts_raw),
            handle,
            flags: i.flags,
            stats: i.stats,
            devices: i.devices[..(i.num_devices as usize).min(registry::EXEC_DEVICES)].to_vec(),
            name: String::from_utf8_lossy(&i.name[..i.name_len as usize]).into_owned(),
            fingerprint: String::from_utf8_lossy(&i.fp[..i.fp_len as usize]).into_owned(),
        };
        let mut out = Vec::new();
        encode_record(&Record::PjrtExecutable(x), &mut out).is_ok() && write(&out)
    });
}
