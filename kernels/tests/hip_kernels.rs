//! The HIP replay kernels build with Debian's clang-19 for gfx90a (MI200), gfx942
//! (MI300X) and gfx1151 (Strix Halo), and each code object is what the HIP backend
//! expects, read back with LLVM's own `llvm-readobj-19`: its ELF header names the right
//! processor, it defines every kernel (and its `.kd` descriptor), and each kernel's
//! explicit arguments sit at the offsets and sizes the backend's launches pass
//! (`kernel_abi`). A target the compiler does not know is skipped with its reason; a
//! broken kernel is an error, not a skip. Needs clang-19, lld-19 and llvm-19
//! (scripts/install-deps.sh). No AMD GPU is involved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use memwatch_kernels::code_object::{self, HIP_CODE_OBJECTS, HIP_SKIPPED};
use memwatch_kernels::hip_build::{self, TargetOutcome, DEFAULT_HIP_TARGETS};
use memwatch_kernels::kernel_abi::{KernelArgs, KernelSignature, KERNELS};

fn clang() -> PathBuf {
    let search = hip_build::find_hip_clang();
    match search.path() {
        Some(p) => p.to_path_buf(),
        None => panic!(
            "{} (this test needs it: run scripts/install-deps.sh)",
            search.reason()
        ),
    }
}

/// `llvm-readobj-19`, or the `llvm-readobj` next to the clang in use.
fn readobj() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("llvm-readobj-19"))
        .chain(clang().parent().map(|d| d.join("llvm-readobj")))
        .chain([PathBuf::from("/usr/lib/llvm-19/bin/llvm-readobj")])
        .find(|p| p.is_file())
        .expect("llvm-readobj-19 is required for this test: run scripts/install-deps.sh")
}

fn read(args: &[&str], file: &Path) -> String {
    let out = Command::new(readobj())
        .args(args)
        .arg(file)
        .output()
        .expect("run llvm-readobj");
    assert!(
        out.status.success(),
        "llvm-readobj {args:?} {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `Key: value` lines of `llvm-readobj --file-headers` (the first of each key).
fn header_fields(text: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        if let Some((k, v)) = l.trim().split_once(": ") {
            m.entry(k.to_string())
                .or_insert_with(|| v.trim().to_string());
        }
    }
    m
}

/// The processor `e_flags` names, as llvm-readobj decodes it (`EF_AMDGPU_MACH_AMDGCN_GFX942`).
fn header_processor(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let at = l.find("EF_AMDGPU_MACH_AMDGCN_")?;
        let rest = &l[at + "EF_AMDGPU_MACH_AMDGCN_".len()..];
        Some(rest.split_whitespace().next()?.to_ascii_lowercase())
    })
}

/// Symbol name -> (type, binding) from `llvm-readobj --symbols`.
fn symbols(text: &str) -> BTreeMap<String, (String, String)> {
    let mut m = BTreeMap::new();
    let (mut name, mut ty, mut binding) = (None::<String>, String::new(), String::new());
    for l in text.lines().map(str::trim) {
        if l == "Symbol {" {
            (name, ty, binding) = (None, String::new(), String::new());
        } else if let Some(v) = l.strip_prefix("Name: ") {
            name = v.split(" (").next().map(str::to_string);
        } else if let Some(v) = l.strip_prefix("Type: ") {
            ty = v.split(" (").next().unwrap_or("").to_string();
        } else if let Some(v) = l.strip_prefix("Binding: ") {
            binding = v.split(" (").next().unwrap_or("").to_string();
        } else if l == "}" {
            if let Some(n) = name.take() {
                m.insert(n, (ty.clone(), binding.clone()));
            }
        }
    }
    m
}

/// One kernel of the AMDGPU metadata note.
#[derive(Debug, Default)]
struct KernelMeta {
    name: String,
    /// (offset, size, value_kind) of every argument, hidden ones included.
    args: Vec<(usize, usize, String)>,
    kernarg_segment_size: usize,
}

