//! One process stores into a database at a time: a second `memwatch serve`, an
//! `import --db` or a `run --db` on a database a daemon is serving is refused at once,
//! naming the holder (two writers each accepted different batches of one run and
//! corrupted it). A daemon stopped with SIGTERM folds SQLite's write-ahead log into the
//! `.db` file, so the file alone holds the data. A file that is not a SQLite database is
//! refused at once instead of after sqlx's 30 s acquire timeout.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

#[path = "support/synthetic_capture.rs"]
mod synthetic_capture;

use common::free_port;

/// A `memwatch serve` child, killed when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve_cmd(db: &str, api: u16) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_memwatch"));
    c.args(["serve", "--db", db])
        .args(["--listen", &format!("127.0.0.1:{api}")])
        .args(["--ingest", &format!("127.0.0.1:{}", free_port())])
        .env("MEMWATCH_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

use common::run_memwatch as mw;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Waits until the daemon answers on its API port.
fn wait_up(api: u16) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while ureq::get(&format!("http://127.0.0.1:{api}/api/runs"))
        .call()
        .is_err()
    {
        assert!(Instant::now() < deadline, "daemon did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `c` to its end (failed as hung past a generous deadline): its whole `Output`.
fn output_or_hung(mut c: Command, what: &str) -> std::process::Output {
    let mut child = c.spawn().unwrap();
    common::wait_or_hung(&mut child, what);
    child.wait_with_output().unwrap()
}

/// A second server on a served database exits non-zero naming the first (it does not
/// wait for the first to end: that would hang).
fn second_serve_is_refused(db: &str, holder: &str) {
    let out = output_or_hung(
        serve_cmd(db, free_port()),
        "a second serve on a served database was not refused",
    );
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("in use by") && err.contains(holder),
        "second serve: {err}"
    );
}

#[test]
fn a_served_sqlite_database_has_one_writer_and_is_whole_after_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mw.db");
    let dbs = db.to_str().unwrap();
    let cap = dir.path().join("train.mwcap");
    synthetic_capture::capture(&cap, 1 << 20);
    let caps = cap.to_str().unwrap();

    let api = free_port();
    let mut first = Daemon(serve_cmd(dbs, api).spawn().unwrap());
    wait_up(api);
    let pid = first.0.id();
    let holder = format!("memwatch pid {pid}");
    let url = format!("http://127.0.0.1:{api}");
    let out = mw(&["import", caps, "--daemon", &url, "--run", "r"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    second_serve_is_refused(dbs, &holder);
    let out = mw(&["import", caps, "--db", dbs, "--run", "r"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains(&holder) && stderr(&out).contains("--daemon"),
        "{}",
        stderr(&out)
    );
    // `run --db` refuses before CMD runs, not after a long capture.
    let marker = dir.path().join("ran");
    let capture = dir.path().join("never.mwcap");
    let out = mw(&[
        "run",
        "--out",
        capture.to_str().unwrap(),
        "--db",
        dbs,
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains(&holder), "{}", stderr(&out));
    assert!(
        !marker.exists(),
        "CMD ran although the capture could not be stored"
    );
    assert!(!capture.exists());

    // SIGTERM: a clean stop, and the .db file alone holds the run.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = first.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "serve ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    let wal = dir.path().join("mw.db-wal");
    assert!(
        std::fs::metadata(&wal).map_or(0, |m| m.len()) == 0,
        "the write-ahead log was left with data"
    );
    let alone = tempfile::tempdir().unwrap();
    let copy = alone.path().join("copy.db");
    std::fs::copy(&db, &copy).unwrap();
    let base = alone.path().join("b.toml");
    let out = mw(&[
        "gate",
        "--baseline",
        base.to_str().unwrap(),
        "--run",
        "t=1",
        "--db",
        copy.to_str().unwrap(),
        "--update",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(std::fs::read_to_string(&base)
        .unwrap()
        .contains("[entries.\"t/device0\"]\npeak = 2097152\n"));

    // The lock went with the daemon: storing directly works now.
    let out = mw(&["import", caps, "--db", dbs, "--run", "other"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_at_once_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("notes.db");
    std::fs::write(&junk, "these are my notes, not a database\n").unwrap();
    let js = junk.to_str().unwrap();
    let cap = dir.path().join("c.mwcap");
    synthetic_capture::capture(&cap, 1);
    // Refused before anything is done: serve does not start serving (it would not end),
    // run does not start the command (it would make `ran`).
    let ran = dir.path().join("ran");
    let out = [
        output_or_hung(
            serve_cmd(js, free_port()),
            "serve on a file that is not SQLite",
        ),
        mw(&["import", cap.to_str().unwrap(), "--db", js]),
        mw(&[
            "run",
            "--out",
            dir.path().join("t.mwcap").to_str().unwrap(),
            "--db",
            js,
            "--",
            "touch",
            ran.to_str().unwrap(),
        ]),
    ];
    assert!(
        !ran.exists(),
        "run started the command before refusing the store"
    );
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, "").unwrap();
    let gate = mw(&[
        "gate",
        "--baseline",
        dir.path().join("b.toml").to_str().unwrap(),
        "--run",
        "1",
        "--db",
        empty.to_str().unwrap(),
    ]);
    for o in &out {
        assert_ne!(o.status.code(), Some(0));
        let e = stderr(o);
        assert!(
            e.contains("notes.db") && e.contains("not a SQLite database"),
            "{e}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&junk).unwrap(),
        "these are my notes, not a database\n"
    );
    assert_eq!(gate.status.code(), Some(2));
    assert!(stderr(&gate).contains("empty file"), "{}", stderr(&gate));
    assert_eq!(
        std::fs::metadata(&empty).unwrap().len(),
        0,
        "gate wrote a schema"
    );
    // A directory: named as one (was SQLite's "disk I/O error" three times), and no lock
    // file made beside it.
    let sub = dir.path().join("adir");
    std::fs::create_dir(&sub).unwrap();
    let o = mw(&[
        "run",
        "-q",
        "--out",
        dir.path().join("d.mwcap").to_str().unwrap(),
        "--db",
        sub.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("adir: is a directory"), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(!dir.path().join("adir.memwatch-writer").exists());
}

/// PostgreSQL: the same refusal through an advisory lock, on a fresh database, when
/// MEMWATCH_TEST_POSTGRES_URL is set.
#[test]
fn a_served_postgres_database_has_one_writer() {
    let Some((url, _)) = common::fresh_postgres_database("mwlock", "PostgreSQL writer-lock test")
    else {
        return;
    };
    let api = free_port();
    let first = Daemon(serve_cmd(&url, api).spawn().unwrap());
    wait_up(api);
    second_serve_is_refused(&url, "another memwatch process");
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("c.mwcap");
    synthetic_capture::capture(&cap, 1);
    let out = mw(&["import", cap.to_str().unwrap(), "--db", &url]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("in use by"), "{}", stderr(&out));
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = mw(&["import", cap.to_str().unwrap(), "--db", &url]);
        if out.status.code() == Some(0) {
            break;
        }
        // The server notices the killed daemon's session closing within moments.
        assert!(Instant::now() < deadline, "{}", stderr(&out));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Someone else's SQLite database is left alone by every command (before, memwatch added
/// its tables and switched the file to WAL mode); parallel first imports into a new file
/// are refused as "in use", never by racing migrations.
#[test]
fn foreign_sqlite_files_are_left_alone_and_first_writers_race_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("app.db");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = format!("sqlite://{}?mode=rwc", foreign.display());
    rt.block_on(async {
        use sqlx::Connection;
        sqlx::any::install_default_drivers();
        let mut c = sqlx::AnyConnection::connect(&url).await.unwrap();
        sqlx::query("CREATE TABLE mine (x INTEGER)")
            .execute(&mut c)
            .await
            .unwrap();
        c.close().await.unwrap();
    });
    let before = std::fs::read(&foreign).unwrap();
    let cap = dir.path().join("c.mwcap");
    synthetic_capture::capture(&cap, 1);
    let fs = foreign.to_str().unwrap();
    for out in [
        mw(&["import", cap.to_str().unwrap(), "--db", fs]),
        mw(&[
            "gate",
            "--baseline",
            dir.path().join("b.toml").to_str().unwrap(),
            "--run",
            "1",
            "--db",
            fs,
        ]),
        serve_cmd(fs, free_port()).output().unwrap(),
    ] {
        assert_ne!(out.status.code(), Some(0));
        let e = stderr(&out);
        assert!(
            e.contains("not a memwatch store") && e.contains("mine"),
            "{e}"
        );
    }
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        before,
        "the file was changed"
    );

    let fresh = dir.path().join("fresh.db");
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_memwatch"))
                .args(["import", cap.to_str().unwrap(), "--db"])
                .arg(&fresh)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ok = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        if out.status.success() {
            ok += 1;
        } else {
            let e = stderr(&out);
            assert!(e.contains("in use by"), "{e}");
        }
    }
    assert!(ok >= 1);
}

#[test]
fn a_daemon_that_cannot_listen_leaves_no_database_and_logs_without_escape_codes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("new.db");
    let dbs = db.to_str().unwrap();
    // Its API port is taken: it exits 2 naming the address, and the database it would
    // have created (and the lock file beside it) is not made.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = serve_cmd(dbs, port).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{}",
        stderr(&out)
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    drop(taken);

    // Its log, redirected (not a terminal), is plain text.
    let api = free_port();
    let mut c = serve_cmd(dbs, api);
    c.env("MEMWATCH_LOG", "info");
    let mut d = Daemon(c.spawn().unwrap());
    // Its own log says when it listens (a port probe could reach another test's daemon
    // that happened to take the same free port).
    let stderr_pipe = d.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut log = String::new();
        for line in std::io::BufReader::new(stderr_pipe).lines() {
            let line = line.unwrap_or_default();
            if line.contains("listening") {
                let _ = tx.send(());
            }
            log.push_str(&line);
            log.push('\n');
        }
        log
    });
    let up = rx.recv_timeout(Duration::from_secs(120)).is_ok();
    unsafe { libc::kill(d.0.id() as i32, libc::SIGTERM) };
    let log = reader.join().unwrap();
    assert!(up && log.contains("listening"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "escape codes in a redirected log: {log:?}"
    );
}
