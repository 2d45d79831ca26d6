//! `memwatch replay --on-gpu` without a usable GPU or with bad input: one-line errors
//! naming what is wrong, exit 2, nothing printed on stdout. (The GPU itself is exercised
//! by tests/gpu/replay_kernels.sh.)

mod common;

use common::mw as memwatch;

const SEED12: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../testdata/h200/bfc/h200-jax0.11.2/bfc_seed12.json"
);

#[test]
fn a_file_that_is_not_a_kernel_code_object_is_rejected() {
    let (rc, out, err) = memwatch(&[
        "replay",
        SEED12,
        "--on-gpu",
        "--backend",
        "cuda",
        "--kernels",
        SEED12,
    ]);
    assert_eq!(rc, 2, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("bfc_seed12.json: not a usable kernel code object"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn a_missing_cuda_driver_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // A real code object (the embedded HIP bundle) passes the format check; the driver
    // library is what is missing.
    let k = dir.path().join("k.bin");
    std::fs::write(&k, memwatch_kernels_code_object()).unwrap();
    let (rc, _, err) = memwatch(&[
        "replay",
        SEED12,
        "--on-gpu",
        "--backend",
        "cuda",
        "--kernels",
        k.to_str().unwrap(),
        "--cuda-driver",
        "/nonexistent/libcuda.so.1",
    ]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("cannot load /nonexistent/libcuda.so.1"),
        "{err}"
    );
}

fn memwatch_kernels_code_object() -> Vec<u8> {
    // The code objects kernels/build.rs compiled with clang-19 (scripts/install-deps.sh
    // installs it) and embedded in memwatch: the same bytes `--on-gpu` loads.
    use memwatch_kernels::code_object::{HIP_CODE_OBJECTS, HIP_COMPILER, HIP_SKIPPED};
    let Some((_, bytes)) = HIP_CODE_OBJECTS.first() else {
        panic!("memwatch-kernels embedded no HIP code object (compiler {HIP_COMPILER}): {HIP_SKIPPED:?}")
    };
    bytes.to_vec()
}

#[test]
fn unsupported_combinations_are_refused_before_touching_a_gpu() {
    let (rc, _, err) = memwatch(&["replay", SEED12, "--on-gpu", "--allocator", "torch"]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("bfc or the platform (driver) allocator, not torch"),
        "{err}"
    );
    let (rc, _, err) = memwatch(&[
        "replay",
        SEED12,
        "--on-gpu",
        "--compare-devices",
        "h100,mi300x",
    ]);
    assert_eq!(rc, 2);
    assert!(err.contains("--on-gpu replays one configuration"), "{err}");
    let (rc, _, err) = memwatch(&[
        "replay",
        SEED12,
        "--on-gpu",
        "--emulate",
        "tpu9000",
        "--allocator",
        "driver",
    ]);
    assert_eq!(rc, 2);
    assert!(err.contains("tpu9000"), "{err}");
    let (rc, _, err) = memwatch(&[
        "replay",
        SEED12,
        "--on-gpu",
        "--max-used-share",
        "1.5",
        "--kernels",
        SEED12,
    ]);
    assert_eq!(rc, 2);
    assert!(err.contains("--max-used-share 1.5"), "{err}");
}

#[test]
fn without_kernels_a_machine_without_a_cuda_device_says_so_first() {
    // Asking for --kernels on a machine with no CUDA driver sent users to build kernels
    // they could not run; the driver is checked first and its loader error is shown.
    let (rc, out, err) = memwatch(&[
        "replay",
        SEED12,
        "--on-gpu",
        "--backend",
        "cuda",
        "--cuda-driver",
        "/nonexistent/libcuda.so.1",
    ]);
    assert_eq!(rc, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("cannot load /nonexistent/libcuda.so.1: dlopen failed: ")
            && err.contains("No such file or directory"),
        "{err}"
    );
    assert!(!err.contains("--kernels"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn gpu_replay_flags_without_on_gpu_are_refused_not_ignored() {
    // These only act on the GPU run; without --on-gpu they used to be dropped silently,
    // and the model-only answer looked like the GPU's.
    for flags in [
        &["--touch"][..],
        &["--emulate", "mi300x"],
        &["--gpu-mode", "driver"],
        &["--kernels", SEED12],
        &["--strided-passes", "2"],
        &["--bandwidth", "1048576"],
        &["--force"],
        &["--device-index", "1"],
        &["--backend", "cuda"],
        &["--max-used-share", "0.5"],
        &["--cuda-driver", "libcuda.so"],
    ] {
        let mut args = vec!["replay", SEED12];
        args.extend_from_slice(flags);
        let (rc, out, err) = memwatch(&args);
        assert_eq!(rc, 2, "{flags:?}: {err}");
        assert!(out.is_empty(), "{flags:?}: {out}");
        assert!(err.contains("--on-gpu"), "{flags:?}: {err}");
    }
    // Their defaults alone do not count as given.
    let (rc, _, err) = memwatch(&["replay", SEED12]);
    assert_eq!(rc, 0, "{err}");
}
