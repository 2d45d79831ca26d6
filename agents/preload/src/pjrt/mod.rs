//! PJRT C API interposition: what XLA-based frameworks (JAX, Reactant.jl ...) do with
//! their PJRT plugin (`xla_cuda_plugin.so`, `xla_rocm_plugin.so`).
//!
//! The framework `dlopen`s the plugin and `dlsym`s `GetPjrtApi`; the shim's `dlsym` hook
//! hands it `table`'s wrapper, which returns a copy of the plugin's function table with a
//! few entries wrapped (`wrap`, which calls the plugin through `plugin`). This module
//! owns the late-attach entry points ([`attach_live`], [`detach_live`]). Beside it:
//! the environment switches (`switches`), the memory-statistics sampler the flusher
//! runs (`sample`), the `pjrt_executable` frames the sink writes (`exec_frames`), and
//! the allocation-free tables the wrappers share with the flusher (`registry`,
//! `ready`, `pre_attach`, `exec_start`).
//!
//! Layers: the flusher and the sink reach only `sample`, `exec_frames`, `exec_start`
//! and `registry`, which never reach up into the wrappers; `table` and `wrap` (the
//! entry points the framework calls) sit on top.

pub mod abi;
pub mod exec_frames;
pub mod exec_start;
pub mod plugin;
pub mod pre_attach;
pub mod ready;
pub mod registry;
pub mod sample;
pub mod switches;
pub mod table;
pub mod wrap;

pub use table::{on_lookup, version};

/// Late attach (`memwatch attach`): wraps the live table of the plugin whose
/// `GetPjrtApi` is `get` (NULL: no PJRT plugin is loaded) and starts the pre-attach
/// baseline (`pre_attach`). Returns the start marker's words about it:
/// `pjrt_table=wrapped pjrt_slots=N`, or `pjrt_table=none` with the reason.
///
/// # Safety
/// `get` is NULL or a loaded plugin's `GetPjrtApi`.
pub unsafe fn attach_live(get: *mut core::ffi::c_void) -> String {
    if get.is_null() {
        return "pjrt_table=none(no-plugin-loaded)".to_string();
    }
    // SAFETY: contract above.
    match unsafe { table::wrap_live(get) } {
        Ok(n) if n > 0 => {
            pre_attach::begin();
            format!("pjrt_table=wrapped pjrt_slots={n}")
        }
        Ok(_) => "pjrt_table=none(no-slot-could-be-written)".to_string(),
        Err(why) => format!("pjrt_table=none({})", why.replace(' ', "-")),
    }
}

/// Detach: the plugin's entries go back, sampling stops and the devices are forgotten
/// (the client may be gone before the next attach). Returns the stop marker's words.
pub fn detach_live() -> String {
    let restored = table::unwrap_live();
    pre_attach::end();
    sample::stop_sampling();
    registry::clear_devices();
    format!("restored_pjrt_slots={restored}")
}

/// In a forked child: executables are announced again in the child's capture.
pub fn reset_in_child() {
    registry::mark_all_new();
}
