//! Optional lookup tracing (`MEMWATCH_DEBUG=1`): one stderr line per run-time lookup of
//! a hooked name (`dlsym`, `dlvsym`, `*GetProcAddress`) saying whether a wrapper was
//! handed out. Used to find which path a framework takes. Writes with `write(2)` from a
//! stack buffer: no allocation, no locks.

use core::sync::atomic::{AtomicU8, Ordering};

static ON: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 off, 2 on

pub fn enabled() -> bool {
    match ON.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: getenv with a NUL-terminated name.
            let on = unsafe { !libc::getenv(c"MEMWATCH_DEBUG".as_ptr()).is_null() };
            ON.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        v => v == 2,
    }
}

/// Writes `memwatch: <path> <name> <what>\n` to stderr.
pub fn lookup(path: &str, name: &[u8], what: &str) {
    if !enabled() {
        return;
    }
    let mut buf = [0u8; 256];
    let mut n = 0;
    for part in [
        b"memwatch: ".as_slice(),
        path.as_bytes(),
        b" ",
        name,
        b" ",
        what.as_bytes(),
        b"\n",
    ] {
        for b in part {
            if let Some(slot) = buf.get_mut(n) {
                *slot = *b;
                n += 1;
            }
        }
    }
    // SAFETY: writing our own buffer to fd 2; errno restored.
    unsafe {
        let e = *libc::__errno_location();
        libc::write(2, buf.as_ptr().cast(), n.min(buf.len()));
        *libc::__errno_location() = e;
    }
}
