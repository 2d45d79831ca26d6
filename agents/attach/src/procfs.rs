//! Everything memwatch reads about a target process from /proc before and while attaching:
//! existence, tracer, yama ptrace_scope, capabilities, architecture, memory maps, the
//! environment, descendants.
//!
//! Owns reading and interpreting /proc files (rooted at a configurable directory so tests
//! can feed fabricated files). It never ptraces or writes to a process.

use std::path::PathBuf;

use crate::error::{AttachError, Result};

/// CAP_SYS_PTRACE bit number in /proc/PID/status `CapEff`.
const CAP_SYS_PTRACE: u32 = 19;
/// ELF e_machine of x86-64.
const EM_X86_64: u16 = 62;

/// A /proc tree (normally `/proc`).
#[derive(Debug, Clone)]
pub struct Proc {
    root: PathBuf,
}

impl Default for Proc {
    fn default() -> Self {
        Self::new("/proc")
    }
}

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    pub path: String,
}

impl Mapping {
    pub fn executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }
}

/// The fields of /proc/PID/status that matter here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    /// The state letter (`R`, `S`, `Z` for a zombie, …).
    pub state: char,
    pub tracer_pid: i32,
    pub uid: u32,
    pub cap_eff: u64,
}

/// A process tree for `--all-children`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tree {
    /// Parents before children.
    pub attachable: Vec<i32>,
    pub left_out: Vec<(i32, LeftOut)>,
}

/// Why a process of the tree is not attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftOut {
    /// Exited and not yet reaped by its parent.
    Zombie,
    /// The memwatch process itself (or a process it started).
    Ourselves,
}

impl LeftOut {
    pub fn why(self) -> &'static str {
        match self {
            LeftOut::Zombie => "a zombie (exited, not yet reaped by its parent): nothing to watch",
            LeftOut::Ourselves => "this memwatch process itself",
        }
    }
}

impl Proc {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn read(&self, rel: &str) -> Result<String> {
        let path = self.path(rel);
        std::fs::read_to_string(&path).map_err(|source| AttachError::Read { path, source })
    }

    /// Fails with [`AttachError::NoSuchProcess`] when the pid has no /proc directory, and
    /// with [`AttachError::Exited`] when it is a zombie (it exited; its parent has not
    /// collected it yet): nothing runs there to attach to.
    pub fn require_process(&self, pid: i32) -> Result<()> {
        if pid <= 0 || !self.path(&pid.to_string()).is_dir() {
            return Err(AttachError::NoSuchProcess { pid });
        }
        if self.is_gone(pid) {
            return Err(AttachError::Exited {
                pid,
                what: "it is a zombie: exited, not yet reaped by its parent".into(),
            });
        }
        Ok(())
    }

    /// Whether the process has exited: no /proc entry, or a zombie.
    pub fn is_gone(&self, pid: i32) -> bool {
        match self.read(&format!("{pid}/status")) {
            Ok(text) => matches!(parse_status(&text).state, 'Z' | 'X'),
            Err(_) => true,
        }
    }

    /// Parses /proc/PID/status.
    pub fn status(&self, pid: i32) -> Result<Status> {
        let text = self
            .read(&format!("{pid}/status"))
            .map_err(|e| self.gone(pid, e))?;
        Ok(parse_status(&text))
    }

