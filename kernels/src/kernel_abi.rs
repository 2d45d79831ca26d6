//! The replay kernels' launch interface, defined once for both backends.
//!
//! Owns: each kernel's entry-point name and parameter list (what `src/gpu/replay_kernels.cu`
//! declares), and [`KernelArgs`], the argument values of one launch packed the way
//! `hipModuleLaunchKernel` / `cuLaunchKernel` take them (`kernelParams`: one pointer per
//! parameter). The HIP and CUDA backends build every launch through the constructors here,
//! so the tests can check, without a GPU, that what the backends pass matches the
//! arguments each compiled code object declares (its AMDGPU metadata note). It launches
//! nothing.

use std::ffi::c_void;

/// The C type of one kernel parameter (passed by value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgType {
    /// `mw_u64` (`unsigned long long`): 8 bytes, 8-byte aligned.
    U64,
    /// `mw_u32` (`unsigned int`): 4 bytes, 4-byte aligned.
    U32,
}

impl ArgType {
    /// Size in bytes (also its alignment in the kernel-argument segment).
    pub fn size(self) -> usize {
        match self {
            Self::U64 => 8,
            Self::U32 => 4,
        }
    }
}

/// A kernel entry point: its unmangled name and its parameters in order.
#[derive(Debug, PartialEq, Eq)]
pub struct KernelSignature {
    pub name: &'static str,
    /// (parameter name in the source, type).
    pub params: &'static [(&'static str, ArgType)],
}

impl KernelSignature {
    /// (offset, size) of each parameter in the kernel-argument segment: C layout, each
    /// parameter at the next multiple of its size.
    pub fn layout(&self) -> Vec<(usize, usize)> {
        let mut offset: usize = 0;
        self.params
            .iter()
            .map(|(_, t)| {
                let size = t.size();
                offset = offset.div_ceil(size) * size;
                let at = offset;
                offset += size;
                (at, size)
            })
            .collect()
    }
}

/// `mw_touch(mw_u64 base, mw_u64 nbytes, mw_u32 seed)`.
pub const TOUCH: KernelSignature = KernelSignature {
    name: "mw_touch",
    params: &[
        ("base", ArgType::U64),
        ("nbytes", ArgType::U64),
        ("seed", ArgType::U32),
    ],
};

/// `mw_checksum(mw_u64 base, mw_u64 nbytes, mw_u32 seed, mw_u64 mismatches_out)`.
pub const CHECKSUM: KernelSignature = KernelSignature {
    name: "mw_checksum",
    params: &[
        ("base", ArgType::U64),
        ("nbytes", ArgType::U64),
        ("seed", ArgType::U32),
        ("mismatches_out", ArgType::U64),
    ],
};

/// `mw_strided(mw_u64 base, mw_u64 nbytes, mw_u64 stride_vec, mw_u32 passes)`.
pub const STRIDED: KernelSignature = KernelSignature {
    name: "mw_strided",
    params: &[
        ("base", ArgType::U64),
        ("nbytes", ArgType::U64),
        ("stride_vec", ArgType::U64),
        ("passes", ArgType::U32),
    ],
};

/// Every kernel a code object must define.
pub const KERNELS: [&KernelSignature; 3] = [&TOUCH, &CHECKSUM, &STRIDED];

/// Threads per block of every launch (the kernels stride over the whole grid, so any
/// block size works; 256 keeps every AMD wavefront size and NVIDIA warp full).
pub const BLOCK_THREADS: u32 = 256;

/// Blocks for a launch over `bytes`: one thread per 16-byte word, at most 16 blocks per
/// compute unit / SM (the kernels loop over the rest), at least one.
pub fn grid_blocks(bytes: u64, compute_units: u32) -> u32 {
    let words = bytes.div_ceil(16).max(1);
    let blocks = words.div_ceil(u64::from(BLOCK_THREADS));
    blocks.min(u64::from(compute_units.max(1)) * 16).max(1) as u32
}

/// One argument value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgValue {
    U64(u64),
    U32(u32),
}

impl ArgValue {
    /// The parameter type this value fills.
    pub fn arg_type(&self) -> ArgType {
        match self {
            Self::U64(_) => ArgType::U64,
            Self::U32(_) => ArgType::U32,
        }
    }
}

/// The most parameters any replay kernel takes.
const MAX_PARAMS: usize = 4;

/// The argument values of one launch, in the signature's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelArgs {
    signature: &'static KernelSignature,
    values: [ArgValue; MAX_PARAMS],
    len: usize,
}

