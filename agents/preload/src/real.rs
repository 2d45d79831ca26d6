//! Finding the real functions behind our wrappers.
//!
//! Owns (a) the real `dlsym`/`dlvsym` of the C library, found by reading libc's ELF
//! dynamic symbol table through `dl_iterate_phdr` — we cannot ask `dlsym` for them,
//! because our own exported `dlsym`/`dlvsym` interpose every such call — and (b) the
//! table of real-function slots, one per hook, filled either by `dlsym(RTLD_NEXT, name)`
//! (ordinary interposition) or by what the program's own `dlsym` / `*GetProcAddress`
//! call returned (see `dl`), and (c) the C library's process-end and exec functions,
//! looked up once by the shim's ELF constructor. Nothing here allocates.

use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering};

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
pub type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

/// libc's `dlsym`; read by the `dlsym` trampoline (so it must stay a plain static).
pub static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
/// libc's `dlvsym`.
pub static REAL_DLVSYM: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

extern "C" fn null_dlsym(_: *mut c_void, _: *const c_char) -> *mut c_void {
    core::ptr::null_mut()
}
extern "C" fn null_dlvsym(_: *mut c_void, _: *const c_char, _: *const c_char) -> *mut c_void {
    core::ptr::null_mut()
}

/// The real `dlsym` (a function returning NULL if libc's could not be found).
pub fn real_dlsym() -> DlsymFn {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p.is_null() {
        resolve_dl();
        p = REAL_DLSYM.load(Ordering::Acquire);
    }
    if p.is_null() {
        return null_dlsym;
    }
    // SAFETY: p is libc's dlsym.
    unsafe { core::mem::transmute::<*mut c_void, DlsymFn>(p) }
}

/// The real `dlvsym`.
pub fn real_dlvsym() -> DlvsymFn {
    let mut p = REAL_DLVSYM.load(Ordering::Acquire);
    if p.is_null() {
        resolve_dl();
        p = REAL_DLVSYM.load(Ordering::Acquire);
    }
    if p.is_null() {
        return null_dlvsym;
    }
    // SAFETY: p is libc's dlvsym.
    unsafe { core::mem::transmute::<*mut c_void, DlvsymFn>(p) }
}

pub type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// libc's `dlclose` (found with `dlsym(RTLD_NEXT)`).
static REAL_DLCLOSE: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

extern "C" fn failing_dlclose(_: *mut c_void) -> c_int {
    -1
}

/// The real `dlclose`. The shim exports `dlclose` and links with
/// -Bsymbolic-functions, so its own `libc::dlclose` calls would reach its hook: code in
/// the shim closes handles with this instead.
pub fn real_dlclose() -> DlcloseFn {
    let mut p = REAL_DLCLOSE.load(Ordering::Acquire);
    if p.is_null() {
        // SAFETY: NUL-terminated name; RTLD_NEXT from the shim means "after the shim".
        p = unsafe { real_dlsym()(libc::RTLD_NEXT, c"dlclose".as_ptr()) };
        if p.is_null() {
            return failing_dlclose;
        }
        REAL_DLCLOSE.store(p, Ordering::Release);
    }
    // SAFETY: p is libc's dlclose.
    unsafe { core::mem::transmute::<*mut c_void, DlcloseFn>(p) }
}

/// Called by the `dlsym` trampoline when `REAL_DLSYM` is still empty; returns it (a
/// function answering NULL when it cannot be found, or when the search panicked).
pub extern "C" fn resolve_real_dlsym() -> *mut c_void {
    crate::panic_guard::catch(|| real_dlsym() as *mut c_void).unwrap_or(null_dlsym as *mut c_void)
}
/// Same for `dlvsym`.
pub extern "C" fn resolve_real_dlvsym() -> *mut c_void {
    crate::panic_guard::catch(|| real_dlvsym() as *mut c_void).unwrap_or(null_dlvsym as *mut c_void)
}

fn resolve_dl() {
    for (want, slot) in [(&b"dlsym"[..], &REAL_DLSYM), (&b"dlvsym"[..], &REAL_DLVSYM)] {
        if slot.load(Ordering::Relaxed).is_null() {
            let p = libc_symbol(want);
            if !p.is_null() {
                slot.store(p, Ordering::Release);
            }
        }
    }
}

