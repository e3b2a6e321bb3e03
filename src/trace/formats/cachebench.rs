//! CacheLib cachebench's trace CSV (the KVReplayGenerator's input; Meta's kvcache traces). Its
//! header names the columns and the releases differ in order — `key,op,size,op_count,key_size`
//! (2022), `op_time,key,key_size,op,op_count,size,cache_hits,ttl[,usecase,sub_usecase]`
//! (2022-10, 2024) — so columns are found by name in the header, which must come first.
//! `key` and `op` are required; `op_time` (milliseconds: a 2024 release's times span its
//! seven days, ~6.0e8 ms), `size` (the value size) and `op_count` (the line stands for that
//! many requests, handed out one by one) are read when present: no `op_time`, every record at
//! time 0.
//!
//! Ops: GET and GET_LEASE → Read, SET and SET_LEASE → Write, DELETE → Delete, any other name
//! → Unreplayable (counted by its name).

use super::{number, set_key, set_value_size, State, MAX_REPEAT};
use crate::trace::{Kind, TraceRecord};

/// Where the columns kvmeter reads are, from the header line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Columns {
    time: Option<usize>,
    key: usize,
    op: usize,
    op_count: Option<usize>,
    size: Option<usize>,
}

impl Columns {
    /// The header's columns, or None when the line is not a header naming `key` and `op`.
    pub fn from_header(line: &[u8]) -> Option<Columns> {
        let mut c = (None, None, None, None, None);
        for (i, name) in line.split(|&b| b == b',').enumerate() {
            match name.trim_ascii() {
                b"op_time" => c.0 = Some(i),
                b"key" => c.1 = Some(i),
                b"op" => c.2 = Some(i),
                b"op_count" => c.3 = Some(i),
                b"size" => c.4 = Some(i),
                _ => {}
            }
        }
        Some(Columns {
            time: c.0,
            key: c.1?,
            op: c.2?,
            op_count: c.3,
            size: c.4,
        })
    }
}

pub fn parse(line: &[u8], rec: &mut TraceRecord, state: &mut State) -> Result<bool, String> {
    let Some(cols) = state.columns else {
        state.columns = Some(Columns::from_header(line).ok_or(
            "expected a header naming the columns first (op_time,key,key_size,op,op_count,size,...)",
        )?);
        return Ok(false);
    };
    let (mut time, mut key, mut op, mut count, mut size) = (None, None, None, None, None);
    for (i, f) in line.split(|&b| b == b',').enumerate() {
        if Some(i) == cols.time {
            time = Some(f);
        }
        if i == cols.key {
            key = Some(f);
        }
        if i == cols.op {
            op = Some(f);
        }
        if Some(i) == cols.op_count {
            count = Some(f);
        }
        if Some(i) == cols.size {
            size = Some(f);
        }
    }
    let missing = |what: &str| format!("no {what} column (fewer fields than the header names)");
    let (Some(key), Some(op)) = (key, op) else {
        return Err(missing("key or op"));
    };
    rec.time_us = match (cols.time, time) {
        (None, _) => 0,
        (Some(_), Some(t)) => {
            let ms = number(t, "op_time")?;
            ms.checked_mul(1000)
                .ok_or_else(|| format!("op_time {ms}: too large"))?
        }
        (Some(_), None) => return Err(missing("op_time")),
    };
    set_key(rec, key)?;
    set_value_size(
        rec,
        match (cols.size, size) {
            (None, _) => 0,
            (Some(_), Some(s)) => number(s, "size")?,
            (Some(_), None) => return Err(missing("size")),
        },
    )?;
    state.repeat = match (cols.op_count, count) {
        (None, _) => 1,
        (Some(_), Some(c)) => number(c, "op_count")?,
        (Some(_), None) => return Err(missing("op_count")),
    };
    if !(1..=MAX_REPEAT).contains(&state.repeat) {
        return Err(format!(
            "op_count {}: expected 1 to {MAX_REPEAT}",
            state.repeat
        ));
    }
    let op = std::str::from_utf8(op.trim_ascii()).map_err(|_| "op: not text".to_string())?;
    if op.is_empty() || op.len() > 64 {
        return Err(format!(
            "op {op:?}: expected a name such as GET, SET or DELETE"
        ));
    }
    rec.kind = Some(match op {
        "GET" | "GET_LEASE" => Kind::Read,
        "SET" | "SET_LEASE" => Kind::Write,
        "DELETE" => Kind::Delete,
        _ => Kind::Unreplayable,
    });
    rec.op.clear();
    rec.op.push_str(op);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_2024_and_2022_layouts_by_their_headers() {
        let st = &mut State::default();
        let mut r = TraceRecord::default();
        let h = b"op_time,key,key_size,op,op_count,size,cache_hits,ttl,usecase,sub_usecase";
        assert_eq!(parse(h, &mut r, st), Ok(false));
        let l = b"604038473,828769c1e1ce3a29,67,SET,3,65,0,7200,2777918327,655456894";
        assert_eq!(parse(l, &mut r, st), Ok(true));
        assert_eq!(r.key, b"828769c1e1ce3a29");
        assert_eq!((r.time_us, r.value_size), (604_038_473_000, 65));
        assert_eq!(
            (r.kind, r.op.as_str(), st.repeat),
            (Some(Kind::Write), "SET", 3)
        );
        parse(b"604038471,a54f,24,GET_LEASE,1,0,0,0,1,1", &mut r, st).unwrap();
        assert_eq!((r.kind, st.repeat), (Some(Kind::Read), 1));
        parse(b"604038471,a54f,24,DELETE,1,0,0,0,1,1", &mut r, st).unwrap();
        assert_eq!(r.kind, Some(Kind::Delete));
        parse(b"604038471,a54f,24,ADD,1,0,0,0,1,1", &mut r, st).unwrap();
        assert_eq!((r.kind, r.op.as_str()), (Some(Kind::Unreplayable), "ADD"));

        let st = &mut State::default();
        assert_eq!(
            parse(b"key,op,size,op_count,key_size", &mut r, st),
            Ok(false)
        );
        parse(b"1668757755,GET,169,18,78", &mut r, st).unwrap();
        assert_eq!(r.key, b"1668757755");
        assert_eq!((r.time_us, r.value_size, st.repeat), (0, 169, 18));
    }

    #[test]
    fn bad_cachebench_lines_say_what_is_wrong() {
        let st = &mut State::default();
        let mut r = TraceRecord::default();
        assert!(parse(b"1,k,2,GET,1,3", &mut r, st)
            .unwrap_err()
            .contains("header"));
        parse(b"op_time,key,key_size,op,op_count,size", &mut r, st).unwrap();
        assert!(parse(b"1,k,2,GET,0,3", &mut r, st)
            .unwrap_err()
            .contains("op_count 0"));
        assert!(parse(b"1,k,2,GET,x,3", &mut r, st)
            .unwrap_err()
            .contains("op_count"));
        assert!(parse(b"1,k,2,GET,1", &mut r, st)
            .unwrap_err()
            .contains("size"));
        assert!(parse(b"1,k,2", &mut r, st).is_err());
        assert!(parse(b"t,k,2,GET,1,3", &mut r, st)
            .unwrap_err()
            .contains("op_time"));
    }
}
