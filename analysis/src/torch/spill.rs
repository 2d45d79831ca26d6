//! The trace entries of a snapshot, stored compactly while the pickle is read and read
//! back in order afterwards: in memory up to [`Spill::MEMORY_ENTRIES`], then in an
//! anonymous temporary file (deleted when closed), so a trace of any length costs
//! bounded memory.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};

use super::model::Entry;

#[derive(Default)]
pub struct Spill {
    memory: Vec<Entry>,
    file: Option<BufWriter<File>>,
    len: u64,
}

/// A stretch of stored entries (one device's trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Range {
    pub start: u64,
    pub len: u64,
}

impl Spill {
    /// Entries kept in memory before the rest goes to a temporary file (about 14 MiB).
    pub const MEMORY_ENTRIES: usize = 1 << 18;

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether entries went to a temporary file.
    pub fn spilled(&self) -> bool {
        self.file.is_some()
    }

    pub fn push(&mut self, e: Entry) -> std::io::Result<()> {
        self.len += 1;
        if let Some(f) = &mut self.file {
            let mut b = [0u8; Entry::ENCODED];
            e.encode(&mut b);
            return f.write_all(&b);
        }
        self.memory.push(e);
        if self.memory.len() >= Self::MEMORY_ENTRIES {
            let mut f = BufWriter::with_capacity(1 << 20, tempfile::tempfile()?);
            let mut b = [0u8; Entry::ENCODED];
            for e in self.memory.drain(..) {
                e.encode(&mut b);
                f.write_all(&b)?;
            }
            self.memory = Vec::new();
            self.file = Some(f);
        }
        Ok(())
    }

    /// Finishes writing (flushes the file).
    pub fn seal(&mut self) -> std::io::Result<()> {
        if let Some(f) = &mut self.file {
            f.flush()?;
        }
        Ok(())
    }

    /// Calls `f` on every entry of `range`, in order.
    pub fn for_each<E>(
        &self,
        range: Range,
        mut f: impl FnMut(&Entry) -> Result<(), E>,
    ) -> Result<(), SpillError<E>> {
        match &self.file {
            None => {
                let start = range.start as usize;
                let end = (range.start + range.len) as usize;
                for e in self.memory.get(start..end).unwrap_or(&[]) {
                    f(e).map_err(SpillError::Visit)?;
                }
            }
            Some(w) => {
                let mut file = w.get_ref().try_clone().map_err(SpillError::Io)?;
                file.seek(SeekFrom::Start(range.start * Entry::ENCODED as u64))
                    .map_err(SpillError::Io)?;
                let mut r = BufReader::with_capacity(1 << 20, file);
                let mut b = [0u8; Entry::ENCODED];
                for _ in 0..range.len {
                    r.read_exact(&mut b).map_err(SpillError::Io)?;
                    let e = Entry::decode(&b).ok_or_else(|| {
                        SpillError::Io(std::io::Error::other("damaged temporary trace file"))
                    })?;
                    f(&e).map_err(SpillError::Visit)?;
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug)]
pub enum SpillError<E> {
    Io(std::io::Error),
    Visit(E),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::model::Action;
    use crate::torch::stacks::StackId;

    fn entry(i: u64) -> Entry {
        Entry {
            action: Action::ALL[(i % 9) as usize],
            time_us: i as i64 * 3 - 7,
            addr: i << 20,
            size: i * 512 + 1,
            stream: i % 3,
            device_free: i * 7,
            stack: StackId(i as u32),
            compile_context: (i % 5) as u32,
            user_metadata: 1,
        }
    }

    #[test]
    fn entries_come_back_in_order_from_memory_and_from_the_file() {
        let n = Spill::MEMORY_ENTRIES as u64 + 1000;
        let mut s = Spill::default();
        for i in 0..n {
            s.push(entry(i)).unwrap();
        }
        s.seal().unwrap();
        assert!(s.spilled());
        let mut next = 10;
        s.for_each::<()>(
            Range {
                start: 10,
                len: n - 10,
            },
            |e| {
                assert_eq!(*e, entry(next));
                next += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(next, n);
        let mut small = Spill::default();
        small.push(entry(3)).unwrap();
        let mut got = Vec::new();
        small
            .for_each::<()>(Range { start: 0, len: 1 }, |e| {
                got.push(*e);
                Ok(())
            })
            .unwrap();
        assert_eq!(got, vec![entry(3)]);
    }
}
