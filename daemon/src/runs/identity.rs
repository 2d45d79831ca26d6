//! What a run is called and when it started, the one rule every page uses: the title
//! from the run's tags or command (not a machine-made key such as
//! `import:exec_oom.mwcap:402015ca64443681`), the start time from the first process's
//! wall clock (else the earliest one, else when the run was stored), and which runs were
//! started together by one launcher (a job, [`same_job`]: each worker forwarded as its
//! own run).

use std::collections::{BTreeMap, HashMap};

use crate::db::{Store, StoreError};

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
    /// The run's first process, as the job rule reads it.
    pub launcher: Option<Launch>,
}

/// A run's first process as the job rule ([`same_job`]) reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The node the run was stored under (the host name the capture gave).
    pub node: String,
    pub ppid: i64,
    pub pid: i64,
    /// When it was alive, unix ns: its start (0: not known) and its end (its exit, else
    /// the run's last event).
    pub start_unix_ns: i64,
    pub end_unix_ns: i64,
}

/// The job rule: two runs were started by one launcher when their first processes ran
/// on one node, have the same parent pid (above 1: init, a container's entry point or a
/// snapshot is no launcher), are two processes (not one process recorded twice, as an
/// attach beside the full recording) and were alive at the same time. A pid names one
/// process at a time on a host, so two processes alive together with one parent pid
/// have one parent. Processes whose lifetimes do not meet may have had different
/// parents that got the same pid: pids are reused, and fresh containers and VMs (every
/// VM of a fleet may be called `vm`) hand out the same low pids, on any day.
pub fn same_job(a: &Launch, b: &Launch) -> bool {
    let known = |l: &Launch| l.ppid > 1 && l.start_unix_ns > 0;
    known(a)
        && known(b)
        && a.node == b.node
        && a.ppid == b.ppid
        && a.pid != b.pid
        && a.start_unix_ns <= b.end_unix_ns
        && b.start_unix_ns <= a.end_unix_ns
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
    /// Its end on the monotonic clock of `mono_anchor_ns`: its exit, else the run's
    /// last event.
    pub end_mono_ns: i64,
    pub argv: String,
}

impl ProcessFacts {
    /// The process as the job rule reads it, on `node`.
    fn launch(&self, node: &str) -> Launch {
        let alive = self.end_mono_ns.saturating_sub(self.mono_anchor_ns).max(0);
        Launch {
            node: node.to_string(),
            ppid: self.ppid,
            pid: self.pid,
            start_unix_ns: self.wall_anchor_unix_ns,
            end_unix_ns: self.wall_anchor_unix_ns.saturating_add(alive),
        }
    }
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
        launcher: first.map(|p| p.launch(r.node)),
    }
}

