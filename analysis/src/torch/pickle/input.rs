//! Buffered reading of the pickle bytes with the byte offset of everything read, and
//! reads of declared lengths that never allocate ahead of the bytes that really arrive
//! (a hostile `BINUNICODE8` of 2^60 bytes fails at the end of the file, having held no
//! more than the file).

use std::io::Read;

use super::ErrorKind;

const BUF: usize = 256 << 10;

pub struct Input<R> {
    inner: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// File offset of `buf[0]`.
    base: u64,
    eof: bool,
}

impl<R: Read> Input<R> {
    pub fn new(inner: R) -> Self {
        Input {
            inner,
            buf: vec![0; BUF],
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
        }
    }

    /// Offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Reads more bytes after the unread ones (moved to the front); false at the end.
    fn fill(&mut self) -> Result<bool, ErrorKind> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.end == self.buf.len() {
            let grow = self.buf.len();
            self.buf.resize(self.buf.len() + grow, 0);
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ErrorKind::Io(e.to_string())),
            }
        }
    }

    /// The next byte, `None` at the end of the input.
    #[inline]
    pub fn next_byte(&mut self) -> Result<Option<u8>, ErrorKind> {
        if self.pos == self.end && !self.fill()? {
            return Ok(None);
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(Some(b))
    }

    /// The bytes read ahead and not yet consumed (possibly none).
    #[inline]
    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.pos..self.end]
    }

    /// Consumes `n` bytes of [`Input::buffered`].
    #[inline]
    pub fn skip(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.pos);
        self.pos += n.min(self.end - self.pos);
    }

    #[inline]
    pub fn byte(&mut self) -> Result<u8, ErrorKind> {
        self.next_byte()?.ok_or(ErrorKind::Truncated)
    }

    /// The next `n` bytes (`n` at most a few hundred KiB: fixed-size arguments and short
    /// strings).
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&[u8], ErrorKind> {
        while self.end - self.pos < n {
            if !self.fill()? {
                return Err(ErrorKind::Truncated);
            }
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], ErrorKind> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    /// `n` bytes of a declared length, however large: memory grows only with the bytes
    /// that arrive.
    pub fn vec(&mut self, n: u64, limit: u64) -> Result<Vec<u8>, ErrorKind> {
        if n > limit {
            return Err(ErrorKind::TooLong { len: n, limit });
        }
        let n = usize::try_from(n).map_err(|_| ErrorKind::TooLong { len: n, limit })?;
        if n <= BUF {
            return Ok(self.bytes(n)?.to_vec());
        }
        let mut out = Vec::with_capacity(BUF);
        while out.len() < n {
            if self.pos == self.end && !self.fill()? {
                return Err(ErrorKind::Truncated);
            }
            let take = (n - out.len()).min(self.end - self.pos);
            out.extend_from_slice(&self.buf[self.pos..self.pos + take]);
            self.pos += take;
        }
        Ok(out)
    }

    /// Bytes up to the next `\n` (not included), at most `limit` of them.
    pub fn line(&mut self, limit: usize) -> Result<Vec<u8>, ErrorKind> {
        let mut out = Vec::new();
        loop {
            if self.pos == self.end && !self.fill()? {
                return Err(ErrorKind::Truncated);
            }
            let avail = &self.buf[self.pos..self.end];
            if let Some(i) = avail.iter().position(|&b| b == b'\n') {
                out.extend_from_slice(&avail[..i]);
                self.pos += i + 1;
                if out.len() > limit {
                    return Err(ErrorKind::TooLong {
                        len: out.len() as u64,
                        limit: limit as u64,
                    });
                }
                return Ok(out);
            }
            out.extend_from_slice(avail);
            self.pos = self.end;
            if out.len() > limit {
                return Err(ErrorKind::TooLong {
                    len: out.len() as u64,
                    limit: limit as u64,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out one byte per call, to cross every buffer boundary.
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }

    #[test]
    fn offsets_and_lengths_survive_small_reads() {
        let data: Vec<u8> = (0..=255u8).cycle().take(BUF * 3 + 17).collect();
        let mut inp = Input::new(Trickle(&data));
        assert_eq!(inp.byte().unwrap(), 0);
        assert_eq!(inp.bytes(3).unwrap(), &[1, 2, 3]);
        let big = inp.vec((BUF * 2) as u64, u64::MAX).unwrap();
        assert_eq!(big[0], 4);
        assert_eq!(inp.offset(), 4 + (BUF * 2) as u64);
        let rest = inp.vec((BUF + 13) as u64, u64::MAX).unwrap();
        assert_eq!(rest.len(), BUF + 13);
        assert!(matches!(inp.byte(), Err(ErrorKind::Truncated)));
    }

    #[test]
    fn declared_lengths_beyond_the_input_fail_without_allocating_them() {
        let mut inp = Input::new(&b"abc"[..]);
        assert!(matches!(
            inp.vec(1 << 40, u64::MAX),
            Err(ErrorKind::Truncated)
        ));
        let mut inp = Input::new(&b"abc"[..]);
        assert!(matches!(
            inp.vec(1 << 40, 1 << 30),
            Err(ErrorKind::TooLong { .. })
        ));
        let mut inp = Input::new(&b"12\nxyz"[..]);
        assert_eq!(inp.line(10).unwrap(), b"12");
        assert!(matches!(inp.line(10), Err(ErrorKind::Truncated)));
    }
}
