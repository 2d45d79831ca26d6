//! What a run is called and when it started, the one rule every page uses: the title
//! from the run's tags or command (not a machine-made key such as
//! `import:exec_oom.mwcap:402015ca64443681`), the start time from the first process's
//! wall clock (else the earliest one, else when the run was stored), and which runs were
//! started together by one launcher (a job: processes of one node with the same parent
//! pid, started within [`JOB_WINDOW_NS`] of each other, each forwarded as its own run).

use std::collections::{BTreeMap, HashMap};

use crate::db::{Store, StoreError};

/// Runs whose first processes share a parent and started this close belong to one job.
pub const JOB_WINDOW_NS: i64 = 60_000_000_000;

/// Longest title shown before it is cut with "…".
const TITLE_CHARS: usize = 90;

/// A run's name and start as pages show them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The tag `title`, a run key the user chose, else the command.
    pub title: String,
    /// The other one of key and command (empty when they are the same).
    pub subtitle: String,
    /// Unix ns of the start (0: not known).
    pub started_unix_ns: i64,
    /// "started" or "stored" (no process recorded its start: when it was stored).
    pub started_basis: &'static str,
    /// (node, parent pid, start) of the run's first process: the job it belongs to.
    pub launcher: Option<(String, i64, i64)>,
}

/// What [`identify`] reads of a run.
pub struct RunFacts<'a> {
    pub run_key: &'a str,
    pub node: &'a str,
    pub wall_anchor_unix_ns: i64,
    pub created_unix_ns: i64,
    pub tags: &'a [(String, String)],
    /// (pid, ppid, wall anchor, argv) of its processes.
    pub processes: &'a [ProcessFacts],
}

/// A process of a run, as [`identify`] reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ProcessFacts {
    pub run_id: i64,
    pub pid: i64,
    pub ppid: i64,
    pub mono_anchor_ns: i64,
    pub wall_anchor_unix_ns: i64,
    pub argv: String,
}

/// Whether a run key was made by a tool rather than chosen: `import:FILE:HEX16` (import,
/// `memwatch run --db`), `NODE:PID:DIGITS` (the agent), `default`, empty.
pub fn machine_key(key: &str) -> bool {
    let parts: Vec<&str> = key.rsplitn(3, ':').collect();
    let hex16 = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    key.is_empty()
        || key == "default"
        || (key.starts_with("import:") && parts.first().is_some_and(|h| hex16(h)))
        || (parts.len() == 3 && digits(parts[0]) && digits(parts[1]))
}

/// A command line as a title: the program's file name, a Python interpreter's script by
/// its file name, the arguments as given; a PyTorch snapshot run by its file.
pub fn command_title(argv: &[String]) -> String {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let Some(first) = argv.first() else {
        return String::new();
    };
    if first == crate::codes::SNAPSHOT_ARGV0 {
        return format!(
            "PyTorch snapshot {}",
            argv.get(1).map_or("", |s| s.as_str())
        );
    }
    let mut words = vec![base(first)];
    let mut rest = argv[1..].iter();
    if words[0].starts_with("python") {
        if let Some(script) = rest.next() {
            words.push(if script.starts_with('-') {
                script.clone()
            } else {
                base(script)
            });
        }
    }
    words.extend(rest.cloned());
    cut(&words.join(" "))
}

fn cut(s: &str) -> String {
    if s.chars().count() <= TITLE_CHARS {
        return s.to_string();
    }
    let mut out: String = s.chars().take(TITLE_CHARS - 1).collect();
    out.push('…');
    out
}

/// The run's first process: the one that started first among those whose parent is not
/// in the run (the launcher's child), else the first.
fn first_process(ps: &[ProcessFacts]) -> Option<&ProcessFacts> {
    let roots = ps.iter().filter(|p| !ps.iter().any(|q| q.pid == p.ppid));
    roots
        .min_by_key(|p| (p.mono_anchor_ns, p.pid))
        .or_else(|| ps.iter().min_by_key(|p| (p.mono_anchor_ns, p.pid)))
}

/// The rule (see the module docs).
pub fn identify(r: &RunFacts<'_>) -> Identity {
    let first = first_process(r.processes);
    let command = first
        .map(|p| command_title(&serde_json::from_str::<Vec<String>>(&p.argv).unwrap_or_default()))
        .unwrap_or_default();
    let tag = |k: &str| {
        r.tags
            .iter()
            .find(|(t, v)| t == k && !v.trim().is_empty())
            .map(|(_, v)| cut(v.trim()))
    };
    let chosen_key = (!machine_key(r.run_key)).then(|| cut(r.run_key));
    let (title, subtitle) = match (tag("title"), chosen_key, command.is_empty()) {
        (Some(t), Some(k), _) => (t, k),
        (Some(t), None, false) => (t, command.clone()),
        (Some(t), None, true) => (t, r.run_key.to_string()),
        (None, Some(k), false) if k != command => (k, command.clone()),
        (None, Some(k), _) => (k, String::new()),
        (None, None, false) => (command.clone(), r.run_key.to_string()),
        (None, None, true) => (r.run_key.to_string(), String::new()),
    };
    let process_wall = r
        .processes
        .iter()
        .map(|p| p.wall_anchor_unix_ns)
        .filter(|w| *w > 0)
        .min();
    let (started_unix_ns, started_basis) = if r.wall_anchor_unix_ns > 0 {
        (r.wall_anchor_unix_ns, "started")
    } else if let Some(w) = process_wall {
        (w, "started")
    } else {
        (r.created_unix_ns, "stored")
    };
    Identity {
        title,
        subtitle,
        started_unix_ns,
        started_basis,
        launcher: first.map(|p| (r.node.to_string(), p.ppid, p.wall_anchor_unix_ns)),
    }
}

