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
        if !m.path.starts_with('/') || m.path.ends_with(" (deleted)") {
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
    for (path, start) in loaded_objects(maps) {
        if !which(file_name(&path)) {
            continue;
        }
        if let Some(addr) = symbol_in_object(proc_, pid, &path, start, name)? {
            return Ok(Some(Resolved { addr, object: path }));
        }
    }
    Ok(None)
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
}
