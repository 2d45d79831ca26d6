//! The shim's GOT patcher and pointer scan (agents/preload/src/got_patch.rs and
//! pointer_scan.rs, compiled here as modules so they are tested without building the
//! shim): a caller library bound to a callee is redirected to a wrapper and restored,
//! with lazy binding and with full RELRO; copies of the callee's address in the caller's
//! static data are redirected and restored, those in the callee's own data left alone.

#[path = "../../preload/src/got_patch.rs"]
#[allow(dead_code)]
mod got_patch;
#[path = "../../preload/src/pointer_scan.rs"]
#[allow(dead_code)]
mod pointer_scan;
// What those two use of the shim: catching panics in their loader callbacks.
#[path = "../../preload/src/debug.rs"]
#[allow(dead_code)]
mod debug;
#[path = "../../preload/src/panic_guard.rs"]
#[allow(dead_code)]
mod panic_guard;

use std::ffi::CString;
use std::path::Path;
use std::process::Command;

use got_patch::{patch_loaded, unpatch, Hook};
use pointer_scan::{redirect_copies, restore, Target};

extern "C" fn wrapper(x: i32) -> i32 {
    x + 1000
}

/// The shim attaches and detaches one at a time (its attach guard); these tests call
/// the patcher directly and must too. Each walk changes the protection of RELRO pages of
/// every loaded object, the other tests' libraries included: a walk that read a page's
/// protection while another test had it writable would store into it once it was
/// read-only again (a SIGSEGV of this binary, seen in a full-suite run).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    // A failed test poisons the lock; the next one still runs alone.
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Builds the callee and a caller linked to it; `tag` keeps each test's objects apart
/// (the scan reads every loaded object, the other tests' libraries included).
fn build(dir: &Path, relro_now: bool, tag: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let c = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let callee = dir.join(format!("libmwcallee{tag}.so"));
    let caller = dir.join(format!(
        "libmwcaller{tag}_{}.so",
        if relro_now { "now" } else { "lazy" }
    ));
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
    cmd.arg(format!("-L{}", dir.display()))
        .arg(format!("-lmwcallee{tag}"));
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
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (_callee, caller) = build(dir.path(), relro_now, "");
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
        // The pointer copied into the library's data at load time is not a GOT slot:
        // the pointer scan's job (below), not the GOT patcher's.
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

fn scan(relro_now: bool) {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let tag = if relro_now { "_scan_now" } else { "_scan_lazy" };
    let (callee, caller) = build(dir.path(), relro_now, tag);
    let path = CString::new(caller.to_str().unwrap()).unwrap();
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null());
        let callee_path = CString::new(callee.to_str().unwrap()).unwrap();
        let hc = libc::dlopen(callee_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(
            !hc.is_null(),
            "the callee is loaded as the caller's dependency"
        );
        let real: usize = sym::<usize>(hc, "mw_target_fn");
        let call_self: extern "C" fn(i32) -> i32 = sym(hc, "mw_call_self");
        let call_taken: extern "C" fn(i32) -> i32 = sym(h, "mw_call_taken");
        let call_taken_ro: extern "C" fn(i32) -> i32 = sym(h, "mw_call_taken_ro");
        let call_stub: extern "C" fn(i32) -> i32 = sym(h, "mw_call_stub");
        // The stub looks its pointer up on first use, before the "attach".
        assert_eq!(call_stub(5), 10);
        assert_eq!(
            (call_taken(5), call_taken_ro(5), call_self(5)),
            (10, 10, 10)
        );
        let targets = [Target {
            real,
            wrapper: wrapper as *const () as usize,
        }];
        // As attach does: GOT slots first, then the copies the GOT patcher cannot see.
        let hooks = [Hook {
            name: b"mw_target_fn",
            wrapper: targets[0].wrapper,
        }];
        let (patches, _) = patch_loaded(&hooks, wrapper as *const () as usize);
        let scanned = redirect_copies(&targets, wrapper as *const () as usize);
        assert_eq!(scanned.failures, 0);
        assert!(scanned.bytes > 0);
        let copies = scanned.redirects;
        let name = caller.file_name().unwrap().to_str().unwrap();
        assert_eq!(
            copies.iter().filter(|c| c.object.ends_with(name)).count(),
            3,
            "the caller's three copies (.data.rel, .data.rel.ro, .bss): {copies:?}"
        );
        assert!(
            copies
                .iter()
                .all(|c| c.original == real && c.wrapper == targets[0].wrapper),
            "{copies:?}"
        );
        assert_eq!(call_taken(5), 1005, "writable copy redirected");
        assert_eq!(call_taken_ro(5), 1005, "RELRO copy redirected");
        assert_eq!(call_stub(5), 1005, "the stub's cached pointer redirected");
        assert_eq!(call_self(5), 10, "the callee's own table is left alone");
        // Scanning again finds nothing new.
        let again = redirect_copies(&targets, wrapper as *const () as usize).redirects;
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(restore(&copies), copies.len());
        unpatch(&patches, &hooks);
        assert_eq!(
            (call_taken(5), call_taken_ro(5), call_stub(5)),
            (10, 10, 10)
        );
        // A copy the program changed meanwhile is not overwritten by the restore.
        let copies = redirect_copies(&targets, wrapper as *const () as usize).redirects;
        assert!(copies.len() >= 3, "{copies:?}");
        let taken = sym::<*mut usize>(h, "mw_taken");
        let other = wrapper2 as *const () as usize;
        core::ptr::write_volatile(taken, other);
        assert_eq!(restore(&copies), copies.len() - 1);
        assert_eq!(call_taken(5), 2005, "the program's own store survives");
        assert_eq!(call_stub(5), 10);
    }
}

extern "C" fn wrapper2(x: i32) -> i32 {
    x + 2000
}

#[test]
fn copied_pointers_are_redirected_and_restored_lazy_binding() {
    scan(false);
}

#[test]
fn copied_pointers_are_redirected_and_restored_full_relro() {
    scan(true);
}
