//! Every real fixture parses, and the memory_analysis() figures match the recorded ground
//! truth to the byte: the H200 dumps (README values) and the jax[cpu]==0.10.2 CPU dumps
//! (`*.memory_analysis.json` recorded beside them by tests/python/gen_dumps.py).

use memwatch_analysis::xla;
use std::path::{Path, PathBuf};

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn find<'a>(mods: &'a [xla::ModuleReport], name: &str) -> &'a xla::ModuleReport {
    mods.iter().find(|m| m.name == name).expect(name)
}

#[test]
fn h200_mlp_and_padf_match_memory_analysis() {
    let mods = xla::load_dump_dir(&repo("testdata/h200/xla/h200-jax0.11.2-mlp")).unwrap();
    assert_eq!(mods.len(), 2);
    let m = find(&mods, "jit_mlp");
    assert_eq!(m.id, Some(3318));
    assert_eq!(m.platform, "sm_9.0a_gpu");
    assert_eq!(m.argument_bytes, 71303168);
    assert_eq!(m.output_bytes, 67108938);
    assert_eq!(m.temp_bytes, 239103760);
    assert_eq!(m.alias_bytes, 0);
    assert_eq!(m.total_allocation_bytes, 377515950);
    assert_eq!(m.dump_total_bytes, Some(377515950));
    // XLA's live-range peak (155 189 250 bytes at step 77).
    assert_eq!(m.peak_bytes, Some(155189250));
    assert_eq!(m.peak_time, Some(77));
    let top = &m.peak_buffers[0];
    assert_eq!(top.instruction, "loop_add_fusion.3");
    assert_eq!(top.category, "loop_add_fusion");
    assert_eq!(top.allocation_kind, "temp");
    assert_eq!(top.fusion_kind.as_deref(), Some("kLoop"));
    assert!(top.op_name.as_deref().unwrap().starts_with("jit(mlp)/"));
    let param = m.by_category.iter().find(|g| g.key == "param").unwrap();
    assert_eq!(param.bytes, 71303168);
    let p = find(&mods, "jit_padf");
    assert_eq!(p.argument_bytes, 150012928);
    assert_eq!(p.output_bytes, 1503552);
    assert_eq!(p.temp_bytes, 0);
    assert_eq!(p.peak_bytes, Some(151516480));
    assert_eq!(
        p.peak_buffers[1].op_name.as_deref(),
        Some("jit(padf)/jit(_pad)/pad")
    );
    assert_eq!(p.peak_buffers[1].category, "loop_pad_fusion");
}

#[test]
fn incident_jit_model_matches_memory_analysis() {
    let mods =
        xla::load_dump_dir(&repo("testdata/h200/incidents/h200-jax0.11.2-oom-temp")).unwrap();
    let m = find(&mods, "jit_model");
    assert_eq!(m.argument_bytes, 603979776);
    assert_eq!(m.output_bytes, 536871052);
    assert_eq!(m.temp_bytes, 3489674768);
    assert_eq!(m.alias_bytes, 0);
    assert_eq!(m.total_allocation_bytes, 4630525608);
    assert_eq!(m.peak_time, Some(88));
    assert_eq!(m.peak_bytes, Some(3120562196));
}

#[test]
fn cpu_jax_0_10_2_dumps_match_recorded_memory_analysis() {
    // tests/python/check_cpu_dumps.sh points this at freshly generated dumps.
    let dir = std::env::var_os("MEMWATCH_CPU_DUMPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo("testdata/cpu-jax0.10.2"));
    let mods = xla::load_dump_dir(&dir).unwrap();
    assert!(mods.len() >= 4);
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        let Some(fname) = p.file_name().and_then(|f| f.to_str()) else {
            continue;
        };
        let Some(name) = fname.strip_suffix(".memory_analysis.json") else {
            continue;
        };
        let truth: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let m = find(&mods, name);
        let want = |k: &str| truth[k].as_u64().unwrap();
        assert_eq!(m.argument_bytes, want("argument_size_in_bytes"), "{name}");
        assert_eq!(m.output_bytes, want("output_size_in_bytes"), "{name}");
        assert_eq!(m.temp_bytes, want("temp_size_in_bytes"), "{name}");
        assert_eq!(m.alias_bytes, want("alias_size_in_bytes"), "{name}");
        assert_eq!(
            m.totals.host_temp_bytes,
            want("host_temp_size_in_bytes"),
            "{name}"
        );
        assert_eq!(
            m.totals.host_argument_bytes,
            want("host_argument_size_in_bytes"),
            "{name}"
        );
        if let Some(t) = truth.get("total_allocation_bytes").and_then(|v| v.as_u64()) {
            assert_eq!(m.total_allocation_bytes, t, "{name}");
        }
        assert!(!m.peak_buffers.is_empty(), "{name}");
        checked += 1;
    }
    assert_eq!(checked, 4, "expected 4 recorded memory_analysis() files");
    // The donated MLP train step aliases its parameters.
    assert!(find(&mods, "jit_mlp_train_step").alias_bytes > 0);
}

