//! Configuration read from the environment, once, without allocating.
//!
//! Owns parsing of `MEMWATCH_SINK`, `MEMWATCH_BUFFER_EVENTS`, `MEMWATCH_HOOK`,
//! `MEMWATCH_ALLOC_DURATIONS` and `MEMWATCH_BACKTRACE_EVERY_BYTES` into a
//! fixed-size [`Config`]. It must not allocate (it runs on the first hooked call and inside
//! `dlsym`), must not panic, and does not open anything.

use core::ffi::CStr;

/// Largest sink path accepted (longer paths disable the shim).
pub const MAX_PATH: usize = 1024;
/// Default number of event slots per recording thread (and in the shared fallback ring).
pub const DEFAULT_BUFFER_EVENTS: usize = 1 << 14;

/// Where frames go.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SinkKind {
    /// `MEMWATCH_SINK` unset, empty or invalid: record nothing.
    None,
    /// `unix:PATH`: a stream connection to a receiver.
    Unix,
    /// `file:PATH`: append to a capture file (`%p` expands to the pid).
    File,
}

/// API families that can be switched on and off with `MEMWATCH_HOOK`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Family {
    Hip = 1,
    Cuda = 2,
    Cudart = 4,
    /// The PJRT C API (`GetPjrtApi` table wrapping).
    Pjrt = 8,
}

/// The parsed environment.
#[derive(Clone, Copy)]
pub struct Config {
    pub sink: SinkKind,
    pub path: [u8; MAX_PATH],
    pub path_len: usize,
    /// Ring capacity per thread, a power of two.
    pub buffer_events: usize,
    /// Bit set of [`Family`] values.
    pub families: u8,
    /// `MEMWATCH_ALLOC_DURATIONS=1`: time allocation and release calls too (a second
    /// clock read per call); by default only API spans carry a duration.
    pub alloc_durations: bool,
    /// `MEMWATCH_BACKTRACE_EVERY_BYTES=N`: sample the native stack about every N bytes a
    /// thread allocates (0: off).
    pub backtrace_every_bytes: u64,
}

impl Config {
    pub const fn disabled() -> Self {
        Config {
            sink: SinkKind::None,
            path: [0; MAX_PATH],
            path_len: 0,
            buffer_events: DEFAULT_BUFFER_EVENTS,
            families: 0,
            alloc_durations: false,
            backtrace_every_bytes: 0,
        }
    }

    pub fn path_bytes(&self) -> &[u8] {
        self.path.get(..self.path_len).unwrap_or(&[])
    }

    pub fn family_enabled(&self, f: Family) -> bool {
        self.sink != SinkKind::None && self.families & (f as u8) != 0
    }

    /// Parses the three values (each `None` when the variable is unset).
    pub fn parse(sink: Option<&[u8]>, buffer: Option<&[u8]>, hook: Option<&[u8]>) -> Self {
        let mut c = Config::disabled();
        let Some(sink) = sink else { return c };
        let (kind, rest) = if let Some(r) = sink.strip_prefix(b"unix:") {
            (SinkKind::Unix, r)
        } else if let Some(r) = sink.strip_prefix(b"file:") {
            (SinkKind::File, r)
        } else {
            return c;
        };
        if rest.is_empty() || rest.len() >= MAX_PATH || rest.contains(&0) {
            return c;
        }
        if let Some(dst) = c.path.get_mut(..rest.len()) {
            dst.copy_from_slice(rest);
        }
        c.path_len = rest.len();
        c.sink = kind;
        c.buffer_events = buffer
            .and_then(parse_usize)
            .unwrap_or(DEFAULT_BUFFER_EVENTS)
            .clamp(1024, 1 << 24)
            .next_power_of_two();
        c.families = match hook {
            None => {
                Family::Hip as u8 | Family::Cuda as u8 | Family::Cudart as u8 | Family::Pjrt as u8
            }
            Some(list) => list
                .split(|b| *b == b',')
                .map(|w| match w {
                    b"hip" => Family::Hip as u8,
                    b"cuda" => Family::Cuda as u8,
                    b"cudart" => Family::Cudart as u8,
                    b"pjrt" => Family::Pjrt as u8,
                    b"all" => 15,
                    _ => 0,
                })
                .fold(0, |a, b| a | b),
        };
        c
    }

    /// Reads the process environment (no allocation).
    pub fn from_env() -> Self {
        // SAFETY: getenv returns NUL-terminated strings owned by the environment.
        unsafe {
            let mut c = Config::parse(
                getenv(c"MEMWATCH_SINK"),
                getenv(c"MEMWATCH_BUFFER_EVENTS"),
                getenv(c"MEMWATCH_HOOK"),
            );
            c.alloc_durations = getenv(c"MEMWATCH_ALLOC_DURATIONS") == Some(b"1".as_slice());
            c.backtrace_every_bytes = getenv(c"MEMWATCH_BACKTRACE_EVERY_BYTES")
                .and_then(parse_usize)
                .unwrap_or(0) as u64;
            c
        }
    }
}

unsafe fn getenv(name: &CStr) -> Option<&'static [u8]> {
    let p = libc::getenv(name.as_ptr());
    if p.is_null() {
        None
    } else {
        Some(CStr::from_ptr(p).to_bytes())
    }
}

fn parse_usize(b: &[u8]) -> Option<usize> {
    if b.is_empty() || b.len() > 12 {
        return None;
    }
    let mut v: usize = 0;
    for d in b {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((d - b'0') as usize)?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_bad_sink_disables() {
        assert_eq!(Config::parse(None, None, None).sink, SinkKind::None);
        assert_eq!(
            Config::parse(Some(b"tcp:x"), None, None).sink,
            SinkKind::None
        );
        assert_eq!(
            Config::parse(Some(b"file:"), None, None).sink,
            SinkKind::None
        );
        assert!(!Config::parse(None, None, None).family_enabled(Family::Hip));
    }

    #[test]
    fn parses_sink_buffer_and_families() {
        let c = Config::parse(
            Some(b"file:/tmp/a%p.mwcap"),
            Some(b"5000"),
            Some(b"hip,cudart"),
        );
        assert_eq!(c.sink, SinkKind::File);
        assert_eq!(c.path_bytes(), b"/tmp/a%p.mwcap");
        assert_eq!(c.buffer_events, 8192);
        assert!(c.family_enabled(Family::Hip));
        assert!(!c.family_enabled(Family::Cuda));
        assert!(c.family_enabled(Family::Cudart));
        let d = Config::parse(Some(b"unix:/s"), Some(b"junk"), None);
        assert_eq!(d.sink, SinkKind::Unix);
        assert_eq!(d.buffer_events, DEFAULT_BUFFER_EVENTS);
        assert_eq!(d.families, 15);
    }
}
