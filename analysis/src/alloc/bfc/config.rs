//! What a BFC pool is configured with: `BFCAllocator::Options` plus the pool limit
//! ([`BfcConfig`], with JAX's defaults), the hole policies of each end of a spatially
//! partitioned pool ([`Policy`]), and the chunk ownership tags and allocation ends the
//! model and its dumps name ([`Tag`], [`End`]).

/// Ownership of a chunk (`ChunkTag`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tag {
    /// The single central gap of a spatially partitioned pool.
    CentralGap,
    /// Lower end: in use, or a hole reusable only by the lower end.
    Lower,
    /// Upper end: in use, or a hole reusable only by the upper end.
    Upper,
}

impl Tag {
    /// The name the real allocator prints in its dumps.
    pub fn name(self) -> &'static str {
        match self {
            Tag::CentralGap => "central_gap",
            Tag::Lower => "lower",
            Tag::Upper => "upper",
        }
    }
}

/// Which end of a partitioned pool serves a request (`AllocationEnd`). Without spatial
/// partitioning every request is `Lower`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Lower,
    Upper,
}

/// Equal-size tie break among free holes (`HoleOrder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoleOrder {
    Ascending,
    Descending,
}

/// How a reused hole is split (`HoleSplitPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitPolicy {
    /// The BFC heuristic ([`Bfc::should_split`]).
    Bfc,
    /// Always split to the rounded request.
    Exact,
}

/// One end's hole policy (`AllocationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub hole_order: HoleOrder,
    pub split: SplitPolicy,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            hole_order: HoleOrder::Ascending,
            split: SplitPolicy::Bfc,
        }
    }
}

/// Configuration (`BFCAllocator::Options` plus the pool limit).
#[derive(Debug, Clone, PartialEq)]
pub struct BfcConfig {
    /// `total_memory`: the pool limit in bytes.
    pub limit: u64,
    /// `allow_growth` (JAX: `!preallocate`).
    pub allow_growth: bool,
    /// `enable_spatial_partitioning` (JAX 0.11: on when preallocating).
    pub spatial_partitioning: bool,
    /// `garbage_collection` (off in XLA's GPU client).
    pub garbage_collection: bool,
    /// `fragmentation_fraction` (0: use 128 MiB).
    pub fragmentation_fraction: f64,
    pub lower_policy: Policy,
    pub upper_policy: Policy,
    /// Bytes the sub-allocator (the driver) can still hand out; `None`: always as much as
    /// the limit allows. A growing pool backs off by 0.9 when a region is refused.
    pub device_free_bytes: Option<u64>,
}

impl BfcConfig {
    /// The configuration JAX/XLA's GPU client builds: a preallocated pool is spatially
    /// partitioned (the default of `--xla_gpu_enable_allocator_spatial_partitioning`), a
    /// growing pool is not (the allocator refuses both at once).
    pub fn jax(limit: u64, preallocate: bool) -> Self {
        BfcConfig {
            limit,
            allow_growth: !preallocate,
            spatial_partitioning: preallocate,
            garbage_collection: false,
            fragmentation_fraction: 0.0,
            lower_policy: Policy::default(),
            upper_policy: Policy::default(),
            device_free_bytes: None,
        }
    }
}
