//! From pickle values to the typed snapshot: one function per kind of element, each
//! naming the element and field that is wrong.

use super::model::{Action, AllocatorSettings, Annotation, Block, BlockState, Entry, Segment};
use super::pickle::{Element, Value};
use super::stacks::{StackId, StackTable};

fn field<'a>(v: &'a Value, key: &str, at: &dyn Fn() -> String) -> Result<&'a Value, String> {
    v.get(key).ok_or_else(|| format!("{}: no '{key}'", at()))
}

fn u64_field(v: &Value, key: &str, at: &dyn Fn() -> String) -> Result<u64, String> {
    let f = field(v, key, at)?;
    f.as_u64().ok_or_else(|| {
        format!(
            "{}: '{key}' is a {} ({}), not a non-negative int",
            at(),
            f.type_name(),
            f.to_json()
        )
    })
}

fn dict<'a>(v: &'a Value, at: &dyn Fn() -> String) -> Result<&'a Value, String> {
    match v {
        Value::Dict(_) => Ok(v),
        other => Err(format!("{}: a {}, not a dict", at(), other.type_name())),
    }
}

fn element_dict<'a>(
    v: Element<'a>,
    at: &dyn Fn() -> String,
) -> Result<&'a [(Value, Value)], String> {
    v.dict()
        .ok_or_else(|| format!("{}: a {}, not a dict", at(), v.type_name()))
}

/// The value of the string key `key` of a dict's items (the last one set).
fn item<'a>(items: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    items
        .iter()
        .rev()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn stack(v: &Value, stacks: &mut StackTable, at: &dyn Fn() -> String) -> Result<StackId, String> {
    match v.get("frames") {
        None => Ok(StackId::NONE),
        Some(f) => stacks.intern(f).map_err(|e| format!("{}: {e}", at())),
    }
}

/// The first entry of a block's `history` (PyTorch 2.0's blocks: a list of
/// `{addr, real_size, frames[, cpp_frames]}` instead of `frames` and `requested_size`),
/// read as memory_viz reads it.
fn first_history(b: &Value) -> Option<&Value> {
    b.get("history")?.as_seq()?.first()
}

/// One trace entry (`device_traces[device][index]`). `None`: an action this build does
/// not know. (One pass over the keys: this runs for every entry of multi-GB traces.)
pub fn entry(
    v: Element<'_>,
    device: usize,
    index: usize,
    stacks: &mut StackTable,
) -> Result<Option<Entry>, String> {
    let at = || format!("device_traces[{device}][{index}]");
    let items = element_dict(v, &at)?;
    let mut action = None;
    let (mut time_us, mut addr, mut size, mut stream, mut device_free) =
        (None, None, None, None, None);
    let (mut frames, mut compile_context, mut user_metadata) = (None, None, None);
    for (k, x) in items {
        match k.as_str() {
            Some("action") => action = Some(x),
            Some("time_us") => time_us = Some(x),
            Some("addr") => addr = Some(x),
            Some("size") => size = Some(x),
            Some("stream") => stream = Some(x),
            Some("device_free") => device_free = Some(x),
            Some("frames") => frames = Some(x),
            Some("compile_context") => compile_context = Some(x),
            Some("user_metadata") => user_metadata = Some(x),
            _ => {}
        }
    }
    let action = action.ok_or_else(|| format!("{}: no 'action'", at()))?;
    let name = action
        .as_str()
        .ok_or_else(|| format!("{}: 'action' is a {}", at(), action.type_name()))?;
    let Some(action) = Action::from_name(name) else {
        return Ok(None);
    };
    let number = |x: Option<&Value>, key: &str, required: bool| -> Result<u64, String> {
        match x {
            Some(x) => x.as_u64().ok_or_else(|| {
                format!(
                    "{}: '{key}' is a {} ({}), not a non-negative int",
                    at(),
                    x.type_name(),
                    x.to_json()
                )
            }),
            None if required => Err(format!("{}: no '{key}'", at())),
            None => Ok(0),
        }
    };
    let time_us = match time_us {
        Some(t) => t
            .as_i64()
            .ok_or_else(|| format!("{}: 'time_us' is a {}", at(), t.type_name()))?,
        None => 0,
    };
    let keyed = !matches!(action, Action::Oom | Action::Snapshot);
    let addr = number(addr, "addr", keyed)?;
    let size = number(size, "size", action != Action::Snapshot)?;
    let device_free = number(device_free, "device_free", action == Action::Oom)?;
    let stream = stream.and_then(Value::as_u64).unwrap_or(0);
    let mut text = |x: Option<&Value>| match x.and_then(Value::as_str) {
        Some(s) if !s.is_empty() && s != "N/A" => stacks.text(s),
        _ => 0,
    };
    let compile_context = text(compile_context);
    let user_metadata = text(user_metadata);
    let stack = match frames {
        None => StackId::NONE,
        Some(f) => stacks.intern(f).map_err(|e| format!("{}: {e}", at()))?,
    };
    Ok(Some(Entry {
        action,
        time_us,
        addr: if action == Action::Oom { 0 } else { addr },
        size,
        stream,
        device_free,
        stack,
        compile_context,
        user_metadata,
    }))
}

/// The name of an entry's action when this build does not know it.
pub fn unknown_action(v: Element<'_>) -> Option<String> {
    let name = item(v.dict()?, "action")?.as_str()?;
    Action::from_name(name).is_none().then(|| name.to_string())
}

