//! Names of the result codes the intercepted APIs return, one table per API family
//! (HIP `hipError_t`, CUDA driver `CUresult`, CUDA runtime `cudaError_t`).
//!
//! Owns only the number → name mapping (values from the public headers). Codes missing
//! from a table give `None`; callers print the number.

use memwatch_wire::{Api, ApiFamily};

const HIP: &[(i32, &str)] = &[
    (0, "hipSuccess"),
    (1, "hipErrorInvalidValue"),
    (2, "hipErrorOutOfMemory"),
    (3, "hipErrorNotInitialized"),
    (4, "hipErrorDeinitialized"),
    (5, "hipErrorProfilerDisabled"),
    (6, "hipErrorProfilerNotInitialized"),
    (7, "hipErrorProfilerAlreadyStarted"),
    (8, "hipErrorProfilerAlreadyStopped"),
    (9, "hipErrorInvalidConfiguration"),
    (12, "hipErrorInvalidPitchValue"),
    (13, "hipErrorInvalidSymbol"),
    (17, "hipErrorInvalidDevicePointer"),
    (21, "hipErrorInvalidMemcpyDirection"),
    (35, "hipErrorInsufficientDriver"),
    (52, "hipErrorMissingConfiguration"),
    (53, "hipErrorPriorLaunchFailure"),
    (98, "hipErrorInvalidDeviceFunction"),
    (100, "hipErrorNoDevice"),
    (101, "hipErrorInvalidDevice"),
    (200, "hipErrorInvalidImage"),
    (201, "hipErrorInvalidContext"),
    (202, "hipErrorContextAlreadyCurrent"),
    (205, "hipErrorMapFailed"),
    (206, "hipErrorUnmapFailed"),
    (207, "hipErrorArrayIsMapped"),
    (208, "hipErrorAlreadyMapped"),
    (209, "hipErrorNoBinaryForGpu"),
    (210, "hipErrorAlreadyAcquired"),
    (211, "hipErrorNotMapped"),
    (217, "hipErrorPeerAccessUnsupported"),
    (300, "hipErrorInvalidSource"),
    (301, "hipErrorFileNotFound"),
    (302, "hipErrorSharedObjectSymbolNotFound"),
    (303, "hipErrorSharedObjectInitFailed"),
    (304, "hipErrorOperatingSystem"),
    (400, "hipErrorInvalidHandle"),
    (401, "hipErrorIllegalState"),
    (500, "hipErrorNotFound"),
    (600, "hipErrorNotReady"),
    (700, "hipErrorIllegalAddress"),
    (701, "hipErrorLaunchOutOfResources"),
    (702, "hipErrorLaunchTimeOut"),
    (704, "hipErrorPeerAccessAlreadyEnabled"),
    (705, "hipErrorPeerAccessNotEnabled"),
    (708, "hipErrorSetOnActiveProcess"),
    (709, "hipErrorContextIsDestroyed"),
    (710, "hipErrorAssert"),
    (712, "hipErrorHostMemoryAlreadyRegistered"),
    (713, "hipErrorHostMemoryNotRegistered"),
    (719, "hipErrorLaunchFailure"),
    (801, "hipErrorNotSupported"),
    (999, "hipErrorUnknown"),
    (1052, "hipErrorRuntimeMemory"),
    (1053, "hipErrorRuntimeOther"),
];

