//! The event vocabulary: what one intercepted call or observation looks like.
//!
//! Owns the fixed-size [`Event`] record (its field order is its wire layout), the small
//! enums inside it ([`EventKind`], [`Api`], [`ApiFamily`], [`MemKind`], [`Vendor`]) and
//! the typed accessors through which every other crate reads and writes those codes. It
//! does not own framing (see `frame`). Enum discriminants are part of the on-disk format:
//! append new variants, never renumber.

/// What happened. Stored as one byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum EventKind {
    /// A successful allocation: `ptr`, `size` valid.
    Alloc = 1,
    /// A release of an earlier allocation: `ptr` valid, `size` 0 unless the API states it.
    Free = 2,
    /// An allocation call that returned an error: `size` is the request, `result` the code.
    AllocFailed = 3,
    /// A timed API call that is not an allocation (stream create, module load, ...):
    /// `aux` holds the duration in ns, `ts_ns` the start.
    ApiSpan = 4,
    /// A release call that returned an error (double free, invalid pointer ...).
    FreeFailed = 5,
    /// The thread's current device changed (hipSetDevice / cuCtxSetCurrent); `device` is
    /// the new one.
    SetDevice = 6,
}

impl EventKind {
    /// The byte stored on the wire.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Decodes the stored byte; `None` for a value this version does not know.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Alloc,
            2 => Self::Free,
            3 => Self::AllocFailed,
            4 => Self::ApiSpan,
            5 => Self::FreeFailed,
            6 => Self::SetDevice,
            _ => return None,
        })
    }

    /// Stable lower-case name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Alloc => "alloc",
            Self::Free => "free",
            Self::AllocFailed => "alloc_failed",
            Self::ApiSpan => "api_span",
            Self::FreeFailed => "free_failed",
            Self::SetDevice => "set_device",
        }
    }
}

/// The kind of memory an allocation API hands out. Stored as one byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum MemKind {
    /// Not a memory event (spans, set-device).
    None = 0,
    /// Ordinary device memory (hipMalloc, cuMemAlloc).
    Device = 1,
    /// Page-locked host memory (hipHostMalloc, cuMemHostAlloc, host register).
    HostPinned = 2,
    /// Managed / unified memory (hipMallocManaged, cuMemAllocManaged).
    Managed = 3,
    /// Physical memory of the virtual memory management API (hipMemCreate, cuMemCreate).
    VmmPhysical = 4,
    /// A mapping of physical memory into a reserved range (hipMemMap, cuMemMap).
    VmmMap = 5,
    /// A reserved virtual address range (hipMemAddressReserve); takes no memory.
    VmmReserve = 6,
    /// Stream-ordered pool memory (hipMallocAsync, cuMemAllocAsync, *FromPoolAsync).
    StreamPool = 7,
    /// A memory pool object (hipMemPoolCreate); size 0.
    PoolObject = 8,
    /// A PJRT buffer (a `jax.Array`'s device storage) with its on-device size. It lives
    /// inside the framework's allocator pool, which the driver-level events already
    /// count, so it does not add to device live bytes.
    PjrtBuffer = 9,
    /// A block of PyTorch's CUDA caching allocator (from a memory snapshot), with its
    /// size as handed out: it lives inside a segment, which the segment's own event
    /// counts, so it does not add to device live bytes. Its address is a device address
    /// like its segment's (the first block of a segment shares the segment's).
    TorchBlock = 10,
}

impl MemKind {
    /// The byte stored on the wire.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Decodes the stored byte; `None` for a value this version does not know.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::None,
            1 => Self::Device,
            2 => Self::HostPinned,
            3 => Self::Managed,
            4 => Self::VmmPhysical,
            5 => Self::VmmMap,
            6 => Self::VmmReserve,
            7 => Self::StreamPool,
            8 => Self::PoolObject,
            9 => Self::PjrtBuffer,
            10 => Self::TorchBlock,
            _ => return None,
        })
    }

    /// Stable lower-case name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Device => "device",
            Self::HostPinned => "host_pinned",
            Self::Managed => "managed",
            Self::VmmPhysical => "vmm_physical",
            Self::VmmMap => "vmm_map",
            Self::VmmReserve => "vmm_reserve",
            Self::StreamPool => "stream_pool",
            Self::PoolObject => "pool_object",
            Self::PjrtBuffer => "pjrt_buffer",
            Self::TorchBlock => "torch_block",
        }
    }

    /// Whether bytes of this kind occupy device memory (counted in device live bytes).
    /// Reservations, pool objects and host memory do not; VMM mappings do not either,
    /// because the physical handle (`VmmPhysical`) already counts the bytes.
    pub fn occupies_device_memory(self) -> bool {
        matches!(
            self,
            Self::Device | Self::Managed | Self::VmmPhysical | Self::StreamPool
        )
    }
}

