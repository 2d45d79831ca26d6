//! Copied function pointers for late attach: find the hooked functions' real addresses
//! stored in the loaded objects' static data, point them at the shim's wrappers, and put
//! them back on detach.
//!
//! GOT patching (`got_patch`) redirects calls that go through an object's relocations.
//! Many GPU stacks call through pointers they looked up once and kept instead: XLA's and
//! TensorFlow's driver stubs (`static auto func_ptr = LoadSymbol("cuMemCreate")` in each
//! stub function), a table of `dlsym` results in `.data` / `.bss`, or a pointer a
//! relocation stored in `.data.rel.ro` (`int (*p)(int) = cuMemAlloc_v2;`). A late attach
//! saw none of those calls. This module reads every word of every loaded object's
//! writable segments (`PT_LOAD` with `PF_W`, which holds `.data`, `.bss` and the RELRO
//! part) and replaces each word that equals a hooked function's real address with the
//! wrapper's address, with a compare-and-swap so a word that changed meanwhile is left
//! alone. [`restore`] puts the real address back where the word still holds the wrapper.
//!
//! What it does not touch: the shim itself; in each object, the addresses of functions
//! that object defines (a runtime that calls itself through its own table must not land
//! in the wrapper, which calls that runtime again); pages that are not readable now
//! (checked against /proc/self/maps); pointers on the heap or the stack (a framework
//! that keeps its pointers in a heap-allocated table, or in a local variable, stays
//! invisible). A word that equals a function's entry address but is not used as a
//! pointer to it (an address used as a key) would be changed for the attach's duration.
//!
//! Owns only the scan and the writes; runs once per attach/detach (never on the hook
//! path), so it may allocate.

use crate::got_patch::{self, mapping_of, Mapping};
use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A hooked function: where calls go now, and where they should go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub real: usize,
    pub wrapper: usize,
}

/// One redirected word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// Address of the word.
    pub slot: usize,
    /// The real function's address it held.
    pub original: usize,
    /// The wrapper's address it holds now.
    pub wrapper: usize,
    /// The object whose data holds it (empty for the main program).
    pub object: String,
}

/// What one scan found and did.
#[derive(Debug, Default)]
pub struct Scanned {
    /// The words changed.
    pub redirects: Vec<Redirect>,
    /// Words found that could not be written.
    pub failures: usize,
    /// Bytes of static data read.
    pub bytes: usize,
}

/// The readable mappings of this process, sorted.
fn readable_mappings() -> Vec<Mapping> {
    let mut maps = got_patch::mappings();
    maps.retain(|m| m.prot & libc::PROT_READ != 0);
    maps
}

struct Scan<'a> {
    /// Sorted by `real`.
    targets: &'a [Target],
    skip_addr: usize,
    maps: Vec<Mapping>,
    out: Scanned,
}

/// Replaces, in every loaded object except the one containing `skip_addr` (an address
/// inside the shim), each aligned word of static data that holds one of the targets'
/// real addresses by that target's wrapper.
///
/// # Safety
/// Writes into other objects' data; each wrapper must be ABI-compatible with the real
/// function it stands for.
pub unsafe fn redirect_copies(targets: &[Target], skip_addr: usize) -> Scanned {
    // SAFETY: the callback reads the loader's headers and writes only through `swap_word` (contract above).
    unsafe {
        let mut sorted: Vec<Target> = targets
            .iter()
            .copied()
            .filter(|t| t.real != 0 && t.wrapper != 0 && t.real != t.wrapper)
            .collect();
        sorted.sort_by_key(|t| t.real);
        sorted.dedup_by_key(|t| t.real);
        if sorted.is_empty() {
            return Scanned::default();
        }
        let mut scan = Scan {
            targets: &sorted,
            skip_addr,
            maps: readable_mappings(),
            out: Scanned::default(),
        };
        libc::dl_iterate_phdr(Some(phdr_cb), &mut scan as *mut Scan as *mut c_void);
        scan.out
    }
}

/// Puts the real address back in every word that still holds the wrapper (a word the
/// program changed meanwhile is left alone). Returns how many were restored.
///
/// # Safety
/// `redirects` must come from [`redirect_copies`] and their objects must still be loaded.
pub unsafe fn restore(redirects: &[Redirect]) -> usize {
    // SAFETY: each slot is a word `redirect_copies` wrote, in an object still loaded (contract above).
    unsafe {
        let maps = readable_mappings();
        redirects
            .iter()
            .filter(|r| swap_word(r.slot, r.wrapper, r.original, &maps))
            .count()
    }
}

