//! The field codec: how each field type of a wire record is written, read, stepped
//! over and described in the layout table.
//!
//! Owns the little-endian primitives, the `str` and counted-list encodings, the bounded
//! [`Cursor`] every read goes through, the two byte sinks (a growable `Vec<u8>` and the
//! allocation-free [`SliceWriter`] the shim uses), and the `wire_struct!` macro that
//! derives a record's whole codec (encode, decode, size check, layout) from its one
//! struct definition. Record types and framing live in `records` and `frame`.

use crate::WireError;

/// Where encoded bytes go.
pub trait Put {
    fn put(&mut self, bytes: &[u8]);
    /// The next `n` bytes, to be written in place (`None`: no room; a [`SliceWriter`]
    /// then reports the overflow).
    fn slot(&mut self, n: usize) -> Option<&mut [u8]>;
}

impl Put for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    #[inline]
    fn slot(&mut self, n: usize) -> Option<&mut [u8]> {
        let start = self.len();
        self.resize(start + n, 0);
        self.get_mut(start..)
    }
}

/// Writes into a fixed buffer without allocating; writes past its end are dropped and
/// remembered ([`SliceWriter::finish`] then says `None`).
pub struct SliceWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
    overflow: bool,
}

impl<'a> SliceWriter<'a> {
    pub fn new(buf: &'a mut [u8]) -> Self {
        SliceWriter {
            buf,
            pos: 0,
            overflow: false,
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// The bytes written so far (mutable, to patch a header in place).
    pub fn written_mut(&mut self) -> &mut [u8] {
        let pos = self.pos;
        &mut self.buf[..pos]
    }

    /// The length written, or `None` when the buffer was too small.
    pub fn finish(self) -> Option<usize> {
        (!self.overflow).then_some(self.pos)
    }
}

impl Put for SliceWriter<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        if let Some(dst) = self.slot(bytes.len()) {
            dst.copy_from_slice(bytes);
        }
    }
    #[inline]
    fn slot(&mut self, n: usize) -> Option<&mut [u8]> {
        match self.buf.get_mut(self.pos..self.pos + n) {
            Some(dst) if !self.overflow => {
                self.pos += n;
                Some(dst)
            }
            _ => {
                self.overflow = true;
                None
            }
        }
    }
}

/// Cursor over a frame payload; every read is bounds-checked.
pub struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
    frame_type: u8,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `payload`, a frame of type `frame_type` (named in errors).
    pub fn new(payload: &'a [u8], frame_type: u8) -> Self {
        Cursor {
            b: payload,
            pos: 0,
            frame_type,
        }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }

    /// The next `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.b.len() - self.pos < n {
            return Err(WireError::ShortPayload {
                frame_type: self.frame_type,
                need: self.pos.saturating_add(n),
                got: self.b.len(),
            });
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The next `N` bytes as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// Steps over `count` items of `size` bytes each.
    pub fn skip_n(&mut self, count: usize, size: usize) -> Result<(), WireError> {
        self.take(count.saturating_mul(size)).map(drop)
    }
}

/// One field type of the wire format.
pub trait Field: Sized + Default {
    /// Encoded size when it is always the same (`None`: it holds a count or a string).
    const FIXED_SIZE: Option<usize>;
    /// How the layout table writes this type: `u32`, `str`, `i32[count:u16]` (a `u16`
    /// count, then that many items).
    fn layout() -> String;
    fn put(&self, w: &mut impl Put);
    fn get(c: &mut Cursor<'_>) -> Result<Self, WireError>;
    /// Steps over one encoded value without building it; fails exactly where
    /// [`Field::get`] would.
    fn skip(c: &mut Cursor<'_>) -> Result<(), WireError> {
        match Self::FIXED_SIZE {
            Some(n) => c.take(n).map(drop),
            None => Self::get(c).map(drop),
        }
    }
    /// A fixed-size type's encoding into `dst`, which is [`Field::FIXED_SIZE`] bytes
    /// long. Fixed-size structs write their fields at constant offsets, so once inlined
    /// into a caller that knows the length, no write is bounds-checked (the events path).
    #[inline]
    fn put_fixed(&self, dst: &mut [u8]) {
        self.put(&mut SliceWriter::new(dst));
    }
    /// Reads a fixed-size type from `src`, which is [`Field::FIXED_SIZE`] bytes long.
    #[inline]
    fn get_fixed(src: &[u8]) -> Self {
        Self::get(&mut Cursor::new(src, 0)).unwrap_or_default()
    }
}

macro_rules! le_primitive {
    ($($t:ty => $name:literal),*) => {$(
        impl Field for $t {
            const FIXED_SIZE: Option<usize> = Some(core::mem::size_of::<$t>());
            fn layout() -> String {
                $name.to_string()
            }
            #[inline]
            fn put(&self, w: &mut impl Put) {
                w.put(&self.to_le_bytes());
            }
            #[inline]
            fn get(c: &mut Cursor<'_>) -> Result<Self, WireError> {
                Ok(<$t>::from_le_bytes(c.array()?))
            }
            #[inline(always)]
            fn put_fixed(&self, dst: &mut [u8]) {
                if let Some(d) = dst.get_mut(..core::mem::size_of::<$t>()) {
                    d.copy_from_slice(&self.to_le_bytes());
                }
            }
            #[inline(always)]
            fn get_fixed(src: &[u8]) -> Self {
                src.get(..core::mem::size_of::<$t>())
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, <$t>::from_le_bytes)
            }
        }
    )*};
}

