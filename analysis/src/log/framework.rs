//! One-line out-of-memory messages of the frameworks and drivers, as they print them:
//! PyTorch's caching allocator (`CUDA out of memory. Tried to allocate …`, also `HIP`, and
//! the 1.x form with its parenthesised figures), CuPy's pool (`Out of memory allocating …
//! bytes (allocated so far: …, limit set to: …)`), the XLA stream executors' failed device
//! allocations (`[0] Failed to allocate device memory of 4.00GiB (4294967296 bytes): …
//! CUDA_ERROR_OUT_OF_MEMORY`, ROCm's `failed to allocate … from device:
//! HIP_ERROR_OutOfMemory`), driver error names (`cudaErrorMemoryAllocation`,
//! `hipErrorOutOfMemory`, …) and XLA's scheduler warning that the arguments exceed the
//! memory limit. Each parser takes one message (the line without its log prefix) and
//! returns `None` when it is not that message. Sizes printed in human units stay
//! approximate (`*_approx_bytes`); exact integers are kept apart.

use super::model::Location;
use crate::xla::text::parse_human_bytes;
use serde::Serialize;

/// A PyTorch caching-allocator out-of-memory message (`torch.OutOfMemoryError`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct TorchOom {
    pub at: Location,
    /// `CUDA`, `HIP` (ROCm builds) or `XPU`.
    pub backend: String,
    /// `GPU N`.
    pub device: Option<i32>,
    /// `Tried to allocate X`.
    pub request_approx_bytes: Option<u64>,
    /// `total capacity of X`.
    pub total_approx_bytes: Option<u64>,
    /// `of which X is free` (the device's free memory, all processes).
    pub free_approx_bytes: Option<u64>,
    /// `this process has X memory in use` (PyTorch and everything else of the process).
    pub process_in_use_approx_bytes: Option<u64>,
    /// `Process P has X memory in use`: other processes on the device.
    pub other_processes: Vec<(u32, u64)>,
    /// `X allowed;`: the limit `set_per_process_memory_fraction` set.
    pub allowed_approx_bytes: Option<u64>,
    /// `X is allocated by PyTorch` (1.x: `already allocated`).
    pub allocated_approx_bytes: Option<u64>,
    /// `X is reserved by PyTorch but unallocated`.
    pub reserved_unallocated_approx_bytes: Option<u64>,
    /// 1.x: `X reserved in total by PyTorch`.
    pub reserved_approx_bytes: Option<u64>,
    /// Whether the message suggests `expandable_segments` (PyTorch always adds it; kept
    /// so the doctor can say when it is not the cause).
    pub suggests_expandable_segments: bool,
}

impl TorchOom {
    /// Reserved bytes: allocated + reserved-but-unallocated, or the 1.x total.
    pub fn reserved(&self) -> Option<u64> {
        self.reserved_approx_bytes.or_else(|| {
            Some(
                self.allocated_approx_bytes?
                    .saturating_add(self.reserved_unallocated_approx_bytes?),
            )
        })
    }
}

/// `cupy.cuda.memory.OutOfMemoryError: Out of memory allocating N bytes (allocated so
/// far: N bytes[, limit set to: N bytes]).` (exact integers with digit-group commas).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CupyOom {
    pub at: Location,
    pub request_bytes: u64,
    pub allocated_bytes: Option<u64>,
    /// The pool limit (`set_limit`), when one was set.
    pub limit_bytes: Option<u64>,
}

/// A failed device allocation the XLA stream executor logged (the BFC pool growing, a
/// platform allocator's buffer).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DeviceAllocFailure {
    pub at: Location,
    /// `[N]` (CUDA executor) when printed.
    pub device: Option<i32>,
    /// Exact bytes asked for.
    pub bytes: u64,
    /// The driver's error (`CUDA_ERROR_OUT_OF_MEMORY`, `HIP_ERROR_OutOfMemory`).
    pub error: String,
}

/// A driver or runtime out-of-memory error named in a message (Python exceptions,
/// framework errors): `cudaErrorMemoryAllocation`, `CUDA_ERROR_OUT_OF_MEMORY`,
/// `hipErrorOutOfMemory`, `HIP_ERROR_OutOfMemory`, `CUDA error: out of memory`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DriverOomError {
    pub at: Location,
    /// The error's name as printed.
    pub name: String,
    /// The whole message.
    pub message: String,
}

/// `The byte size of input/output arguments (N) exceeds the base limit (L)` (XLA's GPU
/// scheduler, at compile time).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ArgumentsOverLimit {
    pub at: Location,
    pub argument_bytes: u64,
    pub limit_bytes: u64,
}

