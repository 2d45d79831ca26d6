//! Compiles the HIP replay kernels for every AMD target (gfx90a, gfx942, gfx1151) with a
//! clang whose AMDGPU back end knows them (Debian's clang-19) and embeds the code objects
//! (loaded at run time with hipModuleLoadData). Targets the toolchain cannot build are
//! recorded as skipped, with the compiler's reason (and a cargo warning); a real compile
//! error fails the build. No compiler: nothing is embedded and the reason says so.
//! CUDA code objects are built by `build-cuda.sh` with nvcc on a GPU machine instead.

#[path = "src/hip_build.rs"]
#[allow(dead_code)]
mod hip_build;

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/gpu/replay_kernels.cu");
    println!("cargo:rerun-if-changed=src/gpu/portability.h");
    println!("cargo:rerun-if-changed=src/hip_build.rs");
    println!("cargo:rerun-if-env-changed=MEMWATCH_HIP_CLANG");
    println!("cargo:rerun-if-env-changed=MEMWATCH_HIP_TARGETS");
    println!("cargo:rerun-if-env-changed=PATH");

    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let targets_env = std::env::var("MEMWATCH_HIP_TARGETS").ok();
    let targets: Vec<&str> = match &targets_env {
        Some(s) => s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect(),
        None => hip_build::DEFAULT_HIP_TARGETS.to_vec(),
    };

    let mut objects = String::new();
    let mut skipped = String::new();
    let search = hip_build::find_hip_clang();
    let compiler = match search.path() {
        None => {
            let reason = search.reason();
            println!("cargo:warning=memwatch-kernels: no HIP code objects: {reason}");
            for t in &targets {
                let _ = write!(skipped, "({t:?}, {reason:?}),");
            }
            "none".to_string()
        }
        Some(clang) => {
            let outcomes = hip_build::compile_all(clang, &targets, &out_dir)
                .unwrap_or_else(|e| panic!("memwatch-kernels: {e}"));
            for (t, o) in outcomes {
                match o {
                    hip_build::TargetOutcome::Built(p) => {
                        let _ = write!(
                            objects,
                            "({t:?}, include_bytes!({:?}) as &[u8]),",
                            p.display().to_string()
                        );
                    }
                    hip_build::TargetOutcome::Skipped(reason) => {
                        println!(
                            "cargo:warning=memwatch-kernels: skipped HIP target {t}: {reason}"
                        );
                        let _ = write!(skipped, "({t:?}, {reason:?}),");
                    }
                }
            }
            clang.display().to_string()
        }
    };
    let generated = format!(
        "/// HIP code objects (AMDGPU ELF) embedded at build time: (target, bytes).\n\
         pub static HIP_CODE_OBJECTS: &[(&str, &[u8])] = &[{objects}];\n\
         /// Targets that were not built, with the reason.\n\
         pub static HIP_SKIPPED: &[(&str, &str)] = &[{skipped}];\n\
         /// The clang used (\"none\" when there was none).\n\
         pub static HIP_COMPILER: &str = {compiler:?};\n"
    );
    std::fs::write(out_dir.join("hip_code_objects.rs"), generated).expect("write OUT_DIR file");
}