/// GPU vendor of a device record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Vendor {
    Unknown = 0,
    Amd = 1,
    Nvidia = 2,
    /// The test runtime's simulated device.
    Simulated = 3,
}

impl Vendor {
    /// The number stored in `device_info`.
    pub const fn code(self) -> u8 {
        self as u8
    }

    pub fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Amd,
            2 => Self::Nvidia,
            3 => Self::Simulated,
            _ => Self::Unknown,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Amd => "amd",
            Self::Nvidia => "nvidia",
            Self::Simulated => "simulated",
        }
    }
}

/// The first API number of the framework (PJRT) range.
const FRAMEWORK_API_FIRST: u16 = 3000;
/// The first API number of PyTorch's caching allocator (framework level too).
const TORCH_API_FIRST: u16 = 3100;

macro_rules! apis {
    ($($variant:ident = $num:literal => $name:literal,)*) => {
        /// Every API function the shim can intercept. Stored as a little-endian u16.
        /// Numbers 1..=999 are HIP, 1000..=1999 CUDA driver, 2000..=2999 CUDA runtime,
        /// 3000.. framework-level (PJRT; 3101.. PyTorch's caching allocator). Append only.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum Api {
            Unknown = 0,
            $($variant = $num,)*
        }

        impl Api {
            /// Decodes the stored number; unknown numbers map to [`Api::Unknown`]. A
            /// table lookup: readers decode it for every event.
            #[inline]
            pub fn from_u16(v: u16) -> Self {
                API_BY_NUMBER
                    .get(v as usize)
                    .copied()
                    .unwrap_or(Self::Unknown)
            }

            /// The C symbol name, e.g. `"hipMalloc"`.
            pub fn name(self) -> &'static str {
                match self {
                    Self::Unknown => "unknown",
                    $(Self::$variant => $name,)*
                }
            }

            /// Looks a C symbol name up; `None` when the shim does not know it.
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($name => Some(Self::$variant),)*
                    _ => None,
                }
            }

            /// All known APIs, in numeric order.
            pub const ALL: &'static [Api] = &[$(Self::$variant,)*];
        }

        /// Numbers below this are decoded by [`API_BY_NUMBER`] (every API's number is).
        const API_NUMBERS: usize = 4096;

        /// [`Api::from_u16`]'s table: each number's API, [`Api::Unknown`] where none.
        static API_BY_NUMBER: [Api; API_NUMBERS] = {
            let mut t = [Api::Unknown; API_NUMBERS];
            $(
                assert!(($num as usize) < API_NUMBERS, "an API number past the table");
                t[$num as usize] = Api::$variant;
            )*
            t
        };
    };
}