/// Jobs among runs: groups of at least two runs whose launchers (node, parent pid) are
/// the same and whose starts lie within [`JOB_WINDOW_NS`] of the group's first. Each
/// group's run ids in start order.
pub fn jobs(ids: &BTreeMap<i64, Identity>) -> Vec<Vec<i64>> {
    let mut by_parent: BTreeMap<(String, i64), Vec<(i64, i64)>> = BTreeMap::new();
    for (id, ident) in ids {
        if let Some((node, ppid, start)) = &ident.launcher {
            // pid 0/1 parents (init, a container's entry point, a snapshot) are no launcher.
            if *ppid > 1 {
                by_parent
                    .entry((node.clone(), *ppid))
                    .or_default()
                    .push((*start, *id));
            }
        }
    }
    let mut out = Vec::new();
    for (_, mut runs) in by_parent {
        runs.sort_unstable();
        let mut group: Vec<i64> = Vec::new();
        let mut first = 0;
        for (start, id) in runs {
            if group.is_empty() || start - first > JOB_WINDOW_NS {
                if group.len() > 1 {
                    out.push(std::mem::take(&mut group));
                }
                group.clear();
                first = start;
            }
            group.push(id);
        }
        if group.len() > 1 {
            out.push(group);
        }
    }
    out.sort();
    out
}

impl Store {
    /// The `memwatch.tag` annotations of runs (recorded before their first event): per
    /// run, (key, value) in time order, from its first 256 annotations.
    pub(crate) async fn run_tags(
        &self,
        runs: &[i64],
    ) -> Result<HashMap<i64, Vec<(String, String)>>, StoreError> {
        let mut out: HashMap<i64, Vec<(String, String)>> = HashMap::new();
        for &run in runs {
            let texts: Vec<String> = sqlx::query_scalar(
                "SELECT text FROM (SELECT text, ts_ns, id FROM annotations WHERE run_id = $1 \
                 ORDER BY ts_ns, id LIMIT 256) a WHERE text LIKE 'memwatch.tag %' \
                 ORDER BY ts_ns, id",
            )
            .bind(run)
            .fetch_all(&self.pool)
            .await?;
            let tags = texts
                .iter()
                .filter_map(|t| t.strip_prefix("memwatch.tag ")?.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            out.insert(run, tags);
        }
        Ok(out)
    }

    /// The identity of each of `runs` (one query for their processes, one per run for its
    /// tags).
    pub(crate) async fn identities(
        &self,
        runs: &[(i64, String, String, i64, i64)],
    ) -> Result<BTreeMap<i64, Identity>, StoreError> {
        let ids: Vec<i64> = runs.iter().map(|r| r.0).collect();
        let procs = self.run_process_facts(&ids).await?;
        let tags = self.run_tags(&ids).await?;
        let mut out = BTreeMap::new();
        for (id, key, node, wall, created) in runs {
            let facts = RunFacts {
                run_key: key,
                node,
                wall_anchor_unix_ns: *wall,
                created_unix_ns: *created,
                tags: tags.get(id).map_or(&[], |t| t.as_slice()),
                processes: procs.get(id).map_or(&[], |p| p.as_slice()),
            };
            out.insert(*id, identify(&facts));
        }
        Ok(out)
    }

    /// The other runs of `run`'s job: runs of the same node whose processes have the same
    /// parent and started within [`JOB_WINDOW_NS`] of `start` (unix ns), by id.
    pub(crate) async fn job_siblings(
        &self,
        run: i64,
        ppid: i64,
        start: i64,
    ) -> Result<Vec<i64>, StoreError> {
        if ppid <= 1 {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT p.run_id FROM processes p JOIN runs r ON r.id = p.run_id \
             WHERE r.node_id = (SELECT node_id FROM runs WHERE id = $1) AND p.ppid = $2 \
             AND p.wall_anchor_unix_ns >= $3 AND p.wall_anchor_unix_ns <= $4 \
             AND p.run_id <> $1 ORDER BY p.run_id LIMIT 64",
        )
        .bind(run)
        .bind(ppid)
        .bind(start.saturating_sub(JOB_WINDOW_NS))
        .bind(start.saturating_add(JOB_WINDOW_NS))
        .fetch_all(&self.pool)
        .await?)
    }

