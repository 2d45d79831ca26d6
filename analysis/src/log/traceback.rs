//! Python tracebacks in a program's stderr: the frames (`  File "x.py", line 36, in
//! <module>` and the source line under it) and the exception that ended them (`Type:
//! message`). The doctor names the program's own frame (the innermost one outside the
//! Python installation) as *who* asked for the memory. A small state machine fed one line
//! at a time by the log parser.

use super::model::Location;
use serde::Serialize;

/// One frame of a traceback.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PyFrame {
    /// Where the frame line is in the log.
    pub at: Location,
    pub file: String,
    pub line: u64,
    pub function: String,
    /// The source line Python printed under it.
    pub code: Option<String>,
}

impl PyFrame {
    /// Whether the frame is the program's own code, not a library's: outside
    /// `site-packages`/`dist-packages`, the standard library and compiled extensions.
    pub fn is_user_code(&self) -> bool {
        let f = &self.file;
        !(f.contains("site-packages/")
            || f.contains("dist-packages/")
            || f.contains("/lib/python")
            || f.starts_with('<')
            || f.ends_with(".pyx"))
    }
}

/// A Python exception with the traceback printed above it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PythonException {
    /// The exception line.
    pub at: Location,
    /// `torch.OutOfMemoryError`, `jax.errors.JaxRuntimeError`, …
    pub exc_type: String,
    pub message: String,
    /// Outermost first, as printed.
    pub frames: Vec<PyFrame>,
}

impl PythonException {
    /// The innermost frame of the program's own code.
    pub fn user_frame(&self) -> Option<&PyFrame> {
        self.frames.iter().rev().find(|f| f.is_user_code())
    }
}

/// Reads tracebacks line by line.
#[derive(Debug, Default)]
pub struct TracebackReader {
    frames: Option<Vec<PyFrame>>,
}

impl TracebackReader {
    /// Whether a traceback is being read (its lines are not log messages).
    pub fn active(&self) -> bool {
        self.frames.is_some()
    }

    /// Feeds one raw line; returns the exception when this line ends a traceback.
    pub fn feed(&mut self, line: &str, at: &Location) -> Option<PythonException> {
        if line.starts_with("Traceback (most recent call last):") {
            self.frames = Some(Vec::new());
            return None;
        }
        let frames = self.frames.as_mut()?;
        if let Some(rest) = line.strip_prefix("  File \"") {
            if let Some((file, tail)) = rest.split_once("\", line ") {
                let (no, func) = tail.split_once(", in ").unwrap_or((tail, ""));
                if let Ok(no) = no.trim().parse() {
                    frames.push(PyFrame {
                        at: at.clone(),
                        file: file.to_string(),
                        line: no,
                        function: func.trim().to_string(),
                        code: None,
                    });
                    return None;
                }
            }
        }
        if line.starts_with("    ") || line.trim().is_empty() && frames.is_empty() {
            let code = line.trim();
            if let Some(f) = frames.last_mut() {
                let marker = !code.is_empty() && code.chars().all(|c| matches!(c, '^' | '~'));
                if f.code.is_none() && !marker && !code.is_empty() {
                    f.code = Some(code.to_string());
                }
            }
            return None;
        }
        // The first line that is neither a frame nor source ends the traceback.
        let frames = self.frames.take().unwrap_or_default();
        let text = line.trim();
        let (exc_type, message) = match text.split_once(": ") {
            Some((t, m)) if is_type_name(t) => (t.to_string(), m.to_string()),
            _ if is_type_name(text) => (text.to_string(), String::new()),
            _ => return None,
        };
        Some(PythonException {
            at: at.clone(),
            exc_type,
            message,
            frames,
        })
    }
}

/// `torch.OutOfMemoryError`, `RuntimeError`, `cupy_backends.cuda.api.runtime.CUDARuntimeError`.
fn is_type_name(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|p| {
            !p.is_empty()
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !p.starts_with(|c: char| c.is_ascii_digit())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// testdata/oom-corpus/torch_fragmentation/stderr.log (PyTorch 2.11).
    #[test]
    fn reads_frames_and_the_exception() {
        let text = "Traceback (most recent call last):\n  File \"/work/main/tests/gpu/oom_corpus/torch_fragmentation.py\", line 35, in <module>\n    big = torch.empty(req, dtype=torch.uint8, device=\"cuda\")\n          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB.\n";
        let mut r = TracebackReader::default();
        let mut out = None;
        for (i, l) in text.lines().enumerate() {
            let at = Location {
                file: "e".into(),
                line: i + 1,
            };
            if let Some(e) = r.feed(l, &at) {
                out = Some(e);
            }
        }
        let e = out.unwrap();
        assert_eq!(e.exc_type, "torch.OutOfMemoryError");
        assert!(e.message.starts_with("CUDA out of memory"));
        assert_eq!(e.at.line, 5);
        let f = e.user_frame().unwrap();
        assert_eq!((f.line, f.function.as_str()), (35, "<module>"));
        assert_eq!(
            f.code.as_deref(),
            Some("big = torch.empty(req, dtype=torch.uint8, device=\"cuda\")")
        );
        assert!(!r.active());
    }

    /// testdata/oom-corpus/host_pinned: library frames (.pyx, site-packages) are not the
    /// program's.
    #[test]
    fn library_frames_are_not_user_code() {
        let f = |file: &str| PyFrame {
            at: Location::default(),
            file: file.into(),
            line: 1,
            function: "f".into(),
            code: None,
        };
        assert!(!f("cupy/cuda/pinned_memory.pyx").is_user_code());
        assert!(!f("/opt/torch/.venv/lib/python3.12/site-packages/jax/_src/api.py").is_user_code());
        assert!(f("/work/main/tests/gpu/oom_corpus/host_pinned.py").is_user_code());
    }
}
