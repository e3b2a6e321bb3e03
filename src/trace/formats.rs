//! Each trace format's line, parsed into the reused `TraceRecord` (no allocation once its
//! buffers have grown). `Ok(false)`: a line the format skips (a header); `Err`: what is wrong,
//! which the reader prefixes with file:line.

use super::{Format, Kind, TraceRecord, MAX_KEY, MAX_VALUE};

mod cachebench;
mod monitor;
mod rocksdb;

pub use cachebench::Columns;

/// The most times one cachebench line may repeat its request (`op_count`): bounds what one
/// line can make the reader hand out.
pub const MAX_REPEAT: u64 = 1_000_000;

/// What a format remembers between lines: cachebench's column positions (from its header)
/// and how many times the line just parsed repeats (its `op_count`; 1 elsewhere).
#[derive(Clone, Debug, Default)]
pub struct State {
    pub columns: Option<Columns>,
    pub repeat: u64,
}

pub fn parse(
    format: Format,
    line: &[u8],
    rec: &mut TraceRecord,
    state: &mut State,
) -> Result<bool, String> {
    state.repeat = 1;
    rec.whole_second = false;
    rec.client = 0;
    rec.scan_len = 0;
    match format {
        Format::Twitter => twitter(line, rec),
        Format::Rocksdb => rocksdb::parse(line, rec),
        Format::Cachebench => cachebench::parse(line, rec, state),
        Format::Monitor => monitor::parse(line, rec),
    }
}

/// Guesses a file's format from its first lines (explicit `--format` wins): MONITOR's `OK` or
/// `<secs>.<micros> [`, a CSV header naming `op` and `key` (cachebench), RocksDB's
/// space-separated numbers, else Twitter's comma-separated fields.
pub fn sniff(lines: &[&[u8]]) -> Option<Format> {
    for &line in lines {
        let l = line.trim_ascii();
        if l.is_empty() {
            continue;
        }
        if l == b"OK" || monitor::looks_like(l) {
            return Some(Format::Monitor);
        }
        if cachebench::Columns::from_header(l).is_some() {
            return Some(Format::Cachebench);
        }
        if rocksdb::looks_like(l) {
            return Some(Format::Rocksdb);
        }
        if l.iter().filter(|&&b| b == b',').count() >= 6 && l[0].is_ascii_digit() {
            return Some(Format::Twitter);
        }
        return None;
    }
    None
}

pub(super) fn number(field: &[u8], what: &str) -> Result<u64, String> {
    let s = std::str::from_utf8(field).map_err(|_| format!("{what}: not text"))?;
    s.trim()
        .parse::<u64>()
        .map_err(|_| format!("{what} {s:?}: expected a whole number"))
}

pub(super) fn set_key(rec: &mut TraceRecord, key: &[u8]) -> Result<(), String> {
    if key.is_empty() {
        return Err("an empty key".into());
    }
    if key.len() > MAX_KEY {
        return Err(format!("a key of {} bytes (at most {MAX_KEY})", key.len()));
    }
    rec.key.clear();
    rec.key.extend_from_slice(key);
    Ok(())
}

pub(super) fn set_value_size(rec: &mut TraceRecord, n: u64) -> Result<(), String> {
    if n > MAX_VALUE {
        return Err(format!("a value of {n} bytes (at most {MAX_VALUE})"));
    }
    rec.value_size = n;
    Ok(())
}

/// Twitter's cache traces: `timestamp,anonymized key,key size,value size,client id,operation,
/// TTL`. The key is the middle of the line (the fields around it have no commas), so a key
/// with a comma in it still parses. The timestamp is in whole seconds.
fn twitter(line: &[u8], rec: &mut TraceRecord) -> Result<bool, String> {
    const WANT: &str = "expected timestamp,key,key size,value size,client id,operation,TTL";
    let Some(c) = line.iter().position(|&b| b == b',') else {
        return Err(WANT.into());
    };
    let (ts, rest) = (&line[..c], &line[c + 1..]);
    let mut tail = rest.rsplitn(6, |&b| b == b',');
    let (Some(_ttl), Some(op), Some(client), Some(vsize), Some(_ksize), Some(key)) = (
        tail.next(),
        tail.next(),
        tail.next(),
        tail.next(),
        tail.next(),
        tail.next(),
    ) else {
        return Err(WANT.into());
    };
    let secs = number(ts, "timestamp")?;
    rec.time_us = secs
        .checked_mul(1_000_000)
        .ok_or_else(|| format!("timestamp {secs}: too large"))?;
    rec.whole_second = true;
    set_key(rec, key)?;
    set_value_size(rec, number(vsize, "value size")?)?;
    rec.client = number(client, "client id")?;
    let op = std::str::from_utf8(op).map_err(|_| "operation: not text".to_string())?;
    rec.kind = Some(match op {
        "get" | "gets" => Kind::Read,
        "set" | "add" | "replace" | "cas" => Kind::Write,
        "delete" => Kind::Delete,
        "append" | "prepend" | "incr" | "decr" => Kind::Unreplayable,
        _ => return Err(format!("operation {op:?}: not a Twitter trace operation (get, gets, set, add, replace, cas, append, prepend, delete, incr, decr)")),
    });
    rec.op.clear();
    rec.op.push_str(op);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_twitter_line_and_a_key_with_a_comma() {
        let mut r = TraceRecord::default();
        let st = &mut State::default();
        assert_eq!(
            parse(Format::Twitter, b"12,q:1,a,7,206,3,set,0", &mut r, st),
            Ok(true)
        );
        assert_eq!(r.time_us, 12_000_000);
        assert_eq!(r.key, b"q:1,a");
        assert_eq!(r.value_size, 206);
        assert_eq!(r.client, 3);
        assert_eq!(r.kind, Some(Kind::Write));
        assert_eq!(r.op, "set");
        assert!(parse(Format::Twitter, b"12,k,1,x,3,get,0", &mut r, st).is_err());
        assert!(parse(Format::Twitter, b"12,k,1,2,3,frob,0", &mut r, st).is_err());
        assert!(parse(Format::Twitter, b"12,k,1", &mut r, st).is_err());
    }

    #[test]
    fn sniffing_each_format_from_its_first_line() {
        let s = |l: &[u8]| sniff(&[&b""[..], l]);
        assert_eq!(s(b"OK"), Some(Format::Monitor));
        assert_eq!(
            s(br#"1700000000.123456 [0 127.0.0.1:6379] "GET" "k""#),
            Some(Format::Monitor)
        );
        assert_eq!(
            s(b"op_time,key,key_size,op,op_count,size,cache_hits,ttl"),
            Some(Format::Cachebench)
        );
        assert_eq!(s(b"0x6B6579 0 0 5 1600000000000000"), Some(Format::Rocksdb));
        assert_eq!(s(b"0 0 5 1600000000000000 0x6B6579"), Some(Format::Rocksdb));
        assert_eq!(s(b"12,k,1,2,3,get,0"), Some(Format::Twitter));
        assert_eq!(s(b"hello world"), None);
    }
}