/// ELF64 dynamic section entry (`Elf64_Dyn`).
#[repr(C)]
struct Elf64Dyn {
    d_tag: i64,
    d_un: u64,
}

const DT_NULL: i64 = 0;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;

/// For the C library (`libc.so*`, `libdl.so*`): its load base and the addresses of its
/// string table, symbol table and GNU hash table; None for any other object.
/// # Safety
/// `info` is a header `dl_iterate_phdr` passed.
unsafe fn libc_tables(info: &libc::dl_phdr_info) -> Option<(usize, usize, usize, usize)> {
    // SAFETY: a header from `dl_iterate_phdr`: its name NULL or NUL-terminated, its program headers and dynamic section mapped.
    unsafe {
        if info.dlpi_name.is_null() {
            return None;
        }
        let name = CStr::from_ptr(info.dlpi_name).to_bytes();
        let base_name = name.rsplit(|b| *b == b'/').next().unwrap_or(name);
        if !(base_name.starts_with(b"libc.so") || base_name.starts_with(b"libdl.so")) {
            return None;
        }
        let base = info.dlpi_addr as usize;
        let mut dynamic: *const Elf64Dyn = core::ptr::null();
        for i in 0..info.dlpi_phnum as usize {
            let ph = &*info.dlpi_phdr.add(i);
            if ph.p_type == libc::PT_DYNAMIC {
                dynamic = (base + ph.p_vaddr as usize) as *const Elf64Dyn;
            }
        }
        if dynamic.is_null() {
            return None;
        }
        let (mut strtab, mut symtab, mut gnu_hash) = (0usize, 0usize, 0usize);
        let mut d = dynamic;
        while (*d).d_tag != DT_NULL {
            let v = (*d).d_un as usize;
            // glibc relocates these in place on most targets; not on some (add the base then).
            let v = if v < base { v + base } else { v };
            match (*d).d_tag {
                DT_STRTAB => strtab = v,
                DT_SYMTAB => symtab = v,
                DT_GNU_HASH => gnu_hash = v,
                _ => {}
            }
            d = d.add(1);
        }
        if strtab == 0 || symtab == 0 || gnu_hash == 0 {
            return None;
        }
        Some((base, strtab, symtab, gnu_hash))
    }
}

fn gnu_hash(name: &[u8]) -> u32 {
    name.iter()
        .fold(5381u32, |h, c| h.wrapping_mul(33).wrapping_add(*c as u32))
}

/// Looks `want` up in a GNU hash table (ELF64). Returns the address or NULL.
/// # Safety
/// `strtab`, `symtab` and `table` are the loaded object's string, symbol and GNU hash
/// tables, `base` its load base.
unsafe fn gnu_lookup(
    base: usize,
    strtab: usize,
    symtab: usize,
    table: usize,
    want: &[u8],
) -> *mut c_void {
    // SAFETY: the tables of a loaded object (`libc_tables`), read within the counts they state.
    unsafe {
        let t = table as *const u32;
        let nbuckets = *t;
        let symoffset = *t.add(1);
        let bloom_size = *t.add(2) as usize;
        if nbuckets == 0 {
            return core::ptr::null_mut();
        }
        let buckets = t.add(4 + bloom_size * 2); // bloom words are 64-bit
        let chain = buckets.add(nbuckets as usize);
        let h = gnu_hash(want);
        let mut idx = *buckets.add((h % nbuckets) as usize);
        if idx < symoffset {
            return core::ptr::null_mut();
        }
        loop {
            let h2 = *chain.add((idx - symoffset) as usize);
            if (h | 1) == (h2 | 1) {
                let sym = &*(symtab as *const libc::Elf64_Sym).add(idx as usize);
                let n = CStr::from_ptr((strtab + sym.st_name as usize) as *const c_char);
                if n.to_bytes() == want && sym.st_shndx != 0 && sym.st_value != 0 {
                    return (base + sym.st_value as usize) as *mut c_void;
                }
            }
            if h2 & 1 != 0 {
                return core::ptr::null_mut();
            }
            idx += 1;
        }
    }
}