fn indent(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

/// The kernels of the `NT_AMDGPU_METADATA` note as `llvm-readobj --notes` prints it (YAML).
fn metadata_kernels(text: &str) -> Vec<KernelMeta> {
    let start = text
        .find("amdhsa.kernels:")
        .expect("an AMDGPU metadata note with amdhsa.kernels");
    let mut kernels: Vec<KernelMeta> = Vec::new();
    let mut in_args: Option<usize> = None;
    for l in text[start..].lines().skip(1) {
        if l.trim().is_empty() {
            continue;
        }
        let ind = indent(l);
        if ind == 0 {
            break; // the next top-level key (amdhsa.target, amdhsa.version)
        }
        let t = l.trim();
        if ind == 2 && t.starts_with("- ") {
            kernels.push(KernelMeta::default());
            in_args = None;
        }
        let Some(k) = kernels.last_mut() else {
            continue;
        };
        let item = t.strip_prefix("- ").unwrap_or(t);
        // A key on a list item's first line ("  - .args:") sits two columns further in.
        let ind = if t.starts_with("- ") { ind + 2 } else { ind };
        let (key, value) = match item.split_once(':') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => continue,
        };
        match in_args {
            Some(args_indent) if ind > args_indent => {
                if t.starts_with("- ") {
                    k.args.push((usize::MAX, usize::MAX, String::new()));
                }
                let Some(a) = k.args.last_mut() else { continue };
                match key {
                    ".offset" => a.0 = value.parse().expect("offset"),
                    ".size" => a.1 = value.parse().expect("size"),
                    ".value_kind" => a.2 = value.to_string(),
                    _ => {}
                }
                continue;
            }
            _ => in_args = None,
        }
        match key {
            ".args" => in_args = Some(ind),
            ".name" => k.name = value.to_string(),
            ".kernarg_segment_size" => k.kernarg_segment_size = value.parse().expect("size"),
            _ => {}
        }
    }
    kernels
}

/// The arguments a launch passes: the (offset, size) layout of `args`' values.
fn launch_layout(args: &KernelArgs) -> Vec<(usize, usize)> {
    let mut offset = 0usize;
    args.values()
        .iter()
        .map(|v| {
            let size = v.arg_type().size();
            offset = offset.div_ceil(size) * size;
            let at = offset;
            offset += size;
            (at, size)
        })
        .collect()
}

/// What each backend launch passes, built by the same constructors the backends call.
fn launches() -> Vec<KernelArgs> {
    vec![
        KernelArgs::touch(0x7f00_0000_0000, 3 << 30, 0xfeed),
        KernelArgs::checksum(0x7f00_0000_0000, 12345, 7, 0x7f10_0000_0000),
        KernelArgs::strided(0x7f00_0000_0000, 1 << 24, 4096, 2),
    ]
}

/// Checks one code object file against what the HIP backend loads and launches.
fn check_code_object(path: &Path, target: &str) {
    let headers = read(&["--file-headers"], path);
    let fields = header_fields(&headers);
    assert_eq!(
        fields.get("Machine").map(String::as_str),
        Some("EM_AMDGPU (0xE0)")
    );
    assert_eq!(
        fields.get("OS/ABI").map(String::as_str),
        Some("AMDGPU_HSA (0x40)"),
        "{headers}"
    );
    // ELFABIVERSION_AMDGPU_HSA_V4 = 2: code object version 4.
    assert_eq!(fields.get("ABIVersion").map(String::as_str), Some("2"));
    let base = target.split(':').next().unwrap_or(target);
    assert_eq!(
        header_processor(&headers).as_deref(),
        Some(base),
        "e_flags of {}: {headers}",
        path.display()
    );
    let bytes = std::fs::read(path).unwrap();
    // memwatch's own e_flags decoding agrees with LLVM's.
    assert_eq!(code_object::amdgpu_processor(&bytes), Some(base));
    let images = code_object::inspect(&bytes).unwrap();
    assert_eq!(images[0].id, format!("amdgcn-amd-amdhsa--{base}"));

    let syms = symbols(&read(&["--symbols"], path));
    for sig in KERNELS {
        assert_eq!(
            syms.get(sig.name),
            Some(&("Function".to_string(), "Global".to_string())),
            "{target}: symbol {} in {syms:?}",
            sig.name
        );
        let kd = format!("{}.kd", sig.name);
        assert_eq!(
            syms.get(&kd).map(|s| s.0.as_str()),
            Some("Object"),
            "{target}: kernel descriptor {kd}"
        );
    }

    let meta = metadata_kernels(&read(&["--notes"], path));
    let mut names: Vec<&str> = meta.iter().map(|k| k.name.as_str()).collect();
    names.sort();
    let mut want: Vec<&str> = KERNELS.iter().map(|s| s.name).collect();
    want.sort();
    assert_eq!(names, want, "{target}: kernels in the metadata note");
    for args in launches() {
        let sig: &KernelSignature = args.signature();
        let k = meta.iter().find(|k| k.name == sig.name).unwrap();
        let explicit: Vec<(usize, usize)> = k
            .args
            .iter()
            .filter(|a| !a.2.starts_with("hidden_"))
            .map(|a| (a.0, a.1))
            .collect();
        assert!(
            k.args
                .iter()
                .filter(|a| !a.2.starts_with("hidden_"))
                .all(|a| a.2 == "by_value"),
            "{target} {}: {:?}",
            sig.name,
            k.args
        );
        assert_eq!(
            explicit,
            launch_layout(&args),
            "{target} {}: the code object's arguments vs what the backend passes",
            sig.name
        );
        assert_eq!(explicit, sig.layout(), "{target} {}", sig.name);
        let end = explicit.last().map_or(0, |(o, s)| o + s);
        assert!(k.kernarg_segment_size >= end, "{target} {}", sig.name);
    }
}

