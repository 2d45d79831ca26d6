//! Finding a function's address inside another process: which mapped ELF object defines
//! a dynamic symbol, and where that object is loaded (from /proc/PID/maps).
//!
//! Owns ELF symbol-table reading (via the `object` crate) and load-bias arithmetic. It
//! does not read or write the target's memory.

use object::{Object, ObjectSegment, ObjectSymbol};

use crate::error::{AttachError, Result};
use crate::procfs::{Mapping, Proc};

/// A symbol resolved to an address in the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub addr: u64,
    /// The mapped file that defines it (as /proc/PID/maps names it).
    pub object: String,
}

/// Distinct mapped files, in address order, each with its offset-0 mapping's start.
pub fn loaded_objects(maps: &[Mapping]) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for m in maps {
        // Device files (GPU drivers map /dev/nvidia*, /dev/kfd, /dev/dri/*) are never
        // ELF objects, and reading them fails.
        if !m.path.starts_with('/') || m.path.ends_with(" (deleted)") || m.path.starts_with("/dev/")
        {
            continue;
        }
        if m.offset == 0 && !out.iter().any(|(p, _)| p == &m.path) {
            out.push((m.path.clone(), m.start));
        }
    }
    out
}

/// The file-name part of a path (`/usr/lib/libc.so.6` → `libc.so.6`).
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The address of defined dynamic symbol `name` in the mapped object `path` whose first
/// page is mapped at `map_start`; `Ok(None)` when the object does not define it.
pub fn symbol_in_object(
    proc_: &Proc,
    pid: i32,
    path: &str,
    map_start: u64,
    name: &str,
) -> Result<Option<u64>> {
    let file = proc_.mapped_file(pid, path);
    let data = std::fs::read(&file).map_err(|source| AttachError::Read {
        path: file.clone(),
        source,
    })?;
    let obj = object::File::parse(&*data).map_err(|e| AttachError::Elf {
        path: file.clone(),
        what: e.to_string(),
    })?;
    let Some(value) = obj
        .dynamic_symbols()
        .find(|s| s.is_definition() && s.name() == Ok(name))
        .map(|s| s.address())
    else {
        return Ok(None);
    };
    // Load bias: where the first PT_LOAD's page went minus where the file asked for it.
    let first_vaddr = obj.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
    let bias = map_start.wrapping_sub(first_vaddr);
    Ok(Some(bias.wrapping_add(value)))
}

/// Finds `name` in the first loaded object whose file name satisfies `which`.
pub fn find_symbol(
    proc_: &Proc,
    pid: i32,
    maps: &[Mapping],
    which: impl Fn(&str) -> bool,
    name: &str,
) -> Result<Option<Resolved>> {
    // An object that cannot be read or parsed (a data file mapped by the program, a file
    // of another mount namespace) is skipped; its error is returned only when the symbol
    // is found nowhere else.
    let mut first_error = None;
    for (path, start) in loaded_objects(maps) {
        if !which(file_name(&path)) {
            continue;
        }
        match symbol_in_object(proc_, pid, &path, start, name) {
            Ok(Some(addr)) => return Ok(Some(Resolved { addr, object: path })),
            Ok(None) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

/// Whether the file name is a C library or dynamic loader that can define `dlopen`.
pub fn is_libc_like(file: &str) -> bool {
    file.starts_with("libc.so")
        || file.starts_with("libc-")
        || file.starts_with("libdl.so")
        || file.starts_with("libdl-")
        || file.starts_with("ld-musl")
        || file.starts_with("ld-linux")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_dlopen_matches_dlsym() {
        let proc_ = Proc::default();
        let pid = std::process::id() as i32;
        let maps = proc_.maps(pid).unwrap();
        let found = find_symbol(&proc_, pid, &maps, is_libc_like, "dlopen")
            .unwrap()
            .expect("dlopen in libc");
        let want = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"dlopen".as_ptr()) } as u64;
        assert_eq!(found.addr, want, "{}", found.object);
    }

    #[test]
    fn objects_are_distinct_with_offset_zero_start() {
        let maps = crate::procfs::parse_maps(
            "1000-2000 r--p 00000000 0:0 1 /lib/libc.so.6\n2000-3000 r-xp 00001000 0:0 1 /lib/libc.so.6\n\
             5000-6000 r--p 00000000 0:0 2 /x/y (deleted)\n",
        );
        assert_eq!(
            loaded_objects(&maps),
            vec![("/lib/libc.so.6".to_string(), 0x1000)]
        );
    }

    #[test]
    fn device_mappings_are_not_objects() {
        // What a CUDA process maps (seen on an H200): device files at offset 0.
        let maps = crate::procfs::parse_maps(
            "1000-2000 r--p 00000000 0:0 1 /lib/libc.so.6\n\
             7000-8000 rw-s 00000000 0:5 3 /dev/nvidia0\n\
             9000-a000 rw-s 00000000 0:5 4 /dev/nvidiactl\n",
        );
        assert_eq!(
            loaded_objects(&maps),
            vec![("/lib/libc.so.6".to_string(), 0x1000)]
        );
    }

    #[test]
    fn unreadable_objects_are_skipped_when_the_symbol_is_elsewhere() {
        let proc_ = Proc::default();
        let pid = std::process::id() as i32;
        let mut maps =
            crate::procfs::parse_maps("1000-2000 r--p 00000000 0:0 9 /nonexistent/libc.so.6\n");
        maps.extend(proc_.maps(pid).unwrap());
        let found = find_symbol(&proc_, pid, &maps, is_libc_like, "dlopen").unwrap();
        assert!(found.is_some());
        // Alone, the unreadable object's error is reported.
        let alone =
            crate::procfs::parse_maps("1000-2000 r--p 00000000 0:0 9 /nonexistent/libc.so.6\n");
        assert!(find_symbol(&proc_, pid, &alone, is_libc_like, "dlopen").is_err());
    }
}
