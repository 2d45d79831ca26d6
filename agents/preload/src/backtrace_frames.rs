//! Sampled backtraces, flusher side: turning the stack slots queued by
//! `record::stack_sample` into `backtrace` frames, and the `module_map` frame (every
//! loaded object's path, address range and load bias) that lets `memwatch report`
//! symbolize them offline.

use crate::record::stack_sample::{MAX_FRAMES, PER_SLOT, SLOT_KIND};
use memwatch_wire::{Backtrace, Event, Module, ModuleMap};

/// Flusher side: moves the backtrace slots out of `events` (in drain order, each
/// sample's slots together, right before its allocation) into whole [`Backtrace`]s.
pub fn split(events: &mut Vec<Event>, out: &mut Vec<Backtrace>) {
    if !events.iter().any(|e| e.kind == SLOT_KIND) {
        return;
    }
    events.retain(|e| {
        if e.kind != SLOT_KIND {
            return true;
        }
        let frames = [e.size, e.stream, e.aux, e.duration_ns];
        let take = (e.api as usize).min(PER_SLOT);
        let same = out.last().is_some_and(|b: &Backtrace| {
            e.device > 0 && b.tid == e.tid && b.ts_ns == e.ts_ns && b.ptr == e.ptr
        });
        if !same {
            out.push(Backtrace {
                pid: e.pid,
                tid: e.tid,
                ts_ns: e.ts_ns,
                ptr: e.ptr,
                frames: Vec::with_capacity(e.result.clamp(0, MAX_FRAMES as i32) as usize),
            });
        }
        if let Some(b) = out.last_mut() {
            b.frames
                .extend_from_slice(frames.get(..take).unwrap_or(&[]));
        }
        false
    });
}

/// The loaded objects now, and the loader's (adds, subs) counters they reflect.
pub fn module_map(pid: u32, ts_ns: u64) -> (ModuleMap, u64) {
    struct Acc {
        modules: Vec<Module>,
        generation: u64,
    }
    /// # Safety
    /// Called by `dl_iterate_phdr` with its header and our accumulator.
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut core::ffi::c_void,
    ) -> core::ffi::c_int {
        // SAFETY: dl_iterate_phdr passes valid headers and our accumulator.
        let (info, acc) = unsafe { (&*info, &mut *(data as *mut Acc)) };
        // A panic must not unwind into the C library: caught, the object is skipped.
        // SAFETY: the loader's header of a loaded object.
        crate::panic_guard::catch(|| unsafe { visit(info, acc) }).unwrap_or(0)
    }
    /// # Safety
    /// `info` is a header `dl_iterate_phdr` passed (its pointers valid during the call).
    unsafe fn visit(info: &libc::dl_phdr_info, acc: &mut Acc) -> core::ffi::c_int {
        acc.generation = info.dlpi_adds.wrapping_add(info.dlpi_subs);
        let bias = info.dlpi_addr;
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: i < dlpi_phnum.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD {
                lo = lo.min(bias.wrapping_add(ph.p_vaddr));
                hi = hi.max(bias.wrapping_add(ph.p_vaddr).wrapping_add(ph.p_memsz));
            }
        }
        if lo >= hi {
            return 0;
        }
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            // SAFETY: dlpi_name is NUL-terminated when not NULL.
            unsafe { core::ffi::CStr::from_ptr(info.dlpi_name) }
                .to_string_lossy()
                .into_owned()
        };
        let path = if name.is_empty() {
            // The main program.
            std::fs::read_link("/proc/self/exe")
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            name
        };
        acc.modules.push(Module {
            start: lo,
            end: hi,
            bias,
            path,
        });
        0
    }
    let mut acc = Acc {
        modules: Vec::new(),
        generation: 0,
    };
    // SAFETY: the callback only reads the headers and writes the accumulator.
    unsafe { libc::dl_iterate_phdr(Some(cb), (&mut acc as *mut Acc).cast()) };
    (
        ModuleMap {
            pid,
            ts_ns,
            modules: acc.modules,
        },
        acc.generation,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reassembled_per_allocation() {
        let slot = |tid, ts, idx, frames: &[u64], total| Event {
            ts_ns: ts,
            ptr: 0x1000 + ts,
            size: frames.first().copied().unwrap_or(0),
            stream: frames.get(1).copied().unwrap_or(0),
            aux: frames.get(2).copied().unwrap_or(0),
            duration_ns: frames.get(3).copied().unwrap_or(0),
            tid,
            result: total,
            device: idx,
            kind: SLOT_KIND,
            api: frames.len() as u16,
            ..Event::default()
        };
        let alloc = Event {
            size: 64,
            ..Event::new(
                memwatch_wire::EventKind::Alloc,
                memwatch_wire::MemKind::Device,
                memwatch_wire::Api::HipMalloc,
            )
        };
        let mut evs = vec![
            slot(5, 10, 0, &[1, 2, 3, 4], 6),
            slot(5, 10, 1, &[5, 6], 6),
            alloc,
            slot(6, 11, 0, &[9], 1),
            alloc,
        ];
        let mut bts = Vec::new();
        split(&mut evs, &mut bts);
        assert_eq!(evs, vec![alloc, alloc]);
        assert_eq!(bts.len(), 2);
        assert_eq!(bts[0].frames, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!((bts[0].tid, bts[0].ts_ns, bts[0].ptr), (5, 10, 0x100a));
        assert_eq!(bts[1].frames, vec![9]);
    }

    #[test]
    fn module_map_lists_this_program() {
        let (m, generation) = module_map(1, 2);
        assert!(generation > 0);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let here = module_map as *const () as usize as u64;
        let me = m
            .modules
            .iter()
            .find(|x| x.start <= here && here < x.end)
            .expect("this function's module");
        assert_eq!(me.path, exe.to_string_lossy());
    }
}
