//! The memo's handles by index, compactly: chunks of 64 K indices, each stored as
//! 4-byte handles while it is being written and, two chunks later, as 1- or 2-byte codes
//! into a table of the chunk's distinct handles when it has few.
//!
//! A trace's indices hold few distinct handles (every trace entry the same "handed out"
//! mark, one interned `'N/A'`, the frame lists of a few dozen stacks), so a multi-GB
//! snapshot's tens of millions of indices cost about a byte each. A later write of a
//! handle a coded chunk lacks (a container finished long after it was memoized) turns
//! that chunk back into 4-byte handles.

/// A slot never stored.
pub const EMPTY: u32 = u32::MAX;

const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;
/// Distinct handles a chunk may have to be stored as 2-byte codes.
const MAX_WIDE_TABLE: usize = 1 << 14;

enum Chunk {
    Raw(Box<[u32]>),
    Byte { table: Vec<u32>, codes: Box<[u8]> },
    Wide { table: Vec<u32>, codes: Box<[u16]> },
}

impl Chunk {
    #[inline(always)]
    fn get(&self, i: usize) -> u32 {
        match self {
            Chunk::Raw(h) => h[i],
            Chunk::Byte { table, codes } => table[usize::from(codes[i])],
            Chunk::Wide { table, codes } => table[usize::from(codes[i])],
        }
    }

    /// Sets slot `i`; returns what it held.
    fn set(&mut self, i: usize, handle: u32) -> u32 {
        let old = self.get(i);
        let code = |table: &[u32]| table.iter().position(|&t| t == handle);
        let done = match self {
            Chunk::Raw(h) => {
                h[i] = handle;
                true
            }
            Chunk::Byte { table, codes } => match code(table) {
                Some(c) => {
                    codes[i] = c as u8;
                    true
                }
                None if table.len() < 256 => {
                    codes[i] = table.len() as u8;
                    table.push(handle);
                    true
                }
                None => false,
            },
            Chunk::Wide { table, codes } => match code(table) {
                Some(c) => {
                    codes[i] = c as u16;
                    true
                }
                None if table.len() < MAX_WIDE_TABLE => {
                    codes[i] = table.len() as u16;
                    table.push(handle);
                    true
                }
                None => false,
            },
        };
        if !done {
            self.widen();
            self.set(i, handle);
        }
        old
    }

    /// Back to 4-byte handles.
    fn widen(&mut self) {
        let raw: Box<[u32]> = (0..CHUNK).map(|i| self.get(i)).collect();
        *self = Chunk::Raw(raw);
    }

    /// Codes for a chunk of few distinct handles.
    fn compact(&mut self) {
        let Chunk::Raw(h) = self else {
            return;
        };
        let mut table: Vec<u32> = Vec::new();
        let mut index = foldhash::HashMap::<u32, u16>::default();
        let mut codes = Vec::with_capacity(CHUNK);
        for &x in h.iter() {
            let c = *index.entry(x).or_insert_with(|| {
                table.push(x);
                (table.len() - 1) as u16
            });
            if table.len() > MAX_WIDE_TABLE {
                return;
            }
            codes.push(c);
        }
        *self = if table.len() <= 256 {
            Chunk::Byte {
                table,
                codes: codes.into_iter().map(|c| c as u8).collect(),
            }
        } else {
            Chunk::Wide {
                table,
                codes: codes.into_boxed_slice(),
            }
        };
    }

    fn bytes(&self) -> usize {
        match self {
            Chunk::Raw(h) => h.len() * 4,
            Chunk::Byte { table, codes } => table.capacity() * 4 + codes.len(),
            Chunk::Wide { table, codes } => table.capacity() * 4 + codes.len() * 2,
        }
    }
}

/// Handles of indices `0..len`.
#[derive(Default)]
pub struct Handles {
    chunks: Vec<Chunk>,
    len: usize,
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handles({} indices, {} bytes)", self.len, self.bytes())
    }
}

impl Handles {
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub fn get(&self, i: usize) -> Option<u32> {
        if i < self.len {
            Some(self.chunks[i >> CHUNK_BITS].get(i & (CHUNK - 1)))
        } else {
            None
        }
    }

    /// Sets index `i` (below `len`); returns what it held.
    pub fn set(&mut self, i: usize, handle: u32) -> u32 {
        self.chunks[i >> CHUNK_BITS].set(i & (CHUNK - 1), handle)
    }

    /// Extends to `i + 1` indices (the new ones [`EMPTY`]) and sets `i`.
    pub fn grow_to(&mut self, i: usize, handle: u32) {
        while self.chunks.len() << CHUNK_BITS <= i {
            self.chunks
                .push(Chunk::Raw(vec![EMPTY; CHUNK].into_boxed_slice()));
            // Two chunks back, what is memoized is finished.
            if let Some(c) = self.chunks.len().checked_sub(3) {
                self.chunks[c].compact();
            }
        }
        self.len = self.len.max(i + 1);
        self.set(i, handle);
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(Chunk::bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_of_few_handles_are_coded_and_read_the_same() {
        let mut h = Handles::default();
        let n = 10 * CHUNK;
        let f = |i: usize| {
            if i.is_multiple_of(3) {
                7
            } else {
                (i % 40) as u32
            }
        };
        for i in 0..n {
            h.grow_to(i, f(i));
        }
        assert!((0..n).all(|i| h.get(i) == Some(f(i))));
        // Eight chunks coded at a byte an index, the last two not yet.
        assert!(
            h.bytes() < 8 * CHUNK + 2 * 4 * CHUNK + 8 * 1024,
            "{}",
            h.bytes()
        );
        // A handle a coded chunk lacks, and many: the chunk widens, values stay.
        for k in 0..300u32 {
            h.set(5 + k as usize, 1000 + k);
        }
        h.set(CHUNK + 1, EMPTY);
        for i in 0..n {
            let want = match i {
                5..=304 => 1000 + (i as u32 - 5),
                i if i == CHUNK + 1 => EMPTY,
                i => f(i),
            };
            assert_eq!(h.get(i), Some(want), "{i}");
        }
        assert_eq!(h.get(n), None);
        // Many distinct handles: 2-byte codes, then too many to code.
        let mut h = Handles::default();
        for i in 0..4 * CHUNK {
            h.grow_to(i, (i % 5000) as u32);
        }
        assert!((0..4 * CHUNK).all(|i| h.get(i) == Some((i % 5000) as u32)));
        let mut h = Handles::default();
        for i in 0..4 * CHUNK {
            h.grow_to(i, i as u32);
        }
        assert!((0..4 * CHUNK).all(|i| h.get(i) == Some(i as u32)));
    }
}