le_primitive!(u8 => "u8", u16 => "u16", u32 => "u32", i32 => "i32", u64 => "u64", i64 => "i64");

/// `str := n:u16 utf8[n]`. Longer strings are cut at a char boundary; invalid UTF-8 is
/// read with replacement characters.
impl Field for String {
    const FIXED_SIZE: Option<usize> = None;
    fn layout() -> String {
        "str".to_string()
    }
    fn put(&self, w: &mut impl Put) {
        let mut end = self.len().min(u16::MAX as usize);
        while !self.is_char_boundary(end) {
            end -= 1;
        }
        (end as u16).put(w);
        w.put(&self.as_bytes()[..end]);
    }
    fn get(c: &mut Cursor<'_>) -> Result<Self, WireError> {
        let n = u16::get(c)? as usize;
        Ok(String::from_utf8_lossy(c.take(n)?).into_owned())
    }
    fn skip(c: &mut Cursor<'_>) -> Result<(), WireError> {
        let n = u16::get(c)? as usize;
        c.take(n).map(drop)
    }
}

/// A field appended to a record after its first version, only ever as the record's
/// last field: written when `Some`, read when the payload has bytes left. Payloads
/// written before the field existed decode to `None` and encode back to the same bytes.
impl<T: Field> Field for Option<T> {
    const FIXED_SIZE: Option<usize> = None;
    fn layout() -> String {
        format!("{}?", T::layout())
    }
    fn put(&self, w: &mut impl Put) {
        if let Some(v) = self {
            v.put(w);
        }
    }
    fn get(c: &mut Cursor<'_>) -> Result<Self, WireError> {
        if c.remaining() == 0 {
            return Ok(None);
        }
        T::get(c).map(Some)
    }
    fn skip(c: &mut Cursor<'_>) -> Result<(), WireError> {
        if c.remaining() == 0 {
            return Ok(());
        }
        T::skip(c)
    }
}

/// `count:u16 item[count]`; lists longer than `u16::MAX` items are cut.
impl<T: Field> Field for Vec<T> {
    const FIXED_SIZE: Option<usize> = None;
    fn layout() -> String {
        format!("{}[count:u16]", T::layout())
    }
    fn put(&self, w: &mut impl Put) {
        let n = self.len().min(u16::MAX as usize);
        (n as u16).put(w);
        for item in &self[..n] {
            item.put(w);
        }
    }
    fn get(c: &mut Cursor<'_>) -> Result<Self, WireError> {
        let n = u16::get(c)? as usize;
        // Capacity bounded by what the payload can hold, so a lying count costs nothing.
        let most = c.remaining() / T::FIXED_SIZE.unwrap_or(2).max(1);
        let mut v = Vec::with_capacity(n.min(most));
        for _ in 0..n {
            v.push(T::get(c)?);
        }
        Ok(v)
    }
    fn skip(c: &mut Cursor<'_>) -> Result<(), WireError> {
        let n = u16::get(c)? as usize;
        match T::FIXED_SIZE {
            Some(size) => c.skip_n(n, size),
            None => (0..n).try_for_each(|_| T::skip(c)),
        }
    }
}

/// The sum of fixed sizes, `None` when any is variable (for [`Field::FIXED_SIZE`]).
pub const fn fixed_sum(sizes: &[Option<usize>]) -> Option<usize> {
    let mut total = 0;
    let mut i = 0;
    while i < sizes.len() {
        match sizes[i] {
            Some(n) => total += n,
            None => return None,
        }
        i += 1;
    }
    Some(total)
}

/// A struct laid out on the wire as its fields in declaration order (optionally followed
/// by `reserved` zero bytes that readers ignore).
pub trait WireStruct: Field {
    /// Its fields in wire order.
    fn fields() -> Vec<FieldLayout>;
}

/// One field of a record or struct, as the layout table shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldLayout {
    pub name: &'static str,
    /// Its [`Field::layout`].
    pub layout: String,
    /// Its [`Field::FIXED_SIZE`].
    pub size: Option<usize>,
}