#[test]
fn every_target_builds_with_clang_19_and_matches_the_backend() {
    let dir = tempfile::tempdir().unwrap();
    let outcomes = hip_build::compile_all(&clang(), DEFAULT_HIP_TARGETS, dir.path()).unwrap();
    assert_eq!(outcomes.len(), DEFAULT_HIP_TARGETS.len());
    for (target, outcome) in &outcomes {
        match outcome {
            TargetOutcome::Built(path) => check_code_object(path, target),
            TargetOutcome::Skipped(reason) => {
                panic!("{target} was skipped ({reason}); clang-19 knows all three targets")
            }
        }
    }
}

#[test]
fn the_embedded_code_objects_are_the_shipped_targets() {
    let built: Vec<&str> = HIP_CODE_OBJECTS.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        built, DEFAULT_HIP_TARGETS,
        "skipped at build time: {HIP_SKIPPED:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    for (t, bytes) in HIP_CODE_OBJECTS {
        let f = dir.path().join(format!("{t}.co"));
        std::fs::write(&f, bytes).unwrap();
        check_code_object(&f, t);
    }
    // The backend's choice by gcnArchName, as ROCm reports it.
    for (arch, want) in [
        ("gfx90a:sramecc+:xnack-", "gfx90a"),
        ("gfx942:sramecc+:xnack-", "gfx942"),
        ("gfx1151", "gfx1151"),
    ] {
        let co = code_object::select_hip_code_object("test device", arch).unwrap();
        assert_eq!(code_object::amdgpu_processor(co), Some(want), "{arch}");
    }
    let e = code_object::select_hip_code_object("device 0 AMD Radeon RX 7900 XTX", "gfx1100")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("device 0 AMD Radeon RX 7900 XTX (gfx1100)")
            && e.contains("gfx90a, gfx942, gfx1151"),
        "{e}"
    );
}

#[test]
fn an_unknown_target_is_skipped_with_the_compilers_reason() {
    let dir = tempfile::tempdir().unwrap();
    let src = hip_build::gpu_source_dir().join("replay_kernels.cu");
    let out = dir.path().join("x.co");
    match hip_build::compile_hip_target(&clang(), &src, "gfx9999", &out).unwrap() {
        TargetOutcome::Skipped(r) => {
            assert!(r.contains("gfx9999") && r.contains("invalid target"), "{r}")
        }
        o => panic!("expected a skip, got {o:?}"),
    }
}

#[test]
fn a_missing_linker_is_a_skip_that_says_so() {
    // The real clang-19 driver copied into a directory without lld: it looks for its
    // AMDGPU linker next to itself, then on PATH (Debian names it lld-19 / ld.lld-19 there).
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|d| d.join("lld").is_file()) {
        eprintln!("an unversioned lld is on PATH: a copied clang would find it; not checked");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("clang");
    std::fs::copy(std::fs::canonicalize(clang()).unwrap(), &copy).unwrap();
    let src = hip_build::gpu_source_dir().join("replay_kernels.cu");
    let out = dir.path().join("x.co");
    // Tests in this binary spawn clang on other threads; a fork taken while `fs::copy` held
    // the copy open for writing keeps that descriptor until its exec, and exec of the copy
    // fails with ETXTBSY meanwhile. That is a property of the test, not of the build: wait it out.
    let mut attempts = 0;
    let outcome = loop {
        match hip_build::compile_hip_target(&copy, &src, "gfx942", &out) {
            Err(e) if e.message.contains("Text file busy") && attempts < 100 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => break other.unwrap(),
        }
    };
    match outcome {
        TargetOutcome::Skipped(r) => assert!(
            r.contains("gfx942") && r.contains("lld") && r.contains("cannot link"),
            "{r}"
        ),
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
    let err = hip_build::compile_hip_target(&clang(), &src, "gfx90a", &dir.path().join("bad.co"))
        .unwrap_err();
    assert!(err.to_string().contains("undefined_thing"), "{err}");
}

#[test]
fn inspect_rejects_what_is_not_a_code_object() {
    assert!(code_object::inspect(b"hello world, not a kernel").is_err());
    let (_, good) = HIP_CODE_OBJECTS[0];
    assert!(code_object::inspect(&good[..40]).is_err());
    // A code object without one of the kernels is refused by name.
    let mut bytes = good.to_vec();
    let name = b"mw_strided\0";
    let at = bytes
        .windows(name.len())
        .position(|w| w == name)
        .expect("the kernel name in the string table");
    bytes[at] = b'X';
    let again = bytes.windows(name.len()).position(|w| w == name);
    if let Some(at) = again {
        bytes[at] = b'X';
    }
    let e = code_object::inspect(&bytes).unwrap_err();
    assert_eq!(
        e.to_string(),
        "kernel `mw_strided` is not defined in the code object"
    );
}
