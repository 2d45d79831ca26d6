//! Sampled native backtraces (`MEMWATCH_BACKTRACE_EVERY_BYTES=N`).
//!
//! Owns the per-thread byte budget, the stack walk and its hand-off to the flusher, and
//! (flusher side) turning queued backtrace slots into `backtrace` frames plus the
//! `module_map` frame that lets `memwatch report` symbolize them offline.
//!
//! Hot path: every successful allocation subtracts its size from the thread's budget;
//! when the budget is used up (about every N bytes, like heap profilers' sampling), the
//! caller's stack is walked by frame pointers. The walk starts from what the x86-64 entry
//! trampoline of the outermost hooked function saved (the program's return address,
//! frame pointer and stack pointer at the call; `hooks`), so the shim's own code needs no
//! frame pointers. It reads only stack memory between the caller's stack pointer and the
//! thread's stack top, requires the chain to grow upwards, and stops after
//! [`MAX_FRAMES`]: code built without frame pointers gives a short (or just the
//! call-site) stack, never a fault; a call made on another stack than the thread's (a
//! fiber) gets its call site only. No heap allocation per sample; the stack bounds are
//! found once per thread (`__libc_stack_end` and the stack rlimit for the main thread,
//! `pthread_getattr_np`, which allocates a small cpuset once, for others). The frames travel in the thread's own ring
//! as up to four extra slots of kind [`SLOT_KIND`] right after the allocation event.

use crate::rt::ThreadState;
use core::sync::atomic::{AtomicU64, Ordering};
use memwatch_wire::{Backtrace, Event, Module, ModuleMap};

/// Most return addresses kept per sample.
pub const MAX_FRAMES: usize = 16;
/// Frames per ring slot (in `size`, `stream`, `aux`, `duration_ns`).
const PER_SLOT: usize = 4;
/// Event kind of a backtrace slot: internal to the shim, never written as an event.
pub const SLOT_KIND: u8 = 0xB1;

static EVERY: AtomicU64 = AtomicU64::new(0);

/// Sets the sampling interval in bytes (0: off). Called once at start-up.
pub fn configure(every_bytes: u64) {
    EVERY.store(every_bytes.min(i64::MAX as u64), Ordering::Relaxed);
}

/// Whether backtraces are sampled.
#[inline]
pub fn enabled() -> bool {
    EVERY.load(Ordering::Relaxed) != 0
}

/// Accounts an allocation of `size` bytes of the calling thread; true when its stack
/// is to be sampled (the thread's byte budget is used up; it starts over at N).
#[inline]
pub(crate) fn due(t: &ThreadState, size: u64) -> bool {
    let left = t
        .bt_budget
        .get()
        .saturating_sub(size.min(i64::MAX as u64) as i64);
    if left > 0 {
        t.bt_budget.set(left);
        return false;
    }
    t.bt_budget
        .set(EVERY.load(Ordering::Relaxed).min(i64::MAX as u64) as i64);
    true
}

extern "C" {
    /// glibc: the stack pointer at process start (above every frame of the main thread).
    static __libc_stack_end: *mut core::ffi::c_void;
}

/// The calling thread's stack as (lowest, highest) address; (0, 0) when unknown. The
/// walk only runs when the caller's stack pointer lies inside, so everything between it
/// and the top is mapped stack (a call made on another stack, e.g. a fiber's, gets only
/// its call site).
#[cold]
fn stack_bounds() -> (u64, u64) {
    // SAFETY: plain libc calls on the calling thread; the attr is destroyed.
    unsafe {
        if libc::syscall(libc::SYS_gettid) as i64 == libc::getpid() as i64 {
            // The main thread's stack grows down from __libc_stack_end, at most by the
            // stack size limit.
            let top = __libc_stack_end as u64;
            let mut lim: libc::rlimit = core::mem::zeroed();
            let max = if libc::getrlimit(libc::RLIMIT_STACK, &mut lim) == 0
                && lim.rlim_cur != libc::RLIM_INFINITY
            {
                lim.rlim_cur
            } else {
                1 << 30
            };
            return (top.saturating_sub(max), top);
        }
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return (0, 0);
        }
        let mut addr: *mut core::ffi::c_void = core::ptr::null_mut();
        let mut size: usize = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if ok {
            (addr as u64, (addr as u64).saturating_add(size as u64))
        } else {
            (0, 0)
        }
    }
}

/// Walks the program's frames from the saved entry state into `out`; returns the count.
fn walk(t: &ThreadState, out: &mut [u64; MAX_FRAMES]) -> usize {
    let ret = t.caller_ret.get();
    if ret == 0 {
        return 0;
    }
    out[0] = ret;
    let mut n = 1;
    if t.stack_top.get() == 0 {
        let (lo, hi) = stack_bounds();
        t.stack_lo.set(lo);
        t.stack_top.set(hi);
    }
    let (lo, hi) = (t.caller_sp.get(), t.stack_top.get());
    if lo < t.stack_lo.get() || lo >= hi {
        return n;
    }
    let mut fp = t.caller_fp.get();
    while n < MAX_FRAMES {
        if fp < lo || !fp.is_multiple_of(8) || fp.checked_add(16).is_none_or(|e| e > hi) {
            break;
        }
        // SAFETY: [fp, fp + 16) lies between the caller's stack pointer and the top of
        // this thread's stack, which is mapped.
        let (next, r) = unsafe { (*(fp as *const u64), *((fp + 8) as *const u64)) };
        if r == 0 {
            break;
        }
        if let Some(slot) = out.get_mut(n) {
            *slot = r;
        }
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

/// Queues `ev` preceded by its stack's slots, all published at once in the thread's
/// ring (a flush never sees half a group). False when that was not possible (no own
/// ring, no room, nothing to walk): the caller queues `ev` alone.
#[cold]
#[inline(never)]
pub(crate) fn push_with_stack(t: &ThreadState, ev: &Event) -> bool {
    let Some(ring) = crate::rt::thread_ring(t) else {
        return false;
    };
    let mut frames = [0u64; MAX_FRAMES];
    let n = walk(t, &mut frames);
    if n == 0 {
        return false;
    }
    let mut group = [Event::default(); MAX_FRAMES / PER_SLOT + 1];
    let mut len = 0;
    for (i, chunk) in frames[..n].chunks(PER_SLOT).enumerate() {
        let f = |k: usize| chunk.get(k).copied().unwrap_or(0);
        if let Some(g) = group.get_mut(len) {
            *g = Event {
                ts_ns: ev.ts_ns,
                ptr: ev.ptr,
                size: f(0),
                stream: f(1),
                aux: f(2),
                duration_ns: f(3),
                pid: ev.pid,
                tid: ev.tid,
                result: n as i32,
                device: i as i32,
                kind: SLOT_KIND,
                mem_kind: 0,
                api: chunk.len() as u16,
            };
            len += 1;
        }
    }
    if let Some(g) = group.get_mut(len) {
        *g = *ev;
        len += 1;
    }
    ring.push_group(group.get(..len).unwrap_or(&[]))
}

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
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut core::ffi::c_void,
    ) -> core::ffi::c_int {
        // SAFETY: dl_iterate_phdr passes valid headers and our accumulator.
        let (info, acc) = unsafe { (&*info, &mut *(data as *mut Acc)) };
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
        // SAFETY: dlpi_name is NUL-terminated when not NULL.
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
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
            kind: 1,
            size: 64,
            ..Event::default()
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
