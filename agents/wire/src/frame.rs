//! Byte layout of the memwatch wire format (`.mwcap` files and socket streams alike).
//!
//! Owns encoding and decoding of the stream preamble, frames and records. It does not
//! own I/O policy (see `reader`) or the meaning of event fields (see `event`).
//!
//! # Layout (all integers little-endian)
//!
//! ```text
//! stream   := preamble frame*
//! preamble := magic[8] = "MWCAP\0\r\n"  version:u16 (=1)  flags:u16 (=0)  reserved:u32 (=0)
//! frame    := len:u32  type:u8  payload[len-1]  crc:u32
//!             len counts type+payload; crc = CRC-32/ISO-HDLC (zlib) of type+payload.
//!             len is at least 1 and at most MAX_FRAME_LEN.
//! str      := n:u16  utf8[n]
//!
//! type 1  process_start := pid:u32 ppid:u32 mono_anchor_ns:u64 wall_anchor_unix_ns:u64
//!                          shim_version:str hostname:str argc:u16 argv:str[argc]
//! type 2  events        := count:u32 event[count]            (event = 72 bytes, below)
//! type 3  device_info   := pid:u32 device:i32 vendor:u8 total_bytes:u64 name:str
//! type 4  marker        := pid:u32 tid:u32 ts_ns:u64 device:i32 text:str
//! type 5  dropped       := pid:u32 ts_ns:u64 dropped_total:u64   (cumulative per process)
//! type 6  process_end   := pid:u32 ts_ns:u64 exit_code:i32       (-1: unknown)
//! type 7  device_sample := ts_ns:u64 device:i32 memory:u8 used_bytes:u64 total_bytes:u64
//!                          source:str                             (memory: 0 vram, 1 gtt)
//! type 8  pjrt_executable := pid:u32 ts_ns:u64 handle:u64 flags:u32
//!                          generated_code:i64 argument:i64 output:i64 alias:i64 temp:i64
//!                          host_generated_code:i64 host_argument:i64 host_output:i64
//!                          host_alias:i64 host_temp:i64
//!                          num_devices:u16 device:i32[num_devices] name:str fingerprint:str
//!          (an executable compiled or loaded through the PJRT C API; handle = the
//!           PJRT_LoadedExecutable pointer that execute events carry in `ptr`;
//!           flags bit 0: the ten byte counts are valid (PJRT_Executable_
//!           GetCompiledMemoryStats answered), bit 1: loaded from a serialized executable)
//! type 9  pjrt_memory_stats := pid:u32 ts_ns:u64 device:i32 flags:u32
//!                          bytes_in_use:i64 peak_bytes_in_use:i64 largest_free_block:i64
//!                          pool_bytes:i64 peak_pool_bytes:i64 bytes_limit:i64
//!                          num_allocs:i64 largest_alloc_size:i64
//!          (one PJRT_Device_MemoryStats answer, i.e. the framework allocator's own
//!           counters; flags bit i set: field i of the eight is valid, bit 0 always)
//! type 10 backtrace      := pid:u32 tid:u32 ts_ns:u64 ptr:u64 count:u16 frame:u64[count]
//!          (native return addresses sampled for one allocation, innermost first: frame 0
//!           is the return address in the code that called the intercepted function.
//!           The allocation is the `alloc` event of the same pid, tid, ts_ns and ptr;
//!           written by the shim with MEMWATCH_BACKTRACE_EVERY_BYTES, before the events
//!           frame holding that event)
//! type 11 module_map     := pid:u32 ts_ns:u64 count:u16 module[count]
//!          module := start:u64 end:u64 bias:u64 path:str
//!          (the objects loaded in the process: [start, end) spans their PT_LOAD
//!           segments in memory, an address A inside maps to the ELF virtual address
//!           A - bias of the file at path; written before the first backtrace frame and
//!           again when objects were loaded or unloaded)
//! other types: skipped by readers (counted), so the format can grow without a version bump.
//! (After damage, a salvaging reader resumes at the next valid frame of a type it knows.)
//!
//! event (72 bytes):
//!   0 ts_ns:u64   8 ptr:u64   16 size:u64   24 stream:u64   32 aux:u64
//!  40 duration_ns:u64   48 pid:u32   52 tid:u32   56 result:i32   60 device:i32
//!  64 api:u16   66 kind:u8   67 mem_kind:u8   68 reserved:u32 (=0)
//! ```
//!
//! Appended values (no format version change; older readers map unknown `api` numbers to
//! `Api::Unknown`): `api` 2009 = cudaSetDevice (event kind `set_device`, added with the
//! LD_PRELOAD shim).
//!
//! Timestamps are CLOCK_MONOTONIC nanoseconds; each `process_start` carries the
//! monotonic and wall-clock anchors taken at the same moment, so readers convert to
//! "ns since the capture's start" (the earliest anchor) and to wall time.

