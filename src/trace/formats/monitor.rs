//! Redis `MONITOR` output: `1700000000.123456 [0 127.0.0.1:6379] "SET" "key" "value"` — the
//! time (seconds, a fraction of up to six digits), `[db client]` (`[0 lua]`, `[0 unix:/path]`),
//! then every argument quoted as Redis's `sdscatrepr` writes it: `\"`, `\\`, `\n`, `\r`, `\t`,
//! `\a`, `\b` and `\xHH` escapes. The `OK` MONITOR answers first is skipped.
//!
//! The command (upper-cased: MONITOR prints it as the client sent it) maps GET, HGET, HGETALL
//! → Read; SET → Write of the value's size; HSET and HMSET → Write of the sum of their values'
//! sizes; DEL → Delete (of its first key); every other command → Unreplayable (counted by
//! name). Arguments are measured, not copied: only the key is kept.

use super::set_value_size;
use crate::trace::{Kind, TraceRecord, MAX_KEY};

const WANT: &str =
    r#"expected <seconds>.<micros> [<db> <client>] "COMMAND" "arg" ... (Redis MONITOR output)"#;

/// The longest command name kvmeter reads (Redis's are under 20 bytes).
const MAX_COMMAND: usize = 32;

/// `<digits>.<digits> [`: a MONITOR line.
pub fn looks_like(line: &[u8]) -> bool {
    let Some(sp) = line.iter().position(|&b| b == b' ') else {
        return false;
    };
    let ts = &line[..sp];
    ts.contains(&b'.')
        && ts.iter().all(|&b| b.is_ascii_digit() || b == b'.')
        && line[sp + 1..].starts_with(b"[")
}

