//! Offline symbolization of sampled native stacks.
//!
//! Owns turning a return address of a captured process into module + offset and, when
//! the module's ELF file (as it is on this machine now) has a symbol table, the name of
//! the function containing the call. Modules come from the capture's `module_map`
//! frames; files are read with the `object` crate, once per path. Nothing here fails: an
//! address outside every module, a missing file or a stripped one just gives less.

use std::collections::HashMap;

use memwatch_wire::Module;
use object::{Object, ObjectSymbol, SymbolKind};

/// One frame of a sampled stack, as far as it could be resolved.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StackFrame {
    /// The return address in the process.
    pub address: u64,
    /// Path of the object it lies in (`None`: no module covers it).
    pub module: Option<String>,
    /// Offset of the address in the object's ELF virtual addresses.
    pub offset: u64,
    /// The function containing the call (from the ELF symbol tables), when known.
    pub symbol: Option<String>,
}

/// Function symbols of one file: (start, size, name), sorted by start.
type Symbols = Vec<(u64, u64, String)>;

/// Symbol tables read so far, by path (`None`: unreadable or not an object file).
#[derive(Default)]
pub struct Symbolizer {
    files: HashMap<String, Option<Symbols>>,
}

fn read_symbols(path: &str) -> Option<Symbols> {
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let mut syms: Symbols = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
        .filter(|(_, _, n)| !n.is_empty())
        .collect();
    syms.sort();
    syms.dedup_by_key(|s| s.0);
    Some(syms)
}

impl Symbolizer {
    /// Resolves `addresses` (return addresses, innermost first) against `modules`.
    pub fn frames(&mut self, modules: &[Module], addresses: &[u64]) -> Vec<StackFrame> {
        addresses
            .iter()
            .map(|&address| {
                let Some(m) = modules
                    .iter()
                    .find(|m| m.start <= address && address < m.end)
                else {
                    return StackFrame {
                        address,
                        module: None,
                        offset: address,
                        symbol: None,
                    };
                };
                let offset = address.wrapping_sub(m.bias);
                // A return address points after the call: look up the call itself.
                let at = offset.saturating_sub(1);
                let syms = self
                    .files
                    .entry(m.path.clone())
                    .or_insert_with(|| read_symbols(&m.path));
                let symbol = syms.as_ref().and_then(|syms| {
                    let i = syms.partition_point(|s| s.0 <= at).checked_sub(1)?;
                    let (start, size, name) = syms.get(i)?;
                    (*size == 0 || at < start.saturating_add(*size)).then(|| name.clone())
                });
                StackFrame {
                    address,
                    module: Some(m.path.clone()),
                    offset,
                    symbol,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_function_is_named_and_unknown_addresses_are_kept() {
        // This test binary: its own address range from /proc/self/maps is not needed;
        // a module entry spanning the function with bias 0 maps address = ELF vaddr for
        // a non-PIE view, so use the real bias from the loaded image instead.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let f = own_function_is_named_and_unknown_addresses_are_kept as *const () as usize as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        // The lowest mapping of the executable is its load base (bias for PIE).
        let base = maps
            .lines()
            .filter(|l| l.ends_with(&*exe.to_string_lossy()))
            .filter_map(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
            .min()
            .unwrap();
        let m = Module {
            start: base,
            end: f + 4096,
            bias: base,
            path: exe.to_string_lossy().into_owned(),
        };
        let mut s = Symbolizer::default();
        let fr = s.frames(std::slice::from_ref(&m), &[f + 1, 1]);
        let name = fr[0].symbol.clone().unwrap_or_default();
        assert!(
            name.contains("own_function_is_named_and_unknown_addresses_are_kept"),
            "{fr:?}"
        );
        assert_eq!(fr[0].offset, f + 1 - base);
        assert_eq!(fr[1].module, None);
        assert_eq!(fr[1].symbol, None);
    }
}