/// PyTorch's size format: `512.00 MiB`, `992.50 KiB`, `0 bytes`, `20 bytes`.
fn torch_size(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_suffix(" bytes").or_else(|| s.strip_suffix(" byte")) {
        Some(n) => n.trim().parse().ok(),
        None => parse_human_bytes(&s.replace(' ', "")),
    }
}

/// The text between `start` and the next `end` (or the end of `s`).
fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let a = s.find(start)? + start.len();
    let b = s[a..].find(end).map_or(s.len(), |e| a + e);
    Some(&s[a..b])
}

/// The size just before `marker` (`… 4.75 GiB allowed;` -> 4.75 GiB): the last two
/// words before it.
fn size_before(s: &str, marker: &str) -> Option<u64> {
    let end = s.find(marker)?;
    let words: Vec<&str> = s[..end].split_whitespace().collect();
    let n = words.len();
    if n < 2 {
        return None;
    }
    torch_size(&format!("{} {}", words[n - 2], words[n - 1]))
}

/// Parses a PyTorch out-of-memory message (modern and 1.x forms).
pub fn parse_torch_oom(msg: &str, at: &Location) -> Option<TorchOom> {
    let (backend, rest) = ["CUDA", "HIP", "XPU"].iter().find_map(|b| {
        let key = format!("{b} out of memory. Tried to allocate ");
        msg.find(&key)
            .map(|i| (b.to_string(), &msg[i + key.len()..]))
    })?;
    let mut o = TorchOom {
        at: at.clone(),
        backend,
        suggests_expandable_segments: msg.contains("expandable_segments"),
        ..TorchOom::default()
    };
    // 1.x: `Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB
    // already allocated; 3.50 MiB free; 14.74 GiB reserved in total by PyTorch)`.
    if let Some(paren) = rest.find(" (GPU ") {
        o.request_approx_bytes = torch_size(&rest[..paren]);
        let inner = between(rest, " (GPU ", ")").unwrap_or("");
        for part in inner.split(';').map(str::trim) {
            if let Ok(d) = part.parse::<i32>() {
                o.device = Some(d);
            } else if let Some(v) = part.strip_suffix(" total capacity") {
                o.total_approx_bytes = torch_size(v);
            } else if let Some(v) = part.strip_suffix(" already allocated") {
                o.allocated_approx_bytes = torch_size(v);
            } else if let Some(v) = part.strip_suffix(" free") {
                o.free_approx_bytes = torch_size(v);
            } else if let Some(v) = part.strip_suffix(" reserved in total by PyTorch") {
                o.reserved_approx_bytes = torch_size(v);
            }
        }
        return Some(o);
    }
    o.request_approx_bytes = rest.split_once(". ").and_then(|(s, _)| torch_size(s));
    if let Some(g) = between(msg, ". GPU ", " has a total capacity of ") {
        o.device = g.trim().parse().ok();
    }
    o.total_approx_bytes =
        between(msg, " has a total capacity of ", " of which ").and_then(torch_size);
    o.free_approx_bytes = between(msg, " of which ", " is free").and_then(torch_size);
    o.process_in_use_approx_bytes =
        between(msg, "this process has ", " memory in use").and_then(torch_size);
    let mut rest = msg;
    while let Some(i) = rest.find("Process ") {
        rest = &rest[i + "Process ".len()..];
        let Some((pid, tail)) = rest.split_once(" has ") else {
            break;
        };
        if let (Ok(pid), Some(size)) = (
            pid.trim().parse::<u32>(),
            tail.split_once(" memory in use")
                .and_then(|(s, _)| torch_size(s)),
        ) {
            o.other_processes.push((pid, size));
        }
    }
    o.allowed_approx_bytes = size_before(msg, " allowed;");
    o.allocated_approx_bytes =
        between(msg, "Of the allocated memory ", " is allocated by PyTorch").and_then(torch_size);
    o.reserved_unallocated_approx_bytes = between(
        msg,
        " is allocated by PyTorch, and ",
        " is reserved by PyTorch but unallocated",
    )
    .and_then(torch_size);
    Some(o)
}

/// `1,610,612,736` -> 1610612736.
fn grouped(s: &str) -> Option<u64> {
    let t: String = s.trim().chars().filter(|c| *c != ',').collect();
    t.parse().ok()
}

/// Parses CuPy's pool out-of-memory message.
pub fn parse_cupy_oom(msg: &str, at: &Location) -> Option<CupyOom> {
    let req = between(msg, "Out of memory allocating ", " bytes")?;
    Some(CupyOom {
        at: at.clone(),
        request_bytes: grouped(req)?,
        allocated_bytes: between(msg, "allocated so far: ", " bytes").and_then(grouped),
        limit_bytes: between(msg, "limit set to: ", " bytes").and_then(grouped),
    })
}

