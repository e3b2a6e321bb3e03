//! The table's JSON files (summary.json, manifest.json, compare.json) parsed into a
//! `serde_json::Value` with the memory the value takes counted as it is built, and refused past
//! `MAX_PARSED_BYTES`. A file's size alone does not bound that: 64 MiB of `{"a":0},` objects
//! parse into 5.85 GB (measured, issue 41 F7), a B-tree node of ~630 bytes for every 8 bytes
//! of text, while kvmeter's own summaries take about 10 bytes a byte.
//!
//! The count is an estimate of serde_json's layout on 64-bit Linux (a Value is 32 bytes; a
//! non-empty object's first B-tree node ~640 bytes, each entry ~64 more with its key; an
//! array slot 32 bytes; text its length plus 16), on the high side for ordinary files. The
//! values made are those `serde_json::from_str` makes (the same numbers, the last of two equal
//! keys kept).

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::cell::Cell;
use std::fmt;

/// The most memory (estimated) one parsed file may take: a summary.json of 320,000 operations
/// near the 64-MiB file bound is estimated at 780 MiB (it takes ~600 MB).
pub const MAX_PARSED_BYTES: u64 = 1 << 30;

/// Why a parse failed.
pub enum Refusal {
    /// The value would take more than `MAX_PARSED_BYTES`.
    TooBig,
    /// Not JSON.
    Invalid(serde_json::Error),
}

/// Parses `text` into a value that takes at most `budget` bytes (estimated); returns the value
/// and the bytes it takes.
pub fn parse(text: &str, budget: u64) -> Result<(Value, u64), Refusal> {
    let left = Cell::new(budget);
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = Seed { left: &left }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|_| v));
    parsed
        .map(|v| (v, budget - left.get()))
        .map_err(|e| match left.get() {
            0 => Refusal::TooBig,
            _ => Refusal::Invalid(e),
        })
}

/// Builds one value, taking its bytes from `left`.
#[derive(Clone, Copy)]
struct Seed<'b> {
    left: &'b Cell<u64>,
}

impl Seed<'_> {
    fn charge<E: serde::de::Error>(&self, bytes: usize) -> Result<(), E> {
        match self.left.get().checked_sub(bytes as u64) {
            Some(l) if l > 0 => {
                self.left.set(l);
                Ok(())
            }
            _ => {
                self.left.set(0);
                Err(E::custom("too big"))
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Value, E> {
        self.charge(s.len() + 16)?;
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Value, E> {
        self.charge(s.len() + 16)?;
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut v = vec![];
        while let Some(x) = seq.next_element_seed(self)? {
            // A slot, twice over: a growing Vec holds up to twice what it needs.
            self.charge(64)?;
            v.push(x);
        }
        Ok(Value::Array(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut m = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            self.charge(k.len() + 16 + 64 + if m.is_empty() { 640 } else { 0 })?;
            let v = map.next_value_seed(self)?;
            m.insert(k, v);
        }
        Ok(Value::Object(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_as_serde_json_does() {
        let text = r#"{"b":[1,-2,0.1,1e300,18446744073709551615,"x\u00e9",null,true],"a":{"k":1,"k":2},"e":{}}"#;
        let want: Value = serde_json::from_str(text).unwrap();
        assert_eq!(parse(text, 1 << 20).ok().map(|(v, _)| v), Some(want));
        assert!(matches!(
            parse("{\"a\":1} x", 1 << 20),
            Err(Refusal::Invalid(_))
        ));
        assert!(matches!(parse("[1,", 1 << 20), Err(Refusal::Invalid(_))));
    }

    #[test]
    fn many_small_objects_are_refused_by_what_they_would_take() {
        // 785 bytes estimated each ({"a":0} in a list), 8 bytes of text.
        let budget = 1 << 20;
        let objects = |n: usize| format!("[{}{{\"a\":0}}]", "{\"a\":0},".repeat(n - 1));
        assert!(parse(&objects(1300), budget).is_ok());
        assert!(matches!(
            parse(&objects(1400), budget),
            Err(Refusal::TooBig)
        ));
        // The same text in numbers is 64 bytes a value.
        let numbers = format!("[{}0]", "0,".repeat(10_000));
        assert!(parse(&numbers, budget).is_ok());
    }
}
