//! Each trace format's line, parsed into the reused `TraceRecord` (no allocation once its
//! buffers have grown). `Ok(false)`: a line the format skips (a header); `Err`: what is wrong,
//! which the reader prefixes with file:line.

use super::{Format, Kind, TraceRecord, MAX_KEY, MAX_VALUE};

pub fn parse(format: Format, line: &[u8], rec: &mut TraceRecord) -> Result<bool, String> {
    match format {
        Format::Twitter => twitter(line, rec),
        Format::Rocksdb | Format::Cachebench | Format::Monitor => {
            Err(format!("the {} format is not read yet", format.name()))
        }
    }
}

fn number(field: &[u8], what: &str) -> Result<u64, String> {
    let s = std::str::from_utf8(field).map_err(|_| format!("{what}: not text"))?;
    s.trim()
        .parse::<u64>()
        .map_err(|_| format!("{what} {s:?}: expected a whole number"))
}

fn set_key(rec: &mut TraceRecord, key: &[u8]) -> Result<(), String> {
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

fn set_value_size(rec: &mut TraceRecord, n: u64) -> Result<(), String> {
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
    rec.scan_len = 0;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_twitter_line_and_a_key_with_a_comma() {
        let mut r = TraceRecord::default();
        assert_eq!(
            parse(Format::Twitter, b"12,q:1,a,7,206,3,set,0", &mut r),
            Ok(true)
        );
        assert_eq!(r.time_us, 12_000_000);
        assert_eq!(r.key, b"q:1,a");
        assert_eq!(r.value_size, 206);
        assert_eq!(r.client, 3);
        assert_eq!(r.kind, Some(Kind::Write));
        assert_eq!(r.op, "set");
        assert!(parse(Format::Twitter, b"12,k,1,x,3,get,0", &mut r).is_err());
        assert!(parse(Format::Twitter, b"12,k,1,2,3,frob,0", &mut r).is_err());
        assert!(parse(Format::Twitter, b"12,k,1", &mut r).is_err());
    }
}