apis! {
    HipMalloc = 1 => "hipMalloc",
    HipFree = 2 => "hipFree",
    HipMallocManaged = 3 => "hipMallocManaged",
    HipMallocAsync = 4 => "hipMallocAsync",
    HipFreeAsync = 5 => "hipFreeAsync",
    HipMallocFromPoolAsync = 6 => "hipMallocFromPoolAsync",
    HipHostMalloc = 7 => "hipHostMalloc",
    HipHostFree = 8 => "hipHostFree",
    HipExtMallocWithFlags = 9 => "hipExtMallocWithFlags",
    HipMallocPitch = 10 => "hipMallocPitch",
    HipHostRegister = 11 => "hipHostRegister",
    HipHostUnregister = 12 => "hipHostUnregister",
    HipMemCreate = 13 => "hipMemCreate",
    HipMemRelease = 14 => "hipMemRelease",
    HipMemMap = 15 => "hipMemMap",
    HipMemUnmap = 16 => "hipMemUnmap",
    HipMemAddressReserve = 17 => "hipMemAddressReserve",
    HipMemAddressFree = 18 => "hipMemAddressFree",
    HipMemPoolCreate = 19 => "hipMemPoolCreate",
    HipMemPoolDestroy = 20 => "hipMemPoolDestroy",
    HipStreamCreate = 21 => "hipStreamCreate",
    HipStreamCreateWithFlags = 22 => "hipStreamCreateWithFlags",
    HipStreamCreateWithPriority = 23 => "hipStreamCreateWithPriority",
    HipStreamDestroy = 24 => "hipStreamDestroy",
    HipModuleLoad = 25 => "hipModuleLoad",
    HipModuleLoadData = 26 => "hipModuleLoadData",
    HipModuleLoadDataEx = 27 => "hipModuleLoadDataEx",
    HipModuleUnload = 28 => "hipModuleUnload",
    HipSetDevice = 29 => "hipSetDevice",
    HipMemGetInfo = 30 => "hipMemGetInfo",
    CuMemAlloc = 1001 => "cuMemAlloc_v2",
    CuMemFree = 1002 => "cuMemFree_v2",
    CuMemAllocManaged = 1003 => "cuMemAllocManaged",
    CuMemAllocPitch = 1004 => "cuMemAllocPitch_v2",
    CuMemHostAlloc = 1005 => "cuMemHostAlloc",
    CuMemAllocHost = 1006 => "cuMemAllocHost_v2",
    CuMemFreeHost = 1007 => "cuMemFreeHost",
    CuMemAllocAsync = 1008 => "cuMemAllocAsync",
    CuMemFreeAsync = 1009 => "cuMemFreeAsync",
    CuMemAllocFromPoolAsync = 1010 => "cuMemAllocFromPoolAsync",
    CuMemCreate = 1011 => "cuMemCreate",
    CuMemRelease = 1012 => "cuMemRelease",
    CuMemMap = 1013 => "cuMemMap",
    CuMemUnmap = 1014 => "cuMemUnmap",
    CuMemAddressReserve = 1015 => "cuMemAddressReserve",
    CuMemAddressFree = 1016 => "cuMemAddressFree",
    CuStreamCreate = 1017 => "cuStreamCreate",
    CuStreamDestroy = 1018 => "cuStreamDestroy_v2",
    CuCtxSetCurrent = 1019 => "cuCtxSetCurrent",
    CuMemGetInfo = 1020 => "cuMemGetInfo_v2",
    CuMemAllocV1 = 1021 => "cuMemAlloc",
    CuMemFreeV1 = 1022 => "cuMemFree",
    CuStreamCreateWithPriority = 1023 => "cuStreamCreateWithPriority",
    CuModuleLoad = 1024 => "cuModuleLoad",
    CuModuleLoadData = 1025 => "cuModuleLoadData",
    CuModuleLoadDataEx = 1026 => "cuModuleLoadDataEx",
    CuModuleUnload = 1027 => "cuModuleUnload",
    CuMemPoolCreate = 1028 => "cuMemPoolCreate",
    CuMemPoolDestroy = 1029 => "cuMemPoolDestroy",
    CudaMalloc = 2001 => "cudaMalloc",
    CudaFree = 2002 => "cudaFree",
    CudaMallocManaged = 2003 => "cudaMallocManaged",
    CudaMallocAsync = 2004 => "cudaMallocAsync",
    CudaFreeAsync = 2005 => "cudaFreeAsync",
    CudaMallocHost = 2006 => "cudaMallocHost",
    CudaHostAlloc = 2007 => "cudaHostAlloc",
    CudaFreeHost = 2008 => "cudaFreeHost",
    CudaSetDevice = 2009 => "cudaSetDevice",
    PjrtClientCompile = 3001 => "PJRT_Client_Compile",
    PjrtDeserializeAndLoad = 3002 => "PJRT_Executable_DeserializeAndLoad",
    PjrtLoadedExecutableDestroy = 3003 => "PJRT_LoadedExecutable_Destroy",
    PjrtExecute = 3004 => "PJRT_LoadedExecutable_Execute",
    PjrtExecuteComplete = 3005 => "PJRT_LoadedExecutable_Execute:complete",
    PjrtBufferFromHostBuffer = 3006 => "PJRT_Client_BufferFromHostBuffer",
    PjrtExecuteOutput = 3007 => "PJRT_LoadedExecutable_Execute:output",
    PjrtBufferCopyToDevice = 3008 => "PJRT_Buffer_CopyToDevice",
    PjrtBufferCopyToMemory = 3009 => "PJRT_Buffer_CopyToMemory",
    PjrtBufferDestroy = 3010 => "PJRT_Buffer_Destroy",
    PjrtBufferDelete = 3011 => "PJRT_Buffer_Delete",
    // A buffer that lived before a late attach (`memwatch attach`): an allocation
    // stamped with the attach time, found as an execute's argument.
    PjrtBufferPreAttach = 3012 => "PJRT_Buffer:pre-attach",
    TorchAlloc = 3101 => "torch:alloc",
    TorchFree = 3102 => "torch:free",
}

