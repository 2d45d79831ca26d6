//! The bounded on-disk spool between the forwarder and the daemon.
//!
//! Every batch the agent forwards is first appended here, so nothing is lost while the
//! daemon is unreachable (or restarting) and memory stays small however long the outage.
//! Owns the segment files (`seg-NNNNNNNNNNNNNNNN.mwspool` in one directory), their record
//! format, the size bound, reading records back in order and deleting segments once
//! everything in them was acknowledged. It does not talk to the network.
//!
//! Record (little-endian): magic "MWSP" stream:u64 seq:u64 run_len:u16 run[run_len]
//! nbytes:u32 frames[nbytes] crc:u32 (CRC-32 of everything from `stream` to the frames).
//! A torn record at the end of the newest segment (agent killed mid-write) is ignored.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Segment files are rotated at this size.
pub const SEGMENT_BYTES: u64 = 8 << 20;
const MAGIC: [u8; 4] = *b"MWSP";

/// Spool errors.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One spooled batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolRecord {
    pub stream: u64,
    pub seq: u64,
    pub run: String,
    pub frames: Vec<u8>,
}

/// A position in the spool: segment number and byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub segment: u64,
    pub offset: u64,
}

/// The spool directory. Appends go to the newest segment.
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    /// Segment numbers present, oldest first, with their sizes.
    segments: Vec<(u64, u64)>,
    current: Option<File>,
    dropped_batches: u64,
    next_segment: u64,
}

fn seg_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("seg-{n:016}.mwspool"))
}

impl Spool {
    /// Opens (creating) `dir`; existing segments are kept for replay.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Self, SpoolError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        let mut segments = Vec::new();
        for entry in fs::read_dir(dir).map_err(io(dir))? {
            let entry = entry.map_err(io(dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(n) = name
                .strip_prefix("seg-")
                .and_then(|s| s.strip_suffix(".mwspool"))
                .and_then(|s| s.parse::<u64>().ok())
            {
                let len = entry.metadata().map_err(io(dir))?.len();
                segments.push((n, len));
            }
        }
        segments.sort();
        let next_segment = segments.last().map_or(1, |s| s.0 + 1);
        Ok(Self {
            next_segment,
            dir: dir.to_path_buf(),
            max_bytes,
            segments,
            current: None,
            dropped_batches: 0,
        })
    }

    /// Bytes on disk.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.1).sum()
    }

    /// Batches refused because the spool was full.
    pub fn dropped_batches(&self) -> u64 {
        self.dropped_batches
    }

    /// Where reading starts: the beginning of the oldest segment.
    pub fn start(&self) -> Pos {
        Pos {
            segment: self.segments.first().map_or(0, |s| s.0),
            offset: 0,
        }
    }

    /// The end of the newest segment (everything before it is readable).
    pub fn end(&self) -> Pos {
        self.segments.last().map_or(Pos::default(), |s| Pos {
            segment: s.0,
            offset: s.1,
        })
    }

    /// Appends a batch. Returns `false` (and counts it) when the spool is full.
    pub fn append(&mut self, rec: &SpoolRecord) -> Result<bool, SpoolError> {
        let mut body = Vec::with_capacity(rec.frames.len() + 64);
        body.extend_from_slice(&rec.stream.to_le_bytes());
        body.extend_from_slice(&rec.seq.to_le_bytes());
        let run = &rec.run.as_bytes()[..rec.run.len().min(u16::MAX as usize)];
        body.extend_from_slice(&(run.len() as u16).to_le_bytes());
        body.extend_from_slice(run);
        body.extend_from_slice(&(rec.frames.len() as u32).to_le_bytes());
        body.extend_from_slice(&rec.frames);
        let crc = crc32fast::hash(&body);
        let total = 4 + body.len() as u64 + 4;
        if self.bytes() + total > self.max_bytes {
            self.dropped_batches += 1;
            return Ok(false);
        }
        let rotate = match (&self.current, self.segments.last()) {
            (None, _) | (_, None) => true,
            (Some(_), Some((_, len))) => *len > 0 && len + total > SEGMENT_BYTES,
        };
        if rotate {
            // Always a new file after opening: a torn tail left by a killed agent stays
            // at the end of its own segment.
            if let Some(f) = self.current.take() {
                let _ = f.sync_data();
            }
            let n = self.next_segment;
            self.next_segment += 1;
            let path = seg_path(&self.dir, n);
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(io(&path))?;
            self.segments.push((n, 0));
            self.current = Some(f);
        }
        let mut rec_bytes = Vec::with_capacity(total as usize);
        rec_bytes.extend_from_slice(&MAGIC);
        rec_bytes.extend_from_slice(&body);
        rec_bytes.extend_from_slice(&crc.to_le_bytes());
        let (n, _) = *self.segments.last().expect("a segment was just opened");
        let path = seg_path(&self.dir, n);
        let known = self.segments.last().map_or(0, |(_, len)| *len);
        if let Some(f) = self.current.as_mut() {
            if let Err(e) = f.write_all(&rec_bytes) {
                // A torn record must not stay in the middle of a segment, where reading
                // stops and every later record would be lost: cut the segment back to
                // its last whole record, and write the next record to a new segment.
                let _ = f.set_len(known);
                self.current = None;
                return Err(io(&path)(e));
            }
        }
        if let Some(last) = self.segments.last_mut() {
            last.1 += total;
        }
        Ok(true)
    }

