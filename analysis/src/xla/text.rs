//! Line-oriented reading shared by every dump and log parser: streams a `BufRead` one
//! line at a time (bounded memory), numbers lines from 1, rejects non-UTF-8 (binary) input
//! with the line it occurs on, and builds the `ParseError` every parser returns.
//! It does not know any file format.

use std::io::BufRead;
use std::path::{Path, PathBuf};

/// A parse failure: which file, which line (1-based; 0 = the file as a whole), and what.
#[derive(Debug, thiserror::Error)]
#[error("{}:{line}: {msg}", file.display())]
pub struct ParseError {
    /// The file being parsed.
    pub file: PathBuf,
    /// 1-based line number; 0 when the problem is the file as a whole (e.g. empty).
    pub line: usize,
    /// What is wrong.
    pub msg: String,
}

impl ParseError {
    /// Builds an error for `file` at `line`.
    pub fn new(file: &Path, line: usize, msg: impl Into<String>) -> Self {
        ParseError {
            file: file.to_path_buf(),
            line,
            msg: msg.into(),
        }
    }
}

/// Streams lines out of a reader; see the module docs.
pub struct Lines<'p, R> {
    reader: R,
    buf: Vec<u8>,
    line_no: usize,
    file: &'p Path,
}

impl<'p, R: BufRead> Lines<'p, R> {
    /// Wraps `reader`; `file` names it in errors.
    pub fn new(reader: R, file: &'p Path) -> Self {
        Lines {
            reader,
            buf: Vec::with_capacity(256),
            line_no: 0,
            file,
        }
    }

    /// The file name given to [`Lines::new`].
    pub fn file(&self) -> &'p Path {
        self.file
    }

    /// Number of the line last returned (0 before the first).
    pub fn line_no(&self) -> usize {
        self.line_no
    }

    /// An error at the line last returned.
    pub fn error(&self, msg: impl Into<String>) -> ParseError {
        ParseError::new(self.file, self.line_no, msg)
    }

    /// The next line without its line terminator, or `None` at the end of input.
    pub fn next_line(&mut self) -> Result<Option<(usize, &str)>, ParseError> {
        self.buf.clear();
        let n = self.reader.read_until(b'\n', &mut self.buf).map_err(|e| {
            ParseError::new(self.file, self.line_no + 1, format!("read error: {e}"))
        })?;
        if n == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        let mut end = self.buf.len();
        while end > 0 && (self.buf[end - 1] == b'\n' || self.buf[end - 1] == b'\r') {
            end -= 1;
        }
        match std::str::from_utf8(&self.buf[..end]) {
            Ok(s) => {
                if s.contains('\0') {
                    return Err(ParseError::new(
                        self.file,
                        self.line_no,
                        "binary data (NUL byte): not a text file",
                    ));
                }
                Ok(Some((self.line_no, s)))
            }
            Err(e) => Err(ParseError::new(
                self.file,
                self.line_no,
                format!(
                    "not UTF-8 text (binary file?): invalid byte at column {}",
                    e.valid_up_to() + 1
                ),
            )),
        }
    }
}

/// Parses a decimal `u64`, naming `what` in the error.
pub fn parse_u64(s: &str, what: &str) -> Result<u64, String> {
    s.trim()
        .parse::<u64>()
        .map_err(|_| format!("{what}: expected a non-negative integer, found {s:?}"))
}

/// Parses a decimal `u64` that may contain digit-group spaces or commas (`155 189 250`).
pub fn parse_grouped_u64(s: &str, what: &str) -> Result<u64, String> {
    let digits: String = s
        .chars()
        .filter(|c| !matches!(c, ' ' | ',' | '_'))
        .collect();
    parse_u64(&digits, what)
}

/// Strips a trailing `.N` numeric suffix repeatedly: `loop_add_fusion.4` -> `loop_add_fusion`.
pub fn strip_numeric_suffix(name: &str) -> &str {
    let mut s = name;
    while let Some(pos) = s.rfind('.') {
        let tail = &s[pos + 1..];
        if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) && pos > 0 {
            s = &s[..pos];
        } else {
            break;
        }
    }
    s
}

/// Parses human byte units as XLA/TSL print them (`3.25GiB`, `768B`, `8.0KiB`, `1.00GiB`).
/// Only for fields with no integer twin: the result is approximate.
pub fn parse_human_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let idx = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(idx);
    let v: f64 = num.parse().ok()?;
    let mult: f64 = match unit.trim() {
        "B" | "" => 1.0,
        "KiB" | "KB" | "K" => 1024.0,
        "MiB" | "MB" | "M" => 1024.0 * 1024.0,
        "GiB" | "GB" | "G" => 1024.0 * 1024.0 * 1024.0,
        "TiB" | "TB" | "T" => 1024.0f64.powi(4),
        _ => return None,
    };
    Some((v * mult).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_number_and_reject_binary() {
        let p = Path::new("f.txt");
        let mut l = Lines::new(&b"a\r\nb\n\xff\xfe\n"[..], p);
        assert_eq!(l.next_line().unwrap(), Some((1, "a")));
        assert_eq!(l.next_line().unwrap(), Some((2, "b")));
        let e = l.next_line().unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.to_string().starts_with("f.txt:3:"));
    }

    #[test]
    fn suffixes_and_units() {
        assert_eq!(strip_numeric_suffix("loop_add_fusion.4"), "loop_add_fusion");
        assert_eq!(strip_numeric_suffix("tuple.3.0"), "tuple");
        assert_eq!(strip_numeric_suffix("fusion"), "fusion");
        assert_eq!(parse_human_bytes("768B"), Some(768));
        assert_eq!(parse_human_bytes("1.00GiB"), Some(1 << 30));
        assert_eq!(parse_grouped_u64("155 189 250", "x"), Ok(155_189_250));
    }
}
