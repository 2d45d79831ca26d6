//! The shim's GOT patcher (agents/preload/src/got_patch.rs, compiled here as a module so
//! it is tested without building the shim): a caller library bound to a callee is
//! redirected to a wrapper and restored, with lazy binding and with full RELRO.

#[path = "../../preload/src/got_patch.rs"]
#[allow(dead_code)]
mod got_patch;

use std::ffi::CString;
use std::path::Path;
use std::process::Command;

use got_patch::{patch_loaded, unpatch, Hook};

extern "C" fn wrapper(x: i32) -> i32 {
    x + 1000
}

fn build(dir: &Path, relro_now: bool) -> (std::path::PathBuf, std::path::PathBuf) {
    let c = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let callee = dir.join("libmwcallee.so");
    let caller = dir.join(if relro_now {
        "libmwcaller_now.so"
    } else {
        "libmwcaller_lazy.so"
    });
    assert!(Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&callee)
        .arg(c.join("callee.c"))
        .status()
        .unwrap()
        .success());
    let mut cmd = Command::new("cc");
    cmd.args(["-shared", "-fPIC", "-o"])
        .arg(&caller)
        .arg(c.join("caller.c"));
    cmd.arg(format!("-L{}", dir.display())).arg("-lmwcallee");
    cmd.arg(format!("-Wl,-rpath,{}", dir.display()));
    if relro_now {
        cmd.arg("-Wl,-z,relro,-z,now");
    } else {
        cmd.arg("-Wl,-z,lazy");
    }
    assert!(cmd.status().unwrap().success());
    (callee, caller)
}

unsafe fn sym<T>(h: *mut libc::c_void, name: &str) -> T {
    let n = CString::new(name).unwrap();
    let p = libc::dlsym(h, n.as_ptr());
    assert!(!p.is_null(), "{name}");
    std::mem::transmute_copy(&p)
}

fn check(relro_now: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (_callee, caller) = build(dir.path(), relro_now);
    let path = CString::new(caller.to_str().unwrap()).unwrap();
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null());
        let call_plt: extern "C" fn(i32) -> i32 = sym(h, "mw_call_plt");
        let call_taken: extern "C" fn(i32) -> i32 = sym(h, "mw_call_taken");
        assert_eq!(call_plt(5), 10);
        let hooks = [Hook {
            name: b"mw_target_fn",
            wrapper: wrapper as *const () as usize,
        }];
        // Skip the test binary itself (it does not call mw_target_fn anyway).
        let (patches, failures) = patch_loaded(&hooks, wrapper as *const () as usize);
        assert_eq!(failures, 0);
        assert!(
            patches.iter().any(|p| p
                .object
                .ends_with(caller.file_name().unwrap().to_str().unwrap())),
            "{patches:?}"
        );
        assert_eq!(call_plt(5), 1005, "PLT call goes to the wrapper");
        // The pointer copied into the library's data at load time is NOT redirected:
        // exactly the documented limit of late attach.
        assert_eq!(call_taken(5), 10);
        // Patching twice finds nothing new.
        let (again, _) = patch_loaded(&hooks, wrapper as *const () as usize);
        assert!(again.is_empty(), "{again:?}");
        let restored = unpatch(&patches, &hooks);
        assert_eq!(restored, patches.len());
        assert_eq!(call_plt(5), 10, "restored");
        assert_eq!(call_plt(7), 14);
    }
}

#[test]
fn patches_and_restores_lazy_binding() {
    check(false);
}

#[test]
fn patches_and_restores_full_relro() {
    check(true);
}