impl KernelArgs {
    fn new(signature: &'static KernelSignature, given: &[ArgValue]) -> Self {
        let mut values = [ArgValue::U32(0); MAX_PARAMS];
        values[..given.len()].copy_from_slice(given);
        Self {
            signature,
            values,
            len: given.len(),
        }
    }

    /// `mw_touch`: write the pattern for `seed` over `[base, base + nbytes)`.
    pub fn touch(base: u64, nbytes: u64, seed: u32) -> Self {
        Self::new(
            &TOUCH,
            &[
                ArgValue::U64(base),
                ArgValue::U64(nbytes),
                ArgValue::U32(seed),
            ],
        )
    }

    /// `mw_checksum`: count the words of `[base, base + nbytes)` that lost the pattern,
    /// adding the count to the device word at `mismatches_out`.
    pub fn checksum(base: u64, nbytes: u64, seed: u32, mismatches_out: u64) -> Self {
        Self::new(
            &CHECKSUM,
            &[
                ArgValue::U64(base),
                ArgValue::U64(nbytes),
                ArgValue::U32(seed),
                ArgValue::U64(mismatches_out),
            ],
        )
    }

    /// `mw_strided`: `passes` sweeps with a stride of `stride_bytes` (in 16-byte words,
    /// at least one).
    pub fn strided(base: u64, nbytes: u64, stride_bytes: u64, passes: u32) -> Self {
        Self::new(
            &STRIDED,
            &[
                ArgValue::U64(base),
                ArgValue::U64(nbytes),
                ArgValue::U64((stride_bytes / 16).max(1)),
                ArgValue::U32(passes),
            ],
        )
    }

    /// The kernel these arguments are for.
    pub fn signature(&self) -> &'static KernelSignature {
        self.signature
    }

    /// The values, in order.
    pub fn values(&self) -> &[ArgValue] {
        &self.values[..self.len]
    }

    /// One pointer per value (the `kernelParams` array). The pointers point into `self`:
    /// keep it alive and unmoved until the launch call returns.
    pub fn param_pointers(&mut self) -> Vec<*mut c_void> {
        self.values[..self.len]
            .iter_mut()
            .map(|v| match v {
                ArgValue::U64(x) => (x as *mut u64).cast::<c_void>(),
                ArgValue::U32(x) => (x as *mut u32).cast::<c_void>(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_constructor_fills_its_signature_in_order() {
        for args in [
            KernelArgs::touch(0x1000, 4096, 7),
            KernelArgs::checksum(0x2000, 100, 9, 0x3000),
            KernelArgs::strided(0x4000, 1 << 20, 4096, 2),
        ] {
            let types: Vec<ArgType> = args.values().iter().map(ArgValue::arg_type).collect();
            let want: Vec<ArgType> = args.signature().params.iter().map(|p| p.1).collect();
            assert_eq!(types, want, "{}", args.signature().name);
        }
    }

    #[test]
    fn grid_covers_small_ranges_and_caps_large_ones() {
        assert_eq!(grid_blocks(0, 104), 1);
        assert_eq!(grid_blocks(16 * 256, 104), 1);
        assert_eq!(grid_blocks(16 * 256 + 1, 104), 2);
        assert_eq!(grid_blocks(1 << 40, 104), 104 * 16);
        assert_eq!(grid_blocks(1 << 40, 0), 16);
    }

    #[test]
    fn layout_aligns_each_parameter_to_its_size() {
        assert_eq!(TOUCH.layout(), [(0, 8), (8, 8), (16, 4)]);
        // The u64 after a u32 starts at the next 8-byte boundary.
        assert_eq!(CHECKSUM.layout(), [(0, 8), (8, 8), (16, 4), (24, 8)]);
        assert_eq!(STRIDED.layout(), [(0, 8), (8, 8), (16, 8), (24, 4)]);
    }

    #[test]
    fn param_pointers_point_at_the_values() {
        let mut a = KernelArgs::strided(0xdead_beef_0000, 77, 33, 5);
        let p = a.param_pointers();
        assert_eq!(p.len(), 4);
        // SAFETY: the pointers point into `a`, alive and unmoved, with the types the
        // signature names.
        unsafe {
            assert_eq!(*p[0].cast::<u64>(), 0xdead_beef_0000);
            assert_eq!(*p[1].cast::<u64>(), 77);
            assert_eq!(*p[2].cast::<u64>(), 2, "33 bytes = 2 words");
            assert_eq!(*p[3].cast::<u32>(), 5);
        }
        assert_eq!(
            KernelArgs::strided(0, 0, 0, 1).values()[2],
            ArgValue::U64(1)
        );
    }
}