/// One segment (`segments[index]`) with its blocks.
pub fn segment(v: &Value, index: usize, stacks: &mut StackTable) -> Result<Segment, String> {
    let at = || format!("segments[{index}]");
    let v = dict(v, &at)?;
    let device = field(v, "device", &at)?
        .as_i64()
        .and_then(|d| i32::try_from(d).ok())
        .ok_or_else(|| format!("{}: 'device' is not a device number", at()))?;
    let address = u64_field(v, "address", &at)?;
    let total_size = u64_field(v, "total_size", &at)?;
    let end = address.saturating_add(total_size);
    let blocks_v = field(v, "blocks", &at)?;
    let items = blocks_v
        .as_seq()
        .ok_or_else(|| format!("{}: 'blocks' is a {}", at(), blocks_v.type_name()))?;
    let mut blocks = Vec::with_capacity(items.len());
    // Blocks lie end to end from the segment's address (PyTorch writes them so, and
    // computes each `address` that way; PyTorch 2.0's blocks have no `address`).
    let mut next = address;
    for (j, b) in items.iter().enumerate() {
        let bat = || format!("segments[{index}].blocks[{j}]");
        let b = dict(b, &bat)?;
        let state_v = field(b, "state", &bat)?;
        let state = state_v
            .as_str()
            .and_then(BlockState::from_name)
            .ok_or_else(|| format!("{}: unknown block state {}", bat(), state_v.to_json()))?;
        let size = u64_field(b, "size", &bat)?;
        let b_address = match b.get("address") {
            Some(_) => u64_field(b, "address", &bat)?,
            None => next,
        };
        next = b_address.saturating_add(size);
        let history = first_history(b);
        // A block lies in its segment: what makes a blocks list that several segments
        // share (one memoized list) wrong at the second, before it is copied out again.
        if b_address < address || b_address.saturating_add(size) > end {
            return Err(format!(
                "{}: block 0x{b_address:x} + {size} lies outside its segment 0x{address:x} + \
                 {total_size}",
                bat()
            ));
        }
        let requested = b
            .get("requested_size")
            .or_else(|| history.and_then(|h| h.get("real_size")))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let stack = match (b.get("frames"), history) {
            (None, Some(h)) => stack(h, stacks, &bat)?,
            _ => stack(b, stacks, &bat)?,
        };
        blocks.push(Block {
            address: b_address,
            size,
            requested_size: requested,
            state,
            stack,
        });
    }
    Ok(Segment {
        device,
        address,
        total_size,
        allocated_size: v.get("allocated_size").and_then(Value::as_u64).unwrap_or(0),
        active_size: v.get("active_size").and_then(Value::as_u64).unwrap_or(0),
        requested_size: v.get("requested_size").and_then(Value::as_u64).unwrap_or(0),
        stream: v.get("stream").and_then(Value::as_u64).unwrap_or(0),
        segment_type: v
            .get("segment_type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        is_expandable: v
            .get("is_expandable")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        stack: stack(v, stacks, &at)?,
        blocks,
    })
}

/// One `external_annotations[index]`.
pub fn annotation(v: Element<'_>, index: usize) -> Result<Annotation, String> {
    let at = || format!("external_annotations[{index}]");
    let v = element_dict(v, &at)?;
    Ok(Annotation {
        device: item(v, "device")
            .and_then(Value::as_i64)
            .and_then(|d| i32::try_from(d).ok())
            .unwrap_or(-1),
        time_us: item(v, "time_us").and_then(Value::as_i64).unwrap_or(0),
        stage: item(v, "stage")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        name: item(v, "name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    })
}

/// `allocator_settings` (absent in old snapshots: all unknown).
pub fn settings(v: Option<&Value>) -> Result<AllocatorSettings, String> {
    let Some(v) = v else {
        return Ok(AllocatorSettings::default());
    };
    let v = dict(v, &|| "allocator_settings".to_string())?;
    let divisions = v.get("roundup_power2_divisions").and_then(|d| match d {
        Value::Dict(items) => {
            // Keys are the interval starts in MiB ('1', '2', ... '32768').
            let mut by_start: Vec<(u64, u64)> = items
                .iter()
                .filter_map(|(k, v)| Some((k.as_str()?.parse().ok()?, v.as_u64()?)))
                .collect();
            by_start.sort_unstable();
            let values: Vec<u64> = by_start.into_iter().map(|(_, d)| d).collect();
            values.iter().any(|&d| d > 0).then_some(values)
        }
        Value::List(items) => {
            let values: Vec<u64> = items.iter().filter_map(Value::as_u64).collect();
            values.iter().any(|&d| d > 0).then_some(values)
        }
        _ => None,
    });
    Ok(AllocatorSettings {
        conf: v
            .get("PYTORCH_CUDA_ALLOC_CONF")
            .and_then(Value::as_str)
            .map(str::to_string),
        expandable_segments: v.get("expandable_segments").and_then(Value::as_bool),
        max_split_size: v
            .get("max_split_size")
            .and_then(Value::as_i64)
            .and_then(|m| u64::try_from(m).ok()),
        garbage_collection_threshold: v
            .get("garbage_collection_threshold")
            .and_then(Value::as_f64),
        roundup_power2_divisions: divisions,
        raw: v.to_json(),
    })
}
