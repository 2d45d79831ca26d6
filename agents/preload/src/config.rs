//! Configuration read from the environment, once, without allocating.
//!
//! Owns parsing of `MEMWATCH_SINK`, `MEMWATCH_BUFFER_EVENTS`, `MEMWATCH_HOOK`,
//! `MEMWATCH_ALLOC_DURATIONS`, `MEMWATCH_BACKTRACE_EVERY_BYTES` and `MEMWATCH_FAULT`
//! into a fixed-size [`Config`], and the one configuration of the process ([`get`],
//! fixed by `memwatch attach` with [`set`] before anything read the environment). It
//! must not allocate (it runs on the first hooked call and inside `dlsym`), must not
//! panic, and does not open anything.

use core::ffi::CStr;
use std::sync::OnceLock;

/// The API families `MEMWATCH_HOOK` switches on and off (`hip`, `cuda`, `cudart`,
/// `pjrt`): the wire's [`memwatch_wire::ApiFamily`].
pub use memwatch_wire::ApiFamily as Family;

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The process's configuration (read from the environment the first time).
pub fn get() -> &'static Config {
    CONFIG.get_or_init(Config::from_env)
}

/// Fixes the configuration before anything read the environment (late attach). False
/// when it was already fixed.
pub fn set(c: Config) -> bool {
    CONFIG.set(c).is_ok()
}

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

/// The fault switch (`MEMWATCH_FAULT`, see `record::fault`): a testing aid that makes
/// memwatch's own bookkeeping panic, before or after the real call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Fault {
    None = 0,
    /// `panic-before-call`.
    PanicBeforeCall = 1,
    /// `panic-after-call`.
    PanicAfterCall = 2,
}

impl Fault {
    pub fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::PanicBeforeCall,
            2 => Self::PanicAfterCall,
            _ => Self::None,
        }
    }

    fn parse(v: Option<&[u8]>) -> Self {
        match v {
            Some(b"panic-before-call") => Self::PanicBeforeCall,
            Some(b"panic-after-call") => Self::PanicAfterCall,
            _ => Self::None,
        }
    }
}

/// The parsed environment.
#[derive(Clone, Copy)]
pub struct Config {
    pub sink: SinkKind,
    pub path: [u8; MAX_PATH],
    pub path_len: usize,
    /// Ring capacity per thread, a power of two.
    pub buffer_events: usize,
    /// Bit set of [`Family::bit`] values.
    pub families: u8,
    /// `MEMWATCH_ALLOC_DURATIONS=1`: time allocation and release calls too (a second
    /// clock read per call); by default only API spans carry a duration.
    pub alloc_durations: bool,
    /// `MEMWATCH_BACKTRACE_EVERY_BYTES=N`: sample the native stack about every N bytes a
    /// thread allocates (0: off).
    pub backtrace_every_bytes: u64,
    /// `MEMWATCH_FAULT` (testing aid; see [`Fault`]).
    pub fault: Fault,
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
            fault: Fault::None,
        }
    }

    pub fn path_bytes(&self) -> &[u8] {
        self.path.get(..self.path_len).unwrap_or(&[])
    }

    pub fn family_enabled(&self, f: Family) -> bool {
        self.sink != SinkKind::None && self.families & f.bit() != 0
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
            None => ALL_FAMILIES,
            Some(list) => list
                .split(|b| *b == b',')
                .map(|w| match w {
                    b"all" => ALL_FAMILIES,
                    _ => Family::ALL
                        .iter()
                        .find(|f| f.name().as_bytes() == w)
                        .map_or(0, |f| f.bit()),
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
            c.fault = Fault::parse(getenv(c"MEMWATCH_FAULT"));
            c
        }
    }
}

/// Every family's bit.
const ALL_FAMILIES: u8 = {
    let mut bits = 0;
    let mut i = 0;
    while i < Family::ALL.len() {
        bits |= Family::ALL[i].bit();
        i += 1;
    }
    bits
};

/// The variable `name`, when set.
///
/// # Safety
/// No other thread may change the environment meanwhile (as for `libc::getenv`).
unsafe fn getenv(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: NUL-terminated name; the caller keeps the environment unchanged.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    if p.is_null() {
        None
    } else {
        // SAFETY: getenv returns a NUL-terminated string owned by the environment.
        Some(unsafe { CStr::from_ptr(p) }.to_bytes())
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
        assert!(!c.family_enabled(Family::CudaDriver));
        assert!(c.family_enabled(Family::CudaRuntime));
        let d = Config::parse(Some(b"unix:/s"), Some(b"junk"), None);
        assert_eq!(d.sink, SinkKind::Unix);
        assert_eq!(d.buffer_events, DEFAULT_BUFFER_EVENTS);
        assert_eq!(d.families, ALL_FAMILIES);
        assert_eq!(ALL_FAMILIES, 31, "hip, cuda, cudart, pjrt and torch");
        let pjrt_only = Config::parse(Some(b"unix:/s"), None, Some(b"pjrt,bogus"));
        assert_eq!(pjrt_only.families, Family::Pjrt.bit());
    }

    #[test]
    fn the_fault_switch_takes_two_exact_values() {
        assert_eq!(
            Fault::parse(Some(b"panic-before-call")),
            Fault::PanicBeforeCall
        );
        assert_eq!(
            Fault::parse(Some(b"panic-after-call")),
            Fault::PanicAfterCall
        );
        assert_eq!(Fault::parse(Some(b"panic")), Fault::None);
        assert_eq!(Fault::parse(None), Fault::None);
        for f in [Fault::None, Fault::PanicBeforeCall, Fault::PanicAfterCall] {
            assert_eq!(Fault::from_u8(f as u8), f);
        }
    }
}
