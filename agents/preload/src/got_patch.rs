//! GOT patching for late attach: redirect already-linked calls of loaded objects to the
//! shim's wrappers, and put them back on detach.
//!
//! When the shim is `dlopen`ed into a running process (`memwatch attach`), symbol
//! interposition is too late: every object already bound `hipMalloc`, `cuMemAlloc_v2`,
//! `dlsym`, ... to the real definitions through its GOT. This module walks the loaded
//! objects (`dl_iterate_phdr`), reads each one's dynamic relocations (`DT_JMPREL` and
//! `DT_RELA`, x86-64 `R_X86_64_JUMP_SLOT` / `R_X86_64_GLOB_DAT`, plus the AArch64
//! equivalents), and for every relocation of a hooked name stores the wrapper's address
//! in the GOT slot (making RELRO pages writable for the store and read-only again after).
//! Each patch remembers the slot's previous value so [`unpatch`] restores it exactly.
//!
//! Limits (documented for users): function pointers a program copied out earlier (from
//! `dlsym`, `hipGetProcAddress`, `cuGetProcAddress`, or by taking `&hipMalloc`) are not
//! relocations; those kept in static data are the `pointer_scan` module's job, those on
//! the heap or the stack cannot be found, which is why attach records a pre-attach
//! baseline. Objects linked with
//! `-Bsymbolic` or calling through protected symbols bypass their GOT, as they bypass
//! LD_PRELOAD.
//!
//! Owns only the GOT walk and writes; it knows nothing about events or the wrappers'
//! behaviour. Runs once per attach/detach (never on the hook path), so it may allocate.

use core::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// An entry of the dynamic section (`Elf64_Dyn`; the libc crate does not define it).
#[repr(C)]
struct Elf64Dyn {
    d_tag: i64,
    d_un: u64,
}

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_JMPREL: i64 = 23;

#[cfg(target_arch = "x86_64")]
const GOT_RELOCS: [u32; 2] = [7 /* JUMP_SLOT */, 6 /* GLOB_DAT */];
#[cfg(target_arch = "aarch64")]
const GOT_RELOCS: [u32; 2] = [1026 /* JUMP_SLOT */, 1025 /* GLOB_DAT */];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const GOT_RELOCS: [u32; 2] = [u32::MAX, u32::MAX];

/// One hooked name and the address calls should go to instead.
#[derive(Debug, Clone, Copy)]
pub struct Hook<'a> {
    pub name: &'a [u8],
    pub wrapper: usize,
}

/// One patched GOT slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// Address of the GOT slot.
    pub slot: usize,
    /// What the slot held before (the real function, or the object's own PLT stub when
    /// the symbol was not yet bound lazily).
    pub original: usize,
    /// Index into the hooks passed to [`patch_loaded`].
    pub hook: usize,
    /// The patched object's name (empty for the main program).
    pub object: String,
}

struct Walk<'a, 'b> {
    hooks: &'a [Hook<'b>],
    /// Objects containing this address are skipped (the shim itself).
    skip_addr: usize,
    patches: Vec<Patch>,
    failures: usize,
}