    /// `kernel.yama.ptrace_scope`, `None` when Yama is not built in.
    pub fn ptrace_scope(&self) -> Option<u32> {
        self.read("sys/kernel/yama/ptrace_scope")
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Fails when another process traces `pid` (a debugger, strace, another injector).
    pub fn require_untraced(&self, pid: i32) -> Result<()> {
        let st = self.status(pid)?;
        if st.tracer_pid != 0 {
            let tracer_name = self
                .status(st.tracer_pid)
                .map(|s| s.name)
                .unwrap_or_else(|_| "unknown".into());
            return Err(AttachError::AlreadyTraced {
                pid,
                tracer: st.tracer_pid,
                tracer_name,
            });
        }
        Ok(())
    }

    /// Fails unless the target's executable is x86-64 ELF.
    pub fn require_x86_64(&self, pid: i32) -> Result<()> {
        let path = self.path(&format!("{pid}/exe"));
        let mut head = [0u8; 20];
        let data = std::fs::read(&path).map_err(|source| {
            self.gone(
                pid,
                AttachError::Read {
                    path: path.clone(),
                    source,
                },
            )
        })?;
        if data.len() < head.len() || &data[..4] != b"\x7fELF" {
            return Err(AttachError::Elf {
                path,
                what: "no ELF header".into(),
            });
        }
        head.copy_from_slice(&data[..20]);
        let machine = u16::from_le_bytes([head[18], head[19]]);
        if machine != EM_X86_64 {
            return Err(AttachError::UnsupportedArch {
                pid,
                arch: machine_name(machine).to_string(),
            });
        }
        Ok(())
    }

    /// Parses /proc/PID/maps.
    pub fn maps(&self, pid: i32) -> Result<Vec<Mapping>> {
        let text = self
            .read(&format!("{pid}/maps"))
            .map_err(|e| self.gone(pid, e))?;
        Ok(parse_maps(&text))
    }

    /// The file a mapped path can be read through: `/proc/PID/root/PATH` (right across
    /// mount namespaces, e.g. containers), else the path itself.
    pub fn mapped_file(&self, pid: i32, path: &str) -> PathBuf {
        let via_root = self.path(&format!("{pid}/root{path}"));
        if via_root.exists() {
            via_root
        } else {
            PathBuf::from(path)
        }
    }

    /// The value of one variable of the target's initial environment.
    pub fn environ_var(&self, pid: i32, name: &str) -> Option<String> {
        let data = std::fs::read(self.path(&format!("{pid}/environ"))).ok()?;
        let prefix = format!("{name}=");
        data.split(|b| *b == 0).find_map(|kv| {
            let kv = std::str::from_utf8(kv).ok()?;
            kv.strip_prefix(&prefix).map(str::to_string)
        })
    }

    /// `pid` and its descendants, parents before children, split into those that can be
    /// attached and those left out: zombies (exited, not yet reaped: nothing left to
    /// watch) and `exclude` with its own descendants (memwatch itself, when the tree it
    /// is asked for contains it).
    pub fn descendants(&self, pid: i32, exclude: Option<i32>) -> Result<Tree> {
        self.require_process(pid)?;
        let mut procs = Vec::new();
        let dir = std::fs::read_dir(&self.root).map_err(|source| AttachError::Read {
            path: self.root.clone(),
            source,
        })?;
        for entry in dir.flatten() {
            let Some(p) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if let Ok(text) = self.read(&format!("{p}/status")) {
                if let Some(pp) = field(&text, "PPid:").and_then(|v| v.parse::<i32>().ok()) {
                    procs.push((p, pp, parse_status(&text).state));
                }
            }
        }
        let mut tree = Tree::default();
        let mut queue = vec![pid];
        let mut i = 0;
        while i < queue.len() {
            let cur = queue[i];
            i += 1;
            let state = procs
                .iter()
                .find(|(p, _, _)| *p == cur)
                .map_or('?', |(_, _, s)| *s);
            if Some(cur) == exclude {
                tree.left_out.push((cur, LeftOut::Ourselves));
                continue; // nor its children (gdb, …)
            }
            if state == 'Z' || state == 'X' {
                tree.left_out.push((cur, LeftOut::Zombie));
                continue;
            }
            tree.attachable.push(cur);
            let mut kids: Vec<i32> = procs
                .iter()
                .filter(|(_, pp, _)| *pp == cur)
                .map(|(p, _, _)| *p)
                .collect();
            kids.sort_unstable();
            queue.extend(kids);
        }
        Ok(tree)
    }

    /// Maps an unreadable per-process file to "no such process" when the process is gone,
    /// and to [`AttachError::PtraceDenied`] when access is refused (/proc/PID/exe, maps
    /// and mem are guarded by the same ptrace access check).
    fn gone(&self, pid: i32, e: AttachError) -> AttachError {
        match &e {
            AttachError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                AttachError::NoSuchProcess { pid }
            }
            AttachError::Read { source, .. }
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                AttachError::PtraceDenied {
                    pid,
                    advice: self.explain_ptrace_denied(pid),
                }
            }
            _ => e,
        }
    }

    /// Explains an EPERM from PTRACE_SEIZE: which rule forbids it and what to change.
    pub fn explain_ptrace_denied(&self, pid: i32) -> String {
        let me = self.status(std::process::id() as i32).unwrap_or_default();
        let target = self.status(pid).unwrap_or_default();
        explain_denied(
            self.ptrace_scope(),
            me.cap_eff & (1 << CAP_SYS_PTRACE) != 0,
            me.uid,
            target.uid,
        )
    }
}

fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim())
}

/// A process's memory on one DRM device, from `/proc/PID/fdinfo` (the kernel's DRM
/// client usage stats; amdgpu reports them, also for ROCm processes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmUsage {
    pub driver: String,
    /// PCI address, e.g. `0000:03:00.0`.
    pub pdev: String,
    pub vram_bytes: u64,
    pub gtt_bytes: u64,
}

/// One fdinfo file's DRM fields: (driver, pdev, client id, vram bytes, gtt bytes).
pub fn parse_drm_fdinfo(text: &str) -> Option<(String, String, u64, u64, u64)> {
    let driver = field(text, "drm-driver:")?.to_string();
    let pdev = field(text, "drm-pdev:").unwrap_or("").to_string();
    let client = field(text, "drm-client-id:")?.parse().ok()?;
    // Older kernels: drm-memory-<region>; newer: drm-total-<region>. Values in KiB/MiB.
    let amount = |region: &str| {
        [
            format!("drm-memory-{region}:"),
            format!("drm-total-{region}:"),
        ]
        .iter()
        .find_map(|k| field(text, k))
        .and_then(|v| {
            let mut it = v.split_whitespace();
            let n: u64 = it.next()?.parse().ok()?;
            let mult = match it.next() {
                Some("KiB") => 1 << 10,
                Some("MiB") => 1 << 20,
                Some("GiB") => 1 << 30,
                _ => 1,
            };
            Some(n * mult)
        })
        .unwrap_or(0)
    };
    Some((driver, pdev, client, amount("vram"), amount("gtt")))
}

impl Proc {
    /// Device memory the process holds per DRM device, summed over its DRM clients
    /// (each client counted once although several descriptors may share it). Empty when
    /// the driver does not report (e.g. NVIDIA's) or /proc/PID/fdinfo is unreadable.
    pub fn drm_usage(&self, pid: i32) -> Vec<DrmUsage> {
        let dir = self.path(&format!("{pid}/fdinfo"));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut seen = std::collections::BTreeSet::new();
        let mut out: Vec<DrmUsage> = Vec::new();
        for e in entries.flatten() {
            let Ok(text) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            let Some((driver, pdev, client, vram, gtt)) = parse_drm_fdinfo(&text) else {
                continue;
            };
            if !seen.insert((pdev.clone(), client)) {
                continue;
            }
            match out
                .iter_mut()
                .find(|u| u.pdev == pdev && u.driver == driver)
            {
                Some(u) => {
                    u.vram_bytes += vram;
                    u.gtt_bytes += gtt;
                }
                None => out.push(DrmUsage {
                    driver,
                    pdev,
                    vram_bytes: vram,
                    gtt_bytes: gtt,
                }),
            }
        }
        out.sort_by(|a, b| a.pdev.cmp(&b.pdev));
        out
    }
}

