//! The records a frame carries, each defined once: its struct is its wire layout (fields
//! in order, see `codec::wire_struct!`) and its frame type number sits next to it
//! (`wire_record!`). Encoding, decoding, the size check salvage reading makes and the
//! layout table in the crate README all come from these definitions.
//!
//! Frame type numbers and field order are the on-disk format: append new record types
//! and never change an existing one.

use crate::codec::{wire_struct, Cursor, Field, FieldLayout, Put, WireStruct};
use crate::event::Event;
use crate::identity::DeviceIdentity;
use crate::WireError;

/// A record type with a frame of its own.
pub trait WireRecord: Sized {
    /// The frame's type byte.
    const FRAME_TYPE: u8;
    /// Its name in the layout table.
    const NAME: &'static str;
    /// Its payload's fields in wire order.
    fn fields() -> Vec<FieldLayout>;
    /// Payload size when it is always the same.
    const FIXED_SIZE: Option<usize>;
    fn encode(&self, w: &mut impl Put);
    fn decode(c: &mut Cursor<'_>) -> Result<Self, WireError>;
    /// Steps over a payload without building the record; fails exactly where
    /// [`WireRecord::decode`] would.
    fn skip(c: &mut Cursor<'_>) -> Result<(), WireError>;
}

/// Gives a [`wire_struct!`] type its own frame type.
macro_rules! wire_record {
    ($($ty:ident = $frame_type:literal $name:literal;)*) => {$(
        impl WireRecord for $ty {
            const FRAME_TYPE: u8 = $frame_type;
            const NAME: &'static str = $name;
            const FIXED_SIZE: Option<usize> = <$ty as Field>::FIXED_SIZE;
            fn fields() -> Vec<FieldLayout> {
                <$ty as WireStruct>::fields()
            }
            #[inline]
            fn encode(&self, w: &mut impl Put) {
                Field::put(self, w)
            }
            #[inline]
            fn decode(c: &mut Cursor<'_>) -> Result<Self, WireError> {
                <$ty as Field>::get(c)
            }
            fn skip(c: &mut Cursor<'_>) -> Result<(), WireError> {
                <$ty as Field>::skip(c)
            }
        }
    )*};
}

wire_record! {
    ProcessStart = 1 "process_start";
    DeviceInfo = 3 "device_info";
    Marker = 4 "marker";
    Dropped = 5 "dropped";
    ProcessEnd = 6 "process_end";
    DeviceSample = 7 "device_sample";
    PjrtExecutable = 8 "pjrt_executable";
    PjrtMemoryStats = 9 "pjrt_memory_stats";
    Backtrace = 10 "backtrace";
    ModuleMap = 11 "module_map";
    DeviceReading = 12 "device_reading";
}

/// Frame type 2, `events`: `count:u32` then `count` [`Event`]s of
/// [`crate::EVENT_SIZE`] bytes each (the one list with a 32-bit count).
impl WireRecord for Vec<Event> {
    const FRAME_TYPE: u8 = 2;
    const NAME: &'static str = "events";
    const FIXED_SIZE: Option<usize> = None;
    fn fields() -> Vec<FieldLayout> {
        vec![
            FieldLayout {
                name: "count",
                layout: "u32".into(),
                size: Some(4),
            },
            FieldLayout {
                name: "events",
                layout: "Event[count]".into(),
                size: None,
            },
        ]
    }
    fn encode(&self, w: &mut impl Put) {
        encode_events(self, w);
    }
    fn decode(c: &mut Cursor<'_>) -> Result<Self, WireError> {
        let mut events = Vec::new();
        decode_events_into(c, &mut events)?;
        Ok(events)
    }
    fn skip(c: &mut Cursor<'_>) -> Result<(), WireError> {
        let n = u32::get(c)? as usize;
        c.skip_n(n, EVENT_SIZE)
    }
}

/// Decodes an `events` payload into `out` (cleared first): a buffer kept from an earlier
/// frame is reused, so its pages are not allocated and zeroed again.
pub(crate) fn decode_events_into(
    c: &mut Cursor<'_>,
    out: &mut Vec<Event>,
) -> Result<(), WireError> {
    let n = u32::get(c)? as usize;
    let body = c.take(n.saturating_mul(EVENT_SIZE))?;
    out.clear();
    out.extend(body.chunks_exact(EVENT_SIZE).map(|chunk| {
        chunk
            .try_into()
            .map(crate::frame::decode_event)
            .unwrap_or_default()
    }));
    Ok(())
}

/// The `events` payload for `events` (the shim's path: no allocation with a
/// [`crate::codec::SliceWriter`]).
pub fn encode_events(events: &[Event], w: &mut impl Put) {
    (events.len() as u32).put(w);
    let Some(body) = w.slot(events.len().saturating_mul(EVENT_SIZE)) else {
        return;
    };
    for (e, slot) in events.iter().zip(body.chunks_exact_mut(EVENT_SIZE)) {
        if let Ok(slot) = slot.try_into() {
            crate::frame::encode_event(e, slot);
        }
    }
}

/// Size of one encoded [`Event`], from its layout.
pub const EVENT_SIZE: usize = match <Event as Field>::FIXED_SIZE {
    Some(n) => n,
    None => panic!("an event has a fixed size"),
};

wire_struct! {
    /// The header of one process image in a capture. `mono_anchor_ns` and
    /// `wall_anchor_unix_ns` were read at the same moment, so readers convert event times
    /// to wall time and to "ns since the capture's start" (the earliest anchor).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ProcessStart {
        pub pid: u32,
        pub ppid: u32,
        pub mono_anchor_ns: u64,
        pub wall_anchor_unix_ns: u64,
        pub shim_version: String,
        pub hostname: String,
        pub argv: Vec<String>,
        /// The inode of the process's pid namespace (`/proc/self/ns/pid`): pids are
        /// unique only within one namespace (each container numbers its own). Absent
        /// from older captures.
        pub pid_ns: Option<u64>,
    }
}

wire_struct! {
    /// A device the process uses (`vendor`: [`crate::Vendor`]); with pid 0, a device
    /// of the node as a sampler lists it (`device` is then the sampler's index).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct DeviceInfo {
        pub pid: u32,
        /// The ordinal the process saw (under `CUDA_VISIBLE_DEVICES` not the GPU's
        /// index on the machine: `identity` says which GPU it is).
        pub device: i32,
        pub vendor: u8,
        pub total_bytes: u64,
        pub name: String,
        /// Which physical device this is, as the runtime said it (UUID, PCI bus id, in
        /// canonical form). Absent from older captures.
        pub identity: Option<DeviceIdentity>,
    }
}