#[test]
fn load_path_accepts_any_file_of_a_module() {
    let d = repo("testdata/h200/xla/h200-jax0.11.2-mlp");
    for f in [
        "module_142220.jit_padf.sm_9.0a_gpu_after_optimizations.txt",
        "module_142220.jit_padf.sm_9.0a_gpu_after_optimizations-live-range.txt",
        "module_142220.jit_padf.sm_9.0a_gpu_after_optimizations-buffer-assignment.txt",
    ] {
        let m = xla::load_path(&d.join(f)).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].name.as_str(), m[0].id), ("jit_padf", Some(142220)));
    }
    let e = xla::load_path(&d.join("module_142220.jit_padf.before_optimizations.txt")).unwrap_err();
    assert!(e.to_string().contains("not an XLA dump"), "{e}");
}

#[test]
fn diff_of_dump_with_itself_is_zero_and_detects_changes() {
    let a = xla::load_dump_dir(&repo("testdata/h200/xla/h200-jax0.11.2-mlp")).unwrap();
    let d = xla::diff::diff_reports(&a, &a);
    assert!(d.added.is_empty() && d.removed.is_empty());
    assert!(d
        .modules
        .iter()
        .all(|m| m.ops.is_empty() && m.figures.values().all(|f| f.2 == 0)));
    let mut b = a.clone();
    b[0].temp_bytes += 1024;
    b[0].by_category[0].bytes += 4096;
    let d = xla::diff::diff_reports(&a, &b);
    let m = d.modules.iter().find(|m| m.name == b[0].name).unwrap();
    assert_eq!(m.figures["temp_bytes"].2, 1024);
    assert_eq!(m.ops[0].delta_bytes, 4096);
}

/// An unknown peak is not compared with 0, and a name compiled several times is paired
/// with the NEW module of the same argument and output sizes, not by position.
#[test]
fn diff_never_compares_an_unknown_peak_and_pairs_repeated_names_by_io_sizes() {
    let a = xla::load_dump_dir(&repo("testdata/h200/xla/h200-jax0.11.2-mlp")).unwrap();
    let mut b = a.clone();
    b[0].peak_bytes = None;
    let d = xla::diff::diff_reports(&a, &b);
    let m = d.modules.iter().find(|m| m.name == a[0].name).unwrap();
    assert!(!m.figures.contains_key("peak_bytes"), "{:?}", m.figures);
    assert_eq!(
        m.unknown,
        [
            "peak_bytes (NEW has no live-range file)",
            "peak bytes by op category (they need both peaks)"
        ]
    );
    assert!(m.ops.is_empty(), "{:?}", m.ops);

    // BASE compiled `f` for two shapes in one order, NEW in the other.
    let mut f1 = a[0].clone();
    f1.name = "jit_f".into();
    f1.argument_bytes = 100;
    f1.temp_bytes = 10;
    let mut f2 = f1.clone();
    f2.argument_bytes = 200;
    f2.temp_bytes = 20;
    let d = xla::diff::diff_reports(&[f1.clone(), f2.clone()], &[f2.clone(), f1.clone()]);
    assert_eq!(d.modules.len(), 2);
    for m in &d.modules {
        assert_eq!(m.paired_by, "name+io");
        assert_eq!(m.figures["temp_bytes"].2, 0, "{m:?}");
    }
    // No size match: paired in order, and said so.
    let mut g = f2.clone();
    g.argument_bytes = 300;
    let d = xla::diff::diff_reports(&[f1.clone(), f2.clone()], &[f1, g]);
    let by: Vec<&str> = d.modules.iter().map(|m| m.paired_by).collect();
    assert_eq!(by, ["name+io", "order"]);
}