/// Parses a stream executor's failed device allocation: CUDA `[0] Failed to allocate
/// device memory of 4.00GiB (4294967296 bytes): RESOURCE_EXHAUSTED: :
/// CUDA_ERROR_OUT_OF_MEMORY: out of memory`; ROCm `failed to allocate 4.00GiB
/// (4294967296 bytes) from device: HIP_ERROR_OutOfMemory`.
pub fn parse_device_alloc_failure(msg: &str, at: &Location) -> Option<DeviceAllocFailure> {
    let (head, after) = if let Some(i) = msg.find("Failed to allocate device memory of ") {
        (
            &msg[..i],
            &msg[i + "Failed to allocate device memory of ".len()..],
        )
    } else {
        let i = msg.find("failed to allocate ")?;
        (&msg[..i], &msg[i + "failed to allocate ".len()..])
    };
    let bytes: u64 = between(after, "(", " bytes)")?.trim().parse().ok()?;
    let error = after
        .split([' ', ':', ','])
        .find(|w| is_oom_error_name(w))
        .unwrap_or_else(|| after.rsplit(": ").next().unwrap_or(""))
        .to_string();
    let device = between(head, "[", "]").and_then(|d| d.trim().parse().ok());
    Some(DeviceAllocFailure {
        at: at.clone(),
        device,
        bytes,
        error,
    })
}

/// The out-of-memory error names of the CUDA driver and runtime and of HIP, in the forms
/// the libraries print them.
pub const OOM_ERROR_NAMES: [&str; 5] = [
    "cudaErrorMemoryAllocation",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "hipErrorOutOfMemory",
    "HIP_ERROR_OutOfMemory",
    "hipErrorMemoryAllocation",
];

fn is_oom_error_name(w: &str) -> bool {
    OOM_ERROR_NAMES.contains(&w)
}

/// Finds a driver out-of-memory error named in a message (`…CUDARuntimeError:
/// cudaErrorMemoryAllocation: out of memory`, `RuntimeError: CUDA error: out of memory`,
/// `RuntimeError: HIP error: out of memory`).
pub fn parse_driver_oom(msg: &str, at: &Location) -> Option<DriverOomError> {
    let name = OOM_ERROR_NAMES
        .iter()
        .find(|n| msg.contains(*n))
        .map(|n| n.to_string())
        .or_else(|| {
            ["CUDA error: out of memory", "HIP error: out of memory"]
                .iter()
                .find(|n| msg.contains(*n))
                .map(|n| n.to_string())
        })?;
    Some(DriverOomError {
        at: at.clone(),
        name,
        message: msg.to_string(),
    })
}

