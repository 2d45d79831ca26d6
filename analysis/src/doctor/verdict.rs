//! The doctor's answer, as stored with a run and shown by `memwatch diagnose`, `memwatch
//! run` and the dashboard: a [`Diagnosis`] with one [`Verdict`] per failure (and per
//! warning the evidence supports), each saying what failed, when, who asked, why (its
//! kind, with the figures that prove it) and the fix (checked where memwatch can). A
//! stable schema ([`SCHEMA`]): figures are integers in bytes or counts, evidence is
//! `file:line`; extend it, never rename.

use serde::Serialize;
use std::collections::BTreeMap;

/// Version of the JSON document; bumped only for incompatible changes.
pub const SCHEMA: u32 = 1;

/// Why memory ran out (or is about to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// An XLA executable's temp buffer (with its arguments) does not fit the pool.
    ExecuteTemp,
    /// Memory asked for while compiling (autotuning scratch) did not fit.
    CompileScratch,
    /// The same executable's outputs (or the same allocations) accumulate step after step.
    Leak,
    /// The free total covered the request but no free block was large enough.
    Fragmentation,
    /// The allocator ran past the limit the configuration states (cuda_async, platform).
    PoolLimitIgnored,
    /// One executable's outputs stayed live while another, which fits alone, ran.
    CoResident,
    /// PyTorch's per-process memory fraction refused a request the device had room for.
    TorchFractionLimit,
    /// CuPy's memory-pool limit (`set_limit`) refused a request the device had room for.
    CupyPoolLimit,
    /// Page-locked host memory could not be allocated.
    HostPinned,
    /// One request larger than the whole device.
    LargerThanDevice,
    /// Other processes (or memory outside the framework's pool) held the device.
    OtherProcess,
    /// Another framework's pool in the same process took the room (JAX's preallocated
    /// pool in a PyTorch process, PyTorch's cache in a JAX one).
    OtherFrameworkPool,
    /// An executable's outputs could have reused its undonated arguments of the same size
    /// (`donate_argnums`), and without them it fits.
    MissingDonation,
    /// Memory was refused but the program recovered (XLA's preallocation backed off, an
    /// out-of-memory error caught and retried) and did not fail: a warning with its cost.
    Recovered,
    /// The live set plus the request exceed the pool; none of the causes above fits.
    PoolTooSmall,
    /// An out-of-memory failure whose cause the evidence does not show.
    Unexplained,
}

impl Kind {
    /// Stable name (the JSON spelling).
    pub fn name(self) -> &'static str {
        match self {
            Self::ExecuteTemp => "execute_temp",
            Self::CompileScratch => "compile_scratch",
            Self::Leak => "leak",
            Self::Fragmentation => "fragmentation",
            Self::PoolLimitIgnored => "pool_limit_ignored",
            Self::CoResident => "co_resident",
            Self::TorchFractionLimit => "torch_fraction_limit",
            Self::CupyPoolLimit => "cupy_pool_limit",
            Self::HostPinned => "host_pinned",
            Self::LargerThanDevice => "larger_than_device",
            Self::OtherProcess => "other_process",
            Self::OtherFrameworkPool => "other_framework_pool",
            Self::MissingDonation => "missing_donation",
            Self::Recovered => "recovered",
            Self::PoolTooSmall => "pool_too_small",
            Self::Unexplained => "unexplained",
        }
    }
}

/// When in the program's life the memory was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Compiling an executable (outside autotuning).
    Compile,
    /// Autotuning while compiling (profiling candidate kernels).
    Autotuning,
    /// Running an executable.
    Execute,
    /// A host-to-device transfer or a copy (no executable running).
    DataTransfer,
    /// Inside a framework's own allocator (PyTorch's caching allocator, CuPy's pool).
    FrameworkAllocator,
    /// A driver call outside any framework allocator.
    DriverCall,
    /// While the program ran (a warning about the whole run, or not known).
    Run,
}

/// What failed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct What {
    /// The request that failed, in bytes (exact when `request_exact`, else as precise as
    /// the message that states it: two decimals of its unit).
    pub request_bytes: Option<u64>,
    pub request_exact: bool,
    /// The allocator (`GPU_0_bfc`, `cuda_async`, `pytorch`, `cupy`, `cuMemHostAlloc` …).
    pub allocator: Option<String>,
    pub pid: Option<u32>,
    pub device: Option<i32>,
    /// The error as reported (`RESOURCE_EXHAUSTED`, `CUDA_ERROR_OUT_OF_MEMORY`,
    /// `torch.OutOfMemoryError` …).
    pub result: Option<String>,
}

