//! The token of `memwatch serve` and `memwatch agent`: from `--token`/`MEMWATCH_TOKEN`
//! or from the first line of `--token-file` (so it never appears on a command line or in
//! a container's environment). One rule for both commands.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// The token: the file's first line (surrounding whitespace removed) when `file` is
/// given, else `value`; `None` when neither is given or the value is empty.
pub fn token(value: Option<&str>, file: Option<&Path>) -> Result<Option<String>> {
    if let Some(f) = file {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("cannot read --token-file {}", f.display()))?;
        let t = text.lines().next().unwrap_or("").trim();
        if t.is_empty() {
            bail!(
                "--token-file {}: its first line is empty (the token goes there)",
                f.display()
            );
        }
        return Ok(Some(t.to_string()));
    }
    Ok(value
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(String::from))
}

#[cfg(test)]
mod tests {
    use super::token;

    #[test]
    fn the_file_wins_and_only_its_first_line_counts() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "  s3cret-Tok_en \nsecond line\n").unwrap();
        assert_eq!(
            token(Some("other"), Some(&f)).unwrap().as_deref(),
            Some("s3cret-Tok_en")
        );
        assert_eq!(token(Some("v"), None).unwrap().as_deref(), Some("v"));
        assert_eq!(token(Some(""), None).unwrap(), None);
        assert_eq!(token(None, None).unwrap(), None);
        std::fs::write(&f, "\nnext\n").unwrap();
        let e = token(None, Some(&f)).unwrap_err().to_string();
        assert!(e.contains("first line is empty"), "{e}");
        let e = token(None, Some(&dir.path().join("absent")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read --token-file"), "{e}");
    }
}
