//! The plain data a pickle may hold here: `None`, bools, ints, floats, str, bytes, lists,
//! tuples, dicts and sets, shared by reference as Python shares them (a memo `GET` gives
//! the same `Rc`, never a deep copy).

use std::rc::Rc;

/// One plain Python value. Containers are reference-counted so a value the pickle refers
/// to again (memo `GET`) costs a pointer, as in Python.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An int outside `i64`, as the little-endian two's complement bytes of `LONG1`.
    BigInt(Rc<Vec<u8>>),
    Float(f64),
    Str(Rc<str>),
    /// `bytes`, `bytearray`, and protocol 0-2 strings that are not UTF-8.
    Bytes(Rc<Vec<u8>>),
    List(Rc<Vec<Value>>),
    Tuple(Rc<Vec<Value>>),
    /// Items in the order the pickle set them (a later equal key wins, see [`Value::get`]).
    Dict(Rc<Vec<(Value, Value)>>),
    /// `set` and `frozenset`.
    Set(Rc<Vec<Value>>),
}

impl Value {
    pub fn str(s: &str) -> Self {
        Value::Str(Rc::from(s))
    }

    /// The Python type name, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
            Value::Set(_) => "set",
        }
    }

    /// Whether both are the same shared object (the same `Rc`); never for scalars.
    pub fn same_object(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Str(a), Value::Str(b)) => Rc::ptr_eq(a, b),
            (Value::Bytes(a), Value::Bytes(b)) | (Value::BigInt(a), Value::BigInt(b)) => {
                Rc::ptr_eq(a, b)
            }
            (Value::List(a), Value::List(b))
            | (Value::Tuple(a), Value::Tuple(b))
            | (Value::Set(a), Value::Set(b)) => Rc::ptr_eq(a, b),
            (Value::Dict(a), Value::Dict(b)) => Rc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Whether this is a list, tuple, dict or set.
    pub fn is_container(&self) -> bool {
        matches!(
            self,
            Value::List(_) | Value::Tuple(_) | Value::Dict(_) | Value::Set(_)
        )
    }

    /// Whether this is a container that holds another container (a dict of scalars does
    /// not): what [`Writer::forget_containers`](super::write::Writer::forget_containers)
    /// writes anew.
    pub fn holds_containers(&self) -> bool {
        match self {
            Value::List(v) | Value::Tuple(v) | Value::Set(v) => v.iter().any(Value::is_container),
            Value::Dict(d) => d.iter().any(|(k, v)| k.is_container() || v.is_container()),
            _ => false,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            Value::BigInt(b) => {
                let v = big_to_i128(b)?;
                i64::try_from(v).ok()
            }
            _ => None,
        }
    }

    /// A non-negative int that fits in `u64` (addresses, sizes, stream handles).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(i) => u64::try_from(*i).ok(),
            Value::Bool(b) => Some(u64::from(*b)),
            Value::BigInt(b) => u64::try_from(big_to_i128(b)?).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            Value::Int(0) => Some(false),
            Value::Int(1) => Some(true),
            _ => None,
        }
    }

    /// The items of a list or tuple.
    pub fn as_seq(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) | Value::Tuple(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_dict(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Dict(d) => Some(d),
            _ => None,
        }
    }

    /// The value of the string key `key` of a dict (the last one set, as in Python).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_dict()?
            .iter()
            .rev()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }

    /// A JSON rendering (bytes as lossy text, big ints as their decimal string when they
    /// do not fit a JSON number, sets as arrays, non-string dict keys as their rendering).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::None => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::BigInt(b) => match big_to_i128(b) {
                Some(v) => u64::try_from(v)
                    .map(J::from)
                    .or_else(|_| i64::try_from(v).map(J::from))
                    .unwrap_or_else(|_| J::String(v.to_string())),
                None => J::String(format!("<int of {} bytes>", b.len())),
            },
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
            Value::Str(s) => J::String(s.to_string()),
            Value::Bytes(b) => J::String(String::from_utf8_lossy(b).into_owned()),
            Value::List(v) | Value::Tuple(v) | Value::Set(v) => {
                J::Array(v.iter().map(Value::to_json).collect())
            }
            Value::Dict(d) => J::Object(
                d.iter()
                    .map(|(k, v)| {
                        let key = match k {
                            Value::Str(s) => s.to_string(),
                            other => other.to_json().to_string(),
                        };
                        (key, v.to_json())
                    })
                    .collect(),
            ),
        }
    }
}

/// The value of little-endian two's complement bytes, when it fits in `i128`.
pub fn big_to_i128(bytes: &[u8]) -> Option<i128> {
    if bytes.is_empty() {
        return Some(0);
    }
    let negative = bytes[bytes.len() - 1] & 0x80 != 0;
    let fill = if negative { 0xff } else { 0 };
    // Bytes beyond 16 must be pure sign extension.
    if bytes.len() > 16 && bytes[16..].iter().any(|&b| b != fill) {
        return None;
    }
    let mut buf = [fill; 16];
    let n = bytes.len().min(16);
    buf[..n].copy_from_slice(&bytes[..n]);
    let v = i128::from_le_bytes(buf);
    // A 16-byte prefix whose sign differs from the full number's does not fit.
    if (v < 0) != negative {
        return None;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_ints_decode_like_python() {
        assert_eq!(big_to_i128(&[]), Some(0));
        assert_eq!(big_to_i128(&[0xff]), Some(-1));
        assert_eq!(big_to_i128(&[0x80, 0x00]), Some(128));
        // 2**63 needs 9 bytes in Python's encoding and fits in u64.
        let v = Value::BigInt(Rc::new(vec![0, 0, 0, 0, 0, 0, 0, 0x80, 0]));
        assert_eq!(v.as_u64(), Some(1 << 63));
        assert_eq!(v.as_i64(), None);
        let mut huge = vec![0u8; 20];
        huge[18] = 1;
        assert_eq!(big_to_i128(&huge), None);
        assert_eq!(big_to_i128(&[0xff; 20]), Some(-1));
    }

    #[test]
    fn dict_get_takes_the_last_equal_key() {
        let d = Value::Dict(Rc::new(vec![
            (Value::str("a"), Value::Int(1)),
            (Value::str("a"), Value::Int(2)),
        ]));
        assert_eq!(d.get("a"), Some(&Value::Int(2)));
        assert_eq!(d.get("b"), None);
        assert!(!d.holds_containers());
        assert!(Value::List(Rc::new(vec![d])).holds_containers());
    }
}