/// C library functions the shim wraps besides the GPU runtimes' (process end, exec).
#[derive(Clone, Copy)]
pub enum LibcFn {
    Abort,
    Exit,
    ExitUpper,
    Execve,
    Execv,
    Execvp,
    Execvpe,
}

const LIBC_FN_NAMES: [&CStr; 7] = [
    c"abort", c"_exit", c"_Exit", c"execve", c"execv", c"execvp", c"execvpe",
];
static LIBC_FNS: [AtomicPtr<c_void>; 7] = [const { AtomicPtr::new(core::ptr::null_mut()) }; 7];

/// The real C library function `f` (null if the C library has none). Resolved when the
/// shim is loaded ([`resolve_libc_fns`]): asking `dlsym` later would take the dynamic
/// loader's lock, which another thread's `dlopen` holds while library constructors run
/// (seconds, or for ever when a constructor waits for the thread that is ending the
/// process), and would use stack in a signal handler that ends the process.
pub fn libc_fn(f: LibcFn) -> *mut c_void {
    let i = f as usize;
    let p = LIBC_FNS[i].load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    // Only when called before the shim's own constructor ran (a preloaded library's
    // constructor runs after those of the libraries it loads with: one of them may end
    // the process, even from a thread of a library it dlopens, under the loader's lock).
    // Read libc's own symbol table, as for dlsym: no lock taken.
    let p = libc_symbol(LIBC_FN_NAMES[i].to_bytes());
    if !p.is_null() {
        LIBC_FNS[i].store(p, Ordering::Release);
    }
    p
}

/// What [`libc_symbol`] looks for and finds.
struct Wanted<'a> {
    name: &'a [u8],
    found: *mut c_void,
}

/// `name` in the C library's dynamic symbol table (NULL if absent), read through
/// `dl_iterate_phdr` without the loader's lock.
fn libc_symbol(name: &[u8]) -> *mut c_void {
    let mut w = Wanted {
        name,
        found: core::ptr::null_mut(),
    };
    // SAFETY: the callback reads valid headers and writes only through `data` (w).
    unsafe {
        libc::dl_iterate_phdr(
            Some(libc_symbol_cb),
            (&mut w as *mut Wanted).cast::<c_void>(),
        )
    };
    w.found
}

/// `dl_iterate_phdr` callback around [`libc_symbol_cb_visit`]; a panic in it is caught (an
/// unwind must not cross the C library), answering 0 (go on).
///
/// # Safety
/// Called by `dl_iterate_phdr` with its header and our `data`.
unsafe extern "C" fn libc_symbol_cb(
    info: *mut libc::dl_phdr_info,
    size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: the arguments `dl_iterate_phdr` passes (contract above).
    crate::panic_guard::catch(|| unsafe { libc_symbol_cb_visit(info, size, data) }).unwrap_or(0)
}

/// [`libc_symbol_cb`]'s work for one object.
///
/// # Safety
/// As for [`libc_symbol_cb`].
unsafe fn libc_symbol_cb_visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: the loader's header and our `Wanted` (contract above).
    unsafe {
        let w = &mut *data.cast::<Wanted>();
        match libc_tables(&*info) {
            Some((base, strtab, symtab, hash)) => {
                w.found = gnu_lookup(base, strtab, symtab, hash, w.name);
                i32::from(!w.found.is_null())
            }
            None => 0,
        }
    }
}

/// Looks every [`LibcFn`] up once, from the shim's ELF constructor.
extern "C" fn resolve_libc_fns() {
    crate::panic_guard::catch(|| {
        for (slot, name) in LIBC_FNS.iter().zip(LIBC_FN_NAMES.iter()) {
            // SAFETY: NUL-terminated name; RTLD_NEXT from the shim means "after the shim".
            let p = unsafe { real_dlsym()(libc::RTLD_NEXT, name.as_ptr()) };
            slot.store(p, Ordering::Release);
        }
    });
}

/// Runs [`resolve_libc_fns`] when the shim is loaded (by LD_PRELOAD at start-up, or by
/// `memwatch attach`'s dlopen), before any code can reach the wrappers through it.
#[used]
#[link_section = ".init_array"]
static RESOLVE_LIBC_FNS_AT_LOAD: extern "C" fn() = resolve_libc_fns;