    /// The processes of runs (for [`identify`]), by run.
    pub(crate) async fn run_process_facts(
        &self,
        runs: &[i64],
    ) -> Result<HashMap<i64, Vec<ProcessFacts>>, StoreError> {
        let mut out: HashMap<i64, Vec<ProcessFacts>> = HashMap::new();
        for group in runs.chunks(256) {
            let marks: Vec<String> = (1..=group.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT run_id, pid, ppid, mono_anchor_ns, wall_anchor_unix_ns, argv \
                 FROM processes WHERE run_id IN ({}) ORDER BY run_id, mono_anchor_ns, pid",
                marks.join(", ")
            );
            let mut q = sqlx::query_as::<_, ProcessFacts>(&sql);
            for id in group {
                q = q.bind(*id);
            }
            for p in q.fetch_all(&self.pool).await? {
                out.entry(p.run_id).or_default().push(p);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_(run: i64, pid: i64, ppid: i64, wall: i64, argv: &[&str]) -> ProcessFacts {
        ProcessFacts {
            run_id: run,
            pid,
            ppid,
            mono_anchor_ns: wall,
            wall_anchor_unix_ns: wall,
            argv: serde_json::to_string(argv).unwrap(),
        }
    }

    #[test]
    fn machine_made_keys_are_told_from_chosen_ones() {
        for k in [
            "import:exec_oom.mwcap:402015ca64443681",
            "import:memwatch-python3-20261122T101010Z.mwcap:00000000deadbeef",
            "vm:2530:1795705362952077318",
            "gpu-node-1:7:1",
            "",
            "default",
        ] {
            assert!(machine_key(k), "{k}");
        }
        for k in [
            "nightly-42",
            "jax_leak_bfc",
            "import:mine",
            "a:b:c",
            "train:step:x1",
        ] {
            assert!(!machine_key(k), "{k}");
        }
    }

    #[test]
    fn commands_become_titles() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            command_title(&s(&[
                "/opt/venv/bin/python3",
                "/work/tests/jax_worker.py",
                "train",
                "5"
            ])),
            "python3 jax_worker.py train 5"
        );
        assert_eq!(
            command_title(&s(&["python", "-m", "pkg.main"])),
            "python -m pkg.main"
        );
        assert_eq!(command_title(&s(&["/usr/bin/env"])), "env");
        assert_eq!(
            command_title(&s(&["pytorch-memory-snapshot", "leak.pickle"])),
            "PyTorch snapshot leak.pickle"
        );
        let long = command_title(&s(&["prog", &"x".repeat(200)]));
        assert_eq!(long.chars().count(), TITLE_CHARS);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn title_and_start_follow_the_rule() {
        let ps = [
            proc_(1, 11, 10, 0, &["python3", "/a/train.py", "--steps", "3"]),
            proc_(1, 12, 11, 5_000, &["python3", "/a/worker.py"]),
        ];
        let facts = |key: &'static str, tags: &'static [(String, String)]| RunFacts {
            run_key: key,
            node: "n",
            wall_anchor_unix_ns: 0,
            created_unix_ns: 99,
            tags,
            processes: &[],
        };
        // The command of the launcher's child, the machine key below it.
        let mut f = facts("import:x.mwcap:0123456789abcdef", &[]);
        f.processes = &ps;
        let id = identify(&f);
        assert_eq!(id.title, "python3 train.py --steps 3");
        assert_eq!(id.subtitle, "import:x.mwcap:0123456789abcdef");
        // The first process with a wall clock gives the start.
        assert_eq!((id.started_unix_ns, id.started_basis), (5_000, "started"));
        assert_eq!(id.launcher, Some(("n".into(), 10, 0)));
        // A chosen key wins over the command; a title tag over both.
        f.run_key = "nightly-42";
        assert_eq!(identify(&f).title, "nightly-42");
        let tags = vec![("title".to_string(), "resnet sweep 3".to_string())];
        f.tags = &tags;
        let id = identify(&f);
        assert_eq!(
            (id.title.as_str(), id.subtitle.as_str()),
            ("resnet sweep 3", "nightly-42")
        );
        // No process: the key, and the time it was stored.
        let id = identify(&facts("vm:1:2", &[]));
        assert_eq!(id.title, "vm:1:2");
        assert_eq!((id.started_unix_ns, id.started_basis), (99, "stored"));
    }

    #[test]
    fn runs_of_one_launcher_form_a_job() {
        let ident = |node: &str, ppid: i64, start: i64| Identity {
            title: String::new(),
            subtitle: String::new(),
            started_unix_ns: start,
            started_basis: "started",
            launcher: Some((node.to_string(), ppid, start)),
        };
        let mut ids = BTreeMap::new();
        ids.insert(1, ident("vm", 2527, 1_000));
        ids.insert(2, ident("vm", 2527, 9_000));
        ids.insert(3, ident("vm", 2527, 1_000 + 2 * JOB_WINDOW_NS));
        ids.insert(4, ident("other", 2527, 1_000));
        ids.insert(5, ident("vm", 1, 1_000));
        ids.insert(6, ident("vm", 1, 1_000));
        assert_eq!(jobs(&ids), vec![vec![1, 2]]);
    }
}