#[test]
fn usage_reports_of_all_fixtures_parse_and_agree_with_totals() {
    use memwatch_analysis::xla::usage_report::parse_usage_report;
    for d in [
        "testdata/h200/xla/h200-jax0.11.2-mlp",
        "testdata/h200/incidents/h200-jax0.11.2-oom-temp",
        "testdata/cpu-jax0.10.2",
    ] {
        for m in xla::list_modules(&repo(d)).unwrap() {
            let f = &m.memory_usage_report;
            let r = parse_usage_report(std::io::BufReader::new(std::fs::File::open(f).unwrap()), f)
                .unwrap();
            let rep = xla::load_module(&m).unwrap();
            assert_eq!(
                r.iter().map(|s| s.total_bytes).sum::<u64>(),
                rep.total_allocation_bytes,
                "{}",
                m.name
            );
        }
    }
}

/// A real module's buffer-assignment or live-range file cut at any line boundary is an
/// error naming that file, never a report with smaller figures (except a live-range file
/// cut inside the stack-trace tree that follows the whole peak list, which older XLA
/// versions do not print at all).
#[test]
fn real_files_cut_at_any_line_are_rejected() {
    let src = repo("testdata/h200/xla/h200-jax0.11.2-mlp");
    let stem = "module_3318.jit_mlp.sm_9.0a_gpu_after_optimizations";
    for suffix in ["-buffer-assignment.txt", "-live-range.txt"] {
        let dir = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(&src).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().unwrap().to_str().unwrap().starts_with(stem) {
                std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
            }
        }
        let target = dir.path().join(format!("{stem}{suffix}"));
        let text = std::fs::read_to_string(&target).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // Where the stack-trace tree starts: cuts from there on keep the peak list whole.
        let tree = lines
            .iter()
            .position(|l| l.trim_start().starts_with("Stack trace breakdown"))
            .unwrap_or(usize::MAX);
        for n in 1..lines.len().min(tree) {
            std::fs::write(&target, lines[..n].join("\n") + "\n").unwrap();
            let m = xla::list_modules(dir.path()).unwrap();
            let e = xla::load_module(&m[0]).expect_err(&format!("{suffix} cut to {n} lines"));
            assert!(e.to_string().contains(suffix), "{n}: {e}");
        }
    }
}

/// The dump text itself, read plainly: the ENTRY ROOT's operands (or the ROOT's own name)
/// and, for each, the `op_name` on the line that defines it (`name#k` -> `name`).
fn root_elements_from_text(text: &str) -> Vec<(String, Option<String>)> {
    let entry = &text[text.find("\nENTRY ").expect("ENTRY")..];
    let root = entry
        .lines()
        .find(|l| l.trim_start().starts_with("ROOT "))
        .expect("ROOT");
    let names: Vec<String> = match root.find(" tuple(") {
        Some(p) => {
            let args = &root[p + 7..];
            args[..args.find(')').unwrap()]
                .split(", ")
                .map(|a| {
                    a.rsplit("*/")
                        .next()
                        .unwrap()
                        .trim_start_matches('%')
                        .to_string()
                })
                .collect()
        }
        None => vec![root.trim_start()[5..]
            .split(" = ")
            .next()
            .unwrap()
            .trim_start_matches('%')
            .to_string()],
    };
    names
        .into_iter()
        .map(|n| {
            let base = n.split('#').next().unwrap().to_string();
            let def = entry
                .lines()
                .find(|l| {
                    let t = l.trim_start().trim_start_matches("ROOT ");
                    t.starts_with(&format!("%{base} = "))
                })
                .expect("definition");
            let op_of = |line: &str| {
                line.split_once("op_name=\"")
                    .map(|(_, r)| r[..r.find('"').unwrap()].to_string())
            };
            // `fusion#k`: element k of a multi-output fusion is what its body's ROOT tuple
            // returns as element k, named by that instruction's own metadata.
            let element = n.split_once('#').and_then(|(_, k)| {
                let k: usize = k.parse().ok()?;
                let body = def.split_once("calls=%")?.1;
                let body = &body[..body.find([',', ' ']).unwrap_or(body.len())];
                let start = text.find(&format!("\n%{body} "))?;
                let lines: Vec<&str> = text[start + 1..]
                    .lines()
                    .take_while(|l| *l != "}")
                    .collect();
                let root = lines.iter().find(|l| l.trim_start().starts_with("ROOT "))?;
                let args = &root[root.find(" tuple(")? + 7..];
                let operand = args[..args.find(')')?].split(", ").nth(k)?;
                let operand = operand.rsplit("*/").next()?.trim_start_matches('%');
                let line = lines
                    .iter()
                    .find(|l| l.trim_start().starts_with(&format!("%{operand} = ")))?;
                op_of(line)
            });
            (n, element.or_else(|| op_of(def)))
        })
        .collect()
}

