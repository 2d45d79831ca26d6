//! [`ImageClock`]: which exec image of a pid a record read from a stream belongs to.
//!
//! A pid's first `process_start` opens image 0; each later one (the shim announces the
//! new program after an `exec`) opens the next image, and the one before it ended: the
//! exec gave its memory back. Records are attributed to the pid's newest image. This is
//! the streaming form of the rule; a whole capture is split by time instead
//! (`capture::images`), because frames of two images can arrive interleaved.

use std::collections::HashMap;

use super::ProcKey;

/// The current image of every pid seen so far.
#[derive(Debug, Clone, Default)]
pub struct ImageClock {
    /// pid -> (current image, whether that image announced itself).
    current: HashMap<u32, (u32, bool)>,
}

impl ImageClock {
    /// The image a record of `pid` read now belongs to.
    pub fn key(&self, pid: u32) -> ProcKey {
        let image = self.current.get(&pid).map_or(0, |c| c.0);
        ProcKey { pid, image }
    }

    /// A `process_start` of `pid` was read. Returns the image it ended (an exec), if
    /// any: the caller releases that image's memory.
    pub fn process_start(&mut self, pid: u32) -> Option<ProcKey> {
        let c = self.current.entry(pid).or_insert((0, false));
        if !c.1 {
            // The pid's first announcement (its events may have come first).
            c.1 = true;
            return None;
        }
        let ended = ProcKey { pid, image: c.0 };
        c.0 += 1;
        Some(ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_later_start_of_a_pid_ends_its_image() {
        let mut c = ImageClock::default();
        assert_eq!(c.key(5), ProcKey { pid: 5, image: 0 });
        assert_eq!(c.process_start(5), None);
        assert_eq!(c.process_start(6), None);
        assert_eq!(c.process_start(5), Some(ProcKey { pid: 5, image: 0 }));
        assert_eq!(c.key(5), ProcKey { pid: 5, image: 1 });
        assert_eq!(c.process_start(5), Some(ProcKey { pid: 5, image: 1 }));
        assert_eq!(c.key(6), ProcKey { pid: 6, image: 0 });
    }
}