use crate::event::Event;
use crate::WireError;

/// First 8 bytes of every stream.
pub const MAGIC: [u8; 8] = *b"MWCAP\0\r\n";
/// Format version written by this crate. Readers accept exactly this version.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the stream preamble in bytes.
pub const PREAMBLE_LEN: usize = 16;
/// Size of one encoded [`Event`].
pub const EVENT_SIZE: usize = 72;
/// Frame overhead: len (4) + type (1) + crc (4).
pub const FRAME_OVERHEAD: usize = 9;
/// Largest accepted `len` field (type + payload), 16 MiB.
pub const MAX_FRAME_LEN: u32 = 16 << 20;

/// Frame type numbers (see the layout above).
pub mod frame_type {
    pub const PROCESS_START: u8 = 1;
    pub const EVENTS: u8 = 2;
    pub const DEVICE_INFO: u8 = 3;
    pub const MARKER: u8 = 4;
    pub const DROPPED: u8 = 5;
    pub const PROCESS_END: u8 = 6;
    pub const DEVICE_SAMPLE: u8 = 7;
    pub const PJRT_EXECUTABLE: u8 = 8;
    pub const PJRT_MEMORY_STATS: u8 = 9;
    pub const BACKTRACE: u8 = 10;
    pub const MODULE_MAP: u8 = 11;

    /// Whether this version knows frame type `ty` (1 to the highest type above). Salvage
    /// reading resumes after damage only at a frame of a known type.
    pub fn is_known(ty: u8) -> bool {
        (PROCESS_START..=MODULE_MAP).contains(&ty)
    }
}

/// Sampled native return addresses of one allocation (frame type 10).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Backtrace {
    pub pid: u32,
    pub tid: u32,
    /// The allocation event's `ts_ns`.
    pub ts_ns: u64,
    /// The allocation event's `ptr`.
    pub ptr: u64,
    /// Return addresses, innermost first.
    pub frames: Vec<u64>,
}

/// One loaded object of a [`ModuleMap`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Module {
    /// Lowest address of its loaded segments.
    pub start: u64,
    /// One past the highest.
    pub end: u64,
    /// Load bias: ELF virtual address = address - bias.
    pub bias: u64,
    pub path: String,
}

/// The objects loaded in a process (frame type 11), for offline symbolization.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModuleMap {
    pub pid: u32,
    pub ts_ns: u64,
    pub modules: Vec<Module>,
}

/// Compiled memory statistics of a PJRT executable (`PJRT_Executable_GetCompiledMemoryStats`,
/// the numbers JAX's `compiled.memory_analysis()` shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompiledMemoryStats {
    pub generated_code: i64,
    pub argument: i64,
    pub output: i64,
    pub alias: i64,
    pub temp: i64,
    pub host_generated_code: i64,
    pub host_argument: i64,
    pub host_output: i64,
    pub host_alias: i64,
    pub host_temp: i64,
}

/// An executable the framework compiled or loaded through the PJRT C API.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PjrtExecutable {
    pub pid: u32,
    pub ts_ns: u64,
    /// The `PJRT_LoadedExecutable*` (execute events carry it in `ptr`).
    pub handle: u64,
    /// Bit 0: `stats` valid; bit 1: loaded from a serialized executable.
    pub flags: u32,
    pub stats: CompiledMemoryStats,
    /// Local hardware ids of the devices it runs on (in execute's device order).
    pub devices: Vec<i32>,
    /// `PJRT_Executable_Name`, e.g. `jit_mlp`.
    pub name: String,
    /// `PJRT_Executable_Fingerprint` (empty when the plugin gives none).
    pub fingerprint: String,
}