/// Parses `The byte size of input/output arguments (N) exceeds the base limit (L).`
pub fn parse_arguments_over_limit(msg: &str, at: &Location) -> Option<ArgumentsOverLimit> {
    let a = between(msg, "byte size of input/output arguments (", ")")?;
    let l = between(msg, "exceeds the base limit (", ")")?;
    Some(ArgumentsOverLimit {
        at: at.clone(),
        argument_bytes: a.trim().parse().ok()?,
        limit_bytes: l.trim().parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;

    fn at() -> Location {
        Location::default()
    }

    /// testdata/oom-corpus/torch_fraction/stderr.log (PyTorch 2.11, H100).
    #[test]
    fn torch_message_with_a_fraction_limit() {
        let m = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which 73.91 GiB is free. Including non-PyTorch memory, this process has 5.26 GiB memory in use. 4.75 GiB allowed; Of the allocated memory 4.75 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
        let o = parse_torch_oom(m, &at()).unwrap();
        assert_eq!(o.backend, "CUDA");
        assert_eq!(o.device, Some(0));
        assert_eq!(o.request_approx_bytes, Some((256.0 * MIB) as u64));
        assert_eq!(o.total_approx_bytes, Some((79.18 * GIB).round() as u64));
        assert_eq!(o.free_approx_bytes, Some((73.91 * GIB).round() as u64));
        assert_eq!(
            o.process_in_use_approx_bytes,
            Some((5.26 * GIB).round() as u64)
        );
        assert_eq!(o.allowed_approx_bytes, Some((4.75 * GIB) as u64));
        assert_eq!(o.allocated_approx_bytes, Some((4.75 * GIB) as u64));
        assert_eq!(o.reserved_unallocated_approx_bytes, Some(0));
        assert!(o.other_processes.is_empty());
        assert!(o.suggests_expandable_segments);
    }

    /// torch_leak: KiB figures, no other process.
    #[test]
    fn torch_message_with_kib_reserved() {
        let m = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which 74.51 GiB is free. Including non-PyTorch memory, this process has 4.66 GiB memory in use. 3.96 GiB allowed; Of the allocated memory 3.94 GiB is allocated by PyTorch, and 992.50 KiB is reserved by PyTorch but unallocated.";
        let o = parse_torch_oom(m, &at()).unwrap();
        assert_eq!(o.reserved_unallocated_approx_bytes, Some(1016320));
        assert_eq!(o.request_approx_bytes, Some(32 << 20));
    }

    /// A message with other processes on the device and no fraction (recorded in a vLLM
    /// issue), and the ROCm spelling.
    #[test]
    fn torch_message_naming_other_processes_and_hip() {
        let m = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 1 has a total capacity of 93.02 GiB of which 1.18 GiB is free. Process 2752205 has 91.82 GiB memory in use. Of the allocated memory 90.63 GiB is allocated by PyTorch, and 120.54 MiB is reserved by PyTorch but unallocated.";
        let o = parse_torch_oom(m, &at()).unwrap();
        assert_eq!(o.device, Some(1));
        assert_eq!(
            o.other_processes,
            vec![(2752205, (91.82 * GIB).round() as u64)]
        );
        assert_eq!(o.allowed_approx_bytes, None);
        assert_eq!(o.process_in_use_approx_bytes, None);
        let h = m.replace("CUDA out of memory", "HIP out of memory");
        assert_eq!(parse_torch_oom(&h, &at()).unwrap().backend, "HIP");
        assert!(parse_torch_oom("CUDA out of memory", &at()).is_none());
    }

    #[test]
    fn torch_1x_message() {
        let m = "RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; 130.35 MiB already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.";
        let o = parse_torch_oom(m, &at()).unwrap();
        assert_eq!(o.request_approx_bytes, Some(36 << 20));
        assert_eq!(o.device, Some(0));
        assert_eq!(o.free_approx_bytes, Some((47.06 * MIB).round() as u64));
        assert_eq!(o.reserved(), Some(188 << 20));
        assert!(!o.suggests_expandable_segments);
    }

    /// testdata/oom-corpus/cupy_limit/stderr.log (CuPy 14.2).
    #[test]
    fn cupy_pool_limit() {
        let m = "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 100,663,296 bytes (allocated so far: 1,610,612,736 bytes, limit set to: 1,610,612,736 bytes).";
        let o = parse_cupy_oom(m, &at()).unwrap();
        assert_eq!(
            (o.request_bytes, o.allocated_bytes, o.limit_bytes),
            (100663296, Some(1610612736), Some(1610612736))
        );
        let m = "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 512 bytes (allocated so far: 1,024 bytes).";
        assert_eq!(parse_cupy_oom(m, &at()).unwrap().limit_bytes, None);
    }

    /// testdata/oom-corpus/two_processes/stderr.log (XLA CUDA executor, JAX 0.11.2).
    #[test]
    fn executor_allocation_failures() {
        let m = "[0] Failed to allocate device memory of 4.00GiB (4294967296 bytes): RESOURCE_EXHAUSTED: : CUDA_ERROR_OUT_OF_MEMORY: out of memory";
        let f = parse_device_alloc_failure(m, &at()).unwrap();
        assert_eq!((f.device, f.bytes), (Some(0), 4294967296));
        assert_eq!(f.error, "CUDA_ERROR_OUT_OF_MEMORY");
        // ROCm's executor (rocm_executor.cc DeviceAllocate), not recorded on an AMD GPU.
        let m = "failed to allocate 4.00GiB (4294967296 bytes) from device: HIP_ERROR_OutOfMemory";
        let f = parse_device_alloc_failure(m, &at()).unwrap();
        assert_eq!(
            (f.device, f.bytes, f.error.as_str()),
            (None, 4294967296, "HIP_ERROR_OutOfMemory")
        );
    }

    /// testdata/oom-corpus/host_pinned/stderr.log (CuPy pinned memory).
    #[test]
    fn driver_error_names() {
        let m = "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorMemoryAllocation: out of memory";
        assert_eq!(
            parse_driver_oom(m, &at()).unwrap().name,
            "cudaErrorMemoryAllocation"
        );
        let m = "RuntimeError: HIP error: out of memory";
        assert_eq!(
            parse_driver_oom(m, &at()).unwrap().name,
            "HIP error: out of memory"
        );
        assert!(parse_driver_oom("cudaErrorInvalidValue", &at()).is_none());
    }

    /// testdata/oom-corpus/jax_too_large/stderr.log.
    #[test]
    fn arguments_over_the_limit() {
        let m = "The byte size of input/output arguments (111177052980) exceeds the base limit (63763906560). This indicates an error in the calculation!";
        let a = parse_arguments_over_limit(m, &at()).unwrap();
        assert_eq!(
            (a.argument_bytes, a.limit_bytes),
            (111177052980, 63763906560)
        );
    }
}