impl DeviceInfo {
    /// Its identity ([`DeviceIdentity::unknown`] when the record has none).
    pub fn identity(&self) -> &DeviceIdentity {
        self.identity
            .as_ref()
            .unwrap_or_else(|| DeviceIdentity::unknown())
    }
}

wire_struct! {
    /// A user or tool annotation at a point in time.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct Marker {
        pub pid: u32,
        pub tid: u32,
        pub ts_ns: u64,
        pub device: i32,
        pub text: String,
    }
}

wire_struct! {
    /// The cumulative count of events a process had to drop (buffers full).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct Dropped {
        pub pid: u32,
        pub ts_ns: u64,
        pub dropped_total: u64,
    }
}

wire_struct! {
    /// A process image left the capture.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct ProcessEnd {
        pub pid: u32,
        pub ts_ns: u64,
        /// The exit status (0-255), or [`ProcessEnd::UNKNOWN_EXIT`].
        pub exit_code: i32,
    }
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

wire_struct! {
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
}

wire_struct! {
    /// Compiled memory statistics of a PJRT executable
    /// (`PJRT_Executable_GetCompiledMemoryStats`, the numbers JAX's
    /// `compiled.memory_analysis()` shows).
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
}

wire_struct! {
    /// An executable the framework compiled or loaded through the PJRT C API.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct PjrtExecutable {
        pub pid: u32,
        pub ts_ns: u64,
        /// The `PJRT_LoadedExecutable*` (execute events carry it in `ptr`).
        pub handle: u64,
        /// [`PjrtExecutable::FLAG_STATS`]: `stats` valid (`GetCompiledMemoryStats`
        /// answered); [`PjrtExecutable::FLAG_DESERIALIZED`]: loaded from a serialized
        /// executable.
        pub flags: u32,
        pub stats: CompiledMemoryStats,
        /// Local hardware ids of the devices it runs on (in execute's device order).
        pub devices: Vec<i32>,
        /// `PJRT_Executable_Name`, e.g. `jit_mlp`.
        pub name: String,
        /// `PJRT_Executable_Fingerprint` (empty when the plugin gives none).
        pub fingerprint: String,
    }
}

impl PjrtExecutable {
    pub const FLAG_STATS: u32 = 1;
    pub const FLAG_DESERIALIZED: u32 = 2;

    /// Compiled statistic `v` (one of `stats`' fields) when the plugin answered
    /// `GetCompiledMemoryStats` and the value is a size; `None` otherwise.
    pub fn stat(&self, v: i64) -> Option<u64> {
        (self.flags & Self::FLAG_STATS != 0 && v >= 0).then_some(v as u64)
    }
}

