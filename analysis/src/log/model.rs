//! The data `memwatch log` extracts (serialisable; bytes as integers). Exact integers are
//! kept apart from figures that the log only prints in human units (`*_approx_bytes`).

pub use super::autotune::{AutotuneFailure, AutotuneMessage, ScratchRefusal};
pub use super::framework::{
    ArgumentsOverLimit, CupyOom, DeviceAllocFailure, DriverOomError, TorchOom,
};
pub use super::traceback::{PyFrame, PythonException};
use serde::Serialize;
use std::collections::BTreeMap;

/// Where an event was found.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct Location {
    /// File.
    pub file: String,
    /// 1-based line.
    pub line: usize,
}

/// `Can't reduce memory use below T by rematerialization; only reduced to A, down from O`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RematWarning {
    /// Where.
    pub at: Location,
    /// Memory limit XLA tried to reach.
    pub target_bytes: u64,
    /// What it reached.
    pub achieved_bytes: u64,
    /// Before rematerialization.
    pub original_bytes: u64,
}

/// One chunk line of a BFC dump (`InUse at 302000100 of size 33554432 tag lower
/// allocation_annotation xla.execute{executable=jit__normal} next 2`; older dumps may add
/// `requested size N` / `by op X`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Chunk {
    /// Where.
    pub at: Location,
    /// In use (`InUse`) or free (`Free`).
    pub in_use: bool,
    /// Device address (hex in the log).
    pub address: u64,
    /// Chunk size in bytes.
    pub size: u64,
    /// Client-requested size, when the dump prints it.
    pub requested_size: Option<u64>,
    /// `tag` (`lower`, `central_gap`).
    pub tag: Option<String>,
    /// `allocation_annotation` text.
    pub annotation: Option<String>,
    /// Executable from the annotation (`xla.execute{executable=jit_model}`).
    pub executable: Option<String>,
    /// `by op X` in old dumps.
    pub op: Option<String>,
}

/// Allocator stats (the BFC `Stats:` block, an `AllocatorStats` key/value block, or a
/// `memory_stats()` dict). Integer values are exact; human-unit values go to `approx`.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct AllocatorStats {
    /// Where the block starts.
    pub at: Location,
    /// What printed it: `bfc-stats`, `allocator-stats`, `memory-stats-dict`.
    pub variant: String,
    /// Label in front of a dict (`MEMORY_STATS_BEFORE`), if any.
    pub label: Option<String>,
    /// Exact fields, normalised to snake_case (`bytes_limit`, `bytes_in_use`, ...).
    pub exact: BTreeMap<String, u64>,
    /// Fields given only in human units (`InUse: 1.06GiB`), converted approximately.
    pub approx: BTreeMap<String, u64>,
}

impl AllocatorStats {
    /// An exact value, else the approximate one.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.exact
            .get(key)
            .or_else(|| self.approx.get(key))
            .copied()
    }
}

/// A BFC allocator out-of-memory report.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct BfcOom {
    /// Where the `ran out of memory` line is.
    pub at: Location,
    /// Allocator name (`GPU_0_bfc`).
    pub allocator: String,
    /// Requested size as printed (human units, approximate).
    pub requested_approx_bytes: u64,
    /// `rounded to N` (exact).
    pub rounded_bytes: u64,
    /// `from the lower end` / `upper` (new format).
    pub end: Option<String>,
    /// `Next region of size N` (exact), one per region.
    pub regions: Vec<u64>,
    /// Bytes of the chunk lines printed under each region (parallel to `regions`). The
    /// chunks of a region tile it, so a region whose chunks add up to less is cut off.
    pub region_chunk_bytes: Vec<u64>,
    /// Every chunk line.
    pub chunks: Vec<Chunk>,
    /// `N Chunks of size S totalling H`: (count, size).
    pub in_use_by_size: Vec<(u64, u64)>,
    /// `Allocator memory summary` fields (human units -> approximate bytes).
    pub summary_approx: BTreeMap<String, u64>,
    /// `Spatial partitioning summary` fields (approximate bytes).
    pub spatial_approx: BTreeMap<String, u64>,
    /// The `Stats:` block.
    pub stats: Option<AllocatorStats>,
    /// The one-line occupancy map BFC prints after the OOM line (`****____`: one cell
    /// per 1% of the pool, `*` in use, `_` free), even at the default log level.
    pub memory_map: Option<MemoryMap>,
}