/// Which runtime interface an [`Api`] belongs to (its number range: 1..=999 HIP,
/// 1000..=1999 CUDA driver, 2000..=2999 CUDA runtime, 3000..=3099 PJRT, 3100.. PyTorch's
/// caching allocator as a memory snapshot records it). The shim switches
/// hooks on and off per family (`MEMWATCH_HOOK`), and result codes are named per family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ApiFamily {
    /// HIP (`hipMalloc` ...), result codes `hipError_t`.
    Hip = 1,
    /// The CUDA driver API (`cuMemAlloc_v2` ...), result codes `CUresult`.
    CudaDriver = 2,
    /// The CUDA runtime API (`cudaMalloc` ...), result codes `cudaError_t`.
    CudaRuntime = 4,
    /// The PJRT C API (framework level: executables, executes, buffers).
    Pjrt = 8,
    /// PyTorch's caching allocator (framework level: blocks inside its segments), read
    /// from a memory snapshot (`memwatch import/report SNAPSHOT.pickle`); no hook.
    Torch = 16,
}

impl ApiFamily {
    /// Every family, in number-range order.
    pub const ALL: [ApiFamily; 5] = [
        Self::Hip,
        Self::CudaDriver,
        Self::CudaRuntime,
        Self::Pjrt,
        Self::Torch,
    ];

    /// This family's bit in a set of families (distinct powers of two).
    pub const fn bit(self) -> u8 {
        self as u8
    }

    /// Stable lower-case name (`MEMWATCH_HOOK` spells `hip`, `cuda`, `cudart`, `pjrt`; `torch` has no hook).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Hip => "hip",
            Self::CudaDriver => "cuda",
            Self::CudaRuntime => "cudart",
            Self::Pjrt => "pjrt",
            Self::Torch => "torch",
        }
    }
}

impl Api {
    /// The number stored on the wire.
    pub const fn code(self) -> u16 {
        self as u16
    }

    /// The family of this API, by its number range; `None` for [`Api::Unknown`].
    pub const fn family(self) -> Option<ApiFamily> {
        match self as u16 {
            0 => None,
            1..=999 => Some(ApiFamily::Hip),
            1000..=1999 => Some(ApiFamily::CudaDriver),
            2000..=2999 => Some(ApiFamily::CudaRuntime),
            FRAMEWORK_API_FIRST..TORCH_API_FIRST => Some(ApiFamily::Pjrt),
            TORCH_API_FIRST.. => Some(ApiFamily::Torch),
        }
    }

    /// A framework-level (PJRT) call rather than a driver / runtime call. Its events
    /// describe memory inside the framework's pool, which driver events already count.
    pub const fn is_framework(self) -> bool {
        matches!(self.family(), Some(ApiFamily::Pjrt | ApiFamily::Torch))
    }

    /// The calls that hand memory (or a handle, range or mapping) out: the shim
    /// reads the clock for them when the real call has returned, and for every
    /// other call when it is entered (see [`Event::ts_ns`]).
    pub const fn stamped_on_return(self) -> bool {
        matches!(
            self,
            Self::HipMalloc
                | Self::HipMallocManaged
                | Self::HipMallocAsync
                | Self::HipMallocFromPoolAsync
                | Self::HipHostMalloc
                | Self::HipExtMallocWithFlags
                | Self::HipMallocPitch
                | Self::HipHostRegister
                | Self::HipMemCreate
                | Self::HipMemMap
                | Self::HipMemAddressReserve
                | Self::HipMemPoolCreate
                | Self::CuMemAlloc
                | Self::CuMemAllocV1
                | Self::CuMemAllocManaged
                | Self::CuMemAllocPitch
                | Self::CuMemHostAlloc
                | Self::CuMemAllocHost
                | Self::CuMemAllocAsync
                | Self::CuMemAllocFromPoolAsync
                | Self::CuMemCreate
                | Self::CuMemMap
                | Self::CuMemAddressReserve
                | Self::CuMemPoolCreate
                | Self::CudaMalloc
                | Self::CudaMallocManaged
                | Self::CudaMallocAsync
                | Self::CudaMallocHost
                | Self::CudaHostAlloc
        )
    }
}

