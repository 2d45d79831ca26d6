//! Which output of its executable each PJRT execute output buffer is: the one rule every
//! reader uses (the daemon's ingest, any analysis of a capture). The shim records the
//! index in the event ([`Event::pjrt_output_index`]); captures made before it did are
//! read by the order of the call's outputs: the shim pushes a call's outputs in order
//! 0..n per device, each stamped with the call's start, so the outputs of one call are
//! the consecutive output events of one (process, executable, device) with the same
//! stamp, numbered from 0. Two threads running the same executable on the same device at
//! once could interleave their outputs; such outputs are numbered as they come.

use std::collections::HashMap;

use memwatch_wire::{Api, Event};

/// Numbers execute outputs in the order they come; feed it a capture's events in order.
/// Holds one entry per (process, executable, device).
#[derive(Debug, Default)]
pub struct OutputOrder {
    last: HashMap<(u32, u64, i32), (u64, u32)>,
}

impl OutputOrder {
    /// The output index of `e` when it is a PJRT execute output (recorded, else derived
    /// from the order of its call's outputs); `None` for any other event.
    pub fn index(&mut self, e: &Event) -> Option<u32> {
        if e.api != Api::PjrtExecuteOutput as u16 {
            return None;
        }
        let key = (e.pid, e.aux, e.device);
        let i = match (e.pjrt_output_index(), self.last.get(&key)) {
            (Some(i), _) => i,
            (None, Some(&(ts, next))) if ts == e.ts_ns => next,
            (None, _) => 0,
        };
        self.last.insert(key, (e.ts_ns, i.saturating_add(1)));
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwatch_wire::{EventKind, MemKind};

    fn out(producer: u64, device: i32, ts: u64, recorded: Option<u32>) -> Event {
        let mut e = Event {
            aux: producer,
            device,
            ts_ns: ts,
            pid: 7,
            ..Event::new(
                EventKind::Alloc,
                MemKind::PjrtBuffer,
                Api::PjrtExecuteOutput,
            )
        };
        if let Some(i) = recorded {
            e.set_pjrt_output_index(i);
        }
        e
    }

    #[test]
    fn numbers_each_calls_outputs_per_device_from_zero() {
        let mut o = OutputOrder::default();
        let evs = [
            out(1, 0, 100, None),
            out(1, 0, 100, None),
            out(2, 0, 100, None), // another executable, same stamp
            out(1, 1, 100, None), // another device
            out(1, 0, 100, None),
            out(1, 0, 200, None), // the next call
            out(1, 1, 100, None),
        ];
        let got: Vec<_> = evs.iter().map(|e| o.index(e)).collect();
        let want = [0, 1, 0, 0, 2, 0, 1].map(Some);
        assert_eq!(got, want);
    }

    #[test]
    fn a_recorded_index_wins_and_other_events_have_none() {
        let mut o = OutputOrder::default();
        assert_eq!(o.index(&out(1, 0, 5, Some(3))), Some(3));
        assert_eq!(o.index(&out(1, 0, 5, None)), Some(4));
        let host = Event::new(
            EventKind::Alloc,
            MemKind::PjrtBuffer,
            Api::PjrtBufferFromHostBuffer,
        );
        assert_eq!(o.index(&host), None);
    }
}