    /// Reads the record at `pos`; returns it and the position after it. `None` at the end
    /// (or at a torn tail). Moves to the next segment when one ends.
    pub fn read_at(&self, mut pos: Pos) -> Result<Option<(SpoolRecord, Pos)>, SpoolError> {
        loop {
            let Some(idx) = self.segments.iter().position(|s| s.0 >= pos.segment) else {
                return Ok(None);
            };
            let (n, len) = self.segments[idx];
            if n != pos.segment {
                pos = Pos {
                    segment: n,
                    offset: 0,
                };
            }
            if pos.offset >= len {
                if idx + 1 < self.segments.len() {
                    pos = Pos {
                        segment: self.segments[idx + 1].0,
                        offset: 0,
                    };
                    continue;
                }
                return Ok(None);
            }
            let path = seg_path(&self.dir, n);
            let mut f = File::open(&path).map_err(io(&path))?;
            f.seek(SeekFrom::Start(pos.offset)).map_err(io(&path))?;
            match read_record(&mut f) {
                Ok(Some((rec, used))) => {
                    return Ok(Some((
                        rec,
                        Pos {
                            segment: n,
                            offset: pos.offset + used,
                        },
                    )))
                }
                // A torn or damaged record: nothing more is readable in this segment.
                Ok(None) | Err(_) => {
                    if idx + 1 < self.segments.len() {
                        pos = Pos {
                            segment: self.segments[idx + 1].0,
                            offset: 0,
                        };
                        continue;
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// Everything before `pos` was acknowledged: deletes the segments wholly before it.
    pub fn acknowledge(&mut self, pos: Pos) -> Result<(), SpoolError> {
        while let Some(&(n, len)) = self.segments.first() {
            let done = n < pos.segment || (n == pos.segment && pos.offset >= len);
            if !done {
                break;
            }
            if self.segments.len() == 1 {
                // The segment being appended to: the next append opens a new one.
                self.current = None;
            }
            let path = seg_path(&self.dir, n);
            fs::remove_file(&path).map_err(io(&path))?;
            self.segments.remove(0);
        }
        Ok(())
    }
}

fn read_record(f: &mut File) -> std::io::Result<Option<(SpoolRecord, u64)>> {
    let mut head = [0u8; 4 + 8 + 8 + 2];
    if f.read_exact(&mut head).is_err() {
        return Ok(None);
    }
    if head[..4] != MAGIC {
        return Ok(None);
    }
    let stream = u64::from_le_bytes(head[4..12].try_into().unwrap_or_default());
    let seq = u64::from_le_bytes(head[12..20].try_into().unwrap_or_default());
    let run_len = u16::from_le_bytes([head[20], head[21]]) as usize;
    let mut run = vec![0u8; run_len];
    let mut nb = [0u8; 4];
    if f.read_exact(&mut run).is_err() || f.read_exact(&mut nb).is_err() {
        return Ok(None);
    }
    let n = u32::from_le_bytes(nb) as usize;
    let mut frames = vec![0u8; n];
    let mut crc = [0u8; 4];
    if f.read_exact(&mut frames).is_err() || f.read_exact(&mut crc).is_err() {
        return Ok(None);
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&head[4..]);
    h.update(&run);
    h.update(&nb);
    h.update(&frames);
    if h.finalize() != u32::from_le_bytes(crc) {
        return Ok(None);
    }
    let used = (head.len() + run_len + 4 + n + 4) as u64;
    Ok(Some((
        SpoolRecord {
            stream,
            seq,
            run: String::from_utf8_lossy(&run).into_owned(),
            frames,
        },
        used,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, n: usize) -> SpoolRecord {
        SpoolRecord {
            stream: 5,
            seq,
            run: "r".into(),
            frames: vec![seq as u8; n],
        }
    }

    #[test]
    fn append_read_ack_reopen_and_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(dir.path(), 40 << 20).unwrap();
        for i in 1..=20 {
            assert!(s.append(&rec(i, 1 << 20)).unwrap());
        }
        assert!(s.segments.len() >= 3, "rotated");
        let mut pos = s.start();
        let mut seen = Vec::new();
        while let Some((r, next)) = s.read_at(pos).unwrap() {
            seen.push(r.seq);
            pos = next;
            if r.seq == 10 {
                s.acknowledge(pos).unwrap();
            }
        }
        assert_eq!(seen, (1..=20).collect::<Vec<_>>());
        drop(s);
        // Reopened: replays from the oldest segment still present (not fully acked).
        let mut s = Spool::open(dir.path(), 40 << 20).unwrap();
        let (first, _) = s.read_at(s.start()).unwrap().unwrap();
        assert!(
            first.seq > 1 && first.seq <= 10,
            "acked segments deleted: {}",
            first.seq
        );
        let end = s.end();
        s.acknowledge(end).unwrap();
        assert_eq!(s.bytes(), 0);
        // Bounded: a 2 MiB spool refuses the third 1 MiB batch.
        let mut small = Spool::open(&dir.path().join("b"), 2 << 20).unwrap();
        assert!(small.append(&rec(1, 1 << 20)).unwrap());
        assert!(!small.append(&rec(2, 1 << 20)).unwrap());
        assert_eq!(small.dropped_batches(), 1);
        // A torn tail is ignored.
        let seg = seg_path(&dir.path().join("b"), 1);
        let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
        f.write_all(b"MWSP\x01\x02").unwrap();
        let small = Spool::open(&dir.path().join("b"), 2 << 20).unwrap();
        let (r, p) = small.read_at(small.start()).unwrap().unwrap();
        assert_eq!(r.seq, 1);
        assert!(small.read_at(p).unwrap().is_none());
    }

    /// A write that fails half way (disk full, a file-size limit) must not leave a torn
    /// record in the middle of a segment: before, every record appended after it was
    /// unreadable and lost. Runs in a child process (this test binary again), because
    /// the file-size limit it sets applies to a whole process.
    #[test]
    fn a_failed_write_loses_only_its_own_record() {
        const CHILD: &str = "MEMWATCH_SPOOL_TORN_WRITE_DIR";
        if let Ok(dir) = std::env::var(CHILD) {
            // SAFETY: ignoring SIGXFSZ and lowering RLIMIT_FSIZE for this process.
            unsafe {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let lim = libc::rlimit {
                    rlim_cur: 10_000,
                    rlim_max: libc::RLIM_INFINITY,
                };
                assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
            }
            let mut s = Spool::open(Path::new(&dir), 1 << 30).unwrap();
            assert!(s.append(&rec(1, 3000)).unwrap());
            assert!(s.append(&rec(2, 3000)).unwrap());
            assert!(s.append(&rec(3, 3000)).unwrap());
            assert!(s.append(&rec(4, 3000)).is_err(), "crosses the 10 kB limit");
            // The next records go to a new segment (which the limit allows three of).
            for i in 5..=7 {
                assert!(s.append(&rec(i, 3000)).unwrap(), "record {i}");
            }
            assert!(s.append(&rec(8, 3000)).is_err());
            assert!(s.append(&rec(9, 3000)).unwrap());
            let mut pos = s.start();
            let mut seen = Vec::new();
            while let Some((r, next)) = s.read_at(pos).unwrap() {
                seen.push(r.seq);
                pos = next;
            }
            assert_eq!(seen, [1, 2, 3, 5, 6, 7, 9]);
            drop(s);
            let s = Spool::open(Path::new(&dir), 1 << 30).unwrap();
            let mut pos = s.start();
            let mut again = Vec::new();
            while let Some((r, next)) = s.read_at(pos).unwrap() {
                again.push(r.seq);
                pos = next;
            }
            assert_eq!(again, [1, 2, 3, 5, 6, 7, 9], "after a restart too");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "spool::tests::a_failed_write_loses_only_its_own_record",
                "--nocapture",
            ])
            .env(CHILD, dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
