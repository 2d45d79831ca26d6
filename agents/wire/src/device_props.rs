//! Device properties the shim learns beyond `device_info`: whether the GPU is integrated
//! (an APU sharing the system's memory, HIP's `hipDeviceAttributeIntegrated`) and how
//! much physical memory the operating system manages.
//!
//! Owns their text form. They travel as a `marker` record whose text starts with
//! [`DEVICE_PROPS_PREFIX`] (as `memwatch run`'s tags do), so no frame layout changes and
//! a reader that does not know them sees an ordinary marker. One marker per (process,
//! device), written right after the device's `device_info`.

use crate::frame::Marker;

/// Marker texts starting with this are device properties, not annotations.
pub const DEVICE_PROPS_PREFIX: &str = "memwatch.device_props ";

/// What the runtime and the OS said about one device of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceProps {
    /// The device ordinal (as in the events).
    pub device: i32,
    /// `hipDeviceAttributeIntegrated`: the GPU shares the system's memory (an APU);
    /// `None` when the runtime did not answer.
    pub integrated: Option<bool>,
    /// Physical memory the OS manages (`sysconf(_SC_PHYS_PAGES)` × page size): on an
    /// APU, what is left after the firmware's VRAM carve-out.
    pub host_memory_bytes: Option<u64>,
}

/// A `memwatch.device_props` marker whose text cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("device properties marker {text:?}: {what}")]
pub struct DevicePropsError {
    pub text: String,
    pub what: String,
}

impl DeviceProps {
    /// The marker text: `memwatch.device_props integrated=1 host_memory_bytes=N` (fields
    /// the runtime did not answer are left out).
    pub fn to_text(&self) -> String {
        let mut s = DEVICE_PROPS_PREFIX.trim_end().to_string();
        if let Some(i) = self.integrated {
            s.push_str(if i { " integrated=1" } else { " integrated=0" });
        }
        if let Some(b) = self.host_memory_bytes {
            s.push_str(&format!(" host_memory_bytes={b}"));
        }
        s
    }

    /// The marker record for process `pid` at `ts_ns`.
    pub fn to_marker(&self, pid: u32, tid: u32, ts_ns: u64) -> Marker {
        Marker {
            pid,
            tid,
            ts_ns,
            device: self.device,
            text: self.to_text(),
        }
    }

    /// `None` for a marker that is not device properties; an error for one that is but
    /// cannot be read. Unknown keys are skipped (later versions may add some).
    pub fn from_marker(m: &Marker) -> Option<Result<DeviceProps, DevicePropsError>> {
        let rest = m
            .text
            .strip_prefix(DEVICE_PROPS_PREFIX)
            .or_else(|| (m.text == DEVICE_PROPS_PREFIX.trim_end()).then_some(""))?;
        let err = |what: String| DevicePropsError {
            text: m.text.clone(),
            what,
        };
        let mut p = DeviceProps {
            device: m.device,
            ..DeviceProps::default()
        };
        for field in rest.split_whitespace() {
            let Some((k, v)) = field.split_once('=') else {
                return Some(Err(err(format!("{field:?} is not key=value"))));
            };
            match k {
                "integrated" => {
                    p.integrated = Some(match v {
                        "1" => true,
                        "0" => false,
                        _ => return Some(Err(err(format!("integrated={v:?}: expected 0 or 1")))),
                    })
                }
                "host_memory_bytes" => match v.parse() {
                    Ok(b) => p.host_memory_bytes = Some(b),
                    Err(_) => {
                        return Some(Err(err(format!(
                            "host_memory_bytes={v:?}: not a byte count"
                        ))))
                    }
                },
                _ => {}
            }
        }
        Some(Ok(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_marker() {
        for p in [
            DeviceProps {
                device: 0,
                integrated: Some(true),
                host_memory_bytes: Some(33_285_996_544),
            },
            DeviceProps {
                device: 3,
                integrated: Some(false),
                host_memory_bytes: None,
            },
            DeviceProps {
                device: 1,
                integrated: None,
                host_memory_bytes: None,
            },
        ] {
            let m = p.to_marker(42, 43, 1000);
            assert_eq!(m.device, p.device);
            assert_eq!(DeviceProps::from_marker(&m), Some(Ok(p)), "{}", m.text);
        }
    }

    #[test]
    fn other_markers_are_not_props_and_bad_ones_say_why() {
        let m = |text: &str| Marker {
            text: text.into(),
            ..Marker::default()
        };
        assert_eq!(DeviceProps::from_marker(&m("memwatch.tag run=1")), None);
        assert_eq!(DeviceProps::from_marker(&m("memwatch.device_propsX")), None);
        let later = DeviceProps::from_marker(&m("memwatch.device_props integrated=1 vram=9"));
        assert_eq!(later.unwrap().unwrap().integrated, Some(true));
        let bad = DeviceProps::from_marker(&m("memwatch.device_props integrated=yes"));
        assert!(bad
            .unwrap()
            .unwrap_err()
            .to_string()
            .contains("expected 0 or 1"));
        let bad = DeviceProps::from_marker(&m("memwatch.device_props host_memory_bytes=-1"));
        assert!(bad.unwrap().is_err());
        let bad = DeviceProps::from_marker(&m("memwatch.device_props garbage"));
        assert!(bad.unwrap().is_err());
    }
}
