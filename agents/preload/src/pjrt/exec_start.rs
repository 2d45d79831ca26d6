//! One converted start time per PJRT execute, shared by its two events.
//!
//! An execute is recorded twice: `PJRT_LoadedExecutable_Execute` when the call returns
//! and `…:complete` when the device has finished (a callback, maybe much later, maybe on
//! another thread). Both carry the execute's start as their raw clock value, and readers
//! (the report, the daemon) pair them by equal start times. The flusher converts raw
//! values with a fresh clock sample per pass, so the same raw value converted in two
//! passes could differ by a few hundred ns and the pair was lost. This table, owned by
//! the flusher (under the sink lock), remembers the converted start of the first of the
//! two events it sees and hands it to the second. It is a fixed ring (no allocation);
//! an execute whose completion never comes (completion events off, or the caller asked
//! for none) is pushed out by newer ones.

use memwatch_wire::{Api, Event};

/// Executes whose first event was converted and whose second is still to come.
const SLOTS: usize = 1024;

#[derive(Clone, Copy)]
struct Entry {
    raw: u64,
    handle: u64,
    device: i32,
    ns: u64,
}

pub struct ExecStarts {
    entries: [Entry; SLOTS],
    next: usize,
}

impl Default for ExecStarts {
    fn default() -> Self {
        Self::new()
    }
}

impl ExecStarts {
    pub const fn new() -> Self {
        ExecStarts {
            entries: [Entry {
                raw: 0,
                handle: 0,
                device: 0,
                ns: 0,
            }; SLOTS],
            next: 0,
        }
    }

    /// The converted start for `e` (an event still holding its raw start in `ts_ns`),
    /// given `converted` by this pass's clock sample: the value its partner event got,
    /// when that one was converted first.
    pub fn start_of(&mut self, e: &Event, converted: u64) -> u64 {
        if !matches!(e.api(), Api::PjrtExecute | Api::PjrtExecuteComplete) || e.ts_ns == 0 {
            return converted;
        }
        let found = self
            .entries
            .iter_mut()
            .find(|x| x.raw == e.ts_ns && x.handle == e.ptr && x.device == e.device);
        if let Some(x) = found {
            x.raw = 0; // the pair is complete
            return x.ns;
        }
        if let Some(slot) = self.entries.get_mut(self.next) {
            *slot = Entry {
                raw: e.ts_ns,
                handle: e.ptr,
                device: e.device,
                ns: converted,
            };
        }
        self.next = (self.next + 1) % SLOTS;
        converted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwatch_wire::{EventKind, MemKind};

    fn ev(api: Api, raw: u64, handle: u64, device: i32) -> Event {
        Event {
            ts_ns: raw,
            ptr: handle,
            device,
            ..Event::new(EventKind::ApiSpan, MemKind::None, api)
        }
    }

    #[test]
    fn the_second_event_of_an_execute_gets_the_first_ones_start() {
        let mut t = ExecStarts::new();
        // The execute converted in one pass, its completion in a later one.
        assert_eq!(t.start_of(&ev(Api::PjrtExecute, 500, 0xa, 0), 1_000), 1_000);
        assert_eq!(t.start_of(&ev(Api::PjrtExecute, 500, 0xa, 1), 1_001), 1_001);
        assert_eq!(
            t.start_of(&ev(Api::PjrtExecuteComplete, 500, 0xa, 1), 1_180),
            1_001
        );
        assert_eq!(
            t.start_of(&ev(Api::PjrtExecuteComplete, 500, 0xa, 0), 1_180),
            1_000
        );
        // The completion may come first (another thread, an earlier pass).
        assert_eq!(
            t.start_of(&ev(Api::PjrtExecuteComplete, 900, 0xb, 0), 2_000),
            2_000
        );
        assert_eq!(t.start_of(&ev(Api::PjrtExecute, 900, 0xb, 0), 2_150), 2_000);
        // Other events, and a pair already matched, are converted as given.
        assert_eq!(t.start_of(&ev(Api::CuMemAlloc, 500, 0xa, 0), 7), 7);
        assert_eq!(t.start_of(&ev(Api::PjrtExecute, 500, 0xa, 0), 1_300), 1_300);
    }

    #[test]
    fn unpaired_executes_are_pushed_out_by_newer_ones() {
        let mut t = ExecStarts::new();
        for i in 1..=(SLOTS as u64 + 1) {
            t.start_of(&ev(Api::PjrtExecute, i, 0xa, 0), i * 10);
        }
        // The oldest was overwritten; the newest is still there.
        assert_eq!(t.start_of(&ev(Api::PjrtExecuteComplete, 1, 0xa, 0), 99), 99);
        let last = SLOTS as u64 + 1;
        assert_eq!(
            t.start_of(&ev(Api::PjrtExecuteComplete, last, 0xa, 0), 5),
            last * 10
        );
    }
}