const CUDA_DRIVER: &[(i32, &str)] = &[
    (0, "CUDA_SUCCESS"),
    (1, "CUDA_ERROR_INVALID_VALUE"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY"),
    (3, "CUDA_ERROR_NOT_INITIALIZED"),
    (4, "CUDA_ERROR_DEINITIALIZED"),
    (34, "CUDA_ERROR_STUB_LIBRARY"),
    (46, "CUDA_ERROR_DEVICE_UNAVAILABLE"),
    (100, "CUDA_ERROR_NO_DEVICE"),
    (101, "CUDA_ERROR_INVALID_DEVICE"),
    (102, "CUDA_ERROR_DEVICE_NOT_LICENSED"),
    (200, "CUDA_ERROR_INVALID_IMAGE"),
    (201, "CUDA_ERROR_INVALID_CONTEXT"),
    (205, "CUDA_ERROR_MAP_FAILED"),
    (206, "CUDA_ERROR_UNMAP_FAILED"),
    (208, "CUDA_ERROR_ALREADY_MAPPED"),
    (209, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
    (211, "CUDA_ERROR_NOT_MAPPED"),
    (304, "CUDA_ERROR_OPERATING_SYSTEM"),
    (400, "CUDA_ERROR_INVALID_HANDLE"),
    (401, "CUDA_ERROR_ILLEGAL_STATE"),
    (500, "CUDA_ERROR_NOT_FOUND"),
    (600, "CUDA_ERROR_NOT_READY"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    (709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
    (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
    (719, "CUDA_ERROR_LAUNCH_FAILED"),
    (800, "CUDA_ERROR_NOT_PERMITTED"),
    (801, "CUDA_ERROR_NOT_SUPPORTED"),
    (802, "CUDA_ERROR_SYSTEM_NOT_READY"),
    (999, "CUDA_ERROR_UNKNOWN"),
];

const CUDA_RUNTIME: &[(i32, &str)] = &[
    (0, "cudaSuccess"),
    (1, "cudaErrorInvalidValue"),
    (2, "cudaErrorMemoryAllocation"),
    (3, "cudaErrorInitializationError"),
    (4, "cudaErrorCudartUnloading"),
    (17, "cudaErrorInvalidDevicePointer"),
    (34, "cudaErrorStubLibrary"),
    (35, "cudaErrorInsufficientDriver"),
    (46, "cudaErrorDevicesUnavailable"),
    (98, "cudaErrorInvalidDeviceFunction"),
    (100, "cudaErrorNoDevice"),
    (101, "cudaErrorInvalidDevice"),
    (200, "cudaErrorInvalidKernelImage"),
    (201, "cudaErrorDeviceUninitialized"),
    (400, "cudaErrorInvalidResourceHandle"),
    (500, "cudaErrorSymbolNotFound"),
    (600, "cudaErrorNotReady"),
    (700, "cudaErrorIllegalAddress"),
    (709, "cudaErrorContextIsDestroyed"),
    (712, "cudaErrorHostMemoryAlreadyRegistered"),
    (713, "cudaErrorHostMemoryNotRegistered"),
    (719, "cudaErrorLaunchFailure"),
    (800, "cudaErrorNotPermitted"),
    (801, "cudaErrorNotSupported"),
    (999, "cudaErrorUnknown"),
];

/// The symbolic name of `code` as returned by `api`, e.g. `hipErrorOutOfMemory`.
pub fn result_name(api: Api, code: i32) -> Option<&'static str> {
    let table = match api.family()? {
        ApiFamily::Hip => HIP,
        ApiFamily::CudaDriver => CUDA_DRIVER,
        ApiFamily::CudaRuntime => CUDA_RUNTIME,
        ApiFamily::Pjrt | ApiFamily::Torch => return None,
    };
    table.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_names_per_family() {
        assert_eq!(result_name(Api::HipMalloc, 2), Some("hipErrorOutOfMemory"));
        assert_eq!(
            result_name(Api::CuMemAlloc, 2),
            Some("CUDA_ERROR_OUT_OF_MEMORY")
        );
        assert_eq!(
            result_name(Api::CudaMalloc, 2),
            Some("cudaErrorMemoryAllocation")
        );
        assert_eq!(
            result_name(Api::HipMalloc, 101),
            Some("hipErrorInvalidDevice")
        );
        assert_eq!(result_name(Api::HipMalloc, 12345), None);
        assert_eq!(result_name(Api::Unknown, 2), None);
    }

    #[test]
    fn tables_are_sorted_and_unique() {
        for t in [HIP, CUDA_DRIVER, CUDA_RUNTIME] {
            assert!(t.windows(2).all(|w| w[0].0 < w[1].0));
        }
    }
}
