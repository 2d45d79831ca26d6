//! The HIP replay kernels compile, with Debian's hipcc, for every AMD target that compiler
//! supports; unsupported targets are skipped with the compiler's reason; a broken kernel
//! source is an error, not a skip. Needs `hipcc` (scripts/install-deps.sh installs it).

use memwatch_kernels::code_object::{self, HIP_CODE_OBJECTS, HIP_SKIPPED};
use memwatch_kernels::hip_build::{self, TargetOutcome, DEFAULT_HIP_TARGETS};

fn hipcc() -> std::path::PathBuf {
    hip_build::find_hipcc().expect("hipcc is required for this test: run scripts/install-deps.sh")
}

#[test]
fn every_supported_target_compiles_and_defines_all_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let outcomes = hip_build::compile_all(&hipcc(), DEFAULT_HIP_TARGETS, dir.path()).unwrap();
    assert_eq!(outcomes.len(), DEFAULT_HIP_TARGETS.len());
    let mut built = 0;
    for (target, outcome) in &outcomes {
        match outcome {
            TargetOutcome::Built(path) => {
                let bytes = std::fs::read(path).unwrap();
                let images = code_object::inspect(&bytes).unwrap();
                assert!(
                    images
                        .iter()
                        .any(|i| i.id.ends_with(&format!("--{target}"))),
                    "{target}: bundle entries {images:?}"
                );
                built += 1;
            }
            TargetOutcome::Skipped(reason) => {
                assert!(reason.contains(target.as_str()), "{reason}");
                println!("skipped {target}: {reason}");
            }
        }
    }
    // gfx90a (MI200) is known to every ROCm since 4.x, Debian's 5.2 included.
    assert!(matches!(outcomes[0], (ref t, TargetOutcome::Built(_)) if t == "gfx90a"));
    assert!(built >= 1);
}

#[test]
fn the_embedded_code_objects_are_valid_and_account_for_every_target() {
    let mut seen: Vec<&str> = HIP_CODE_OBJECTS.iter().map(|(t, _)| *t).collect();
    for (t, bytes) in HIP_CODE_OBJECTS {
        let images = code_object::inspect(bytes).unwrap();
        assert!(images.iter().any(|i| i.id.ends_with(t)));
        assert!(code_object::hip_code_object_for(&format!("{t}:sramecc+:xnack-")).is_some());
    }
    seen.extend(HIP_SKIPPED.iter().map(|(t, _)| *t));
    seen.sort();
    let mut want = DEFAULT_HIP_TARGETS.to_vec();
    want.sort();
    assert_eq!(seen, want);
    assert!(code_object::hip_code_object_for("gfx90a").is_some());
}

#[test]
fn an_unknown_target_is_skipped_with_the_compilers_reason() {
    let dir = tempfile::tempdir().unwrap();
    let src = hip_build::gpu_source_dir().join("replay_kernels.cu");
    let out = dir.path().join("x.hsaco");
    match hip_build::compile_hip_target(&hipcc(), &src, "gfx9999", &out).unwrap() {
        TargetOutcome::Skipped(r) => {
            assert!(r.contains("gfx9999") && r.contains("invalid target"), "{r}")
        }
        o => panic!("expected a skip, got {o:?}"),
    }
}

#[test]
fn a_broken_kernel_is_an_error_not_a_skip() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("bad.cu");
    std::fs::write(
        &src,
        format!(
            "#include \"{}/portability.h\"\nMW_KERNEL void k(mw_u64 p) {{ undefined_thing(p); }}\n",
            hip_build::gpu_source_dir().display()
        ),
    )
    .unwrap();
    let err =
        hip_build::compile_hip_target(&hipcc(), &src, "gfx90a", &dir.path().join("bad.hsaco"))
            .unwrap_err();
    assert!(err.to_string().contains("undefined_thing"), "{err}");
}

#[test]
fn inspect_rejects_what_is_not_a_code_object() {
    assert!(code_object::inspect(b"hello world, not a kernel").is_err());
    let (_, good) = HIP_CODE_OBJECTS[0];
    assert!(code_object::inspect(&good[..40]).is_err());
}
