//! The allocator's segments at the dump as capture markers (`torch.segment`), so a
//! stored snapshot run keeps what `_snapshot()['segments']` says: each segment (device,
//! address, size, stream, pool, expandable or not, the stack that made it) and every
//! block in it (address, size, requested bytes, state, stack). `records` writes them
//! after each device's events; the daemon's segments view reads them back.
//!
//! ```text
//! torch.segment DEVICE ADDRESS TOTAL STREAM TYPE expandable|fixed STACK PART
//! ADDRESS SIZE REQUESTED STATE STACK        (one line per block, in address order)
//! ```
//! Addresses in hex (`0x…`), sizes in bytes, `STACK` the stack's number (its
//! `torch.stack N` marker) or `-`. A segment whose blocks do not fit one marker is
//! written in parts 0, 1, … with the same header; its blocks are the parts' in order.

use super::model::{BlockState, Segment};
use super::stacks::StackId;

/// The first word of a segment's marker.
pub const SEGMENT_MARKER: &str = "torch.segment ";

/// A segment read back from its marker (one part of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentPart {
    pub device: i32,
    pub address: u64,
    pub total_size: u64,
    pub stream: u64,
    /// `small` or `large` (PyTorch's pool); `-` when the snapshot did not say.
    pub segment_type: String,
    pub is_expandable: bool,
    /// The stack number of the allocation that made it.
    pub stack: Option<u32>,
    pub part: u32,
    pub blocks: Vec<BlockLine>,
}

/// One block of a segment at the dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockLine {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    pub stack: Option<u32>,
}

fn stack_field(s: Option<u32>) -> String {
    s.map_or_else(|| "-".to_string(), |n| n.to_string())
}

fn stack_number(id: StackId) -> Option<u32> {
    id.is_known().then_some(id.0)
}

/// The markers of one segment, each at most `max_text` bytes long.
pub fn segment_markers(seg: &Segment, max_text: usize) -> Vec<String> {
    let kind = if seg.segment_type.trim().is_empty() {
        "-".to_string()
    } else {
        seg.segment_type
            .split_whitespace()
            .collect::<Vec<_>>()
            .join("_")
    };
    let header = |part: u32| {
        format!(
            "{SEGMENT_MARKER}{} {:#x} {} {} {} {} {} {part}",
            seg.device,
            seg.address,
            seg.total_size,
            seg.stream,
            kind,
            if seg.is_expandable {
                "expandable"
            } else {
                "fixed"
            },
            stack_field(stack_number(seg.stack)),
        )
    };
    let mut out = Vec::new();
    let mut part = 0u32;
    let mut text = header(part);
    for b in &seg.blocks {
        let line = format!(
            "\n{:#x} {} {} {} {}",
            b.address,
            b.size,
            b.requested_size,
            b.state.name(),
            stack_field(stack_number(b.stack))
        );
        if text.len() + line.len() > max_text {
            out.push(std::mem::take(&mut text));
            part += 1;
            text = header(part);
        }
        text.push_str(&line);
    }
    out.push(text);
    out
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

fn stack_of(s: &str) -> Option<Option<u32>> {
    if s == "-" {
        Some(None)
    } else {
        s.parse().ok().map(Some)
    }
}

/// A `torch.segment` marker read back (`None`: not one, or damaged).
pub fn parse_segment_marker(text: &str) -> Option<SegmentPart> {
    let mut lines = text.lines();
    let head = lines.next()?.strip_prefix(SEGMENT_MARKER)?;
    let f: Vec<&str> = head.split_whitespace().collect();
    let [device, address, total, stream, kind, exp, stack, part] = f.as_slice() else {
        return None;
    };
    let mut seg = SegmentPart {
        device: device.parse().ok()?,
        address: hex(address)?,
        total_size: total.parse().ok()?,
        stream: stream.parse().ok()?,
        segment_type: kind.to_string(),
        is_expandable: match *exp {
            "expandable" => true,
            "fixed" => false,
            _ => return None,
        },
        stack: stack_of(stack)?,
        part: part.parse().ok()?,
        blocks: Vec::new(),
    };
    for l in lines {
        let f: Vec<&str> = l.split_whitespace().collect();
        let [address, size, requested, state, stack] = f.as_slice() else {
            return None;
        };
        seg.blocks.push(BlockLine {
            address: hex(address)?,
            size: size.parse().ok()?,
            requested_size: requested.parse().ok()?,
            state: BlockState::from_name(state)?,
            stack: stack_of(stack)?,
        });
    }
    Some(seg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::model::Block;

    fn seg(blocks: usize) -> Segment {
        Segment {
            device: 1,
            address: 0x7f00_0000_0000,
            total_size: 2 << 20,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: 7,
            segment_type: "small".into(),
            is_expandable: true,
            stack: StackId(3),
            blocks: (0..blocks as u64)
                .map(|i| Block {
                    address: 0x7f00_0000_0000 + i * 512,
                    size: 512,
                    requested_size: 500,
                    state: if i % 2 == 0 {
                        BlockState::ActiveAllocated
                    } else {
                        BlockState::Inactive
                    },
                    stack: if i % 3 == 0 {
                        StackId::NONE
                    } else {
                        StackId(9)
                    },
                })
                .collect(),
        }
    }

    #[test]
    fn a_segment_reads_back_whole_across_parts() {
        for n in [0, 1, 7, 500] {
            let s = seg(n);
            let texts = segment_markers(&s, 400);
            assert!(texts.iter().all(|t| t.len() <= 400), "{n}");
            let parts: Vec<SegmentPart> = texts
                .iter()
                .map(|t| parse_segment_marker(t).expect("reads back"))
                .collect();
            assert_eq!(
                parts.iter().map(|p| p.part).collect::<Vec<_>>(),
                (0..parts.len() as u32).collect::<Vec<_>>()
            );
            let blocks: Vec<BlockLine> = parts.iter().flat_map(|p| p.blocks.clone()).collect();
            assert_eq!(blocks.len(), n);
            for (b, want) in blocks.iter().zip(&s.blocks) {
                assert_eq!(b.address, want.address);
                assert_eq!(b.state, want.state);
                assert_eq!(b.stack, want.stack.is_known().then_some(want.stack.0));
            }
            let p = &parts[0];
            assert_eq!(
                (p.device, p.address, p.total_size, p.stream, p.is_expandable),
                (1, s.address, 2 << 20, 7, true)
            );
            assert_eq!((p.segment_type.as_str(), p.stack), ("small", Some(3)));
        }
    }

    #[test]
    fn damaged_markers_are_not_segments() {
        let good = segment_markers(&seg(2), 65_000).remove(0);
        assert!(parse_segment_marker(&good).is_some());
        assert!(parse_segment_marker("torch.stack 1").is_none());
        assert!(parse_segment_marker(&good.replace("expandable", "maybe")).is_none());
        assert!(parse_segment_marker(&good.replace("active_allocated", "held")).is_none());
        assert!(parse_segment_marker(&format!("{good}\n0x10 5")).is_none());
    }
}
