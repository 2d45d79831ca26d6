//! Which run a captured process belongs to: a process whose parent is captured (and
//! still running) joins its parent's run, an image that replaces a captured process
//! (exec, same pid) keeps its run, any other process starts a run of its own.
//!
//! Processes are known by pid namespace + pid: each container numbers its pids from 1,
//! so pid alone would put programs of different containers into one run. The namespace
//! is the inode of `/proc/PID/ns/pid` the shim sends in `process_start` (`pid_ns`;
//! shims that do not send it share namespace 0). An entry lives as long as the
//! connection of the process image that made it: the table holds only running
//! processes.

use std::collections::HashMap;

use memwatch_wire::ProcessStart;

use crate::sink::ConnId;

/// A process: its pid namespace and pid.
type ProcKey = (u64, u32);

struct Entry {
    run: String,
    /// The connection of the image that registered it (a later exec replaces it).
    conn: ConnId,
}

/// The pid → run table of running captured processes.
#[derive(Default)]
pub struct ProcessRuns {
    procs: HashMap<ProcKey, Entry>,
    conns: HashMap<ConnId, ProcKey>,
}

impl ProcessRuns {
    /// The run of the process `p` starting on connection `conn`; a new run is named by
    /// `new_run(p)`.
    pub fn start(
        &mut self,
        conn: ConnId,
        p: &ProcessStart,
        new_run: impl FnOnce(&ProcessStart) -> String,
    ) -> String {
        let ns = p.pid_ns.unwrap_or(0);
        let me = (ns, p.pid);
        let run = self
            .procs
            .get(&(ns, p.ppid))
            .filter(|_| p.ppid != p.pid)
            .or_else(|| self.procs.get(&me))
            .map(|e| e.run.clone())
            .unwrap_or_else(|| new_run(p));
        if let Some(old) = self.conns.insert(conn, me) {
            if old != me {
                self.forget(conn, old);
            }
        }
        self.procs.insert(
            me,
            Entry {
                run: run.clone(),
                conn,
            },
        );
        run
    }

    /// The connection `conn` ended: its process image is gone.
    pub fn closed(&mut self, conn: ConnId) {
        if let Some(key) = self.conns.remove(&conn) {
            self.forget(conn, key);
        }
    }

    fn forget(&mut self, conn: ConnId, key: ProcKey) {
        if self.procs.get(&key).is_some_and(|e| e.conn == conn) {
            self.procs.remove(&key);
        }
    }

    /// Processes held.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(pid: u32, ppid: u32, ns: Option<u64>, wall: u64) -> ProcessStart {
        ProcessStart {
            pid,
            ppid,
            wall_anchor_unix_ns: wall,
            pid_ns: ns,
            ..ProcessStart::default()
        }
    }

    fn named(p: &ProcessStart) -> String {
        format!("n:{}:{}", p.pid, p.wall_anchor_unix_ns)
    }

    #[test]
    fn containers_with_the_same_pids_get_runs_of_their_own() {
        let mut t = ProcessRuns::default();
        // Container A: pid 1 a program; container B: pid 1 a shell, its child pid 7.
        let a = t.start(ConnId(1), &start(1, 0, Some(4026532001), 10), named);
        let b = t.start(ConnId(2), &start(1, 0, Some(4026532777), 20), named);
        let b7 = t.start(ConnId(3), &start(7, 1, Some(4026532777), 30), named);
        // Container A's pid 7, child of its pid 1.
        let a7 = t.start(ConnId(4), &start(7, 1, Some(4026532001), 40), named);
        assert_ne!(a, b);
        assert_eq!(b7, b, "a child joins its parent of the same namespace");
        assert_eq!(a7, a);
        assert_eq!(t.len(), 4, "same pid, other namespace: two processes");
    }

    #[test]
    fn entries_leave_when_their_process_ends_and_exec_keeps_the_run() {
        let mut t = ProcessRuns::default();
        let ns = Some(4026531836);
        let parent = t.start(ConnId(1), &start(100, 1, ns, 1), named);
        let child = t.start(ConnId(2), &start(101, 100, ns, 2), named);
        assert_eq!(child, parent);
        // The child execs: the new image (new connection) keeps the run, and the old
        // image's connection closing after that does not remove the new one.
        let exec = t.start(ConnId(3), &start(101, 100, ns, 3), named);
        assert_eq!(exec, parent);
        t.closed(ConnId(2));
        assert_eq!(t.len(), 2);
        t.closed(ConnId(3));
        t.closed(ConnId(1));
        assert!(t.is_empty(), "the table holds only running processes");
        // pid 100 reused later by an unrelated program: a new run.
        let reused = t.start(ConnId(4), &start(101, 100, ns, 9), named);
        assert_ne!(reused, parent);
        for i in 0..10_000u32 {
            t.start(ConnId(10 + i as u64), &start(1000 + i, 1, ns, 0), named);
            t.closed(ConnId(10 + i as u64));
        }
        assert_eq!(t.len(), 1, "a long-lived agent's table does not grow");
    }

    #[test]
    fn shims_without_a_namespace_behave_as_before() {
        let mut t = ProcessRuns::default();
        let p = t.start(ConnId(1), &start(5, 1, None, 1), named);
        let c = t.start(ConnId(2), &start(6, 5, None, 2), named);
        assert_eq!(p, c);
        assert_eq!(p, "n:5:1");
    }
}
