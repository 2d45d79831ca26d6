//! `memwatch report`'s multi-device text: the "per device" section (each process's
//! devices side by side: driver-level peak by kind, the framework's own figures, NVML's
//! per-process figure), the capture-wide stretches when one API ran on several devices
//! at once, and the VMM handle releases that gave nothing back. Presentation only; the
//! figures come from `memwatch_analysis::capture::devices` and `stats`.

use memwatch_analysis::capture::devices::{DeviceView, FrameworkView, MemoryKind};
use memwatch_analysis::capture::{ApiStats, DeviceReport};

use super::fmt::{bytes, delta};
use super::report::duration;

fn kind(name: &'static str) -> &'static str {
    MemoryKind::from_name(name).map_or(name, MemoryKind::short)
}

/// The "per device" section (empty when no device held memory).
pub fn render(views: &[DeviceView]) -> String {
    let mut o = String::new();
    if views.is_empty() {
        return o;
    }
    o.push_str(
        "\nper device (CUDA/HIP ordinals as each process saw them: under CUDA_VISIBLE_DEVICES \
         two processes' device 0 can be different GPUs):\n",
    );
    for v in views {
        let name = v.name.as_deref().map_or(String::new(), |n| format!(" {n}"));
        let image = match v.image {
            0 => String::new(),
            n => format!(" (exec #{n})"),
        };
        o.push_str(&format!(
            "  device {}{name}, pid {}{image}: driver-level peak {} at {}\n",
            v.device,
            v.pid,
            bytes(v.peak_bytes),
            duration(v.peak_ns)
        ));
        if !v.at_peak.is_empty() {
            let parts: Vec<String> = v
                .at_peak
                .iter()
                .map(|k| format!("{} {}", kind(k.kind), bytes(k.bytes)))
                .collect();
            o.push_str(&format!("    at the peak: {}\n", parts.join(", ")));
        }
        match &v.framework {
            FrameworkView::Pjrt {
                samples,
                peak_bytes_in_use,
                max_bytes_in_use,
                bytes_limit,
                pool_bytes,
                live_arrays_peak_bytes,
                live_arrays_peak_ns,
            } => {
                let opt = |b: &Option<u64>| b.map_or_else(|| "-".to_string(), bytes);
                o.push_str(&format!(
                    "    framework (PJRT allocator, what JAX's memory_stats() says; {samples} \
                     samples): peak_bytes_in_use {}, bytes_in_use up to {}, bytes_limit {}, \
                     pool {}\n",
                    bytes(*peak_bytes_in_use),
                    bytes(*max_bytes_in_use),
                    opt(bytes_limit),
                    opt(pool_bytes)
                ));
                if *live_arrays_peak_bytes > 0 {
                    o.push_str(&format!(
                        "    live jax.Array (PJRT buffer) bytes: peak {} at {}\n",
                        bytes(*live_arrays_peak_bytes),
                        duration(*live_arrays_peak_ns)
                    ));
                }
            }
            FrameworkView::None { note } => o.push_str(&format!("    framework: {note}\n")),
        }
        if v.host_pinned_peak_bytes > 0 {
            o.push_str(&format!(
                "    pinned host memory: peak {}\n",
                bytes(v.host_pinned_peak_bytes)
            ));
        }
        if let Some(i) = &v.imported_vmm {
            o.push_str(&format!(
                "    imported VMM handles (another process's memory: NCCL peer buffers, CUDA \
                 IPC; counted on its device): {} mappings, up to {} mapped\n",
                i.mappings,
                bytes(i.peak_mapped_bytes)
            ));
        }
        if let Some(n) = &v.nvml {
            o.push_str(&format!(
                "    NVML (this process on this GPU): peak {} at {} = captured {} {} not in \
                 the capture (CUDA context, module code); over {} readings {} (median), {} \
                 to {}\n",
                bytes(n.peak_bytes),
                duration(n.peak_ns),
                bytes(n.captured_at_peak_bytes),
                delta(n.not_captured_at_peak_bytes),
                n.readings,
                delta(n.not_captured_median_bytes),
                delta(n.not_captured_min_bytes),
                delta(n.not_captured_max_bytes)
            ));
        }
    }
    o
}

/// Lines for the APIs whose calls ran on several devices at once (capture-wide).
pub fn render_stretches(stats: &[ApiStats]) -> String {
    let mut o = String::new();
    for s in stats
        .iter()
        .filter(|s| !s.concurrent_device_stretches.is_empty())
    {
        let longest = s
            .concurrent_device_stretches
            .iter()
            .max_by_key(|x| x.until_ns - x.from_ns);
        if let Some(l) = longest {
            o.push_str(&format!(
                "    {} on several devices at once {} time(s); longest {} from {} ({} devices)\n",
                s.api,
                s.concurrent_device_stretches_total,
                duration(l.until_ns - l.from_ns),
                duration(l.from_ns),
                l.max_devices
            ));
        }
    }
    o
}

/// A line for a device's VMM releases that gave nothing back (empty when none).
pub fn render_vmm_references(d: &DeviceReport) -> String {
    let r = &d.vmm_reference_releases;
    if r.still_mapped + r.retained + r.imported == 0 {
        return String::new();
    }
    format!(
        "  device {}: cuMemRelease that gave nothing back (not unmatched): {} while still \
         mapped (given back at the unmap), {} retained references, {} of imported handles\n",
        d.device, r.still_mapped, r.retained, r.imported
    )
}