impl PjrtExecutable {
    pub const FLAG_STATS: u32 = 1;
    pub const FLAG_DESERIALIZED: u32 = 2;
}

/// One `PJRT_Device_MemoryStats` answer (the framework allocator's counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PjrtMemoryStats {
    pub pid: u32,
    pub ts_ns: u64,
    /// Local hardware id of the device.
    pub device: i32,
    /// Bit i: field i of (bytes_in_use, peak_bytes_in_use, largest_free_block,
    /// pool_bytes, peak_pool_bytes, bytes_limit, num_allocs, largest_alloc_size) valid.
    pub flags: u32,
    pub bytes_in_use: i64,
    pub peak_bytes_in_use: i64,
    pub largest_free_block: i64,
    pub pool_bytes: i64,
    pub peak_pool_bytes: i64,
    pub bytes_limit: i64,
    pub num_allocs: i64,
    pub largest_alloc_size: i64,
}

impl PjrtMemoryStats {
    pub const BYTES_IN_USE: u32 = 1;
    pub const PEAK_BYTES_IN_USE: u32 = 2;
    pub const LARGEST_FREE_BLOCK: u32 = 4;
    pub const POOL_BYTES: u32 = 8;
    pub const PEAK_POOL_BYTES: u32 = 16;
    pub const BYTES_LIMIT: u32 = 32;
    pub const NUM_ALLOCS: u32 = 64;
    pub const LARGEST_ALLOC_SIZE: u32 = 128;

    /// The value of a field when its flag is set.
    pub fn get(&self, flag: u32, v: i64) -> Option<u64> {
        (self.flags & flag != 0 && v >= 0).then_some(v as u64)
    }
}

/// The header of one process in a capture.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcessStart {
    pub pid: u32,
    pub ppid: u32,
    pub mono_anchor_ns: u64,
    pub wall_anchor_unix_ns: u64,
    pub shim_version: String,
    pub hostname: String,
    pub argv: Vec<String>,
}

/// A device the process uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceInfo {
    pub pid: u32,
    pub device: i32,
    pub vendor: u8,
    pub total_bytes: u64,
    pub name: String,
}

/// A user or tool annotation at a point in time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Marker {
    pub pid: u32,
    pub tid: u32,
    pub ts_ns: u64,
    pub device: i32,
    pub text: String,
}

/// The cumulative count of events a process had to drop (buffers full).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dropped {
    pub pid: u32,
    pub ts_ns: u64,
    pub dropped_total: u64,
}

/// A process left the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessEnd {
    pub pid: u32,
    pub ts_ns: u64,
    /// The exit status (0-255), or [`ProcessEnd::UNKNOWN_EXIT`].
    pub exit_code: i32,
}

impl ProcessEnd {
    /// `exit_code` of an end whose status the shim could not learn (an image replaced by
    /// exec, an exit handler that was not told the status). Never a status: those are
    /// 0-255.
    pub const UNKNOWN_EXIT: i32 = -1;

    /// The exit status, or `None` when it was not known.
    pub fn known_exit_code(&self) -> Option<i32> {
        (self.exit_code != Self::UNKNOWN_EXIT).then_some(self.exit_code)
    }
}

/// A device-level memory reading taken outside the process (rocm-smi, NVML, sysfs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceSample {
    pub ts_ns: u64,
    pub device: i32,
    /// 0: VRAM (dedicated or carve-out), 1: GTT (system memory mapped for the GPU).
    pub memory: u8,
    pub used_bytes: u64,
    pub total_bytes: u64,
    pub source: String,
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    ProcessStart(ProcessStart),
    Events(Vec<Event>),
    DeviceInfo(DeviceInfo),
    Marker(Marker),
    Dropped(Dropped),
    ProcessEnd(ProcessEnd),
    DeviceSample(DeviceSample),
    PjrtExecutable(PjrtExecutable),
    PjrtMemoryStats(PjrtMemoryStats),
    Backtrace(Backtrace),
    ModuleMap(ModuleMap),
    /// A frame type this version does not know; skipped.
    Unknown {
        frame_type: u8,
        len: u32,
    },
}

