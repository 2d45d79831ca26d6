//! The real ROCm runtime (Debian's libamdhip64, ROCm 5.2, from scripts/install-deps.sh)
//! under the shim: hipMalloc returns exactly what it returns without the shim (on a
//! machine without an AMD GPU: hipErrorInvalidDevice) and the capture records the call;
//! the device's identity is recorded only as the runtime answered it (without a GPU,
//! hipDeviceGetPCIBusId and hipDeviceGetUuid fail and no identity is recorded).

mod common;

use common::*;
use std::process::Command;

#[test]
fn real_libamdhip64_result_is_unchanged_and_recorded() {
    let b = built("rocm");
    let header = std::path::Path::new("/usr/include/hip/hip_runtime_api.h");
    assert!(
        header.exists(),
        "libamdhip64-dev missing: run scripts/install-deps.sh"
    );
    let exe = b.dir.join("rocm_probe");
    let src = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/rocm_probe.c");
    let out = Command::new("cc")
        .args([
            "-O2",
            "-D__HIP_PLATFORM_AMD__",
            "-o",
            exe.to_str().unwrap(),
            src.to_str().unwrap(),
            "-lamdhip64",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plain = Command::new(&exe)
        .env_remove("LD_PRELOAD")
        .env_remove("MEMWATCH_SINK")
        .output()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("rocm.mwcap");
    let shimmed = Command::new(&exe)
        .env("LD_PRELOAD", &b.shim)
        .env("MEMWATCH_SINK", format!("file:{}", cap.display()))
        .output()
        .unwrap();
    assert_eq!(plain.status.code(), shimmed.status.code());
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&shimmed.stdout)
    );
    let text = String::from_utf8_lossy(&shimmed.stdout).to_string();
    eprintln!("{text}");
    let want = expected(&text);
    let recs = read_capture(&cap);
    // What the runtime answered the probe's own identity calls (the shim's are the same).
    let line = text
        .lines()
        .find(|l| l.starts_with("I bus r="))
        .expect("identity line");
    let words: Vec<&str> = line.split_whitespace().collect();
    let bus = (words[2] == "r=0").then(|| memwatch_wire::canonical_pci_bus_id(words[3]));
    for r in &recs {
        if let memwatch_wire::Record::DeviceInfo(d) = r {
            assert_eq!(
                d.identity().pci_bus_id().map(str::to_string),
                bus.clone().flatten(),
                "{line}"
            );
        }
    }
    if bus.is_none() {
        assert!(
            recs.iter().all(|r| !matches!(
                r,
                memwatch_wire::Record::DeviceInfo(d) if d.identity.is_some()
            )),
            "no identity without a GPU: {recs:?}"
        );
    }
    let evs = events(&recs);
    assert_eq!(evs.len(), want.len(), "{evs:?}");
    for (e, w) in evs.iter().zip(&want) {
        assert_eq!(&as_expected(e, false), w);
    }
}