crate::codec::wire_struct! {
    /// One intercepted call or observation: 72 bytes on the wire, its fields in this
    /// order and 4 reserved zero bytes.
    ///
    /// Field meanings by kind are documented on [`EventKind`]. `device` is the thread's
    /// current device ordinal (-1 when unknown). `result` is the real call's return code,
    /// unchanged (0 = success for HIP and CUDA). `api`, `kind` and `mem_kind` hold the
    /// stored codes; read and write them with [`Event::api`], [`Event::kind`],
    /// [`Event::mem_kind`] and their setters.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct Event {
        /// CLOCK_MONOTONIC nanoseconds: when the call started, except for the events of
        /// allocating calls ([`Api::stamped_on_return`]: `Alloc` / `AllocFailed`), stamped
        /// when the real call returned. That keeps one address's events in their real
        /// order across threads: a release is stamped before the runtime can hand the
        /// address out again, an allocation after the runtime has handed it out, so
        /// sorting by `ts_ns` never puts a free of an address after the allocation that
        /// reused it, even when the two calls overlap on two threads.
        /// [`Event::call_start_ns`] gives the start.
        pub ts_ns: u64,
        /// Returned (alloc) or passed (free) pointer / handle; 0 when none.
        pub ptr: u64,
        /// Bytes requested (alloc, failed alloc) or stated (free with size, VMM).
        pub size: u64,
        /// Stream handle for stream-ordered calls; 0 when none. For a PJRT execute
        /// output buffer ([`Api::PjrtExecuteOutput`]) it holds which output of the
        /// executable the buffer is, plus one (0: not recorded, as in captures made
        /// before the shim recorded it); read and write it with
        /// [`Event::pjrt_output_index`] and [`Event::set_pjrt_output_index`].
        pub stream: u64,
        /// Kind-specific extra: span duration in ns; pitch for pitched allocations; the
        /// physical handle for VMM map/unmap; the pool handle for *FromPoolAsync; flags
        /// otherwise.
        pub aux: u64,
        /// Duration of the real call in ns. API spans always carry it (also in `aux`);
        /// the shim leaves it 0 for allocation / release events unless
        /// `MEMWATCH_ALLOC_DURATIONS=1` (one clock read per call instead of two). An
        /// allocating call ran from `ts_ns - duration_ns` to `ts_ns`; any other from
        /// `ts_ns`.
        pub duration_ns: u64,
        pub pid: u32,
        pub tid: u32,
        pub result: i32,
        pub device: i32,
        /// [`Api`] code.
        pub api: u16,
        /// [`EventKind`] code.
        pub kind: u8,
        /// [`MemKind`] code.
        pub mem_kind: u8,
    }
    reserved 4
}

/// Typed access to the three coded fields. The fields hold the codes as stored (a
/// newer writer's unknown codes survive a read and a re-write); outside this crate code
/// reads and writes them through these methods, never as numbers.
impl Event {
    /// An event of `kind`, memory kind `mem_kind`, from `api`, every other field 0 (fill
    /// the rest with struct update syntax: `Event { size, ..Event::new(..) }`).
    pub const fn new(kind: EventKind, mem_kind: MemKind, api: Api) -> Self {
        Event {
            ts_ns: 0,
            ptr: 0,
            size: 0,
            stream: 0,
            aux: 0,
            duration_ns: 0,
            pid: 0,
            tid: 0,
            result: 0,
            device: 0,
            kind: kind as u8,
            mem_kind: mem_kind as u8,
            api: api as u16,
        }
    }

    /// The event kind, `None` for a kind this version does not know.
    #[inline]
    pub fn kind(&self) -> Option<EventKind> {
        EventKind::from_u8(self.kind)
    }

