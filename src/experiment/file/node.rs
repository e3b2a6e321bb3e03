//! The experiment file as a small tree of values that remember their line, so that every
//! complaint names the file, the line and the key (as the YCSB property files' checks do).
//! Parsed with toml_edit, which keeps source spans; the `toml` crate's serde route drops them
//! below the top level.

use crate::error::UsageError;
use std::path::Path;

#[derive(Clone, Debug, PartialEq)]
pub enum V {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Arr(Vec<Node>),
    /// Keys in file order, each with its line.
    Table(Vec<(String, usize, Node)>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub line: usize,
    pub v: V,
}

impl Node {
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.v {
            V::Table(t) => t.iter().find(|(k, _, _)| k == key).map(|(_, _, n)| n),
            _ => None,
        }
    }

    pub fn entries(&self) -> &[(String, usize, Node)] {
        match &self.v {
            V::Table(t) => t,
            _ => &[],
        }
    }

    pub fn kind(&self) -> &'static str {
        match self.v {
            V::Str(_) => "a string",
            V::Int(_) => "an integer",
            V::Float(_) => "a number",
            V::Bool(_) => "true or false",
            V::Arr(_) => "an array",
            V::Table(_) => "a table",
        }
    }

    /// The value as a command-line word: strings as they are, numbers and booleans printed.
    pub fn word(&self) -> Option<String> {
        match &self.v {
            V::Str(s) => Some(s.clone()),
            V::Int(i) => Some(i.to_string()),
            V::Float(f) => Some(f.to_string()),
            V::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    pub fn number(&self) -> Option<f64> {
        match self.v {
            V::Int(i) => Some(i as f64),
            V::Float(f) => Some(f),
            _ => None,
        }
    }
}

/// Where in which file: the prefix of every message about the file.
#[derive(Clone, Debug)]
pub struct Loc {
    pub file: String,
}

impl Loc {
    pub fn err(&self, line: usize, msg: impl std::fmt::Display) -> UsageError {
        UsageError::new(format!("{}:{line}: {msg}", self.file))
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// Parses `text` (the contents of `path`) into a table node.
pub fn parse(path: &Path, text: &str) -> Result<Node, UsageError> {
    let loc = Loc {
        file: path.display().to_string(),
    };
    let doc = toml_edit::ImDocument::parse(text.to_string()).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
        let msg = e.message().trim().replace('\n', " ");
        loc.err(line, format!("not valid TOML: {msg}"))
    })?;
    Ok(table(text, doc.as_table(), 1))
}

fn span_line(text: &str, span: Option<std::ops::Range<usize>>, fallback: usize) -> usize {
    span.map(|s| line_of(text, s.start)).unwrap_or(fallback)
}

fn table(text: &str, t: &toml_edit::Table, line: usize) -> Node {
    let line = span_line(text, t.span(), line);
    let mut out = vec![];
    for (k, _) in t.iter() {
        let (key, item) = t.get_key_value(k).expect("key just listed");
        let kl = span_line(text, key.span(), line);
        out.push((k.to_string(), kl, item_node(text, item, kl)));
    }
    Node {
        line,
        v: V::Table(out),
    }
}

fn item_node(text: &str, item: &toml_edit::Item, line: usize) -> Node {
    match item {
        toml_edit::Item::Value(v) => value(text, v, line),
        toml_edit::Item::Table(t) => table(text, t, line),
        toml_edit::Item::ArrayOfTables(a) => Node {
            line,
            v: V::Arr(a.iter().map(|t| table(text, t, line)).collect()),
        },
        toml_edit::Item::None => Node {
            line,
            v: V::Table(vec![]),
        },
    }
}

fn value(text: &str, v: &toml_edit::Value, line: usize) -> Node {
    use toml_edit::Value as T;
    let line = span_line(text, v.span(), line);
    let v = match v {
        T::String(s) => V::Str(s.value().clone()),
        T::Integer(i) => V::Int(*i.value()),
        T::Float(f) => V::Float(*f.value()),
        T::Boolean(b) => V::Bool(*b.value()),
        T::Datetime(d) => V::Str(d.value().to_string()),
        T::Array(a) => V::Arr(a.iter().map(|x| value(text, x, line)).collect()),
        T::InlineTable(t) => {
            let mut out = vec![];
            for (k, x) in t.iter() {
                let kl = span_line(text, t.key(k).and_then(|key| key.span()), line);
                out.push((k.to_string(), kl, value(text, x, kl)));
            }
            V::Table(out)
        }
    };
    Node { line, v }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_the_source() {
        let text = "a = 1\n\n[t]\nb = \"x\"\nc = { d = 2 }\n\n[[s]]\ne = [1, 2]\n";
        let n = parse(Path::new("f.toml"), text).unwrap();
        assert_eq!(n.entries()[0].1, 1);
        let t = n.get("t").unwrap();
        assert_eq!(t.entries()[0].1, 4);
        assert_eq!(t.get("c").unwrap().get("d").unwrap().line, 5);
        let V::Arr(s) = &n.get("s").unwrap().v else {
            panic!()
        };
        assert_eq!(s[0].entries()[0].1, 8);
    }

    #[test]
    fn bad_toml_names_file_and_line() {
        let e = parse(Path::new("f.toml"), "a = 1\nb = = 2\n").unwrap_err();
        assert!(e.0.starts_with("f.toml:2: not valid TOML"), "{}", e.0);
    }
}
