//! The text arguments of protocol 0 opcodes (`INT`, `LONG`, `FLOAT`, `STRING`,
//! `UNICODE`, `GET`/`PUT`): decimal numbers, Python string literals and
//! raw-unicode-escape text.

use std::rc::Rc;

use super::value::Value;
use super::ErrorKind;

fn bad(what: &str, line: &[u8]) -> ErrorKind {
    let shown: String = String::from_utf8_lossy(line).chars().take(40).collect();
    ErrorKind::BadArgument(format!("{what} {shown:?}"))
}

/// `INT` / `LONG`: a decimal integer (`LONG` ends in `L`; `INT` `00`/`01` are bools).
pub fn int(line: &[u8], is_long: bool) -> Result<Value, ErrorKind> {
    if !is_long {
        match line {
            b"00" => return Ok(Value::Bool(false)),
            b"01" => return Ok(Value::Bool(true)),
            _ => {}
        }
    }
    let text = line.strip_suffix(b"L").unwrap_or(line);
    let s = std::str::from_utf8(text).map_err(|_| bad("integer", line))?;
    if let Ok(i) = s.parse::<i64>() {
        return Ok(Value::Int(i));
    }
    decimal_to_twos_complement(s)
        .map(|b| Value::BigInt(Rc::new(b)))
        .ok_or_else(|| bad("integer", line))
}

/// A decimal string (optional sign) as little-endian two's complement bytes, as `LONG1`
/// carries them. At most 4,300 digits (Python's own default limit).
fn decimal_to_twos_complement(s: &str) -> Option<Vec<u8>> {
    let (neg, digits) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 4300 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Magnitude in base 256, little-endian.
    let mut mag: Vec<u8> = vec![0];
    for d in digits.bytes() {
        let mut carry = u32::from(d - b'0');
        for byte in mag.iter_mut() {
            let v = u32::from(*byte) * 10 + carry;
            *byte = (v & 0xff) as u8;
            carry = v >> 8;
        }
        while carry > 0 {
            mag.push((carry & 0xff) as u8);
            carry >>= 8;
        }
    }
    // Room for the sign bit.
    mag.push(0);
    if neg {
        let mut carry = 1u16;
        for byte in mag.iter_mut() {
            let v = u16::from(!*byte) + carry;
            *byte = (v & 0xff) as u8;
            carry = v >> 8;
        }
    }
    Some(mag)
}

/// `FLOAT`: Python's `repr` of a float.
pub fn float(line: &[u8]) -> Result<Value, ErrorKind> {
    let s = std::str::from_utf8(line).map_err(|_| bad("float", line))?;
    let f = match s {
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        "nan" => f64::NAN,
        _ => s.parse::<f64>().map_err(|_| bad("float", line))?,
    };
    Ok(Value::Float(f))
}

/// `GET`/`PUT`: a decimal memo index.
pub fn index(line: &[u8]) -> Result<u32, ErrorKind> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .ok_or_else(|| bad("memo index", line))
}

/// `STRING`: a quoted Python 2 string literal (the bytes it denotes).
pub fn quoted(line: &[u8]) -> Result<Vec<u8>, ErrorKind> {
    let q = *line.first().ok_or_else(|| bad("string literal", line))?;
    if line.len() < 2 || (q != b'\'' && q != b'"') || line[line.len() - 1] != q {
        return Err(bad("string literal", line));
    }
    let body = &line[1..line.len() - 1];
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        i += 1;
        if c != b'\\' {
            out.push(c);
            continue;
        }
        let e = *body.get(i).ok_or_else(|| bad("string literal", line))?;
        i += 1;
        match e {
            b'\\' | b'\'' | b'"' => out.push(e),
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'v' => out.push(11),
            b'x' => {
                let hex = body
                    .get(i..i + 2)
                    .ok_or_else(|| bad("string literal", line))?;
                let s = std::str::from_utf8(hex).map_err(|_| bad("string literal", line))?;
                out.push(u8::from_str_radix(s, 16).map_err(|_| bad("string literal", line))?);
                i += 2;
            }
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match body.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push((v & 0xff) as u8);
            }
            _ => {
                out.push(b'\\');
                out.push(e);
            }
        }
    }
    Ok(out)
}

/// `UNICODE`: raw-unicode-escape text (`\uXXXX`, `\UXXXXXXXX`; other bytes are
/// Latin-1).
pub fn raw_unicode_escape(line: &[u8]) -> Result<String, ErrorKind> {
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        let c = line[i];
        let digits = match (c, line.get(i + 1)) {
            (b'\\', Some(b'u')) => 4,
            (b'\\', Some(b'U')) => 8,
            _ => {
                out.push(char::from(c));
                i += 1;
                continue;
            }
        };
        let hex = line
            .get(i + 2..i + 2 + digits)
            .ok_or_else(|| bad("unicode escape", line))?;
        let s = std::str::from_utf8(hex).map_err(|_| bad("unicode escape", line))?;
        let v = u32::from_str_radix(s, 16).map_err(|_| bad("unicode escape", line))?;
        out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
        i += 2 + digits;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::pickle::value::big_to_i128;

    #[test]
    fn decimal_ints_round_trip_through_twos_complement() {
        for v in [
            0i128,
            1,
            -1,
            127,
            128,
            -128,
            -129,
            1 << 63,
            -(1 << 63) - 1,
            (1 << 100) + 7,
            -(1 << 100),
        ] {
            let bytes = decimal_to_twos_complement(&v.to_string()).unwrap();
            assert_eq!(big_to_i128(&bytes), Some(v), "{v}");
        }
        assert_eq!(int(b"01", false).unwrap(), Value::Bool(true));
        assert_eq!(int(b"42L", true).unwrap(), Value::Int(42));
        assert!(int(b"4x2", false).is_err());
    }

    #[test]
    fn literals_unescape() {
        assert_eq!(quoted(br"'a\'b\x41\n\101'").unwrap(), b"a'bA\nA");
        assert!(quoted(b"'open").is_err());
        assert_eq!(
            raw_unicode_escape(br"caf\u00e9 \U0001F600").unwrap(),
            "café 😀"
        );
        assert_eq!(float(b"1.5").unwrap(), Value::Float(1.5));
    }
}