/// Defines a struct whose wire layout is its fields in declaration order, and derives its
/// [`Field`] codec from that one definition: `put` writes each field, `get` reads them
/// back, `skip` steps over them, `layout` describes them. `reserved N` after the struct
/// adds N zero bytes at its end (ignored when read).
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
        $(reserved $reserved:literal)?
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $crate::codec::Field for $name {
            const FIXED_SIZE: Option<usize> = match $crate::codec::fixed_sum(&[
                $( <$ty as $crate::codec::Field>::FIXED_SIZE, )*
            ]) {
                Some(n) => Some(n $(+ $reserved)?),
                None => None,
            };
            fn layout() -> String {
                stringify!($name).to_string()
            }
            #[inline]
            fn put(&self, w: &mut impl $crate::codec::Put) {
                if let Some(n) = <Self as $crate::codec::Field>::FIXED_SIZE {
                    if let Some(d) = w.slot(n) {
                        $crate::codec::Field::put_fixed(self, d);
                    }
                    return;
                }
                $( $crate::codec::Field::put(&self.$field, w); )*
                $( w.put(&[0u8; $reserved]); )?
            }
            #[inline]
            fn get(c: &mut $crate::codec::Cursor<'_>) -> Result<Self, $crate::WireError> {
                if let Some(n) = <Self as $crate::codec::Field>::FIXED_SIZE {
                    return Ok(<Self as $crate::codec::Field>::get_fixed(c.take(n)?));
                }
                let v = $name {
                    $( $field: <$ty as $crate::codec::Field>::get(c)?, )*
                };
                $( c.take($reserved)?; )?
                Ok(v)
            }
            #[inline(always)]
            fn put_fixed(&self, dst: &mut [u8]) {
                let mut _at = 0usize;
                $(
                    let n = <$ty as $crate::codec::Field>::FIXED_SIZE.unwrap_or(0);
                    if let Some(d) = dst.get_mut(_at.._at + n) {
                        $crate::codec::Field::put_fixed(&self.$field, d);
                    }
                    _at += n;
                )*
                $( if let Some(d) = dst.get_mut(_at.._at + $reserved) {
                    d.fill(0);
                } )?
            }
            #[inline(always)]
            fn get_fixed(src: &[u8]) -> Self {
                let mut _at = 0usize;
                $name {
                    $( $field: {
                        let n = <$ty as $crate::codec::Field>::FIXED_SIZE.unwrap_or(0);
                        let v = src
                            .get(_at.._at + n)
                            .map(<$ty as $crate::codec::Field>::get_fixed)
                            .unwrap_or_default();
                        _at += n;
                        v
                    }, )*
                }
            }
            fn skip(c: &mut $crate::codec::Cursor<'_>) -> Result<(), $crate::WireError> {
                if let Some(n) = <Self as $crate::codec::Field>::FIXED_SIZE {
                    return c.take(n).map(drop);
                }
                $( <$ty as $crate::codec::Field>::skip(c)?; )*
                $( c.take($reserved)?; )?
                Ok(())
            }
        }

        impl $crate::codec::WireStruct for $name {
            fn fields() -> Vec<$crate::codec::FieldLayout> {
                #[allow(unused_mut)]
                let mut f = vec![
                    $( $crate::codec::FieldLayout {
                        name: stringify!($field),
                        layout: <$ty as $crate::codec::Field>::layout(),
                        size: <$ty as $crate::codec::Field>::FIXED_SIZE,
                    }, )*
                ];
                $( f.push($crate::codec::FieldLayout {
                    name: "reserved",
                    layout: format!("u8[{}] (=0)", $reserved),
                    size: Some($reserved),
                }); )?
                f
            }
        }
    };
}

pub(crate) use wire_struct;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_writer_refuses_what_does_not_fit() {
        let mut buf = [0u8; 6];
        let mut w = SliceWriter::new(&mut buf);
        7u32.put(&mut w);
        assert_eq!(w.len(), 4);
        9u32.put(&mut w);
        assert_eq!(w.finish(), None);
    }

    #[test]
    fn strings_are_cut_at_a_char_boundary() {
        let s = "é".repeat(40_000); // 80,000 bytes
        let mut out = Vec::new();
        s.put(&mut out);
        let n = u16::from_le_bytes([out[0], out[1]]) as usize;
        assert_eq!(n, 65_534);
        let back = String::get(&mut Cursor::new(&out, 0)).unwrap();
        assert_eq!(back.chars().count(), 32_767);
    }

    #[test]
    fn a_lying_list_count_is_a_short_payload_not_an_allocation() {
        let bytes = [0xff, 0xff, 1, 0, 0, 0];
        let err = Vec::<u64>::get(&mut Cursor::new(&bytes, 10)).unwrap_err();
        assert!(matches!(
            err,
            WireError::ShortPayload { frame_type: 10, .. }
        ));
        assert!(Vec::<u64>::skip(&mut Cursor::new(&bytes, 10)).is_err());
    }
}