    /// Whether this is an event of kind `k`.
    #[inline]
    pub fn is(&self, k: EventKind) -> bool {
        self.kind == k as u8
    }

    /// The memory kind, `None` for a kind this version does not know.
    #[inline]
    pub fn mem_kind(&self) -> Option<MemKind> {
        MemKind::from_u8(self.mem_kind)
    }

    /// Whether this event's memory kind is `m`.
    #[inline]
    pub fn is_mem(&self, m: MemKind) -> bool {
        self.mem_kind == m as u8
    }

    /// The API (unknown numbers give [`Api::Unknown`]).
    #[inline]
    pub fn api(&self) -> Api {
        Api::from_u16(self.api)
    }

    /// Whether the event comes from `api`.
    #[inline]
    pub fn is_api(&self, api: Api) -> bool {
        self.api == api as u16
    }

    /// A framework-level (PJRT) event: see [`Api::is_framework`]. Unknown numbers in the
    /// framework range count too (a newer shim's PJRT calls).
    #[inline]
    pub fn is_framework(&self) -> bool {
        self.api >= FRAMEWORK_API_FIRST
    }

    #[inline]
    pub fn set_kind(&mut self, k: EventKind) {
        self.kind = k as u8;
    }

    #[inline]
    pub fn set_mem_kind(&mut self, m: MemKind) {
        self.mem_kind = m as u8;
    }

    #[inline]
    pub fn set_api(&mut self, api: Api) {
        self.api = api as u16;
    }

    /// Same as [`Event::kind`] (older name, kept for callers not yet moved).
    pub fn event_kind(&self) -> Option<EventKind> {
        self.kind()
    }

    /// Same as [`Event::mem_kind`] (older name, kept for callers not yet moved).
    pub fn memory_kind(&self) -> Option<MemKind> {
        self.mem_kind()
    }

    /// Same as [`Event::api`] (older name, kept for callers not yet moved).
    pub fn api_name(&self) -> Api {
        self.api()
    }

    /// Which output of its executable a PJRT execute output buffer is (0-based), as the
    /// shim recorded it; `None` for any other event and for outputs recorded without
    /// their index (older captures: derive it from the call's order of outputs, see
    /// `memwatch_analysis::runtime::output_order`).
    pub fn pjrt_output_index(&self) -> Option<u32> {
        if self.api != Api::PjrtExecuteOutput as u16 || self.stream == 0 {
            return None;
        }
        u32::try_from(self.stream - 1).ok()
    }

    /// Records which output of its executable this PJRT execute output buffer is.
    pub fn set_pjrt_output_index(&mut self, index: u32) {
        self.stream = u64::from(index) + 1;
    }

    /// When the call started: `ts_ns`, less the duration for the events of calls
    /// stamped when they returned (see [`Event::ts_ns`]).
    pub fn call_start_ns(&self) -> u64 {
        call_span(self.ts_ns, self.duration_ns, self.kind, self.api).0
    }
}

/// When a call started and returned (as far as known: the start for an untimed call that
/// is not stamped on return), from an event's order stamp `ts_ns`, its `duration_ns`,
/// `kind` and `api` (see [`Event::ts_ns`]).
pub fn call_span(ts_ns: u64, duration_ns: u64, kind: u8, api: u16) -> (u64, u64) {
    if stamped_on_return(kind, api) {
        (ts_ns.saturating_sub(duration_ns), ts_ns)
    } else {
        (ts_ns, ts_ns.saturating_add(duration_ns))
    }
}