/// Who asked for the memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Who {
    pub executable: Option<String>,
    pub hlo_instruction: Option<String>,
    pub op_name: Option<String>,
    /// The program's source line from the HLO metadata (`file:line`).
    pub source: Option<String>,
    /// The program's innermost Python frame (`file:line in function`).
    pub python_frame: Option<String>,
    /// Another executable whose live outputs took the room (co-resident).
    pub resident_executable: Option<String>,
}

/// How memwatch checked a fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// `bfc_replay` (the run's own trace replayed through the BFC model),
    /// `recorded_figures` (arithmetic on the figures the run recorded), `device_free`
    /// (the device's free memory at the failure).
    pub method: String,
    pub passed: bool,
    /// One sentence: what was replayed or compared.
    pub detail: String,
}

/// The fix.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Fix {
    pub advice: String,
    /// `None`: memwatch could not check it.
    pub check: Option<Check>,
}

/// A piece of evidence: a file and line (`line` `None` for a whole file, e.g. a capture).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Cite {
    pub file: String,
    pub line: Option<usize>,
    pub what: String,
}

impl Cite {
    /// `file:line` (or `file`).
    pub fn location(&self) -> String {
        match self.line {
            Some(l) => format!("{}:{l}", self.file),
            None => self.file.clone(),
        }
    }
}

/// Who held the memory the verdict blames: the process and framework whose pool ran out
/// (a leak, a temp, fragmentation), the framework whose pool took the room (another
/// framework's pool in the same process), or another process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Blame {
    pub pid: Option<u32>,
    /// `xla`, `torch`, `cupy`, `driver` (memory outside any framework), or none known.
    pub framework: Option<String>,
    pub other_process: bool,
}

/// One verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub kind: Kind,
    /// A failure of the run (false: a warning, e.g. a limit ignored without an OOM).
    pub failure: bool,
    /// One sentence for lists and badges.
    pub headline: String,
    pub what: What,
    pub when: When,
    pub who: Who,
    /// Why, in a sentence or two, with the figures below.
    pub why: String,
    /// The figures that prove it (bytes, counts), by name.
    pub figures: BTreeMap<String, u64>,
    pub fix: Fix,
    /// Other kinds the evidence also shows (a leak behind a limit, …).
    pub also: Vec<Kind>,
    pub evidence: Vec<Cite>,
    /// Who held the memory this verdict blames.
    pub holder: Blame,
}

/// Peak device memory of one process on one device (driver level).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DevicePeak {
    pub pid: u32,
    pub device: i32,
    pub device_name: Option<String>,
    pub device_total_bytes: Option<u64>,
    pub peak_bytes: u64,
    /// ns since the capture's start.
    pub peak_ns: u64,
}

/// Evidence that was missing, and what it would have added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missing {
    /// `capture`, `log`, `xla_dump`, `environment`, `device_samples`, `torch_snapshot`, …
    pub evidence: String,
    pub would_add: String,
}

/// A source the doctor read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// `capture`, `log`, `xla_dump`, `device_samples`, `torch_snapshot`.
    pub kind: String,
    pub path: String,
    /// What was found unusable in it, if anything.
    pub note: Option<String>,
}

/// The doctor's whole answer for a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnosis {
    pub schema: u32,
    /// Whether the run ended in an out-of-memory failure.
    pub failed: bool,
    /// The first verdict's headline, or what was (not) found.
    pub headline: String,
    pub verdicts: Vec<Verdict>,
    /// Per process and device: the peak (several when the run had several).
    pub devices: Vec<DevicePeak>,
    /// When one of several devices ran out: each device's share of the run's memory in
    /// the figure that shows the split (`super::imbalance`); omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imbalance: Option<super::imbalance::Imbalance>,
    /// Every byte of the failing device at the failure (or of the busiest device at its
    /// peak) by holder (`super::ledger`); omitted when no evidence names a device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger: Option<super::ledger::Ledger>,
    pub sources: Vec<Source>,
    pub missing: Vec<Missing>,
}
