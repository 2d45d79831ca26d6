//! Link the shim with -Bsymbolic-functions: the shim's own references to the functions
//! it exports (its wrappers' addresses, handed out by dlsym / *GetProcAddress and written
//! into GOTs by late attach) must mean the shim's own definitions. Under LD_PRELOAD the
//! shim comes first in the lookup order anyway; when `memwatch attach` loads it later with
//! dlopen, the runtime library loaded earlier would otherwise win and the shim would hand
//! out the real function as if it were its wrapper.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
    println!("cargo:rerun-if-changed=build.rs");
}