/// Whether an event of `kind` from `api` carries its call's return time (see
/// [`Event::ts_ns`]): allocation results of the driver / runtime calls the shim stamps
/// when they return.
pub fn stamped_on_return(kind: u8, api: u16) -> bool {
    matches!(
        EventKind::from_u8(kind),
        Some(EventKind::Alloc | EventKind::AllocFailed)
    ) && Api::from_u16(api).stamped_on_return()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for api in Api::ALL {
            assert!(seen.insert(api.name()), "duplicate name {}", api.name());
            assert_eq!(Api::from_name(api.name()), Some(*api));
            assert_eq!(Api::from_u16(*api as u16), *api);
        }
        assert_eq!(Api::from_u16(9999), Api::Unknown);
    }

    #[test]
    fn allocating_calls_are_stamped_on_return() {
        let ev = |api: Api, kind: EventKind| Event {
            ts_ns: 1_000,
            duration_ns: 100,
            api: api as u16,
            kind: kind as u8,
            ..Event::default()
        };
        assert_eq!(ev(Api::CuMemAlloc, EventKind::Alloc).call_start_ns(), 900);
        assert_eq!(
            ev(Api::HipMalloc, EventKind::AllocFailed).call_start_ns(),
            900
        );
        assert_eq!(ev(Api::CuMemFree, EventKind::Free).call_start_ns(), 1_000);
        let span = |e: Event| call_span(e.ts_ns, e.duration_ns, e.kind, e.api);
        assert_eq!(span(ev(Api::CuMemAlloc, EventKind::Alloc)), (900, 1_000));
        assert_eq!(span(ev(Api::CuMemFree, EventKind::Free)), (1_000, 1_100));
        assert_eq!(
            ev(Api::CuStreamCreate, EventKind::ApiSpan).call_start_ns(),
            1_000
        );
        // PJRT events carry the times the PJRT layer chose.
        assert_eq!(
            ev(Api::PjrtExecuteOutput, EventKind::Alloc).call_start_ns(),
            1_000
        );
        // Every allocating name is one: its C name says so.
        for api in Api::ALL {
            let n = api.name();
            let allocating = (n.contains("Malloc") || n.contains("Alloc") || n.ends_with("Create"))
                && !n.contains("Stream")
                || n.ends_with("Map")
                || n.ends_with("Register")
                || n.ends_with("AddressReserve");
            let allocating = allocating && !n.starts_with("PJRT") && !n.contains("Free");
            assert_eq!(api.stamped_on_return(), allocating, "{n}");
        }
    }

    #[test]
    fn families_follow_the_number_ranges() {
        assert_eq!(Api::HipMemGetInfo.family(), Some(ApiFamily::Hip));
        assert_eq!(Api::CuMemFreeV1.family(), Some(ApiFamily::CudaDriver));
        assert_eq!(Api::CudaSetDevice.family(), Some(ApiFamily::CudaRuntime));
        assert_eq!(Api::PjrtBufferDelete.family(), Some(ApiFamily::Pjrt));
        assert_eq!(Api::Unknown.family(), None);
        for api in Api::ALL {
            assert_eq!(
                api.is_framework(),
                api.name().starts_with("PJRT") || api.name().starts_with("torch:"),
                "{}",
                api.name()
            );
            let e = Event::new(EventKind::ApiSpan, MemKind::None, *api);
            assert_eq!(e.is_framework(), api.is_framework());
            assert!(e.is_api(*api) && e.api() == *api);
        }
        // A newer shim's framework call this version does not name is still one.
        let newer = Event {
            api: 3999,
            ..Event::default()
        };
        assert!(newer.is_framework() && newer.api() == Api::Unknown);
        let bits: u8 = ApiFamily::ALL.iter().map(|f| f.bit()).sum();
        assert_eq!(bits, 31, "distinct bits");
    }

    #[test]
    fn typed_setters_store_the_codes_the_getters_read() {
        let mut e = Event::new(EventKind::Alloc, MemKind::Device, Api::HipMalloc);
        assert!(e.is(EventKind::Alloc) && e.is_mem(MemKind::Device));
        e.set_kind(EventKind::FreeFailed);
        e.set_mem_kind(MemKind::PjrtBuffer);
        e.set_api(Api::PjrtBufferDestroy);
        assert_eq!(e.kind(), Some(EventKind::FreeFailed));
        assert_eq!(e.mem_kind(), Some(MemKind::PjrtBuffer));
        assert_eq!(e.api(), Api::PjrtBufferDestroy);
        let unknown = Event {
            kind: 200,
            mem_kind: 200,
            ..e
        };
        assert_eq!((unknown.kind(), unknown.mem_kind()), (None, None));
    }

    #[test]
    fn kinds_round_trip() {
        for v in 0..=255u8 {
            if let Some(k) = EventKind::from_u8(v) {
                assert_eq!(k as u8, v);
            }
            if let Some(k) = MemKind::from_u8(v) {
                assert_eq!(k as u8, v);
            }
        }
    }
}
