//! The caching allocator's rules a replay needs from the snapshot's settings: how a
//! request is rounded (`round_size`, with `roundup_power2_divisions` when set) and the
//! largest block that is still split (`max_split_size`).

use crate::alloc::torch::{round_size, MIN_BLOCK};
use crate::torch::model::AllocatorSettings;

/// The allocator rules the replay needs from the settings.
#[derive(Debug, Clone)]
pub struct Rules {
    divisions: Option<Vec<u64>>,
    pub(super) max_split: u64,
}

impl Rules {
    pub fn new(s: &AllocatorSettings) -> Self {
        Rules {
            divisions: s.roundup_power2_divisions.clone(),
            max_split: s.max_split_size.unwrap_or(u64::MAX),
        }
    }

    /// `round_size`, with `roundup_power2_divisions` when set.
    pub fn round(&self, size: u64) -> u64 {
        if let Some(divs) = &self.divisions {
            if size >= MIN_BLOCK {
                // Intervals by power of two from 1 MiB (index 0) to 32 GiB (15).
                let log = 63 - u64::from(size.leading_zeros());
                let index = (log.saturating_sub(20) as usize).min(divs.len().saturating_sub(1));
                let d = divs.get(index).copied().unwrap_or(0);
                if d > 1 && size > MIN_BLOCK * d {
                    return power2_division(size, d);
                }
            }
        }
        round_size(size)
    }
}

/// `roundup_power2_next_division`.
fn power2_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let down = size & !(step - 1);
    if down == size {
        size
    } else {
        down.saturating_add(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power2_divisions_round_like_pytorch() {
        // 1.1 GiB with 4 divisions per power of two: the next quarter step above 1 GiB.
        assert_eq!(power2_division(1_181_116_006, 4), 1_342_177_280);
        assert_eq!(power2_division(1 << 30, 4), 1 << 30);
        assert_eq!(
            power2_division((1 << 30) + (1 << 28), 4),
            (1 << 30) + (1 << 28)
        );
        let rules = Rules {
            divisions: Some(vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0]),
            max_split: u64::MAX,
        };
        assert_eq!(rules.round(1_181_116_006), 1_342_177_280);
        assert_eq!(rules.round(1000), 1024);
    }
}
