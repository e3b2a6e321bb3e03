//! RocksDB's human-readable trace, as `trace_analyzer -convert_to_human_readable_trace`
//! writes it. The flag's help text documents `type_id cf_id value_size time_in_micorsec <key>`,
//! but `TraceAnalyzer::WriteTraceSequence` writes the key first: `0x6B6579 1 0 5
//! 1600000000000000` (`LDBCommand::StringToHex`: `0x` and upper-case hex), then
//! `type cf_id value_size time_us`. Both orders are read (a first field starting `0x` is the
//! key). A file written with `-no_key` has no keys and cannot be replayed: an error.
//!
//! Type ids (trace_analyzer's `taIndexToOpt`): 0 get, 1 put, 2 delete, 3 single_delete,
//! 4 range_delete, 5 merge, 6 iterator_Seek, 7 iterator_SeekForPrev, 8 multiget (newer
//! releases). get → Read, put → Write, delete and single_delete → Delete, iterator_Seek →
//! Scan of `SCAN_LEN` records (the trace records no scan length), the rest Unreplayable.

use super::{number, set_value_size};
use crate::trace::{Kind, TraceRecord, MAX_KEY};

/// The scan length replayed for an `iterator_Seek` (the trace does not record how far the
/// iterator went). db_bench's mixgraph draws its scan lengths from a Pareto around this size.
pub const SCAN_LEN: u32 = 10;

const NAMES: [&str; 9] = [
    "get",
    "put",
    "delete",
    "single_delete",
    "range_delete",
    "merge",
    "iterator_Seek",
    "iterator_SeekForPrev",
    "multiget",
];

const WANT: &str = "expected key type_id cf_id value_size time_us (trace_analyzer's human-readable trace, key as 0x hex)";

fn is_hex_key(t: &[u8]) -> bool {
    t.len() >= 2 && (t.starts_with(b"0x") || t.starts_with(b"0X"))
}

/// A line in either order: four numbers and a `0x` key.
pub fn looks_like(line: &[u8]) -> bool {
    let t: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let num = |f: &[u8]| !f.is_empty() && f.iter().all(u8::is_ascii_digit);
    t.len() == 5
        && ((is_hex_key(t[0]) && t[1..].iter().all(|&f| num(f)))
            || (is_hex_key(t[4]) && t[..4].iter().all(|&f| num(f))))
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn set_hex_key(rec: &mut TraceRecord, t: &[u8]) -> Result<(), String> {
    let hex = &t[2..];
    if hex.is_empty() {
        return Err("an empty key".into());
    }
    if !hex.len().is_multiple_of(2) {
        return Err(format!(
            "key {}: an odd number of hex digits",
            String::from_utf8_lossy(t)
        ));
    }
    if hex.len() / 2 > MAX_KEY {
        return Err(format!(
            "a key of {} bytes (at most {MAX_KEY})",
            hex.len() / 2
        ));
    }
    rec.key.clear();
    for pair in hex.chunks_exact(2) {
        match (hex_digit(pair[0]), hex_digit(pair[1])) {
            (Some(h), Some(l)) => rec.key.push(h << 4 | l),
            _ => {
                return Err(format!(
                    "key {}: not hex",
                    String::from_utf8_lossy(&t[..t.len().min(80)])
                ))
            }
        }
    }
    Ok(())
}

pub fn parse(line: &[u8], rec: &mut TraceRecord) -> Result<bool, String> {
    let mut f = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let (Some(a), Some(b), Some(c), Some(d)) = (f.next(), f.next(), f.next(), f.next()) else {
        return Err(WANT.into());
    };
    let e = f.next();
    if f.next().is_some() {
        return Err(WANT.into());
    }
    let (key, ty, vsize, ts) = match e {
        _ if is_hex_key(a) => (a, b, d, e.ok_or(WANT)?),
        Some(k) if is_hex_key(k) => (k, a, c, d),
        None => {
            return Err("no key (converted with -no_key?): kvmeter needs the keys".into());
        }
        Some(_) => return Err(WANT.into()),
    };
    let ty = number(ty, "type_id")?;
    let name = NAMES
        .get(ty as usize)
        .ok_or_else(|| format!("type_id {ty}: not a trace_analyzer type (0..=8)"))?;
    set_hex_key(rec, key)?;
    set_value_size(rec, number(vsize, "value_size")?)?;
    rec.time_us = number(ts, "time_us")?;
    rec.kind = Some(match ty {
        0 => Kind::Read,
        1 => Kind::Write,
        2 | 3 => Kind::Delete,
        6 => Kind::Scan,
        _ => Kind::Unreplayable,
    });
    if ty == 6 {
        rec.scan_len = SCAN_LEN;
    }
    rec.op.clear();
    rec.op.push_str(name);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(line: &str) -> Result<TraceRecord, String> {
        let mut r = TraceRecord::default();
        parse(line.as_bytes(), &mut r).map(|_| r)
    }

    #[test]
    fn trace_analyzer_lines_in_the_written_and_the_documented_order() {
        // WriteTraceSequence: hex key first (StringToHex: "0x", upper case).
        let r = rec("0x757365723031 1 0 100 1600000000123456").unwrap();
        assert_eq!(r.key, b"user01");
        assert_eq!((r.kind, r.op.as_str()), (Some(Kind::Write), "put"));
        assert_eq!((r.value_size, r.time_us), (100, 1_600_000_000_123_456));
        // The flag's help text: type cf value_size time key.
        let r = rec("0 2 0 1600000000000001 0x6b6579").unwrap();
        assert_eq!((r.key.as_slice(), r.kind), (&b"key"[..], Some(Kind::Read)));
        assert_eq!(r.time_us, 1_600_000_000_000_001);
        let kinds: Vec<_> = (0..9)
            .map(|t| rec(&format!("0x6B {t} 0 0 5")).unwrap())
            .map(|r| (r.kind.unwrap(), r.op, r.scan_len))
            .collect();
        assert_eq!(kinds[2].0, Kind::Delete);
        assert_eq!(kinds[3], (Kind::Delete, "single_delete".into(), 0));
        assert_eq!(kinds[6], (Kind::Scan, "iterator_Seek".into(), SCAN_LEN));
        for t in [4, 5, 7, 8] {
            assert_eq!(kinds[t].0, Kind::Unreplayable, "type {t}");
        }
    }

    #[test]
    fn bad_rocksdb_lines_say_what_is_wrong() {
        assert!(rec("0x6B 9 0 0 5").unwrap_err().contains("type_id 9"));
        assert!(rec("0x6B6 1 0 0 5").unwrap_err().contains("odd"));
        assert!(rec("0xZZ 1 0 0 5").unwrap_err().contains("not hex"));
        assert!(rec("1 0 0 5").unwrap_err().contains("no_key"));
        assert!(rec("0x6B 1 0 x 5").unwrap_err().contains("value_size"));
        assert!(rec("0x6B 1 0").is_err());
        assert!(rec("0x6B 1 0 0 5 6").is_err());
    }
}