/// Patches every GOT slot, in every loaded object except the one containing
/// `skip_addr` (pass an address inside the shim), whose relocation names a hooked
/// symbol. Returns the patches made and the number of slots that could not be written.
///
/// # Safety
/// Writes into other objects' GOTs; the wrappers must be ABI-compatible with the
/// functions they replace.
pub unsafe fn patch_loaded(hooks: &[Hook<'_>], skip_addr: usize) -> (Vec<Patch>, usize) {
    // SAFETY: the callback only reads the loader's headers and writes our `walk`.
    unsafe {
        let mut walk = Walk {
            hooks,
            skip_addr,
            patches: Vec::new(),
            failures: 0,
        };
        libc::dl_iterate_phdr(Some(phdr_cb), &mut walk as *mut Walk as *mut c_void);
        (walk.patches, walk.failures)
    }
}

/// Restores every slot to the value it had before patching (only where the slot still
/// holds our wrapper, so a later rebinding by someone else is left alone). Returns how
/// many were restored.
///
/// # Safety
/// `patches` must come from [`patch_loaded`] with the same hooks, and the objects must
/// still be loaded.
pub unsafe fn unpatch(patches: &[Patch], hooks: &[Hook<'_>]) -> usize {
    // SAFETY: each slot is a GOT word `patch_loaded` wrote, in an object still loaded (contract above).
    unsafe {
        let mut n = 0;
        for p in patches {
            let Some(h) = hooks.get(p.hook) else { continue };
            let slot = &*(p.slot as *const AtomicUsize);
            if slot.load(Ordering::Acquire) == h.wrapper && write_slot(p.slot, p.original) {
                n += 1;
            }
        }
        n
    }
}

/// Stores `value` into a GOT slot, making its page writable first if needed. The page's
/// protection is read afresh for every slot: a snapshot taken before could call
/// writable a RELRO page that has been protected since, and the store would fault.
/// # Safety
/// `slot` is an aligned word of a loaded object's GOT.
unsafe fn write_slot(slot: usize, value: usize) -> bool {
    // SAFETY: `slot` is an aligned GOT word of a loaded object (contract above).
    unsafe {
        let prot =
            mapping_of(&mappings(), slot).map_or(libc::PROT_READ | libc::PROT_WRITE, |m| m.prot);
        // An aligned word store: concurrent callers see either the old or the new target.
        with_writable_word(slot, prot, |word| {
            word.store(value, Ordering::Release);
            true
        })
    }
}

/// Runs `write` on the aligned word at `slot`, whose page has protection `prot` now:
/// a page without `PROT_WRITE` (RELRO) is made writable for it and given `prot` back
/// after. False when the page cannot be made writable, else what `write` returns.
///
/// # Safety
/// `slot` must be an aligned, mapped word.
pub unsafe fn with_writable_word(
    slot: usize,
    prot: c_int,
    write: impl FnOnce(&AtomicUsize) -> bool,
) -> bool {
    // SAFETY: `slot` is an aligned, mapped word (contract above); its page is made writable only for `write` and given its protection back.
    unsafe {
        let word = &*(slot as *const AtomicUsize);
        if prot & libc::PROT_WRITE != 0 {
            return write(word);
        }
        let page = page_size();
        let start = slot & !(page - 1);
        if libc::mprotect(start as *mut c_void, page, prot | libc::PROT_WRITE) != 0 {
            return false;
        }
        let done = write(word);
        libc::mprotect(start as *mut c_void, page, prot);
        done
    }
}

/// The system page size (4096 when sysconf cannot say).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// One mapping of this process, from /proc/self/maps.
#[derive(Debug, Clone, Copy)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    /// `PROT_READ` / `PROT_WRITE` / `PROT_EXEC` as the mapping has them now.
    pub prot: c_int,
}

/// This process's mappings, sorted by address (empty when /proc is not readable).
pub fn mappings() -> Vec<Mapping> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut out: Vec<Mapping> = maps.lines().filter_map(parse_mapping).collect();
    out.sort_by_key(|m| m.start);
    out
}

fn parse_mapping(line: &str) -> Option<Mapping> {
    let mut it = line.split_whitespace();
    let (range, perms) = (it.next()?, it.next()?);
    let (s, e) = range.split_once('-')?;
    let (start, end) = (
        usize::from_str_radix(s, 16).ok()?,
        usize::from_str_radix(e, 16).ok()?,
    );
    let b = perms.as_bytes();
    let mut prot = 0;
    if b.first() == Some(&b'r') {
        prot |= libc::PROT_READ;
    }
    if b.get(1) == Some(&b'w') {
        prot |= libc::PROT_WRITE;
    }
    if b.get(2) == Some(&b'x') {
        prot |= libc::PROT_EXEC;
    }
    Some(Mapping { start, end, prot })
}

/// The mapping of `maps` (sorted) holding the word at `addr`, when all 8 bytes lie in it.
pub fn mapping_of(maps: &[Mapping], addr: usize) -> Option<Mapping> {
    let i = maps.partition_point(|m| m.start <= addr);
    let m = maps.get(i.checked_sub(1)?)?;
    (addr >= m.start && addr + 8 <= m.end).then_some(*m)
}

