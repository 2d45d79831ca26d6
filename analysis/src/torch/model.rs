//! What a PyTorch memory snapshot says, typed: the segments and blocks at the dump, the
//! trace entries of each device, the allocator settings and the annotations.
//!
//! Field meanings are PyTorch's (`torch.cuda.memory._snapshot()`): trace sizes are the
//! caller's requested bytes, block sizes the bytes the caching allocator handed out.

use serde::Serialize;

use super::stacks::StackId;

/// One trace action (`device_traces[i][j]['action']`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A block handed to the caller (`size`: requested bytes).
    Alloc,
    /// The caller released a block; it leaves `memory_allocated()` now.
    FreeRequested,
    /// The block went back to the cache (after the streams that used it finished).
    FreeCompleted,
    /// `cudaMalloc` of a new segment.
    SegmentAlloc,
    /// `cudaFree` of a segment (cache release, `empty_cache`).
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// An allocation failed (`size` requested, `device_free` what the device had free).
    Oom,
    /// `_snapshot()` was taken here.
    Snapshot,
}

impl Action {
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "alloc" => Self::Alloc,
            "free_requested" => Self::FreeRequested,
            "free_completed" => Self::FreeCompleted,
            "segment_alloc" => Self::SegmentAlloc,
            "segment_free" => Self::SegmentFree,
            "segment_map" => Self::SegmentMap,
            "segment_unmap" => Self::SegmentUnmap,
            "oom" => Self::Oom,
            "snapshot" => Self::Snapshot,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Alloc => "alloc",
            Self::FreeRequested => "free_requested",
            Self::FreeCompleted => "free_completed",
            Self::SegmentAlloc => "segment_alloc",
            Self::SegmentFree => "segment_free",
            Self::SegmentMap => "segment_map",
            Self::SegmentUnmap => "segment_unmap",
            Self::Oom => "oom",
            Self::Snapshot => "snapshot",
        }
    }

    pub const ALL: [Action; 9] = [
        Self::Alloc,
        Self::FreeRequested,
        Self::FreeCompleted,
        Self::SegmentAlloc,
        Self::SegmentFree,
        Self::SegmentMap,
        Self::SegmentUnmap,
        Self::Oom,
        Self::Snapshot,
    ];

    fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.get(usize::from(v)).copied()
    }
}

/// One trace entry, compact (it is stored, see `spill`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub action: Action,
    /// PyTorch's clock: Unix microseconds.
    pub time_us: i64,
    /// Block or segment address (0 for `oom`).
    pub addr: u64,
    /// Requested bytes (alloc, free, oom) or segment bytes.
    pub size: u64,
    pub stream: u64,
    /// `oom` only: free device memory the driver reported.
    pub device_free: u64,
    pub stack: StackId,
    /// Interned `compile_context` / `user_metadata` (see `StackTable::text`).
    pub compile_context: u32,
    pub user_metadata: u32,
}

impl Entry {
    pub const ENCODED: usize = 57;

    pub fn encode(&self, out: &mut [u8; Self::ENCODED]) {
        out[0] = self.action as u8;
        out[1..9].copy_from_slice(&self.time_us.to_le_bytes());
        out[9..17].copy_from_slice(&self.addr.to_le_bytes());
        out[17..25].copy_from_slice(&self.size.to_le_bytes());
        out[25..33].copy_from_slice(&self.stream.to_le_bytes());
        out[33..41].copy_from_slice(&self.device_free.to_le_bytes());
        out[41..45].copy_from_slice(&self.stack.0.to_le_bytes());
        out[45..49].copy_from_slice(&self.compile_context.to_le_bytes());
        out[49..53].copy_from_slice(&self.user_metadata.to_le_bytes());
        out[53..57].copy_from_slice(&[0; 4]);
    }

    pub fn decode(b: &[u8; Self::ENCODED]) -> Option<Self> {
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let u32_at = |i: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[i..i + 4]);
            u32::from_le_bytes(a)
        };
        Some(Entry {
            action: Action::from_u8(b[0])?,
            time_us: u64_at(1) as i64,
            addr: u64_at(9),
            size: u64_at(17),
            stream: u64_at(25),
            device_free: u64_at(33),
            stack: StackId(u32_at(41)),
            compile_context: u32_at(45),
            user_metadata: u32_at(49),
        })
    }
}

/// State of a block in a segment at the dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Held by the caller: counts in `memory_allocated()`.
    ActiveAllocated,
    /// Released by the caller, waiting for streams: active, not allocated.
    ActivePendingFree,
    /// Free space of the segment, cached.
    Inactive,
}

impl BlockState {
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "active_allocated" => Self::ActiveAllocated,
            "active_pending_free" => Self::ActivePendingFree,
            "inactive" => Self::Inactive,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::ActiveAllocated => "active_allocated",
            Self::ActivePendingFree => "active_pending_free",
            Self::Inactive => "inactive",
        }
    }
}

/// One block of a segment at the dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    pub stack: StackId,
}

/// One segment (a `cudaMalloc`, or an expandable segment's mapped range) at the dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub device: i32,
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub requested_size: u64,
    pub stream: u64,
    /// `small` (2 MiB segments of requests up to 1 MiB) or `large`.
    pub segment_type: String,
    pub is_expandable: bool,
    pub stack: StackId,
    pub blocks: Vec<Block>,
}

/// `external_annotations`: `record_function` ranges (optimizer steps ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Annotation {
    pub device: i32,
    pub time_us: i64,
    /// `START` or `END`.
    pub stage: String,
    pub name: String,
}

/// `allocator_settings`: the caching allocator's configuration when dumped.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AllocatorSettings {
    /// `PYTORCH_CUDA_ALLOC_CONF` as the process saw it.
    pub conf: Option<String>,
    pub expandable_segments: Option<bool>,
    /// Blocks at least this large are never split (`None`: unlimited, PyTorch's -1).
    pub max_split_size: Option<u64>,
    pub garbage_collection_threshold: Option<f64>,
    /// `roundup_power2_divisions` per size interval (1 MiB, 2 MiB, ... 32 GiB), when any
    /// is set.
    pub roundup_power2_divisions: Option<Vec<u64>>,
    /// Everything the snapshot holds, as JSON.
    pub raw: serde_json::Value,
}
