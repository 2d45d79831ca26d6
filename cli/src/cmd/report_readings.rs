//! `memwatch report`'s device readings section: what memwatch's own sampler read of each
//! device (NVML, ROCm SMI) — how often, the device's use, and the most memory held
//! outside the run at one instant with the run's own bytes at that instant. A capture
//! without readings says they are missing (and why, when it recorded why).

use memwatch_analysis::device_readings::ReadingsSummary;

use super::report::bytes;

/// The section's text.
pub fn render(r: &ReadingsSummary) -> String {
    let mut o = String::from(
        "\nDevice readings (memwatch's sampler, device and processes at one instant)\n",
    );
    if r.devices.is_empty() {
        o.push_str(&format!(
            "  missing: {}\n",
            r.missing_why.as_deref().unwrap_or(
                "this capture has none (made without the sampler, or by an older memwatch)"
            )
        ));
        return o;
    }
    for d in &r.devices {
        let ident = [d.pci_bus_id.as_str(), d.uuid.as_str()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(", ");
        // Which of the run's devices it was (by UUID, then PCI bus id, then ordinal).
        let theirs = match d.ordinal {
            Some(o) => format!(", the run's device {o}"),
            None => ", none of the run's devices".to_string(),
        };
        o.push_str(&format!(
            "  {} device {}{}{}: {} readings ({} at a failure) from {:.2} s to {:.2} s, longest gap {}\n",
            d.source,
            d.device,
            if ident.is_empty() {
                String::new()
            } else {
                format!(" ({ident})")
            },
            theirs,
            d.readings,
            d.at_failure,
            d.first_s,
            d.last_s,
            d.max_gap_ms
                .map_or_else(|| "-".to_string(), |g| format!("{g:.0} ms"))
        ));
        o.push_str(&format!(
            "    device used {} .. {} of {}\n",
            bytes(d.used_min_bytes),
            bytes(d.used_max_bytes),
            bytes(d.total_bytes)
        ));
        match (d.others_peak_bytes, d.watched_at_others_peak_bytes) {
            (Some(others), Some(own)) => {
                let pids: Vec<String> = d
                    .others_at_peak
                    .iter()
                    .map(|(pid, b)| {
                        format!("pid {pid} {}", b.map_or_else(|| "?".to_string(), bytes))
                    })
                    .collect();
                o.push_str(&format!(
                    "    outside this run at most {} (at {:.2} s, while this run's processes held {}){}\n",
                    bytes(others),
                    d.others_peak_at_s.unwrap_or(0.0),
                    bytes(own),
                    if pids.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", pids.join(", "))
                    }
                ));
            }
            _ => o.push_str("    per-process figures: missing (the library did not list them)\n"),
        }
        if let Some(w) = d.watched_peak_bytes.filter(|_| d.watched_seen) {
            o.push_str(&format!("    this run's processes at most {}\n", bytes(w)));
        } else if d.others_peak_bytes.is_some() {
            o.push_str("    this run's processes: not listed on this device\n");
        }
    }
    o
}