/// Parses the text of /proc/PID/status.
pub fn parse_status(text: &str) -> Status {
    Status {
        name: field(text, "Name:").unwrap_or("").to_string(),
        state: field(text, "State:")
            .and_then(|v| v.chars().next())
            .unwrap_or('?'),
        tracer_pid: field(text, "TracerPid:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        uid: field(text, "Uid:")
            .and_then(|v| v.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(u32::MAX),
        cap_eff: field(text, "CapEff:")
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .unwrap_or(0),
    }
}

/// Parses the text of /proc/PID/maps (lines that do not parse are skipped).
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.split_whitespace();
            let range = it.next()?;
            let perms = it.next()?.to_string();
            let offset = u64::from_str_radix(it.next()?, 16).ok()?;
            let _dev = it.next()?;
            let _inode = it.next()?;
            let path = it.collect::<Vec<_>>().join(" ");
            let (s, e) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                perms,
                offset,
                path,
            })
        })
        .collect()
}

/// The advice for a denied ptrace, from the facts that decide it.
pub fn explain_denied(scope: Option<u32>, has_cap: bool, my_uid: u32, target_uid: u32) -> String {
    let cap_hint = "run memwatch as root or give it CAP_SYS_PTRACE \
                    (`sudo setcap cap_sys_ptrace+ep $(command -v memwatch)`; in a container: \
                    `docker run --cap-add=SYS_PTRACE`)";
    match scope {
        Some(3) => "kernel.yama.ptrace_scope is 3 (no process may be traced, not even by root; \
                    only a reboot resets it); start the program under `memwatch run` instead"
            .to_string(),
        Some(2) if !has_cap => format!(
            "kernel.yama.ptrace_scope is 2 (only processes with CAP_SYS_PTRACE may trace): {cap_hint}"
        ),
        Some(1) if !has_cap => format!(
            "kernel.yama.ptrace_scope is 1 (a process may only trace its own descendants): \
             `sudo sysctl -w kernel.yama.ptrace_scope=0` to allow it until reboot, or {cap_hint}"
        ),
        _ if my_uid != target_uid && !has_cap => format!(
            "the process belongs to uid {target_uid} and memwatch runs as uid {my_uid} without \
             CAP_SYS_PTRACE: run it as the same user, or {cap_hint}"
        ),
        _ if !has_cap => format!(
            "the kernel refused (EPERM) although uids match; the process may be non-dumpable \
             (setuid, prctl PR_SET_DUMPABLE=0) or a security module (AppArmor/SELinux/seccomp) \
             forbids ptrace: {cap_hint}"
        ),
        _ => "the kernel refused (EPERM) even with CAP_SYS_PTRACE; a security module \
              (AppArmor/SELinux) or seccomp policy forbids ptrace here"
            .to_string(),
    }
}

