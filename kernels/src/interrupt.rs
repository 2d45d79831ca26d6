//! Ctrl-C / SIGTERM handling for GPU runs: the first signal sets a flag that the runner
//! checks between trace events (it then stops, frees everything through its `Session`
//! guards and reports `interrupted`); a second signal terminates the process at once.

use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Installs the handlers and returns the flag they set.
pub fn install() -> io::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Order matters: the conditional shutdown fires only if the flag was already set.
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&flag))?;
        signal_hook::flag::register(sig, Arc::clone(&flag))?;
    }
    Ok(flag)
}
