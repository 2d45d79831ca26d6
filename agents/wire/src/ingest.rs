//! The agent → daemon ingest protocol: an envelope around unchanged wire frames.
//!
//! Owns the bytes that let an agent number its batches and a daemon acknowledge them after
//! commit (so the agent can resend what was not acknowledged and the daemon can drop what
//! it already stored). It does not change the frames: a batch carries whole frames exactly
//! as `frame` encodes them. The daemon's README explains the protocol in prose.
//!
//! ```text
//! client → daemon:  hello preamble batch*
//!   hello    := "MWINGST1" token:str node:str          (str = n:u16 utf8[n])
//!   preamble := the 16-byte wire preamble (magic, format version): a wrong version closes
//!               the connection
//!   batch    := "MWB1" stream:u64 seq:u64 run:str nbytes:u32 frames[nbytes]
//!               frames = whole wire frames; run = the run key ("" for node-level data such
//!               as device samples); (node, stream, seq) identifies a batch; an agent sends
//!               the batches of one stream with seq 1, 2, 3 … in order
//! daemon → client:
//!   ack      := "MWA1" stream:u64 seq:u64              after the batch is committed (or
//!               was already committed before: resends are acknowledged, not stored twice)
//!   error    := "MWE1" message:str                     then the daemon closes
//! ```
//!
//! A batch that does not follow its stream's stored batches (a gap) is refused with an
//! error whose message ends in [`resend_request`]'s words; the agent resends that stream
//! from the batch named, sending empty batches for numbers it no longer has.

use crate::frame::{decode_payload, Record, FRAME_OVERHEAD, MAX_FRAME_LEN};
use crate::WireError;

/// How often a node agent reads its devices and sends their memory by default, in ms
/// (`memwatch agent --sample-ms`); `memwatch run` and `attach` read as often. The
/// dashboard says so beside a device that has sent no sample yet.
pub const DEFAULT_SAMPLE_MS: u64 = 100;

/// First bytes a client sends.
pub const HELLO_MAGIC: [u8; 8] = *b"MWINGST1";
/// Start of every batch.
pub const BATCH_MAGIC: [u8; 4] = *b"MWB1";
/// Start of every acknowledgement.
pub const ACK_MAGIC: [u8; 4] = *b"MWA1";
/// Start of an error message (the daemon closes the connection after it).
pub const ERROR_MAGIC: [u8; 4] = *b"MWE1";
/// Largest batch payload a daemon accepts by default (64 MiB).
pub const DEFAULT_MAX_BATCH_BYTES: u32 = 64 << 20;
/// Size of an encoded acknowledgement.
pub const ACK_LEN: usize = 20;

fn put_str(out: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

/// Appends the hello (without the preamble that must follow it).
pub fn encode_hello(token: &str, node: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&HELLO_MAGIC);
    put_str(out, token);
    put_str(out, node);
}

/// Appends a batch header; `nbytes` frame bytes must follow.
pub fn encode_batch_header(stream: u64, seq: u64, run: &str, nbytes: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&BATCH_MAGIC);
    out.extend_from_slice(&stream.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    put_str(out, run);
    out.extend_from_slice(&nbytes.to_le_bytes());
}

/// Encodes an acknowledgement.
pub fn encode_ack(stream: u64, seq: u64) -> [u8; ACK_LEN] {
    let mut b = [0u8; ACK_LEN];
    b[..4].copy_from_slice(&ACK_MAGIC);
    b[4..12].copy_from_slice(&stream.to_le_bytes());
    b[12..20].copy_from_slice(&seq.to_le_bytes());
    b
}

/// Decodes an acknowledgement; `None` when the bytes are not one.
pub fn decode_ack(b: &[u8; ACK_LEN]) -> Option<(u64, u64)> {
    if b[..4] != ACK_MAGIC {
        return None;
    }
    let mut s = [0u8; 8];
    s.copy_from_slice(&b[4..12]);
    let mut q = [0u8; 8];
    q.copy_from_slice(&b[12..20]);
    Some((u64::from_le_bytes(s), u64::from_le_bytes(q)))
}

/// Encodes an error message.
pub fn encode_error(message: &str) -> Vec<u8> {
    let mut out = ERROR_MAGIC.to_vec();
    put_str(&mut out, message);
    out
}

/// The end of the daemon's error message that refuses a batch after a gap: "resend stream
/// S from batch N" (N: the first batch the daemon lacks).
pub fn resend_request(stream: u64, from: u64) -> String {
    format!("resend stream {stream} from batch {from}")
}

/// The (stream, first missing batch) of an error message ending in [`resend_request`]'s
/// words.
pub fn parse_resend_request(message: &str) -> Option<(u64, u64)> {
    let rest = &message[message.rfind("resend stream ")? + "resend stream ".len()..];
    let (stream, from) = rest.split_once(" from batch ")?;
    Some((stream.parse().ok()?, from.trim_end().parse().ok()?))
}

/// Decodes a buffer of whole frames strictly: any bad length, checksum mismatch,
/// malformed payload or cut-off tail is an error naming the byte offset. Unknown frame
/// types are skipped (the format may grow).
pub fn decode_frames_strict(bytes: &[u8]) -> Result<Vec<Record>, WireError> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let damaged = |what: String| WireError::Damaged {
            offset: pos as u64,
            what,
        };
        if bytes.len() - pos < FRAME_OVERHEAD {
            return Err(damaged("batch ends inside a frame (cut off)".into()));
        }
        let len = u32::from_le_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]]);
        if len == 0 || len > MAX_FRAME_LEN {
            return Err(damaged(format!("impossible frame length {len}")));
        }
        let total = len as usize + 8;
        if bytes.len() - pos < total {
            return Err(damaged("batch ends inside a frame (cut off)".into()));
        }
        let frame = &bytes[pos..pos + total];
        let stored = u32::from_le_bytes([
            frame[total - 4],
            frame[total - 3],
            frame[total - 2],
            frame[total - 1],
        ]);
        if crc32fast::hash(&frame[4..total - 4]) != stored {
            return Err(damaged("checksum mismatch".into()));
        }
        let record = decode_payload(frame[4], &frame[5..total - 4])
            .map_err(|e| damaged(format!("malformed frame: {e}")))?;
        if !matches!(record, Record::Unknown { .. }) {
            out.push(record);
        }
        pos += total;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::encode_record;
    use crate::Event;

    #[test]
    fn resend_requests_round_trip() {
        let m = format!(
            "stream 7: batch 9 does not follow batch 4; {}",
            resend_request(7, 5)
        );
        assert_eq!(parse_resend_request(&m), Some((7, 5)));
        assert_eq!(
            parse_resend_request("storage failed: database is locked"),
            None
        );
        assert_eq!(parse_resend_request("resend stream x from batch 1"), None);
    }

    #[test]
    fn ack_round_trips() {
        let a = encode_ack(7, 9);
        assert_eq!(decode_ack(&a), Some((7, 9)));
        let mut bad = a;
        bad[0] = b'X';
        assert_eq!(decode_ack(&bad), None);
    }

    #[test]
    fn strict_decoding_rejects_damage() {
        let mut b = Vec::new();
        encode_record(&Record::Events(vec![Event::default(); 3]), &mut b).unwrap();
        assert_eq!(decode_frames_strict(&b).unwrap().len(), 1);
        assert!(decode_frames_strict(&b[..b.len() - 1]).is_err());
        let mut c = b.clone();
        c[10] ^= 1;
        assert!(decode_frames_strict(&c).is_err());
        let mut d = b.clone();
        d[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_frames_strict(&d).is_err());
    }
}
