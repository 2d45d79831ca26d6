//! Injection through `gdb` in batch mode, driven by the data file `gdb/inject.gdb`.
//!
//! Owns filling in the script template, running gdb, and turning its output into an
//! [`crate::Injected`] or a specific error. It does not ptrace by itself.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::error::{AttachError, Result};
use crate::procfs::Proc;
use crate::Injected;

/// The batch script template (kept as a data file in the repository).
pub const TEMPLATE: &str = include_str!("../gdb/inject.gdb");

/// Whether a `gdb` executable is on PATH.
pub fn available() -> bool {
    Command::new("gdb")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn check_literal(what: &str, s: &str) -> Result<()> {
    if s.chars().any(|c| c == '"' || c == '\\' || c.is_control()) {
        return Err(AttachError::Gdb(format!(
            "{what} {s:?} contains a quote, backslash or control character, which the gdb \
             script cannot carry; use --method ptrace"
        )));
    }
    Ok(())
}

/// The script for one call of `entry(arg)` after `dlopen(shim)`.
pub fn render(shim: &Path, entry: &str, arg: &str) -> Result<String> {
    let shim = shim.to_string_lossy();
    check_literal("shim path", &shim)?;
    check_literal("argument", arg)?;
    Ok(TEMPLATE
        .replace("@SHIM_N@", &(shim.len() + 1).to_string())
        .replace("@ENTRY_N@", &(entry.len() + 1).to_string())
        .replace("@ARG_N@", &(arg.len() + 1).to_string())
        .replace("@SHIM@", &shim)
        .replace("@ENTRY@", entry)
        .replace("@ARG@", arg))
}

/// Runs gdb against `pid` to dlopen `shim` and call `entry(arg)`.
pub fn inject(proc_: &Proc, pid: i32, shim: &Path, entry: &str, arg: &str) -> Result<Injected> {
    let script = render(shim, entry, arg)?;
    let mut file = tempfile_path(pid)?;
    std::fs::write(&file.0, script).map_err(|source| AttachError::Read {
        path: file.0.clone(),
        source,
    })?;
    let t0 = Instant::now();
    let out = Command::new("gdb")
        .args(["-nx", "-batch", "-p", &pid.to_string(), "-x"])
        .arg(&file.0)
        .output()
        .map_err(|e| AttachError::Gdb(format!("cannot run gdb: {e}")))?;
    let elapsed = t0.elapsed();
    file.cleanup();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_output(proc_, pid, shim, entry, &text).map(|entry_result| Injected {
        method: crate::Method::Gdb,
        entry_result,
        // gdb stops every thread from attach to detach; its whole run bounds the pause.
        pause: elapsed,
        at_syscall: None,
    })
}

/// Interprets gdb's output: the `MEMWATCH` lines, or gdb's own error messages.
pub fn parse_output(proc_: &Proc, pid: i32, shim: &Path, entry: &str, text: &str) -> Result<i32> {
    let restored = text.lines().any(|l| l.starts_with("MEMWATCH restored"));
    if !restored && text.lines().any(|l| l.starts_with("MEMWATCH dlopen-")) {
        let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = tail[tail.len().saturating_sub(3)..].join(" | ");
        return Err(AttachError::Gdb(format!(
            "the gdb script stopped before restoring the registers of process {pid}; the \
             process may not continue correctly. gdb's last lines: {tail}"
        )));
    }
    for line in text.lines() {
        if line.starts_with("MEMWATCH not-in-syscall") {
            return Err(AttachError::Gdb(format!(
                "process {pid}'s thread was running its own code, not waiting in a system \
                 call, when gdb stopped it; gdb cannot put its vector registers back after \
                 loading the shim, so nothing was changed. Try again, or use --method ptrace \
                 (the default), which restores the whole register state"
            )));
        }
        if let Some(rest) = line.strip_prefix("MEMWATCH entry-result ") {
            return rest
                .trim()
                .parse()
                .map_err(|_| AttachError::Gdb(format!("unexpected result line {line:?}")));
        }
        if let Some(rest) = line.strip_prefix("MEMWATCH dlopen-failed ") {
            return Err(AttachError::DlopenFailed {
                pid,
                lib: shim.display().to_string(),
                reason: rest.trim().to_string(),
            });
        }
        if line.starts_with("MEMWATCH entry-missing") {
            return Err(AttachError::EntryMissing {
                pid,
                symbol: entry.into(),
                lib: shim.display().to_string(),
            });
        }
    }
    if text.contains("ptrace: Operation not permitted") {
        proc_.require_untraced(pid)?;
        return Err(AttachError::PtraceDenied {
            pid,
            advice: proc_.explain_ptrace_denied(pid),
        });
    }
    if text.contains("ptrace: No such process") {
        return Err(AttachError::NoSuchProcess { pid });
    }
    if text.contains("No symbol \"dlopen\"") || text.contains("No symbol table is loaded") {
        return Err(AttachError::NoDlopen {
            pid,
            searched: "gdb found no dlopen symbol".into(),
        });
    }
    let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = tail[tail.len().saturating_sub(3)..].join(" | ");
    Err(AttachError::Gdb(format!(
        "gdb did not report a result for process {pid}; its last lines: {tail}"
    )))
}

/// A private script file, removed after use.
struct ScriptFile(std::path::PathBuf);

impl ScriptFile {
    fn cleanup(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tempfile_path(pid: i32) -> Result<ScriptFile> {
    let path =
        std::env::temp_dir().join(format!("memwatch-inject-{pid}-{}.gdb", std::process::id()));
    Ok(ScriptFile(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_fills_placeholders_and_rejects_quotes() {
        let s = render(
            Path::new("/opt/mw/libmemwatch_preload.so"),
            "memwatch_attach_start",
            "unix:/tmp/s",
        )
        .unwrap();
        assert!(
            s.contains("set {char[31]} $mw_shim = \"/opt/mw/libmemwatch_preload.so\""),
            "{s}"
        );
        assert!(s.contains("set {char[22]} $mw_entry_name = \"memwatch_attach_start\""));
        assert!(s.contains("set {char[12]} $mw_arg = \"unix:/tmp/s\""));
        assert!(!s.contains('@'));
        assert!(render(Path::new("/a\"b.so"), "e", "x").is_err());
    }

    #[test]
    fn output_parsing() {
        let p = Proc::default();
        let shim = Path::new("/x.so");
        assert_eq!(
            parse_output(
                &p,
                1,
                shim,
                "e",
                "noise\nMEMWATCH dlopen-ok 0x1\nMEMWATCH entry-result 1\nMEMWATCH restored\n"
            )
            .unwrap(),
            1
        );
        let e = parse_output(
            &p,
            1,
            shim,
            "e",
            "MEMWATCH dlopen-failed /x.so: cannot open shared object file\nMEMWATCH restored\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("cannot open shared object file"),
            "{e}"
        );
        let e = parse_output(
            &p,
            1,
            shim,
            "e",
            "MEMWATCH dlopen-ok 0x1\nMEMWATCH entry-missing\nMEMWATCH restored\n",
        )
        .unwrap_err();
        assert!(matches!(e, AttachError::EntryMissing { .. }));
        let e = parse_output(&p, 999_999_999, shim, "e", "ptrace: No such process.\n").unwrap_err();
        assert!(matches!(e, AttachError::NoSuchProcess { .. }));
        let e = parse_output(
            &p,
            1,
            shim,
            "e",
            "MEMWATCH dlopen-ok 0x1\nerror in sourced file\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("before restoring the registers"),
            "{e}"
        );
        let e = parse_output(&p, 1, shim, "e", "MEMWATCH not-in-syscall\n").unwrap_err();
        assert!(e.to_string().contains("nothing was changed"), "{e}");
    }
}