/// Jobs among runs: the groups of at least two runs that [`same_job`] links, directly
/// or through another run of the group. Each group's run ids in start order.
pub fn jobs(ids: &BTreeMap<i64, Identity>) -> Vec<Vec<i64>> {
    let runs: Vec<(i64, &Launch)> = ids
        .iter()
        .filter_map(|(id, i)| Some((*id, i.launcher.as_ref()?)))
        .collect();
    // Union-find over the linked pairs (only runs of one node and parent can link).
    let mut root: Vec<usize> = (0..runs.len()).collect();
    fn find(root: &mut [usize], mut i: usize) -> usize {
        while root[i] != i {
            root[i] = root[root[i]];
            i = root[i];
        }
        i
    }
    let mut by_parent: BTreeMap<(&str, i64), Vec<usize>> = BTreeMap::new();
    for (k, (_, l)) in runs.iter().enumerate() {
        by_parent.entry((&l.node, l.ppid)).or_default().push(k);
    }
    for members in by_parent.values() {
        for (x, &a) in members.iter().enumerate() {
            for &b in &members[x + 1..] {
                if same_job(runs[a].1, runs[b].1) {
                    let (ra, rb) = (find(&mut root, a), find(&mut root, b));
                    root[ra.max(rb)] = ra.min(rb);
                }
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<(i64, i64)>> = BTreeMap::new();
    for (k, (id, l)) in runs.iter().enumerate() {
        let r = find(&mut root, k);
        groups.entry(r).or_default().push((l.start_unix_ns, *id));
    }
    let mut out: Vec<Vec<i64>> = groups
        .into_values()
        .filter(|g| g.len() > 1)
        .map(|mut g| {
            g.sort_unstable();
            g.into_iter().map(|(_, id)| id).collect()
        })
        .collect();
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

    /// The other runs of `run`'s job (its first process `launch`): the runs of its node
    /// with a process of the same parent pid whose first process [`same_job`] links to
    /// it, by id (at most 64).
    pub(crate) async fn job_siblings(
        &self,
        run: i64,
        launch: &Launch,
    ) -> Result<Vec<i64>, StoreError> {
        if launch.ppid <= 1 {
            return Ok(Vec::new());
        }
        let candidates: Vec<i64> = sqlx::query_scalar(
            "SELECT DISTINCT p.run_id FROM processes p JOIN runs r ON r.id = p.run_id \
             WHERE r.node_id = (SELECT node_id FROM runs WHERE id = $1) AND p.ppid = $2 \
             AND p.run_id <> $1 ORDER BY p.run_id LIMIT 256",
        )
        .bind(run)
        .bind(launch.ppid)
        .fetch_all(&self.pool)
        .await?;
        let procs = self.run_process_facts(&candidates).await?;
        Ok(candidates
            .into_iter()
            .filter(|id| {
                procs
                    .get(id)
                    .and_then(|ps| first_process(ps))
                    .is_some_and(|p| same_job(launch, &p.launch(&launch.node)))
            })
            .take(64)
            .collect())
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
                "SELECT p.run_id, p.pid, p.ppid, p.mono_anchor_ns, p.wall_anchor_unix_ns, \
                 COALESCE(p.end_ts_ns, r.last_ts_ns) AS end_mono_ns, p.argv \
                 FROM processes p JOIN runs r ON r.id = p.run_id WHERE p.run_id IN ({}) \
                 ORDER BY p.run_id, p.mono_anchor_ns, p.pid",
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
            end_mono_ns: wall + 7_000,
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
        let launch = Launch {
            node: "n".into(),
            ppid: 10,
            pid: 11,
            start_unix_ns: 0,
            end_unix_ns: 7_000,
        };
        assert_eq!(id.launcher, Some(launch));
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

    const S: i64 = 1_000_000_000;
    const DAY: i64 = 86_400 * S;

    /// A run whose first process `pid` (parent `ppid`, on `node`) lived over
    /// [start, end] seconds after a fixed day.
    fn run(node: &str, ppid: i64, pid: i64, (start, end): (i64, i64)) -> Identity {
        let t0 = 1_795_894_850 * S;
        Identity {
            title: String::new(),
            subtitle: String::new(),
            started_unix_ns: t0 + start * S,
            started_basis: "started",
            launcher: Some(Launch {
                node: node.to_string(),
                ppid,
                pid,
                start_unix_ns: t0 + start * S,
                end_unix_ns: t0 + end * S,
            }),
        }
    }

    #[test]
    fn runs_of_one_launcher_form_a_job() {
        let mut ids = BTreeMap::new();
        // Two workers of one launcher, alive together (the H100 fleet's jax_launch.py).
        ids.insert(1, run("vm", 2527, 2530, (0, 5)));
        ids.insert(2, run("vm", 2527, 2531, (0, 6)));
        // A third started 2 minutes later while the first still ran (a restarted
        // worker of a long job): the same launcher.
        ids.insert(3, run("vm", 2527, 2540, (120, 600)));
        ids.insert(11, run("vm", 2527, 2530, (0, 700)));
        // Another node, and init / a container's entry point as parent: no job.
        ids.insert(4, run("other", 2527, 2533, (0, 5)));
        ids.insert(5, run("vm", 1, 20, (0, 5)));
        ids.insert(6, run("vm", 1, 21, (0, 5)));
        // The same parent pid on the same host name, on different days (fresh VMs or
        // containers all called `vm` hand out the same low pids): no job.
        ids.insert(7, run("vm", 900, 906, (0, 30)));
        ids.insert(8, run("vm", 900, 907, (DAY / S, DAY / S + 30)));
        // The same parent pid 30 s later, after the first had exited: its launcher may
        // have exited too and its pid been handed out again.
        ids.insert(9, run("vm", 4000, 4001, (0, 10)));
        ids.insert(10, run("vm", 4000, 4002, (30, 40)));
        // One process recorded twice (an attach beside the full recording): one
        // process, not a job of two.
        ids.insert(12, run("vm", 1796, 1798, (0, 10)));
        ids.insert(13, run("vm", 1796, 1798, (4, 10)));
        // A start not known: nothing to compare.
        let mut unknown = run("vm", 2527, 2541, (0, 5));
        if let Some(l) = unknown.launcher.as_mut() {
            l.start_unix_ns = 0;
        }
        ids.insert(14, unknown);
        assert_eq!(jobs(&ids), vec![vec![1, 2, 11, 3]]);
        let l = |id: i64| ids[&id].launcher.clone().unwrap();
        assert!(same_job(&l(1), &l(2)) && same_job(&l(2), &l(1)));
        assert!(!same_job(&l(1), &l(11)), "one pid twice");
        for (a, b) in [(7, 8), (9, 10), (12, 13), (1, 4), (5, 6), (1, 14)] {
            assert!(!same_job(&l(a), &l(b)), "{a} and {b}");
        }
    }
}
