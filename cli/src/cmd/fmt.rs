//! Human-readable formatting shared by the report commands: binary units (the one
//! formatter, `memwatch_analysis::size`), percentages (and the broken-pipe policy of report output). Output only; no logic.

pub use memwatch_analysis::size::format_bytes as bytes;

/// Signed byte delta: `+16.00 MiB`, `-4.00 KiB`.
pub fn delta(d: i64) -> String {
    memwatch_analysis::size::format_signed_bytes(i128::from(d))
}

/// `12.3%` of a total (0 when the total is 0).
pub fn pct(part: u64, total: u64) -> String {
    if total == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / total as f64)
    }
}

/// Shortens a string to `n` chars with an ellipsis.
pub fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Lets `memwatch … | head` end quietly: restores the default SIGPIPE action so a closed
/// stdout terminates the process instead of making `println!` panic.
pub fn quiet_broken_pipe() {
    // SAFETY: setting a signal disposition to SIG_DFL at start-up, before any threads.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