/// BFC's occupancy map (`bfc_allocator.cc` prints it under the OOM line).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct MemoryMap {
    pub at: Location,
    /// The map as printed.
    pub cells: String,
}

impl MemoryMap {
    /// Whether a message is such a map (only `*` and `_`, at least 50 cells).
    pub fn is_map(msg: &str) -> bool {
        msg.len() >= 50 && msg.bytes().all(|b| b == b'*' || b == b'_')
    }

    /// Free cells, and the longest run of free cells (each cell is 1/len of the pool).
    pub fn free_cells(&self) -> (usize, usize) {
        let (mut free, mut run, mut best) = (0, 0, 0);
        for b in self.cells.bytes() {
            if b == b'_' {
                free += 1;
                run += 1;
                best = best.max(run);
            } else {
                run = 0;
            }
        }
        (free, best)
    }

    /// Free cells that are not at the end of the map (holes between used memory).
    pub fn holes(&self) -> usize {
        self.cells
            .trim_end_matches('_')
            .bytes()
            .filter(|b| *b == b'_')
            .count()
    }
}

impl BfcOom {
    /// The failed request, rounded as the allocator rounds it; `None` when the message
    /// states no `rounded to` figure (never a made-up 0).
    pub fn request_bytes(&self) -> Option<u64> {
        (self.rounded_bytes > 0).then_some(self.rounded_bytes)
    }

    /// Whether the chunk lines are the whole dump: every region printed and its chunks
    /// adding up to exactly its size. A log cut off (or lines lost) inside the dump fails.
    pub fn chunk_dump_complete(&self) -> bool {
        !self.regions.is_empty() && self.regions == self.region_chunk_bytes
    }

    /// Where the chunk dump stops: its last chunk line, else the OOM line itself.
    pub fn chunk_dump_end(&self) -> &Location {
        self.chunks.last().map_or(&self.at, |c| &c.at)
    }

    /// What is missing from an incomplete chunk dump, for messages
    /// (`chunks cover 640.00 MiB of the 3.50 GiB pool`); `None` when it is complete or
    /// there is no dump at all.
    pub fn chunk_dump_gap(&self) -> Option<(u64, u64)> {
        if (self.chunks.is_empty() && self.regions.is_empty()) || self.chunk_dump_complete() {
            return None;
        }
        let covered = self
            .region_chunk_bytes
            .iter()
            .fold(0u64, |a, b| a.saturating_add(*b));
        Some((covered, self.pool_bytes().unwrap_or(0)))
    }

    /// Exact bytes in use: sum of the in-use chunk lines when the dump is whole, else of
    /// the by-size summary; `None` when the log has neither (older one-line OOM messages,
    /// or a dump cut off before its summary).
    pub fn in_use_bytes(&self) -> Option<u64> {
        if self.chunk_dump_complete() && self.chunks.iter().any(|c| c.in_use) {
            Some(
                self.chunks
                    .iter()
                    .filter(|c| c.in_use)
                    .fold(0u64, |a, c| a.saturating_add(c.size)),
            )
        } else if !self.in_use_by_size.is_empty() {
            Some(
                self.in_use_by_size
                    .iter()
                    .fold(0u64, |a, (n, s)| a.saturating_add(n.saturating_mul(*s))),
            )
        } else {
            None
        }
    }

    /// The limit the `Stats:` block states, when it is above the pool reserved so far
    /// (a growing pool): exact values as they are, values printed in human units (two
    /// decimals) only when above the pool by more than their rounding.
    pub fn limit_above_pool(&self) -> Option<u64> {
        let pool = self.pool_bytes()?;
        let stats = self.stats.as_ref()?;
        match stats.exact.get("bytes_limit") {
            Some(&l) => (l > pool).then_some(l),
            None => stats
                .approx
                .get("bytes_limit")
                .copied()
                .filter(|&l| l as f64 > pool as f64 * 1.005),
        }
    }

