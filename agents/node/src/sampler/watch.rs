//! Which pids belong to the watched process tree: the roots (the command `memwatch run`
//! started, the processes `memwatch attach` attached to) and every descendant, found by
//! following each pid's parent in `/proc/PID/stat` up to a root or to pid 1.
//!
//! A process left behind and reparented to `memwatch run` (its subreaper) has memwatch
//! as parent: memwatch's own pid counts as a root for `run` for that reason.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The roots of the watched tree; set after the processes exist, read by the sampler.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    roots: Arc<Mutex<Vec<u32>>>,
    proc_root: PathBuf,
}

impl Watch {
    /// Nothing watched yet (the agent's node view stays so).
    pub fn new() -> Self {
        Self::at(PathBuf::from("/proc"))
    }

    /// Reads processes under `proc_root` instead of `/proc` (tests).
    pub fn at(proc_root: PathBuf) -> Self {
        Self {
            roots: Arc::default(),
            proc_root,
        }
    }

    /// Adds a root.
    pub fn add_root(&self, pid: u32) {
        let mut r = self.roots.lock().unwrap_or_else(|p| p.into_inner());
        if !r.contains(&pid) {
            r.push(pid);
        }
    }

    /// A resolver for one reading: parents read once per pid.
    pub fn resolver(&self) -> Resolver<'_> {
        Resolver {
            roots: self.roots.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            proc_root: &self.proc_root,
            known: HashMap::new(),
        }
    }
}

/// Answers "is this pid in the tree" for the pids of one reading.
pub struct Resolver<'a> {
    roots: Vec<u32>,
    proc_root: &'a std::path::Path,
    known: HashMap<u32, bool>,
}

/// The parent pid in `/proc/PID/stat` (after the command's closing parenthesis: state,
/// then ppid).
fn parent(proc_root: &std::path::Path, pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

impl Resolver<'_> {
    /// Whether `pid` is a root or descends from one.
    pub fn contains(&mut self, pid: u32) -> bool {
        let mut chain = Vec::new();
        let mut at = pid;
        let found = loop {
            if self.roots.contains(&at) {
                break true;
            }
            if let Some(&k) = self.known.get(&at) {
                break k;
            }
            chain.push(at);
            match parent(self.proc_root, at) {
                Some(p) if p > 1 && p != at && chain.len() < 4096 => at = p,
                _ => break false,
            }
        };
        for p in chain {
            self.known.insert(p, found);
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_entry(root: &std::path::Path, pid: u32, comm: &str, ppid: u32) {
        let d = root.join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("stat"),
            format!("{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 0"),
        )
        .unwrap();
    }

    #[test]
    fn descendants_of_the_roots_and_nothing_else() {
        let t = tempfile::tempdir().unwrap();
        proc_entry(t.path(), 100, "bash", 1);
        proc_entry(t.path(), 200, "python3", 100);
        // A command with a space and a parenthesis in its name.
        proc_entry(t.path(), 300, "worker (1) x", 200);
        proc_entry(t.path(), 400, "other", 1);
        let w = Watch::at(t.path().to_path_buf());
        assert!(!w.resolver().contains(300), "no root yet");
        w.add_root(200);
        let mut r = w.resolver();
        assert!(r.contains(200) && r.contains(300));
        assert!(!r.contains(100) && !r.contains(400));
        // A pid that is gone (or in another namespace) is not in the tree.
        assert!(!r.contains(999));
        // Answers are cached per resolver, and stay the same.
        assert!(r.contains(300) && !r.contains(400));
    }
}