fn machine_name(m: u16) -> &'static str {
    match m {
        3 => "x86 (32-bit)",
        40 => "ARM (32-bit)",
        183 => "AArch64",
        243 => "RISC-V",
        21 => "PowerPC64",
        _ => "non-x86-64",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields() {
        let st = parse_status(
            "Name:\tpython3\nState:\tS\nTracerPid:\t4242\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000080000\n",
        );
        assert_eq!(st.name, "python3");
        assert_eq!(st.tracer_pid, 4242);
        assert_eq!(st.uid, 1000);
        assert_eq!(st.cap_eff, 1 << CAP_SYS_PTRACE);
    }

    #[test]
    fn maps_lines() {
        let m = parse_maps(
            "7f00-7f10 r-xp 00002000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
             7ffd-7ffe rw-p 00000000 00:00 0 [stack]\n7a-7b rw-p 0 0 0\n",
        );
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].start, 0x7f00);
        assert_eq!(m[0].offset, 0x2000);
        assert!(m[0].executable());
        assert_eq!(m[0].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(m[1].path, "[stack]");
        assert_eq!(m[2].path, "");
    }

    #[test]
    fn denied_advice_names_the_setting() {
        let a = explain_denied(Some(1), false, 1000, 1000);
        assert!(
            a.contains("ptrace_scope is 1") && a.contains("sysctl -w kernel.yama.ptrace_scope=0"),
            "{a}"
        );
        let a = explain_denied(Some(2), false, 1000, 1000);
        assert!(
            a.contains("ptrace_scope is 2") && a.contains("CAP_SYS_PTRACE"),
            "{a}"
        );
        let a = explain_denied(Some(3), true, 0, 0);
        assert!(a.contains("reboot"), "{a}");
        let a = explain_denied(None, false, 1000, 0);
        assert!(a.contains("uid 0") && a.contains("setcap"), "{a}");
    }

    #[test]
    fn simulated_proc_tree() {
        let dir = tempfile::tempdir().unwrap();
        let w = |rel: &str, text: &str| {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w("sys/kernel/yama/ptrace_scope", "1\n");
        w("10/status", "Name:\tlauncher\nPPid:\t1\nTracerPid:\t0\n");
        w("11/status", "Name:\tworker\nPPid:\t10\nTracerPid:\t77\n");
        w("12/status", "Name:\tworker\nPPid:\t10\nTracerPid:\t0\n");
        w("13/status", "Name:\tgrandkid\nPPid:\t12\nTracerPid:\t0\n");
        w(
            "14/status",
            "Name:\tdone\nState:\tZ (zombie)\nPPid:\t10\nTracerPid:\t0\n",
        );
        w(
            "15/status",
            "Name:\tmemwatch\nState:\tS (sleeping)\nPPid:\t13\nTracerPid:\t0\n",
        );
        w(
            "16/status",
            "Name:\tgdb\nState:\tS (sleeping)\nPPid:\t15\nTracerPid:\t0\n",
        );
        w("77/status", "Name:\tgdb\nPPid:\t1\nTracerPid:\t0\n");
        // Two descriptors of one amdgpu client, one of another client, a non-DRM fd.
        let amd = |client: u32, vram: &str| {
            format!(
                "pos:\t0\nflags:\t02100002\ndrm-driver:\tamdgpu\ndrm-pdev:\t0000:03:00.0\n\
                 drm-client-id:\t{client}\ndrm-memory-vram:\t{vram}\ndrm-memory-gtt:\t2048 KiB\n"
            )
        };
        w("12/fdinfo/5", &amd(18, "1048576 KiB"));
        w("12/fdinfo/6", &amd(18, "1048576 KiB"));
        w("12/fdinfo/7", &amd(19, "512 MiB"));
        w("12/fdinfo/1", "pos:\t0\nflags:\t02\n");
        let p = Proc::new(dir.path());
        assert_eq!(p.ptrace_scope(), Some(1));
        assert_eq!(
            p.descendants(10, None).unwrap().attachable,
            vec![10, 11, 12, 13, 15, 16]
        );
        let tree = p.descendants(10, Some(15)).unwrap();
        assert_eq!(tree.attachable, vec![10, 11, 12, 13]);
        assert_eq!(
            tree.left_out,
            vec![(14, LeftOut::Zombie), (15, LeftOut::Ourselves)]
        );
        let err = p.require_untraced(11).unwrap_err().to_string();
        assert!(err.contains("traced by pid 77 (gdb)"), "{err}");
        assert_eq!(
            p.drm_usage(12),
            vec![DrmUsage {
                driver: "amdgpu".into(),
                pdev: "0000:03:00.0".into(),
                vram_bytes: (1 << 30) + (512 << 20),
                gtt_bytes: 2 * 2048 * 1024,
            }]
        );
        assert!(p.drm_usage(13).is_empty());
        assert!(matches!(
            p.require_process(99),
            Err(AttachError::NoSuchProcess { pid: 99 })
        ));
    }
}