/// Output i of each real module is ROOT element i of its dump, with the `op_name` of the
/// instruction that defines it; the outputs' bytes add up to the output allocation
/// XLA reports, less its tuple index table (one pointer per element).
#[test]
fn entry_outputs_match_the_dump_text() {
    let cases = [
        ("testdata/oom-corpus/jax_leak_bfc/dump", "jit_update", 2),
        (
            "testdata/oom-corpus/jax_exec_temp/dump",
            "jit_forward_loss",
            13,
        ),
        ("testdata/oom-corpus/jax_co_resident/dump", "", 0),
        ("testdata/h200/xla/h200-jax0.11.2-mlp", "jit_mlp", 0),
    ];
    let mut checked = 0;
    for (dir, name, n) in cases {
        let mods = xla::load_dump_dir(&repo(dir)).unwrap();
        for m in mods.iter().filter(|m| name.is_empty() || m.name == name) {
            let hlo = std::fs::read_dir(repo(dir))
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| {
                    let f = p.file_name().unwrap().to_string_lossy().to_string();
                    f.ends_with("after_optimizations.txt") && f.contains(&format!(".{}.", m.name))
                });
            let Some(hlo) = hlo else { continue };
            let want = root_elements_from_text(&std::fs::read_to_string(&hlo).unwrap());
            if n > 0 {
                assert_eq!(m.outputs.len(), n, "{}", m.name);
            }
            assert_eq!(m.outputs.len(), want.len(), "{}", m.name);
            for (i, (o, (instr, op))) in m.outputs.iter().zip(&want).enumerate() {
                assert_eq!(o.index as usize, i);
                assert_eq!(&o.instruction, instr, "{} output {i}", m.name);
                if op.is_some() {
                    assert_eq!(&o.op_name, op, "{} output {i}", m.name);
                }
                assert!(o.bytes.is_some(), "{} output {i}: {}", m.name, o.shape);
            }
            let sum: u64 = m.outputs.iter().filter_map(|o| o.bytes).sum();
            let table = if m.outputs.len() > 1 {
                8 * m.outputs.len() as u64
            } else {
                0
            };
            assert_eq!(sum + table, m.output_bytes, "{}", m.name);
            checked += 1;
        }
    }
    assert!(checked >= 4, "{checked}");
    let leak = xla::load_dump_dir(&repo("testdata/oom-corpus/jax_leak_bfc/dump")).unwrap();
    let update = find(&leak, "jit_update");
    // `return new, new * 2.0` with `new = sin(state) * scale + state * 0.5`: one fusion
    // computes both; its own metadata says `mul`, its body returns the add as output 0.
    let named: Vec<_> = update
        .outputs
        .iter()
        .map(|o| (o.op_name.as_deref(), o.bytes))
        .collect();
    assert_eq!(
        named,
        vec![
            (Some("jit(update)/add"), Some(64 << 20)),
            (Some("jit(update)/mul"), Some(64 << 20))
        ]
    );
}