/// A loaded object's name as `dl_iterate_phdr` gives it (empty for the main program);
/// `None` for the vDSO, which has nothing to patch.
///
/// # Safety
/// `info` must come from `dl_iterate_phdr`.
pub unsafe fn object_name(info: &libc::dl_phdr_info) -> Option<String> {
    // SAFETY: `dlpi_name` of a header from `dl_iterate_phdr` is NULL or NUL-terminated.
    unsafe {
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            CStr::from_ptr(info.dlpi_name)
                .to_string_lossy()
                .into_owned()
        };
        (!name.contains("linux-vdso")).then_some(name)
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

/// [`phdr_cb`]'s work for one loaded object.
///
/// # Safety
/// As for [`phdr_cb`].
unsafe fn phdr_cb_visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: `info` is the loader's header of a loaded object and `data` our `Walk` (contract above); its dynamic section, symbol, string and relocation tables are read within the sizes it states, and GOT slots are written only through `write_slot`.
    unsafe {
        let walk = &mut *(data as *mut Walk);
        let info = &*info;
        let base = info.dlpi_addr as usize;
        let mut dynamic: *const Elf64Dyn = core::ptr::null();
        let mut contains_skip = false;
        for i in 0..info.dlpi_phnum as usize {
            let ph = &*info.dlpi_phdr.add(i);
            let lo = base + ph.p_vaddr as usize;
            let hi = lo + ph.p_memsz as usize;
            if ph.p_type == libc::PT_DYNAMIC {
                dynamic = lo as *const Elf64Dyn;
            }
            if ph.p_type == libc::PT_LOAD && walk.skip_addr >= lo && walk.skip_addr < hi {
                contains_skip = true;
            }
        }
        if dynamic.is_null() || contains_skip {
            return 0;
        }
        let Some(name) = object_name(info) else {
            return 0;
        };
        let (mut strtab, mut symtab) = (0usize, 0usize);
        let (mut jmprel, mut pltrelsz, mut rela, mut relasz) = (0usize, 0usize, 0usize, 0usize);
        let mut d = dynamic;
        while (*d).d_tag != DT_NULL {
            let raw = (*d).d_un as usize;
            // glibc relocates address entries in place; musl and the vdso do not.
            let addr = if raw < base { raw + base } else { raw };
            match (*d).d_tag {
                DT_STRTAB => strtab = addr,
                DT_SYMTAB => symtab = addr,
                DT_JMPREL => jmprel = addr,
                DT_PLTRELSZ => pltrelsz = raw,
                DT_RELA => rela = addr,
                DT_RELASZ => relasz = raw,
                _ => {}
            }
            d = d.add(1);
        }
        if strtab == 0 || symtab == 0 {
            return 0;
        }
        for (table, size) in [(jmprel, pltrelsz), (rela, relasz)] {
            if table == 0 {
                continue;
            }
            let count = size / core::mem::size_of::<libc::Elf64_Rela>();
            for i in 0..count {
                let r = &*(table as *const libc::Elf64_Rela).add(i);
                let rtype = (r.r_info & 0xffff_ffff) as u32;
                if !GOT_RELOCS.contains(&rtype) {
                    continue;
                }
                let sym_idx = (r.r_info >> 32) as usize;
                if sym_idx == 0 {
                    continue;
                }
                let sym = &*(symtab as *const libc::Elf64_Sym).add(sym_idx);
                let sym_name =
                    CStr::from_ptr((strtab + sym.st_name as usize) as *const c_char).to_bytes();
                let Some(hook) = walk.hooks.iter().position(|h| h.name == sym_name) else {
                    continue;
                };
                let slot = base + r.r_offset as usize;
                let original = (*(slot as *const AtomicUsize)).load(Ordering::Acquire);
                if original == walk.hooks[hook].wrapper {
                    continue; // already ours (attached twice without detach)
                }
                if write_slot(slot, walk.hooks[hook].wrapper) {
                    walk.patches.push(Patch {
                        slot,
                        original,
                        hook,
                        object: name.clone(),
                    });
                } else {
                    walk.failures += 1;
                }
            }
        }
        0
    }
}
