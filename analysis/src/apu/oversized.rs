//! A failed request larger than what the device could give: the split-model case, a
//! program that asks for a whole 160 GiB model file on a 128 GiB APU when it needed 75.
//!
//! Owns the judgement (what the device could give at that moment = what HIP reports
//! minus the device memory the capture's processes held; the shortfall; whether the
//! request alone exceeds the device) and the one sentence that says it. The figures come
//! from `walk`.

use memwatch_wire::Api;
use serde::Serialize;

use crate::capture::result_name;
use crate::size::format_bytes;

/// Whether `code` returned by `api` means out of memory (hipErrorOutOfMemory,
/// CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation).
pub fn is_out_of_memory(api: Api, code: i32) -> bool {
    matches!(
        result_name(api, code),
        Some("hipErrorOutOfMemory" | "CUDA_ERROR_OUT_OF_MEMORY" | "cudaErrorMemoryAllocation")
    )
}

/// One failed request the device could not have given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OversizedRequest {
    pub pid: u32,
    pub device: i32,
    /// When it failed (ns since the capture's start).
    pub ts_ns: u64,
    pub api: String,
    /// Bytes requested.
    pub size: u64,
    pub result: i32,
    pub result_name: Option<String>,
    /// What HIP reports as the device's total.
    pub capacity_bytes: u64,
    /// Device memory the capture's processes held on the device then (hipMalloc,
    /// managed, pools, VMM).
    pub in_use_bytes: u64,
    /// `capacity_bytes - in_use_bytes`.
    pub could_give_bytes: u64,
    /// `size - could_give_bytes`.
    pub shortfall_bytes: u64,
    /// The request alone is larger than the device.
    pub exceeds_capacity: bool,
    /// What `hipMalloc` can get by the driver's totals (sysfs), when known.
    pub os_limit_bytes: Option<u64>,
    /// The most device memory the process held on this device after the failure: what
    /// it went on to use.
    pub peak_after_bytes: u64,
}

impl OversizedRequest {
    /// The judgement for a failed request, `None` when the device could have given it
    /// (then the failure has another cause: fragmentation, memory the shim did not see).
    #[allow(clippy::too_many_arguments)]
    pub fn judge(
        pid: u32,
        device: i32,
        ts_ns: u64,
        api: Api,
        size: u64,
        result: i32,
        capacity_bytes: u64,
        in_use_bytes: u64,
        os_limit_bytes: Option<u64>,
    ) -> Option<Self> {
        let could_give = capacity_bytes.saturating_sub(in_use_bytes);
        (capacity_bytes > 0 && size > could_give).then(|| Self {
            pid,
            device,
            ts_ns,
            api: api.name().to_string(),
            size,
            result,
            result_name: result_name(api, result).map(str::to_string),
            capacity_bytes,
            in_use_bytes,
            could_give_bytes: could_give,
            shortfall_bytes: size - could_give,
            exceeds_capacity: size > capacity_bytes,
            os_limit_bytes,
            peak_after_bytes: 0,
        })
    }

    /// One sentence: the request, what the device could give, the shortfall, and what
    /// the process went on to use.
    pub fn describe(&self) -> String {
        let bytes = format_bytes;
        let mut s = format!(
            "{} of {} failed ({}) in pid {}: the device could give {} (HIP reports {}, {} in use), \
             {} short",
            self.api,
            bytes(self.size),
            self.result_name
                .clone()
                .unwrap_or_else(|| format!("error {}", self.result)),
            self.pid,
            bytes(self.could_give_bytes),
            bytes(self.capacity_bytes),
            bytes(self.in_use_bytes),
            bytes(self.shortfall_bytes),
        );
        if self.exceeds_capacity {
            s.push_str("; the request alone is larger than the whole device");
        }
        if let Some(os) = self.os_limit_bytes {
            if self.size > os {
                s.push_str(&format!(
                    " and than the {} the driver lets hipMalloc map",
                    bytes(os)
                ));
            }
        }
        if self.peak_after_bytes > 0 && self.peak_after_bytes < self.size {
            s.push_str(&format!(
                ". The process then held at most {} on this device: it asked for {:.1}x what \
                 it used (a whole file or tensor loaded where a part was needed?)",
                bytes(self.peak_after_bytes),
                self.size as f64 / self.peak_after_bytes as f64
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_whole_model_on_a_smaller_apu() {
        let mut r = OversizedRequest::judge(
            77,
            0,
            5,
            Api::HipMalloc,
            160 * GIB,
            2,
            128 * GIB,
            0,
            Some(120 * GIB),
        )
        .unwrap();
        assert_eq!(r.could_give_bytes, 128 * GIB);
        assert_eq!(r.shortfall_bytes, 32 * GIB);
        assert!(r.exceeds_capacity);
        assert_eq!(r.result_name.as_deref(), Some("hipErrorOutOfMemory"));
        r.peak_after_bytes = 75 * GIB;
        let s = r.describe();
        for part in [
            "hipMalloc of 160.00 GiB failed (hipErrorOutOfMemory) in pid 77",
            "could give 128.00 GiB",
            "32.00 GiB short",
            "larger than the whole device",
            "than the 120.00 GiB the driver lets hipMalloc map",
            "held at most 75.00 GiB",
            "2.1x",
        ] {
            assert!(s.contains(part), "{part:?} in {s}");
        }
    }

    #[test]
    fn what_is_in_use_counts_and_a_request_that_fits_is_not_oversized() {
        let r = OversizedRequest::judge(
            1,
            0,
            0,
            Api::HipMalloc,
            20 * GIB,
            2,
            96 * GIB,
            80 * GIB,
            None,
        )
        .unwrap();
        assert_eq!((r.could_give_bytes, r.shortfall_bytes), (16 * GIB, 4 * GIB));
        assert!(!r.exceeds_capacity);
        assert!(!r.describe().contains("whole device"));
        assert!(
            OversizedRequest::judge(1, 0, 0, Api::HipMalloc, GIB, 2, 96 * GIB, 80 * GIB, None)
                .is_none()
        );
        // Unknown capacity: no judgement.
        assert!(OversizedRequest::judge(1, 0, 0, Api::HipMalloc, GIB, 2, 0, 0, None).is_none());
    }

    #[test]
    fn out_of_memory_codes_per_family() {
        assert!(is_out_of_memory(Api::HipMalloc, 2));
        assert!(is_out_of_memory(Api::CuMemAlloc, 2));
        assert!(is_out_of_memory(Api::CudaMalloc, 2));
        assert!(!is_out_of_memory(Api::HipMalloc, 101));
    }
}
