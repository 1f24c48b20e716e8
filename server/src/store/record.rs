//! Checksummed JSON lines, the on-disk form of the ledger and of journals (DESIGN.md section 6).
//!
//! A line is `{"sum":"<16 hex>","rec":<record JSON>}\n`, where the sum is the first 8 bytes
//! of the SHA-256 of the record's exact bytes. The sum lets recovery tell a **torn tail** (the
//! last line without its newline: a crash mid-append, discarded) from **damage** (any
//! complete line that fails its sum or does not parse: refused, naming the file and line).

use crate::limits::RECORD_LINE_BYTES_MAX;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};

const PREFIX: &[u8] = b"{\"sum\":\"";
const MIDDLE: &[u8] = b"\",\"rec\":";
const SUM_HEX_CHARS: usize = 16;

fn sum(bytes: &[u8]) -> [u8; SUM_HEX_CHARS] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let mut hex = [0u8; SUM_HEX_CHARS];
    for (pair, byte) in hex.chunks_exact_mut(2).zip(&digest[..SUM_HEX_CHARS / 2]) {
        pair[0] = HEX[(byte >> 4) as usize];
        pair[1] = HEX[(byte & 0xf) as usize];
    }
    hex
}

/// Encodes one record as a line, newline included.
pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    let body = serde_json::to_vec(record).expect("records serialise");
    assert!(!body.contains(&b'\n'), "a serialised record never holds a raw newline");
    let mut line = Vec::with_capacity(body.len() + 40);
    line.extend_from_slice(PREFIX);
    line.extend_from_slice(&sum(&body));
    line.extend_from_slice(MIDDLE);
    line.extend_from_slice(&body);
    line.extend_from_slice(b"}\n");
    line
}

/// Decodes one line (without its newline).
pub fn decode<T: DeserializeOwned>(line: &[u8]) -> Result<T, String> {
    if line.len() > RECORD_LINE_BYTES_MAX {
        return Err(format!("line of {} bytes is over the limit of {RECORD_LINE_BYTES_MAX}", line.len()));
    }
    let rest = line.strip_prefix(PREFIX).ok_or("not a record line")?;
    if rest.len() < SUM_HEX_CHARS + MIDDLE.len() + 1 {
        return Err("record line too short".into());
    }
    let (stated, rest) = rest.split_at(SUM_HEX_CHARS);
    let body = rest.strip_prefix(MIDDLE).and_then(|r| r.strip_suffix(b"}")).ok_or("not a record line")?;
    if stated != sum(body) {
        return Err("checksum mismatch".into());
    }
    serde_json::from_slice(body).map_err(|e| format!("record does not parse: {e}"))
}

/// A file of records, read back.
#[derive(Debug, PartialEq)]
pub struct Records<T> {
    pub records: Vec<T>,
    /// Bytes of a torn last line that were dropped (0 when the file ended cleanly).
    pub torn_tail_bytes: usize,
    /// Length of the intact prefix: where the next record must be written.
    pub intact_len: usize,
}

/// Damage: a bad line that is not the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// 1-based line number.
    pub line: usize,
    pub problem: String,
}

