//! Log line prefixes: recognises and strips the abseil (`I1121 23:03:49.623270 2389
//! file.cc:119] `, also `E0000 00:00:1755941951.386733 3750 file.cc:3081] `) and TF-style
//! (`2025-08-15 21:13:25.777440: W external/xla/…/file.cc:3181] `) prefixes. Knows nothing
//! about messages.

/// A line split into its prefix parts and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefixed<'a> {
    /// `I`, `W`, `E`, `F` when a prefix was found.
    pub severity: Option<char>,
    /// `file.cc:line` of the logging call, when a prefix was found.
    pub source: Option<&'a str>,
    /// The message (the whole line when no prefix was found).
    pub message: &'a str,
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Splits `line` into prefix and message.
pub fn split_prefix(line: &str) -> Prefixed<'_> {
    let none = Prefixed {
        severity: None,
        source: None,
        message: line,
    };
    let Some(close) = line
        .find("] ")
        .or_else(|| line.strip_suffix(']').map(|s| s.len()))
    else {
        return none;
    };
    let head = &line[..close];
    let message = line.get(close + 2..).unwrap_or("");
    let parts: Vec<&str> = head.split_whitespace().collect();
    // abseil: Lmmdd hh:mm:ss.uuuuuu thread file:line
    if parts.len() == 4 {
        let sev = parts[0].chars().next().unwrap_or(' ');
        if matches!(sev, 'I' | 'W' | 'E' | 'F')
            && is_digits(&parts[0][1..])
            && parts[1].contains(':')
            && is_digits(parts[2])
            && parts[3].contains(':')
        {
            return Prefixed {
                severity: Some(sev),
                source: Some(parts[3]),
                message,
            };
        }
    }
    // TF-style: yyyy-mm-dd hh:mm:ss.uuuuuu: L path:line
    if parts.len() == 4
        && parts[0].len() == 10
        && parts[0].as_bytes()[4] == b'-'
        && parts[1].ends_with(':')
        && parts[2].len() == 1
    {
        let sev = parts[2].chars().next().unwrap_or(' ');
        if matches!(sev, 'I' | 'W' | 'E' | 'F') {
            return Prefixed {
                severity: Some(sev),
                source: Some(parts[3]),
                message,
            };
        }
    }
    none
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_prefix_styles() {
        let a =
            split_prefix("W1121 23:03:53.970212    2389 hlo_rematerialization.cc:3363] Can't x");
        assert_eq!(a.severity, Some('W'));
        assert_eq!(a.source, Some("hlo_rematerialization.cc:3363"));
        assert_eq!(a.message, "Can't x");
        let b = split_prefix("2025-08-15 21:13:25.777440: W external/xla/xla/a.cc:3181] Can't y");
        assert_eq!((b.severity, b.message), (Some('W'), "Can't y"));
        let c = split_prefix("E0000 00:00:1755941951.386733 3750 pjrt.cc:3081] Execution");
        assert_eq!(c.message, "Execution");
        let d = split_prefix("Limit:  3.50GiB");
        assert_eq!((d.severity, d.message), (None, "Limit:  3.50GiB"));
    }
}
