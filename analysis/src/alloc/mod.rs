//! Allocator models, device profiles and trace replay: "would this run fit on that
//! device?".
//!
//! Owns: the [`AllocatorModel`] interface every model implements, the models themselves
//! (`bfc`: XLA's TSL BFC allocator; `platform`: one driver allocation per buffer;
//! `async_pool`: stream-ordered pools, cudaMallocAsync / hipMallocAsync; `torch`:
//! PyTorch's CUDA caching allocator), device profiles (`device`), traces and their
//! readers (`trace`) and the replay engine with its capacity search (`replay`). Pure
//! logic: no printing, no exiting, typed errors.

pub mod async_pool;
pub mod bfc;
pub mod device;
pub mod platform;
pub mod replay;
pub mod torch;
pub mod trace;

/// What a block of a model's memory is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    InUse,
    Free,
}

/// One contiguous block of a model's pool (a BFC chunk, a torch block, a driver
/// allocation), for dumps and OOM reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub addr: u64,
    pub size: u64,
    /// Bytes the client asked for (0 for free blocks).
    pub requested: u64,
    pub state: BlockState,
    /// Model-specific label (BFC tag, torch pool).
    pub label: &'static str,
}

/// Errors of the models.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model invariant broken: {0}")]
    Invariant(String),
}

/// One allocator model. Handles are opaque slab indices (below `u32::MAX - 1`); `alloc` returns `None` exactly
/// when the real allocator would report out-of-memory.
pub trait AllocatorModel {
    /// Short name (`bfc`, `platform`, `async`, `torch`).
    fn name(&self) -> &'static str;
    /// Allocates `size` bytes (`size > 0`).
    fn alloc(&mut self, size: u64) -> Option<u32>;
    /// Frees a handle returned by `alloc`.
    fn free(&mut self, handle: u32);
    /// Bytes the allocation occupies (after rounding).
    fn allocated_size(&self, handle: u32) -> u64;
    /// Bytes handed to clients (rounded), the `bytes_in_use` statistic.
    fn bytes_in_use(&self) -> u64;
    /// The largest single allocation that could be served from memory already held
    /// (`largest_free_block_bytes`).
    fn largest_free_block(&self) -> u64;
    /// Bytes held from the device (reserved / pool).
    fn pool_bytes(&self) -> u64;
    /// The most the model may hold.
    fn limit(&self) -> u64;
    /// The pool's blocks in address order (may be empty for models without a layout).
    fn blocks(&self) -> Vec<Block>;
    /// Checks structural invariants (tiling, no overlap, statistics add up).
    fn check_invariants(&self) -> Result<(), ModelError>;
    /// After a replay that fit: the exact smallest limit with which the same replay
    /// would also fit, when the model can prove it from this run (its decisions do not
    /// depend on the limit as long as the limit covers the run's high-water mark).
    /// `None` when only a search can tell.
    fn exact_min_limit(&self) -> Option<u64> {
        None
    }
}

/// Which model to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllocatorKind {
    Bfc,
    Platform,
    Async,
    Torch,
}

impl AllocatorKind {
    /// All kinds, in the order reports list them.
    pub const ALL: [AllocatorKind; 4] = [
        AllocatorKind::Bfc,
        AllocatorKind::Platform,
        AllocatorKind::Async,
        AllocatorKind::Torch,
    ];

    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            AllocatorKind::Bfc => "bfc",
            AllocatorKind::Platform => "platform",
            AllocatorKind::Async => "async",
            AllocatorKind::Torch => "torch",
        }
    }

    /// Parses a CLI name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "bfc" => AllocatorKind::Bfc,
            "platform" => AllocatorKind::Platform,
            "async" | "cuda_async" | "cuda_malloc_async" => AllocatorKind::Async,
            "torch" | "pytorch" => AllocatorKind::Torch,
            _ => return None,
        })
    }
}

/// Everything needed to build a model for one replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    pub kind: AllocatorKind,
    /// Pool limit in bytes (device capacity × memory fraction).
    pub limit: u64,
    /// JAX's `XLA_PYTHON_CLIENT_PREALLOCATE` (BFC; the async pool reserves its limit).
    pub preallocate: bool,
    /// Driver allocation granularity (platform model, async pool pages).
    pub granularity: u64,
    /// Bytes the driver can hand out in total (growth back-off); `None`: the limit.
    pub device_free_bytes: Option<u64>,
}

/// Builds a boxed model.
pub fn build(spec: &ModelSpec) -> Box<dyn AllocatorModel> {
    match spec.kind {
        AllocatorKind::Bfc => {
            let mut cfg = bfc::BfcConfig::jax(spec.limit, spec.preallocate);
            cfg.device_free_bytes = spec.device_free_bytes;
            Box::new(bfc::Bfc::new(cfg))
        }
        AllocatorKind::Platform => Box::new(platform::Platform::new(spec.limit, spec.granularity)),
        AllocatorKind::Async => Box::new(async_pool::AsyncPool::new(async_pool::AsyncConfig {
            limit: spec.limit,
            granularity: spec.granularity,
            release_threshold: if spec.preallocate { spec.limit } else { 0 },
        })),
        AllocatorKind::Torch => Box::new(torch::Torch::new(spec.limit)),
    }
}