    /// Exact pool size: sum of regions when printed.
    pub fn pool_bytes(&self) -> Option<u64> {
        if self.regions.is_empty() {
            None
        } else {
            Some(self.regions.iter().fold(0u64, |a, b| a.saturating_add(*b)))
        }
    }

    /// Largest free chunk from the chunk lines (exact), when the dump is whole.
    pub fn largest_free_chunk(&self) -> Option<u64> {
        if !self.chunk_dump_complete() {
            return None;
        }
        self.chunks
            .iter()
            .filter(|c| !c.in_use)
            .map(|c| c.size)
            .max()
    }

    /// In-use bytes per executable (chunks without annotation under `(unannotated)`).
    pub fn in_use_by_executable(&self) -> Vec<(String, u64, u64)> {
        let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for c in self.chunks.iter().filter(|c| c.in_use) {
            let k = c
                .executable
                .clone()
                .unwrap_or_else(|| "(unannotated)".into());
            let e = m.entry(k).or_insert((0, 0));
            e.0 = e.0.saturating_add(c.size);
            e.1 += 1;
        }
        let mut v: Vec<(String, u64, u64)> = m.into_iter().map(|(k, (b, n))| (k, b, n)).collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1));
        v
    }
}

/// `RESOURCE_EXHAUSTED: Out of memory while trying to allocate …`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ResourceExhausted {
    /// Where.
    pub at: Location,
    /// Exact bytes when printed as `N bytes`.
    pub bytes: Option<u64>,
    /// Approximate bytes when printed in human units.
    pub approx_bytes: Option<u64>,
    /// `with allocator X`.
    pub allocator: Option<String>,
    /// `[executable_name='X']`.
    pub executable: Option<String>,
    /// The message.
    pub message: String,
}

/// `XLA backend allocating 3.50GiB (3753902080 bytes) on device 0 for BFCAllocator.`
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PoolAllocation {
    /// Where.
    pub at: Location,
    /// Exact pool bytes.
    pub bytes: u64,
    /// Device ordinal.
    pub device: Option<u64>,
}

/// Everything found in the logs.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct LogReport {
    /// Files read.
    pub files: Vec<String>,
    /// Lines read.
    pub lines: usize,
    /// Device names (`StreamExecutor [0]: NVIDIA H200`).
    pub devices: Vec<String>,
    /// Rematerialization warnings.
    pub remat_warnings: Vec<RematWarning>,
    /// BFC OOM reports.
    pub ooms: Vec<BfcOom>,
    /// Stats blocks outside OOM reports.
    pub allocator_stats: Vec<AllocatorStats>,
    /// RESOURCE_EXHAUSTED errors.
    pub resource_exhausted: Vec<ResourceExhausted>,
    /// Pool allocation lines.
    pub pool_allocations: Vec<PoolAllocation>,
    /// `MEMORY_ANALYSIS {json}` lines (printed `compiled.memory_analysis()`).
    pub memory_analyses: Vec<BTreeMap<String, u64>>,
    /// BFC reports whose caller retries with something else (the GPU autotuner): not
    /// failures, and not in `ooms`.
    pub scratch_refusals: Vec<ScratchRefusal>,
    /// Instructions the autotuner could not configure (`Could not get config for HLO`,
    /// `All configs failed during profiling`).
    pub autotune_failures: Vec<AutotuneFailure>,
    /// PyTorch out-of-memory messages.
    pub torch_ooms: Vec<TorchOom>,
    /// CuPy pool out-of-memory messages.
    pub cupy_ooms: Vec<CupyOom>,
    /// Failed device allocations the XLA stream executor logged.
    pub device_alloc_failures: Vec<DeviceAllocFailure>,
    /// Driver out-of-memory errors named in messages (outside the forms above).
    pub driver_errors: Vec<DriverOomError>,
    /// Python exceptions with their tracebacks.
    pub exceptions: Vec<PythonException>,
    /// XLA's compile-time warning that the arguments exceed the memory limit.
    pub arguments_over_limit: Vec<ArgumentsOverLimit>,
    /// `Using BFC allocator.` and the like: the XLA allocator the log names.
    pub xla_allocator: Option<String>,
}
