//! Link settings of the shim.
//!
//! 1. `-Bsymbolic-functions`: the shim's own references to the functions it exports (its
//!    wrappers' addresses, handed out by dlsym / *GetProcAddress and written into GOTs by
//!    late attach) must mean the shim's own definitions. Under LD_PRELOAD the shim comes
//!    first in the lookup order anyway; when `memwatch attach` loads it later with dlopen,
//!    the runtime library loaded earlier would otherwise win and the shim would hand out
//!    the real function as if it were its wrapper.
//! 2. GCC's unwinder linked in statically: Rust's standard library asks for `-lgcc_s` on
//!    linux-gnu, which would make the shim need `libgcc_s.so.1` beside glibc in every
//!    process it is preloaded into (a container image may lack it). A linker script named
//!    `libgcc_s.so`, found first on the search path, points the linker at `libgcc_eh.a`,
//!    the static copy of the same unwinder. Its symbols stay local to the shim (a cdylib
//!    exports only the shim's own functions), so the program's unwinder is untouched.
use std::env;
use std::fs;
use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
    println!("cargo:rerun-if-changed=build.rs");

    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && target_env == "gnu" {
        let Some(out_dir) = env::var_os("OUT_DIR").map(PathBuf::from) else {
            return;
        };
        let dir = out_dir.join("static-unwinder");
        let script = dir.join("libgcc_s.so");
        let written = fs::create_dir_all(&dir).and_then(|()| {
            fs::write(
                &script,
                "/* memwatch shim: GCC's unwinder, static */\nINPUT(-lgcc_eh)\n",
            )
        });
        match written {
            Ok(()) => println!("cargo:rustc-link-search=native={}", dir.display()),
            Err(e) => println!(
                "cargo:warning=cannot write {}: {e}; the shim will need libgcc_s.so.1",
                script.display()
            ),
        }
    }
}