/// Compare-and-swap of one word, making its page writable for the store when it is not
/// (the RELRO part) and giving it its protection back after.
/// # Safety
/// `slot` is an aligned word of a loaded object's static data.
unsafe fn swap_word(slot: usize, from: usize, to: usize, maps: &[Mapping]) -> bool {
    // SAFETY: `slot` lies in the mapping `maps` names for it, aligned; see `with_writable_word`.
    unsafe {
        let Some(m) = mapping_of(maps, slot) else {
            return false;
        };
        got_patch::with_writable_word(slot, m.prot, |word| {
            word.compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }
}

/// `dl_iterate_phdr` callback around [`phdr_cb_visit`]; a panic in it is caught (an
/// unwind must not cross the C library), answering 0 (go on).
///
/// # Safety
/// Called by `dl_iterate_phdr` with its header and our `data`.
unsafe extern "C" fn phdr_cb(
    info: *mut libc::dl_phdr_info,
    size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: the arguments `dl_iterate_phdr` passes (contract above).
    crate::panic_guard::catch(|| unsafe { phdr_cb_visit(info, size, data) }).unwrap_or(0)
}

/// [`phdr_cb`]'s work for one object.
///
/// # Safety
/// As for [`phdr_cb`].
unsafe fn phdr_cb_visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: the loader's header and our `Scan` (contract above); only readable mappings are read, words written through `swap_word`.
    unsafe {
        let scan = &mut *(data as *mut Scan);
        let info = &*info;
        let base = info.dlpi_addr as usize;
        let phdrs = core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
        let loads = || phdrs.iter().filter(|ph| ph.p_type == libc::PT_LOAD);
        let range = |ph: &libc::Elf64_Phdr| {
            let lo = base + ph.p_vaddr as usize;
            (lo, lo + ph.p_memsz as usize)
        };
        let inside = |addr: usize| {
            loads().any(|ph| {
                let (lo, hi) = range(ph);
                addr >= lo && addr < hi
            })
        };
        if inside(scan.skip_addr) {
            return 0;
        }
        let Some(name) = got_patch::object_name(info) else {
            return 0;
        };
        // The functions this object defines are left alone in its own data.
        let own: Vec<bool> = scan.targets.iter().map(|t| inside(t.real)).collect();
        if own.iter().all(|&o| o) {
            return 0;
        }
        let page = got_patch::page_size();
        for ph in loads().filter(|ph| ph.p_flags & libc::PF_W != 0) {
            let (lo, hi) = range(ph);
            let mut addr = (lo + 7) & !7;
            while addr + 8 <= hi {
                // Walk the segment one readable mapping at a time.
                let Some(m) = mapping_of(&scan.maps, addr) else {
                    addr = next_mapped(&scan.maps, addr, hi);
                    continue;
                };
                let end = m.end.min(hi);
                for (from, to) in resident_runs(addr, end, page) {
                    scan.out.bytes += to - from;
                    scan_words(scan, &own, &name, from, to);
                }
                addr = end;
            }
        }
        0
    }
}

/// The parts of `[from, to)` (8-aligned) whose pages are in memory (`mincore`). A page
/// of `.bss` never written, or of `.data` never relocated or written, cannot hold an
/// address that was only known at run time, and reading it would fault it in (a large
/// framework's `.bss`: ~140,000 faults, 0.6 s of the attach pause). A page swapped out
/// is skipped as well. When `mincore` fails, the whole range.
fn resident_runs(from: usize, to: usize, page: usize) -> Vec<(usize, usize)> {
    let first = from & !(page - 1);
    let pages = (to - first).div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `first` is page-aligned, the range lies in one mapping, `vec` has one byte
    // per page.
    let ok = unsafe { libc::mincore(first as *mut c_void, to - first, vec.as_mut_ptr()) } == 0;
    if !ok {
        return vec![(from, to)];
    }
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, v) in vec.iter().enumerate() {
        if v & 1 == 0 {
            continue;
        }
        let (a, b) = (
            (first + i * page).max(from),
            (first + (i + 1) * page).min(to),
        );
        match runs.last_mut() {
            Some(last) if last.1 == a => last.1 = b,
            _ => runs.push((a, b)),
        }
    }
    runs
}

/// Redirects the targets' addresses found in the words of `[addr, end)`.
/// # Safety
/// `[addr, end)` is readable memory of a loaded object.
unsafe fn scan_words(scan: &mut Scan, own: &[bool], name: &str, mut addr: usize, end: usize) {
    // SAFETY: `[addr, end)` lies in a readable mapping of a loaded object (the caller checked).
    unsafe {
        let (lowest, highest) = (
            scan.targets[0].real,
            scan.targets[scan.targets.len() - 1].real,
        );
        while addr + 8 <= end {
            let v = (*(addr as *const AtomicUsize)).load(Ordering::Relaxed);
            if v >= lowest && v <= highest {
                if let Ok(i) = scan.targets.binary_search_by_key(&v, |t| t.real) {
                    if !own[i] {
                        let w = scan.targets[i].wrapper;
                        if swap_word(addr, v, w, &scan.maps) {
                            scan.out.redirects.push(Redirect {
                                slot: addr,
                                original: v,
                                wrapper: w,
                                object: name.to_owned(),
                            });
                        } else {
                            scan.out.failures += 1;
                        }
                    }
                }
            }
            addr += 8;
        }
    }
}

/// The first 8-aligned address at or after `addr` inside a readable mapping (or `hi`).
fn next_mapped(maps: &[Mapping], addr: usize, hi: usize) -> usize {
    let i = maps.partition_point(|m| m.start <= addr);
    maps.get(i)
        .map_or(hi, |m| ((m.start + 7) & !7).min(hi))
        .max(addr + 8)
}