/// Parses a whole file. Only the last line may be bad (torn); any other bad line is damage.
pub fn parse_file<T: DeserializeOwned>(bytes: &[u8]) -> Result<Records<T>, Damage> {
    let mut records = Vec::new();
    let mut offset = 0;
    let mut number = 0;
    while offset < bytes.len() {
        number += 1;
        let newline = bytes[offset..].iter().position(|&b| b == b'\n');
        let (line, next) = match newline {
            Some(n) => (&bytes[offset..offset + n], offset + n + 1),
            None => (&bytes[offset..], bytes.len()),
        };
        // Only an unterminated last line can be torn: an append cut short by a crash never
        // ends in its newline. A line that has its newline and fails to decode is damage, even
        // the last one (a corrupted newline could otherwise merge two lines into a "tail").
        match (decode::<T>(line), newline.is_some()) {
            (Ok(record), true) => records.push(record),
            (_, false) => {
                return Ok(Records { records, torn_tail_bytes: bytes.len() - offset, intact_len: offset });
            }
            (Err(problem), true) => return Err(Damage { line: number, problem }),
        }
        offset = next;
    }
    Ok(Records { records, torn_tail_bytes: 0, intact_len: bytes.len() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn file(records: &[Value]) -> Vec<u8> {
        records.iter().flat_map(encode).collect()
    }

    #[test]
    fn round_trips() {
        let bytes = file(&[json!({"a": 1}), json!({"b": "x\ny"})]);
        let parsed: Records<Value> = parse_file(&bytes).unwrap();
        assert_eq!(parsed.records, vec![json!({"a": 1}), json!({"b": "x\ny"})]);
        assert_eq!(parsed.torn_tail_bytes, 0);
        assert_eq!(parsed.intact_len, bytes.len());
    }

    #[test]
    fn a_torn_tail_is_dropped_at_every_cut() {
        let whole = file(&[json!({"a": 1}), json!({"b": 2})]);
        let first_len = encode(&json!({"a": 1})).len();
        for cut in first_len..whole.len() {
            let parsed: Records<Value> = parse_file(&whole[..cut]).unwrap();
            let expected = if cut == first_len { 0 } else { cut - first_len };
            assert_eq!(parsed.records, vec![json!({"a": 1})], "cut at {cut}");
            assert_eq!(parsed.torn_tail_bytes, expected, "cut at {cut}");
            assert_eq!(parsed.intact_len, first_len);
        }
    }

    #[test]
    fn a_complete_last_line_that_fails_its_sum_is_damage_not_a_torn_tail() {
        let mut bytes = file(&[json!({"a": 1}), json!({"b": 2})]);
        let last = bytes.len() - 5;
        bytes[last] ^= 0x01;
        assert_eq!(parse_file::<Value>(&bytes).unwrap_err().line, 2);
        // A corrupted newline merges two lines: damage too, never a silently dropped tail.
        let mut merged = file(&[json!({"a": 1}), json!({"b": 2}), json!({"c": 3})]);
        let newline = encode(&json!({"a": 1})).len() + encode(&json!({"b": 2})).len() - 1;
        merged[newline] = b' ';
        assert!(parse_file::<Value>(&merged).is_err());
    }

    /// The limits at their edges (mutants cargo-mutants found missed): a line of exactly the
    /// most bytes is read, one byte more is refused for its length; a line one byte shorter
    /// than the shortest record line is "too short", and one of that length is not.
    #[test]
    fn a_lines_length_is_checked_at_its_edges() {
        let empty = encode(&json!(""));
        let padding = RECORD_LINE_BYTES_MAX - (empty.len() - 1);
        let longest = encode(&json!("x".repeat(padding)));
        assert_eq!(longest.len() - 1, RECORD_LINE_BYTES_MAX);
        assert_eq!(decode::<Value>(&longest[..longest.len() - 1]), Ok(json!("x".repeat(padding))));
        let over = encode(&json!("x".repeat(padding + 1)));
        assert!(decode::<Value>(&over[..over.len() - 1]).unwrap_err().contains("over the limit"));
        let shortest = [PREFIX, b"0123456789abcdef".as_slice(), MIDDLE, b"}"].concat();
        assert_eq!(decode::<Value>(&shortest[..shortest.len() - 1]), Err("record line too short".to_string()));
        assert_ne!(decode::<Value>(&shortest), Err("record line too short".to_string()));
    }

    #[test]
    fn damage_before_the_tail_names_its_line() {
        let mut bytes = file(&[json!({"a": 1}), json!({"b": 2}), json!({"c": 3})]);
        let second = encode(&json!({"a": 1})).len() + 12;
        bytes[second] ^= 0x01;
        let damage = parse_file::<Value>(&bytes).unwrap_err();
        assert_eq!(damage.line, 2);
    }
}