wire_struct! {
    /// One `PJRT_Device_MemoryStats` answer (the framework allocator's own counters).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct PjrtMemoryStats {
        pub pid: u32,
        pub ts_ns: u64,
        /// Local hardware id of the device.
        pub device: i32,
        /// Bit i: field i of the eight counters below is valid (bit 0 always).
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

wire_struct! {
    /// Native return addresses sampled for one allocation, innermost first: frame 0 is
    /// the return address in the code that called the intercepted function. The
    /// allocation is the `alloc` event of the same pid, tid, `ts_ns` and `ptr`; the shim
    /// (`MEMWATCH_BACKTRACE_EVERY_BYTES`) writes it before the events frame holding
    /// that event.
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
}

wire_struct! {
    /// One loaded object of a [`ModuleMap`]: `[start, end)` spans its `PT_LOAD`
    /// segments in memory; an address A inside maps to the ELF virtual address
    /// `A - bias` of the file at `path`.
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
}

wire_struct! {
    /// The objects loaded in a process, for offline symbolization; written before the
    /// first backtrace frame and again when objects were loaded or unloaded.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ModuleMap {
        pub pid: u32,
        pub ts_ns: u64,
        pub modules: Vec<Module>,
    }
}

wire_struct! {
    /// One process's use of a device in a [`DeviceReading`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct ProcessUse {
        /// The pid as the sampler's library reports it (the pid namespace of the driver).
        pub pid: u32,
        /// [`ProcessUse::WATCHED`], [`ProcessUse::BYTES_KNOWN`].
        pub flags: u32,
        /// The process's device memory as the driver counts it (its allocations, its
        /// context, its loaded code); valid with [`ProcessUse::BYTES_KNOWN`].
        pub used_bytes: u64,
    }
}

impl ProcessUse {
    /// The pid belongs to the watched process tree (the command `memwatch run` started
    /// and its descendants; the processes `memwatch attach` attached to and theirs).
    pub const WATCHED: u32 = 1;
    /// `used_bytes` holds a figure (NVML answers "not available" under some setups;
    /// ROCm SMI gives one figure per process, not per device, to a process on several).
    pub const BYTES_KNOWN: u32 = 2;

    /// The process's bytes, when the sampler knew them.
    pub fn bytes(&self) -> Option<u64> {
        (self.flags & Self::BYTES_KNOWN != 0).then_some(self.used_bytes)
    }

    /// Whether the pid is in the watched process tree.
    pub fn watched(&self) -> bool {
        self.flags & Self::WATCHED != 0
    }
}

wire_struct! {
    /// One device's memory read by memwatch itself (NVML, ROCm SMI) in the `memwatch`
    /// process, at one instant: the device-wide use and each process's use come from the
    /// same reading, so the watched processes' bytes and the device's are taken together.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct DeviceReading {
        /// CLOCK_MONOTONIC ns when the reading started (the events' clock).
        pub ts_ns: u64,
        /// The sampler library's device index (NVML: PCI bus order; ROCm SMI: its own
        /// order), not a process's CUDA / HIP ordinal.
        pub device: i32,
        /// [`crate::Vendor`] code.
        pub vendor: u8,
        /// [`DeviceReading::PROCESSES`], [`DeviceReading::AT_FAILURE`].
        pub flags: u32,
        /// Device memory in use, all processes and the driver together.
        pub used_bytes: u64,
        pub total_bytes: u64,
        /// "nvml" or "rocm_smi".
        pub source: String,
        /// The device's UUID, empty if unknown ([`crate::identity::canonical_uuid`]'s
        /// form; older captures hold NVML's `GPU-…` or ROCm SMI's bare hex unique id).
        pub uuid: String,
        /// PCI bus id, empty if unknown ([`crate::identity::canonical_pci_bus_id`]'s
        /// `0000:18:00.0`; older captures hold NVML's `00000000:18:00.0`).
        pub pci_bus_id: String,
        /// Every process on the device at this instant (valid with
        /// [`DeviceReading::PROCESSES`]).
        pub processes: Vec<ProcessUse>,
    }
}

impl DeviceReading {
    /// `processes` was read (an empty list then means no process used the device);
    /// without it the per-process figures are unknown, not zero.
    pub const PROCESSES: u32 = 1;
    /// Taken at once because a failed allocation of a watched process arrived, not on
    /// the sampling period.
    pub const AT_FAILURE: u32 = 2;

    /// The processes, when the sampler read them.
    pub fn process_list(&self) -> Option<&[ProcessUse]> {
        (self.flags & Self::PROCESSES != 0).then_some(&self.processes[..])
    }

    /// Bytes of the watched processes at this instant: `None` when the processes were
    /// not read or one watched process's figure is unknown.
    pub fn watched_bytes(&self) -> Option<u64> {
        self.process_list()?
            .iter()
            .filter(|p| p.watched())
            .try_fold(0u64, |a, p| Some(a.saturating_add(p.bytes()?)))
    }

    /// Whether it was taken because of a failure.
    pub fn at_failure(&self) -> bool {
        self.flags & Self::AT_FAILURE != 0
    }

    /// The device's identity, in canonical form (readings written before it was
    /// canonical hold the library's own forms).
    pub fn identity(&self) -> DeviceIdentity {
        DeviceIdentity::new(&self.uuid, &self.pci_bus_id)
    }
}