/// Writes the 16-byte stream preamble.
pub fn encode_preamble() -> [u8; PREAMBLE_LEN] {
    let mut out = [0u8; PREAMBLE_LEN];
    out[..8].copy_from_slice(&MAGIC);
    out[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out
}

/// Checks a preamble; returns the version on success.
pub fn decode_preamble(bytes: &[u8]) -> Result<u16, WireError> {
    if bytes.len() < PREAMBLE_LEN {
        return Err(WireError::ShortPreamble { got: bytes.len() });
    }
    if bytes[..8] != MAGIC {
        return Err(WireError::BadMagic);
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != FORMAT_VERSION {
        return Err(WireError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    Ok(version)
}

/// Encodes one event into exactly [`EVENT_SIZE`] bytes. Never allocates.
pub fn encode_event(e: &Event, out: &mut [u8; EVENT_SIZE]) {
    out[0..8].copy_from_slice(&e.ts_ns.to_le_bytes());
    out[8..16].copy_from_slice(&e.ptr.to_le_bytes());
    out[16..24].copy_from_slice(&e.size.to_le_bytes());
    out[24..32].copy_from_slice(&e.stream.to_le_bytes());
    out[32..40].copy_from_slice(&e.aux.to_le_bytes());
    out[40..48].copy_from_slice(&e.duration_ns.to_le_bytes());
    out[48..52].copy_from_slice(&e.pid.to_le_bytes());
    out[52..56].copy_from_slice(&e.tid.to_le_bytes());
    out[56..60].copy_from_slice(&e.result.to_le_bytes());
    out[60..64].copy_from_slice(&e.device.to_le_bytes());
    out[64..66].copy_from_slice(&e.api.to_le_bytes());
    out[66] = e.kind;
    out[67] = e.mem_kind;
    out[68..72].copy_from_slice(&0u32.to_le_bytes());
}

/// Decodes one event from exactly [`EVENT_SIZE`] bytes.
pub fn decode_event(b: &[u8; EVENT_SIZE]) -> Event {
    let u64_at = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(a)
    };
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    Event {
        ts_ns: u64_at(0),
        ptr: u64_at(8),
        size: u64_at(16),
        stream: u64_at(24),
        aux: u64_at(32),
        duration_ns: u64_at(40),
        pid: u32_at(48),
        tid: u32_at(52),
        result: u32_at(56) as i32,
        device: u32_at(60) as i32,
        api: u16::from_le_bytes([b[64], b[65]]),
        kind: b[66],
        mem_kind: b[67],
    }
}

/// Writes an events frame for `events` into `out` without allocating. Returns the
/// number of bytes written, or `None` when `out` is too small. This is the shim's path.
pub fn encode_events_frame_into(events: &[Event], out: &mut [u8]) -> Option<usize> {
    let payload_len = 4 + events.len().checked_mul(EVENT_SIZE)?;
    let total = FRAME_OVERHEAD + payload_len;
    if out.len() < total || payload_len + 1 > MAX_FRAME_LEN as usize {
        return None;
    }
    let len = (payload_len + 1) as u32;
    out[0..4].copy_from_slice(&len.to_le_bytes());
    out[4] = frame_type::EVENTS;
    out[5..9].copy_from_slice(&(events.len() as u32).to_le_bytes());
    let mut pos = 9;
    for e in events {
        let slot: &mut [u8; EVENT_SIZE] = (&mut out[pos..pos + EVENT_SIZE]).try_into().ok()?;
        encode_event(e, slot);
        pos += EVENT_SIZE;
    }
    let crc = crc32fast::hash(&out[4..pos]);
    out[pos..pos + 4].copy_from_slice(&crc.to_le_bytes());
    Some(pos + 4)
}

/// Writes a `dropped` or `process_end` frame into `out` without allocating (the shim's
/// last pass may run while the program's allocator is locked). Returns the number of
/// bytes written; `None` for any other record or when `out` is too small. Same bytes as
/// [`encode_record`].
pub fn encode_small_record_into(record: &Record, out: &mut [u8]) -> Option<usize> {
    let mut payload = [0u8; 20];
    let (ty, n) = match record {
        Record::Dropped(d) => {
            payload[0..4].copy_from_slice(&d.pid.to_le_bytes());
            payload[4..12].copy_from_slice(&d.ts_ns.to_le_bytes());
            payload[12..20].copy_from_slice(&d.dropped_total.to_le_bytes());
            (frame_type::DROPPED, 20)
        }
        Record::ProcessEnd(e) => {
            payload[0..4].copy_from_slice(&e.pid.to_le_bytes());
            payload[4..12].copy_from_slice(&e.ts_ns.to_le_bytes());
            payload[12..16].copy_from_slice(&e.exit_code.to_le_bytes());
            (frame_type::PROCESS_END, 16)
        }
        _ => return None,
    };
    let total = FRAME_OVERHEAD + n;
    let out = out.get_mut(..total)?;
    out[0..4].copy_from_slice(&((n + 1) as u32).to_le_bytes());
    out[4] = ty;
    out[5..5 + n].copy_from_slice(&payload[..n]);
    let crc = crc32fast::hash(&out[4..5 + n]);
    out[5 + n..].copy_from_slice(&crc.to_le_bytes());
    Some(total)
}

/// Growable payload builder used for the variable-length frames.
#[derive(Default)]
struct Payload(Vec<u8>);

impl Payload {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Strings longer than u16::MAX bytes are cut at a char boundary.
    fn str(&mut self, s: &str) -> &mut Self {
        let mut end = s.len().min(u16::MAX as usize);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.0.extend_from_slice(&s.as_bytes()[..end]);
        self
    }
}

/// Appends one framed record to `out`.
pub fn encode_record(record: &Record, out: &mut Vec<u8>) -> Result<(), WireError> {
    let mut p = Payload::default();
    let ty = match record {
        Record::ProcessStart(h) => {
            p.u32(h.pid)
                .u32(h.ppid)
                .u64(h.mono_anchor_ns)
                .u64(h.wall_anchor_unix_ns)
                .str(&h.shim_version)
                .str(&h.hostname);
            let argc = h.argv.len().min(u16::MAX as usize);
            p.u16(argc as u16);
            for a in &h.argv[..argc] {
                p.str(a);
            }
            frame_type::PROCESS_START
        }
        Record::Events(events) => {
            p.u32(events.len() as u32);
            let mut slot = [0u8; EVENT_SIZE];
            for e in events {
                encode_event(e, &mut slot);
                p.0.extend_from_slice(&slot);
            }
            frame_type::EVENTS
        }
        Record::DeviceInfo(d) => {
            p.u32(d.pid)
                .i32(d.device)
                .u8(d.vendor)
                .u64(d.total_bytes)
                .str(&d.name);
            frame_type::DEVICE_INFO
        }
        Record::Marker(m) => {
            p.u32(m.pid)
                .u32(m.tid)
                .u64(m.ts_ns)
                .i32(m.device)
                .str(&m.text);
            frame_type::MARKER
        }
        Record::Dropped(d) => {
            p.u32(d.pid).u64(d.ts_ns).u64(d.dropped_total);
            frame_type::DROPPED
        }
        Record::ProcessEnd(e) => {
            p.u32(e.pid).u64(e.ts_ns).i32(e.exit_code);
            frame_type::PROCESS_END
        }
        Record::DeviceSample(s) => {
            p.u64(s.ts_ns)
                .i32(s.device)
                .u8(s.memory)
                .u64(s.used_bytes)
                .u64(s.total_bytes)
                .str(&s.source);
            frame_type::DEVICE_SAMPLE
        }
        Record::PjrtExecutable(x) => {
            p.u32(x.pid).u64(x.ts_ns).u64(x.handle).u32(x.flags);
            let s = &x.stats;
            for v in [
                s.generated_code,
                s.argument,
                s.output,
                s.alias,
                s.temp,
                s.host_generated_code,
                s.host_argument,
                s.host_output,
                s.host_alias,
                s.host_temp,
            ] {
                p.i64(v);
            }
            let n = x.devices.len().min(u16::MAX as usize);
            p.u16(n as u16);
            for d in &x.devices[..n] {
                p.i32(*d);
            }
            p.str(&x.name).str(&x.fingerprint);
            frame_type::PJRT_EXECUTABLE
        }
        Record::PjrtMemoryStats(m) => {
            p.u32(m.pid).u64(m.ts_ns).i32(m.device).u32(m.flags);
            for v in [
                m.bytes_in_use,
                m.peak_bytes_in_use,
                m.largest_free_block,
                m.pool_bytes,
                m.peak_pool_bytes,
                m.bytes_limit,
                m.num_allocs,
                m.largest_alloc_size,
            ] {
                p.i64(v);
            }
            frame_type::PJRT_MEMORY_STATS
        }
        Record::Backtrace(b) => {
            p.u32(b.pid).u32(b.tid).u64(b.ts_ns).u64(b.ptr);
            let n = b.frames.len().min(u16::MAX as usize);
            p.u16(n as u16);
            for f in &b.frames[..n] {
                p.u64(*f);
            }
            frame_type::BACKTRACE
        }
        Record::ModuleMap(m) => {
            p.u32(m.pid).u64(m.ts_ns);
            let n = m.modules.len().min(u16::MAX as usize);
            p.u16(n as u16);
            for x in &m.modules[..n] {
                p.u64(x.start).u64(x.end).u64(x.bias).str(&x.path);
            }
            frame_type::MODULE_MAP
        }
        Record::Unknown { frame_type, .. } => {
            return Err(WireError::CannotEncodeUnknown {
                frame_type: *frame_type,
            })
        }
    };
    let len = p.0.len() + 1;
    if len > MAX_FRAME_LEN as usize {
        return Err(WireError::FrameTooLarge { len: len as u64 });
    }
    let start = out.len();
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.push(ty);
    out.extend_from_slice(&p.0);
    let crc = crc32fast::hash(&out[start + 4..]);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Cursor over a frame payload; every read is bounds-checked.
struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
    frame_type: u8,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.b.len() - self.pos < n {
            return Err(WireError::ShortPayload {
                frame_type: self.frame_type,
                need: self.pos + n,
                got: self.b.len(),
            });
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn i32(&mut self) -> Result<i32, WireError> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn i64(&mut self) -> Result<i64, WireError> {
        Ok(self.u64()? as i64)
    }
    fn str(&mut self) -> Result<String, WireError> {
        let n = self.u16()? as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    /// Steps over a `str` without reading it.
    fn skip_str(&mut self) -> Result<(), WireError> {
        let n = self.u16()? as usize;
        self.take(n).map(drop)
    }
    /// Steps over `count` items of `size` bytes.
    fn skip_n(&mut self, count: usize, size: usize) -> Result<(), WireError> {
        let n = count.saturating_mul(size);
        self.take(n).map(drop)
    }
}

/// Whether `payload` is exactly as long as the layout of frame type `ty` says, reading
/// only its counts and string lengths: true exactly when [`decode_payload`] would accept
/// it, without decoding or copying anything. Salvage reading asks this of a candidate
/// frame before checksumming it, so resync over a damaged stretch does not checksum
/// megabytes at every offset whose bytes merely look like a frame header. Unknown types
/// fit at any size.
pub fn payload_fits(ty: u8, payload: &[u8]) -> bool {
    let mut c = Cursor {
        b: payload,
        pos: 0,
        frame_type: ty,
    };
    let walked = (|| -> Result<(), WireError> {
        match ty {
            frame_type::PROCESS_START => {
                c.take(4 + 4 + 8 + 8)?;
                c.skip_str()?;
                c.skip_str()?;
                for _ in 0..c.u16()? {
                    c.skip_str()?;
                }
            }
            frame_type::EVENTS => {
                let n = c.u32()? as usize;
                c.skip_n(n, EVENT_SIZE)?;
            }
            frame_type::DEVICE_INFO => {
                c.take(4 + 4 + 1 + 8)?;
                c.skip_str()?;
            }
            frame_type::MARKER => {
                c.take(4 + 4 + 8 + 4)?;
                c.skip_str()?;
            }
            frame_type::DROPPED => drop(c.take(4 + 8 + 8)?),
            frame_type::PROCESS_END => drop(c.take(4 + 8 + 4)?),
            frame_type::DEVICE_SAMPLE => {
                c.take(8 + 4 + 1 + 8 + 8)?;
                c.skip_str()?;
            }
            frame_type::PJRT_EXECUTABLE => {
                c.take(4 + 8 + 8 + 4 + 10 * 8)?;
                let n = c.u16()? as usize;
                c.skip_n(n, 4)?;
                c.skip_str()?;
                c.skip_str()?;
            }
            frame_type::PJRT_MEMORY_STATS => drop(c.take(4 + 8 + 4 + 4 + 8 * 8)?),
            frame_type::BACKTRACE => {
                c.take(4 + 4 + 8 + 8)?;
                let n = c.u16()? as usize;
                c.skip_n(n, 8)?;
            }
            frame_type::MODULE_MAP => {
                c.take(4 + 8)?;
                for _ in 0..c.u16()? {
                    c.take(8 + 8 + 8)?;
                    c.skip_str()?;
                }
            }
            _ => c.pos = payload.len(),
        }
        Ok(())
    })();
    walked.is_ok() && c.pos == payload.len()
}

/// Decodes the payload of a frame whose type byte is `ty` (CRC already checked).
pub fn decode_payload(ty: u8, payload: &[u8]) -> Result<Record, WireError> {
    let mut c = Cursor {
        b: payload,
        pos: 0,
        frame_type: ty,
    };
    let record =
        match ty {
            frame_type::PROCESS_START => {
                let pid = c.u32()?;
                let ppid = c.u32()?;
                let mono_anchor_ns = c.u64()?;
                let wall_anchor_unix_ns = c.u64()?;
                let shim_version = c.str()?;
                let hostname = c.str()?;
                let argc = c.u16()?;
                let mut argv = Vec::with_capacity(argc as usize);
                for _ in 0..argc {
                    argv.push(c.str()?);
                }
                Record::ProcessStart(ProcessStart {
                    pid,
                    ppid,
                    mono_anchor_ns,
                    wall_anchor_unix_ns,
                    shim_version,
                    hostname,
                    argv,
                })
            }
            frame_type::EVENTS => {
                let count = c.u32()? as usize;
                let body = c.take(count.checked_mul(EVENT_SIZE).ok_or(
                    WireError::ShortPayload {
                        frame_type: ty,
                        need: usize::MAX,
                        got: payload.len(),
                    },
                )?)?;
                let events = body
                    .chunks_exact(EVENT_SIZE)
                    .map(|chunk| {
                        let mut slot = [0u8; EVENT_SIZE];
                        slot.copy_from_slice(chunk);
                        decode_event(&slot)
                    })
                    .collect();
                Record::Events(events)
            }
            frame_type::DEVICE_INFO => Record::DeviceInfo(DeviceInfo {
                pid: c.u32()?,
                device: c.i32()?,
                vendor: c.u8()?,
                total_bytes: c.u64()?,
                name: c.str()?,
            }),
            frame_type::MARKER => Record::Marker(Marker {
                pid: c.u32()?,
                tid: c.u32()?,
                ts_ns: c.u64()?,
                device: c.i32()?,
                text: c.str()?,
            }),
            frame_type::DROPPED => Record::Dropped(Dropped {
                pid: c.u32()?,
                ts_ns: c.u64()?,
                dropped_total: c.u64()?,
            }),
            frame_type::PROCESS_END => Record::ProcessEnd(ProcessEnd {
                pid: c.u32()?,
                ts_ns: c.u64()?,
                exit_code: c.i32()?,
            }),
            frame_type::DEVICE_SAMPLE => Record::DeviceSample(DeviceSample {
                ts_ns: c.u64()?,
                device: c.i32()?,
                memory: c.u8()?,
                used_bytes: c.u64()?,
                total_bytes: c.u64()?,
                source: c.str()?,
            }),
            frame_type::PJRT_EXECUTABLE => {
                let pid = c.u32()?;
                let ts_ns = c.u64()?;
                let handle = c.u64()?;
                let flags = c.u32()?;
                let stats = CompiledMemoryStats {
                    generated_code: c.i64()?,
                    argument: c.i64()?,
                    output: c.i64()?,
                    alias: c.i64()?,
                    temp: c.i64()?,
                    host_generated_code: c.i64()?,
                    host_argument: c.i64()?,
                    host_output: c.i64()?,
                    host_alias: c.i64()?,
                    host_temp: c.i64()?,
                };
                let n = c.u16()?;
                let mut devices = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    devices.push(c.i32()?);
                }
                Record::PjrtExecutable(PjrtExecutable {
                    pid,
                    ts_ns,
                    handle,
                    flags,
                    stats,
                    devices,
                    name: c.str()?,
                    fingerprint: c.str()?,
                })
            }
            frame_type::PJRT_MEMORY_STATS => Record::PjrtMemoryStats(PjrtMemoryStats {
                pid: c.u32()?,
                ts_ns: c.u64()?,
                device: c.i32()?,
                flags: c.u32()?,
                bytes_in_use: c.i64()?,
                peak_bytes_in_use: c.i64()?,
                largest_free_block: c.i64()?,
                pool_bytes: c.i64()?,
                peak_pool_bytes: c.i64()?,
                bytes_limit: c.i64()?,
                num_allocs: c.i64()?,
                largest_alloc_size: c.i64()?,
            }),
            frame_type::BACKTRACE => {
                let (pid, tid, ts_ns, ptr) = (c.u32()?, c.u32()?, c.u64()?, c.u64()?);
                let n = c.u16()?;
                let mut frames = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    frames.push(c.u64()?);
                }
                Record::Backtrace(Backtrace {
                    pid,
                    tid,
                    ts_ns,
                    ptr,
                    frames,
                })
            }
            frame_type::MODULE_MAP => {
                let (pid, ts_ns) = (c.u32()?, c.u64()?);
                let n = c.u16()?;
                let mut modules = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    modules.push(Module {
                        start: c.u64()?,
                        end: c.u64()?,
                        bias: c.u64()?,
                        path: c.str()?,
                    });
                }
                Record::ModuleMap(ModuleMap {
                    pid,
                    ts_ns,
                    modules,
                })
            }
            other => {
                return Ok(Record::Unknown {
                    frame_type: other,
                    len: payload.len() as u32 + 1,
                })
            }
        };
    if c.pos != payload.len() {
        return Err(WireError::TrailingBytes {
            frame_type: ty,
            extra: payload.len() - c.pos,
        });
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_round_trips() {
        let e = Event {
            ts_ns: 1,
            ptr: 0xdead_beef,
            size: 1 << 40,
            stream: 7,
            aux: 9,
            duration_ns: 11,
            pid: 12,
            tid: 13,
            result: -2,
            device: 7,
            kind: 3,
            mem_kind: 1,
            api: 1001,
        };
        let mut b = [0u8; EVENT_SIZE];
        encode_event(&e, &mut b);
        assert_eq!(decode_event(&b), e);
    }

    #[test]
    fn no_alloc_small_records_equal_record_encoding() {
        for rec in [
            Record::ProcessEnd(ProcessEnd {
                pid: 7,
                ts_ns: u64::MAX - 3,
                exit_code: 134,
            }),
            Record::Dropped(Dropped {
                pid: 9,
                ts_ns: 12,
                dropped_total: 1 << 40,
            }),
        ] {
            let mut want = Vec::new();
            encode_record(&rec, &mut want).unwrap();
            let mut buf = [0u8; 64];
            let n = encode_small_record_into(&rec, &mut buf).unwrap();
            assert_eq!(&buf[..n], &want[..]);
            assert_eq!(encode_small_record_into(&rec, &mut buf[..n - 1]), None);
        }
        let other = Record::Events(vec![]);
        assert_eq!(encode_small_record_into(&other, &mut [0u8; 64]), None);
    }

    #[test]
    fn no_alloc_events_frame_equals_record_encoding() {
        let events = vec![
            Event::default(),
            Event {
                size: 5,
                ..Event::default()
            },
        ];
        let mut a = Vec::new();
        encode_record(&Record::Events(events.clone()), &mut a).unwrap();
        let mut b = vec![0u8; 512];
        let n = encode_events_frame_into(&events, &mut b).unwrap();
        assert_eq!(&a[..], &b[..n]);
        assert!(encode_events_frame_into(&events, &mut [0u8; 20]).is_none());
    }

    #[test]
    fn preamble_checks() {
        let p = encode_preamble();
        assert_eq!(decode_preamble(&p).unwrap(), FORMAT_VERSION);
        let mut bad = p;
        bad[0] = b'X';
        assert!(matches!(decode_preamble(&bad), Err(WireError::BadMagic)));
        let mut v2 = p;
        v2[8] = 2;
        assert!(matches!(
            decode_preamble(&v2),
            Err(WireError::UnsupportedVersion { found: 2, .. })
        ));
    }
}
