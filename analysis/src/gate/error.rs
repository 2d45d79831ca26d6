//! The gate's typed errors. Every variant names the file (and line, where there is one)
//! and what is wrong, so the CLI can print it as one line and exit 2.

use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum GateError {
    /// A baseline file that cannot be used: syntax, unknown metric, bad threshold, …
    #[error("{}:{line}:{column}: {message}", path.display())]
    Baseline {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// A measurement input (memwatch-jax JSON, dump, capture) that cannot be used.
    #[error("{}: {message}", path.display())]
    Input { path: PathBuf, message: String },
    /// A measurement input with a position in it.
    #[error("{}:{line}:{column}: {message}", path.display())]
    InputAt {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("entry `{key}` is measured twice: by {first} and by {second}")]
    DuplicateKey {
        key: String,
        first: String,
        second: String,
    },
}

/// 1-based line and column of byte `offset` in `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    #[test]
    fn line_column_is_one_based() {
        assert_eq!(super::line_column("ab\ncd", 0), (1, 1));
        assert_eq!(super::line_column("ab\ncd", 4), (2, 2));
        assert_eq!(super::line_column("ab", 99), (1, 3));
    }
}