fn time_us(ts: &[u8]) -> Result<u64, String> {
    let bad = || {
        format!(
            "time {:?}: expected <seconds>.<micros>",
            String::from_utf8_lossy(ts)
        )
    };
    let s = std::str::from_utf8(ts).map_err(|_| bad())?;
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    if secs.is_empty() || frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let secs: u64 = secs.parse().map_err(|_| bad())?;
    let mut micros = 0u64;
    for d in frac.bytes().chain(std::iter::repeat(b'0')).take(6) {
        micros = micros * 10 + u64::from(d - b'0');
    }
    secs.checked_mul(1_000_000)
        .and_then(|t| t.checked_add(micros))
        .ok_or_else(bad)
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// The next quoted argument from `*pos`: its decoded bytes go to `out` when given; returns its
/// decoded length, or None at the end of the line.
fn next_arg(
    line: &[u8],
    pos: &mut usize,
    mut out: Option<&mut Vec<u8>>,
) -> Result<Option<usize>, String> {
    while *pos < line.len() && line[*pos] == b' ' {
        *pos += 1;
    }
    if *pos == line.len() {
        return Ok(None);
    }
    if line[*pos] != b'"' {
        return Err(format!("at byte {}: expected a quoted argument", *pos + 1));
    }
    let mut i = *pos + 1;
    let mut n = 0usize;
    let mut push = |b: u8, n: &mut usize| {
        *n += 1;
        if let Some(o) = out.as_deref_mut() {
            o.push(b);
        }
    };
    loop {
        let Some(&c) = line.get(i) else {
            return Err("an argument's closing quote is missing (a truncated line?)".into());
        };
        match c {
            b'"' => break,
            b'\\' => {
                let e = *line.get(i + 1).ok_or("a truncated escape")?;
                let b = match e {
                    b'"' | b'\\' => e,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'a' => 7,
                    b'b' => 8,
                    b'x' => {
                        let h = line.get(i + 2).copied().and_then(hex);
                        let l = line.get(i + 3).copied().and_then(hex);
                        let (Some(h), Some(l)) = (h, l) else {
                            return Err(format!("at byte {}: a bad \\x escape", i + 1));
                        };
                        i += 2;
                        h << 4 | l
                    }
                    _ => {
                        return Err(format!(
                            "at byte {}: an unknown escape \\{}",
                            i + 1,
                            e as char
                        ))
                    }
                };
                push(b, &mut n);
                i += 2;
            }
            _ => {
                push(c, &mut n);
                i += 1;
            }
        }
    }
    *pos = i + 1;
    Ok(Some(n))
}

pub fn parse(line: &[u8], rec: &mut TraceRecord) -> Result<bool, String> {
    if line.trim_ascii() == b"OK" {
        return Ok(false);
    }
    let sp = line.iter().position(|&b| b == b' ').ok_or(WANT)?;
    rec.time_us = time_us(&line[..sp])?;
    if line.get(sp + 1) != Some(&b'[') {
        return Err(WANT.into());
    }
    let close = line[sp..].iter().position(|&b| b == b']').ok_or(WANT)? + sp;
    let mut pos = close + 1;
    rec.key.clear();
    let n = next_arg(line, &mut pos, Some(&mut rec.key))?.ok_or(WANT)?;
    if n == 0 || n > MAX_COMMAND {
        return Err(format!("a command of {n} bytes (1 to {MAX_COMMAND})"));
    }
    rec.op.clear();
    for &b in &rec.key {
        rec.op.push(b.to_ascii_uppercase() as char);
    }
    let kind = match rec.op.as_str() {
        "GET" | "HGET" | "HGETALL" => Kind::Read,
        "SET" | "HSET" | "HMSET" => Kind::Write,
        "DEL" => Kind::Delete,
        _ => Kind::Unreplayable,
    };
    rec.kind = Some(kind);
    // The key: the first argument after the command (none for PING and the like). The line
    // is at most MAX_LINE, so decoding it before the check is bounded.
    rec.key.clear();
    next_arg(line, &mut pos, Some(&mut rec.key))?;
    if rec.key.len() > MAX_KEY {
        return Err(format!(
            "a key of {} bytes (at most {MAX_KEY})",
            rec.key.len()
        ));
    }
    if kind != Kind::Unreplayable && rec.key.is_empty() {
        return Err(format!("{} with an empty key", rec.op));
    }
    let mut value = 0u64;
    let mut i = 0usize;
    while let Some(len) = next_arg(line, &mut pos, None)? {
        // SET key value [EX ..]: the first; HSET/HMSET key field value ...: every second.
        let counts = match rec.op.as_str() {
            "SET" => i == 0,
            "HSET" | "HMSET" => i % 2 == 1,
            _ => false,
        };
        if counts {
            value += len as u64;
        }
        i += 1;
    }
    if kind == Kind::Write && (i == 0 || (rec.op != "SET" && !i.is_multiple_of(2))) {
        return Err(format!("{} without its value", rec.op));
    }
    set_value_size(rec, value)?;
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
    fn monitor_lines_with_escapes() {
        let mut r = TraceRecord::default();
        assert_eq!(parse(b"OK", &mut r), Ok(false));
        let r = rec(r#"1700000000.123456 [0 127.0.0.1:6379] "set" "k\"1" "ab\x00\\c" "EX" "10""#)
            .unwrap();
        assert_eq!(r.time_us, 1_700_000_000_123_456);
        assert_eq!((r.op.as_str(), r.kind), ("SET", Some(Kind::Write)));
        assert_eq!(r.key, b"k\"1");
        assert_eq!(r.value_size, 5); // a, b, NUL, \, c
        let r = rec(r#"1700000000.5 [0 lua] "GET" "k""#).unwrap();
        assert_eq!(
            (r.time_us, r.kind),
            (1_700_000_000_500_000, Some(Kind::Read))
        );
        let r = rec(r#"1.000001 [3 unix:/tmp/r.sock] "HSET" "h" "f1" "abc" "f2" "de""#).unwrap();
        assert_eq!(
            (r.kind, r.value_size, r.time_us),
            (Some(Kind::Write), 5, 1_000_001)
        );
        let r = rec(r#"1.0 [0 127.0.0.1:1] "HGETALL" "h""#).unwrap();
        assert_eq!(r.kind, Some(Kind::Read));
        let r = rec(r#"1.0 [0 127.0.0.1:1] "DEL" "a" "b""#).unwrap();
        assert_eq!((r.kind, r.key.as_slice()), (Some(Kind::Delete), &b"a"[..]));
        let r = rec(r#"1.0 [0 127.0.0.1:1] "PING""#).unwrap();
        assert_eq!((r.kind, r.op.as_str()), (Some(Kind::Unreplayable), "PING"));
        let r = rec(r#"1.0 [0 127.0.0.1:1] "incr" "n""#).unwrap();
        assert_eq!((r.kind, r.op.as_str()), (Some(Kind::Unreplayable), "INCR"));
    }

    #[test]
    fn bad_monitor_lines_say_what_is_wrong() {
        assert!(rec(r#"1.0 [0 a] "GET" "k"#)
            .unwrap_err()
            .contains("truncated"));
        assert!(rec(r#"1.0 [0 a] "GET" "k\x4""#)
            .unwrap_err()
            .contains("\\x"));
        assert!(rec(r#"x.0 [0 a] "GET" "k""#).unwrap_err().contains("time"));
        assert!(rec(r#"1.0 [0 a] GET"#).unwrap_err().contains("quoted"));
        assert!(rec(r#"1.0 [0 a] "SET" "k""#).unwrap_err().contains("value"));
        assert!(rec(r#"1.0 [0 a] "GET""#).unwrap_err().contains("empty key"));
        assert!(rec("1.0 0 a").is_err());
    }
}
