//! Capacity emulation: how to make a real device look like the target device.
//!
//! Owns the arithmetic only. A smaller target: reserve a ballast allocation so that exactly
//! the target's capacity remains free. A larger target: divide every size and the capacity
//! by the same integer factor, the smallest that makes the target fit in what is free, and
//! say so. Performing the ballast allocation (and topping it up to the driver's
//! granularity) is the runner's job.

use serde::Serialize;

/// What the runner must do before replaying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CapacityPlan {
    /// The capacity requested (the emulated device), before scaling; `None`: the real device.
    pub target_bytes: Option<u64>,
    /// Every trace size and the capacity are divided by this (1: no scaling).
    pub scale_divisor: u64,
    /// The capacity the trace runs against on this device (`target / scale_divisor`, or the
    /// free memory when no target was given).
    pub capacity_bytes: u64,
    /// Ballast to allocate first so that `capacity_bytes` remain free.
    pub ballast_bytes: u64,
    /// The device capacity the allocator model is given (what a framework on the emulated
    /// device would see as its total, the base of a memory fraction): the target (scaled),
    /// or the real device's total when nothing is emulated.
    pub device_bytes: u64,
}

/// Plans emulating `target` (None: use the device as it is) on a device with `free` of
/// `total` bytes free.
pub fn plan_capacity(target: Option<u64>, free: u64, total: u64) -> CapacityPlan {
    match target {
        None => CapacityPlan {
            target_bytes: None,
            scale_divisor: 1,
            capacity_bytes: free,
            ballast_bytes: 0,
            device_bytes: total,
        },
        Some(t) if t <= free => CapacityPlan {
            target_bytes: Some(t),
            scale_divisor: 1,
            capacity_bytes: t,
            ballast_bytes: free - t,
            device_bytes: t,
        },
        Some(t) => {
            // free > 0 here unless the device is full; a full device cannot emulate anything,
            // which the runner reports when the ballast/region allocation fails.
            let divisor = t.div_ceil(free.max(1));
            let capacity = t / divisor;
            CapacityPlan {
                target_bytes: Some(t),
                scale_divisor: divisor,
                capacity_bytes: capacity,
                ballast_bytes: free - capacity,
                device_bytes: capacity,
            }
        }
    }
}

/// The top-up ballast after the first ballast allocation: the driver rounds allocations
/// and keeps some memory itself, so free memory is measured again and the excess over the
/// capacity, rounded down to `granularity`, is reserved too. 0 when within one granule.
pub fn top_up(free_now: u64, capacity: u64, granularity: u64) -> u64 {
    let excess = free_now.saturating_sub(capacity);
    let g = granularity.max(1);
    excess / g * g
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn smaller_target_gets_a_ballast_of_the_difference() {
        let p = plan_capacity(Some(80 * GIB), 139 * GIB, 200 * GIB);
        assert_eq!(p.ballast_bytes, 59 * GIB);
        assert_eq!(p.capacity_bytes, 80 * GIB);
        assert_eq!(p.scale_divisor, 1);
        assert_eq!(p.capacity_bytes + p.ballast_bytes, 139 * GIB);
    }

    #[test]
    fn larger_target_is_scaled_by_the_smallest_integer_that_fits() {
        // MI300X (192 GiB) on an H100 with 78 GiB free: divide by 3, 64 GiB remain.
        let p = plan_capacity(Some(192 * GIB), 78 * GIB, 200 * GIB);
        assert_eq!(p.scale_divisor, 3);
        assert_eq!(p.capacity_bytes, 64 * GIB);
        assert_eq!(p.ballast_bytes, 14 * GIB);
        // Just over: divisor 2.
        let p = plan_capacity(Some(100 * GIB + 1), 100 * GIB, 200 * GIB);
        assert_eq!(p.scale_divisor, 2);
        assert!(p.capacity_bytes <= 100 * GIB);
    }

    #[test]
    fn no_target_uses_what_is_free() {
        let p = plan_capacity(None, 5 * GIB, 200 * GIB);
        assert_eq!(
            (p.scale_divisor, p.capacity_bytes, p.ballast_bytes),
            (1, 5 * GIB, 0)
        );
    }

    #[test]
    fn exact_fit_needs_no_ballast() {
        let p = plan_capacity(Some(5 * GIB), 5 * GIB, 200 * GIB);
        assert_eq!((p.scale_divisor, p.ballast_bytes), (1, 0));
    }

    #[test]
    fn top_up_rounds_down_to_granularity() {
        let g = 2 << 20;
        assert_eq!(top_up(100 * g + 5, 10 * g, g), 90 * g);
        assert_eq!(top_up(10 * g + 5, 10 * g, g), 0);
        assert_eq!(top_up(9 * g, 10 * g, g), 0);
    }
}
