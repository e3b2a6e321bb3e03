//! `kvmeter table --format parquet`: the tidy table as one Parquet file (every column OPTIONAL
//! so a missing value is a null), for pandas, R's arrow, DuckDB or Spark. The rows come one at
//! a time (mod.rs streams them) and are kept column by column until a row group is full —
//! `ROW_GROUP_ROWS` rows or `ROW_GROUP_BYTES` of values, whichever comes first — so a table of
//! millions of rows holds one row group's values, never the whole table (issue 41 F7).
//!
//! Written with arrow-rs's `parquet` crate through its low-level column writers, with its
//! default features off: no Arrow arrays (the rows are JSON scalars already) and no
//! compression codecs (a table of a few thousand rows is small; readers need nothing extra).
//! Measured on the 2-core build machine it adds about 40 s of compile time (27 s for the crate,
//! the rest for num-bigint, chrono, zerocopy and friends) to a release build, most of it in
//! parallel with kvmeter's own crate: under the 90 s the project allows a dependency before it
//! goes behind a cargo feature, so `--format parquet` works in every build.
//!
//! Each column's type is the one its values agree on, read as a CSV reader reads the CSV: a
//! number is a number whether the JSON has it as one or as text that is one (manifest.json
//! keeps store options as text, `"64"`; as UTF8 it would sort before `"8"`). BOOLEAN, INT64
//! (signed, or unsigned for a u64 beyond i64, e.g. a seed), DOUBLE (numbers, integers among
//! them converted), else UTF8 with every value as the CSV shows it.

use super::rows::Row;
use parquet::basic::{LogicalType, Repetition, Type as Physical};
use parquet::column::writer::ColumnWriter;
use parquet::data_type::ByteArray;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;
use serde_json::{Number, Value};
use std::io::Write;
use std::sync::Arc;

/// The type a column is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Int,
    UInt,
    Double,
    Text,
}

/// A value as the number its CSV cell reads as: a JSON number, or text that is exactly one
/// (JSON's number syntax: no spaces, no leading zeros, so "007" and "1.6.21" stay text).
fn as_number(v: &Value) -> Option<Number> {
    match v {
        Value::Number(n) => Some(n.clone()),
        Value::String(s) if !s.is_empty() && s.trim() == s => serde_json::from_str(s).ok(),
        _ => None,
    }
}

/// A row group is written when it has this many rows...
pub const ROW_GROUP_ROWS: usize = 4096;
/// ... or when its values reach this many bytes (10 a cell, 2 a null, a text cell 58 plus
/// its length).
pub const ROW_GROUP_BYTES: usize = 16 << 20;

/// The kinds of value a column has held so far (the first pass over the runs sees every row
/// once; `kind` is then the type all of them fit).
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen {
    bool_: bool,
    int: bool,
    uint: bool,
    float: bool,
    text: bool,
}

impl Seen {
    pub fn see(&mut self, v: &Value) {
        match (v, as_number(v)) {
            (Value::Bool(_), _) => self.bool_ = true,
            (_, Some(n)) if n.is_i64() => self.int = true,
            (_, Some(n)) if n.is_u64() => self.uint = true,
            (_, Some(_)) => self.float = true,
            _ => self.text = true,
        }
    }

    /// The type every value seen fits.
    pub fn kind(&self) -> Kind {
        let number = self.int || self.uint || self.float;
        if self.text || (self.bool_ && number) {
            Kind::Text
        } else if self.bool_ {
            Kind::Bool
        } else if self.float {
            Kind::Double
        } else if self.uint {
            Kind::UInt
        } else {
            Kind::Int
        }
    }
}

/// The type every value of the column fits.
#[cfg(test)]
fn kind_of(rows: &[Row], col: &str) -> Kind {
    let mut seen = Seen::default();
    for v in rows.iter().filter_map(|r| r.get(col)) {
        seen.see(v);
    }
    seen.kind()
}

fn field(name: &str, kind: Kind) -> parquet::errors::Result<Arc<Type>> {
    let (physical, logical) = match kind {
        Kind::Bool => (Physical::BOOLEAN, None),
        Kind::Int => (Physical::INT64, None),
        Kind::UInt => (Physical::INT64, Some(LogicalType::integer(64, false))),
        Kind::Double => (Physical::DOUBLE, None),
        Kind::Text => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
    };
    Type::primitive_type_builder(name, physical)
        .with_repetition(Repetition::OPTIONAL)
        .with_logical_type(logical)
        .build()
        .map(Arc::new)
}

/// One column's values of the row group being filled (nulls left out).
enum Values {
    Bool(Vec<bool>),
    Int(Vec<i64>),
    Double(Vec<f64>),
    Text(Vec<ByteArray>),
}

/// One column of the row group being filled: its values and definition levels (1 = a value).
struct Column {
    values: Values,
    levels: Vec<i16>,
}

impl Column {
    fn new(kind: Kind) -> Self {
        let values = match kind {
            Kind::Bool => Values::Bool(vec![]),
            Kind::Int | Kind::UInt => Values::Int(vec![]),
            Kind::Double => Values::Double(vec![]),
            Kind::Text => Values::Text(vec![]),
        };
        Column {
            values,
            levels: vec![],
        }
    }

    /// Adds a cell; returns the bytes it holds, or None when the value does not fit the
    /// column's type (the run changed since the first pass fixed the types).
    fn push(&mut self, v: Option<&Value>) -> Option<usize> {
        let Some(v) = v else {
            self.levels.push(0);
            return Some(2);
        };
        let mut bytes = 10;
        match &mut self.values {
            Values::Bool(b) => b.push(v.as_bool()?),
            // An unsigned column keeps the u64's bits; its logical type says how to read them.
            Values::Int(i) => {
                let n = as_number(v)?;
                i.push(n.as_i64().or_else(|| n.as_u64().map(|u| u as i64))?);
            }
            Values::Double(d) => d.push(as_number(v)?.as_f64()?),
            Values::Text(t) => {
                // A ByteArray (32 bytes) and its allocation.
                let s = super::write::text(v).into_bytes();
                bytes += 32 + 16 + s.len();
                t.push(ByteArray::from(s));
            }
        }
        self.levels.push(1);
        Some(bytes)
    }
}

/// A Parquet file being written a row group at a time.
pub struct Writer<'c, W: Write + Send> {
    columns: &'c [String],
    kinds: Vec<Kind>,
    file: SerializedFileWriter<W>,
    group: Vec<Column>,
    rows: usize,
    bytes: usize,
}

impl<'c, W: Write + Send> Writer<'c, W> {
    /// Starts the file: these columns, each of the type the first pass found.
    pub fn new(columns: &'c [String], kinds: Vec<Kind>, out: W) -> anyhow::Result<Self> {
        let fields = columns
            .iter()
            .zip(&kinds)
            .map(|(c, k)| field(c, *k))
            .collect::<Result<Vec<_>, _>>()?;
        let schema = Type::group_type_builder("kvmeter_table")
            .with_fields(fields)
            .build()?;
        let props = WriterProperties::builder()
            .set_created_by(format!("kvmeter {}", env!("CARGO_PKG_VERSION")))
            .build();
        let file = SerializedFileWriter::new(out, Arc::new(schema), Arc::new(props))?;
        let group = kinds.iter().map(|k| Column::new(*k)).collect();
        Ok(Writer {
            columns,
            kinds,
            file,
            group,
            rows: 0,
            bytes: 0,
        })
    }

    /// Adds a row; writes the row group when it is full. `Ok(false)`: a value does not fit its
    /// column's type (the caller names the run that changed).
    pub fn push(&mut self, row: &Row) -> anyhow::Result<bool> {
        for (c, col) in self.group.iter_mut().zip(self.columns) {
            match c.push(row.get(col)) {
                Some(n) => self.bytes += n,
                None => return Ok(false),
            }
        }
        self.rows += 1;
        if self.rows >= ROW_GROUP_ROWS || self.bytes >= ROW_GROUP_BYTES {
            self.flush()?;
        }
        Ok(true)
    }

    /// Writes the rows kept as one row group and empties the columns.
    fn flush(&mut self) -> anyhow::Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut rg = self.file.next_row_group()?;
        let mut cols = self.group.iter_mut();
        while let Some(mut cw) = rg.next_column()? {
            let c = cols.next().expect("one buffered column per schema column");
            let levels = Some(&c.levels[..]);
            match (cw.untyped(), &c.values) {
                (ColumnWriter::BoolColumnWriter(w), Values::Bool(v)) => {
                    w.write_batch(v, levels, None)?;
                }
                (ColumnWriter::Int64ColumnWriter(w), Values::Int(v)) => {
                    w.write_batch(v, levels, None)?;
                }
                (ColumnWriter::DoubleColumnWriter(w), Values::Double(v)) => {
                    w.write_batch(v, levels, None)?;
                }
                (ColumnWriter::ByteArrayColumnWriter(w), Values::Text(v)) => {
                    w.write_batch(v, levels, None)?;
                }
                _ => unreachable!("each column is buffered as its schema type"),
            }
            cw.close()?;
        }
        rg.close()?;
        self.group = self.kinds.iter().map(|k| Column::new(*k)).collect();
        (self.rows, self.bytes) = (0, 0);
        Ok(())
    }

    /// Writes the last row group and the footer; returns the output.
    pub fn finish(mut self) -> anyhow::Result<W> {
        self.flush()?;
        Ok(self.file.into_inner()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(col: &str, v: Value) -> Row {
        [(col.to_string(), v)].into_iter().collect()
    }

    #[test]
    fn a_column_takes_the_type_all_its_values_fit() {
        let rows = [
            row("a", json!(1)),
            row("a", json!(2.5)),
            row("b", json!(true)),
        ];
        assert_eq!(kind_of(&rows, "a"), Kind::Double);
        assert_eq!(kind_of(&rows, "b"), Kind::Bool);
        assert_eq!(kind_of(&[row("s", json!(u64::MAX))], "s"), Kind::UInt);
        assert_eq!(
            kind_of(&[row("s", json!(3)), row("s", json!("x"))], "s"),
            Kind::Text
        );
        assert_eq!(
            kind_of(&[row("s", json!(3)), row("s", json!(false))], "s"),
            Kind::Text
        );
        assert_eq!(kind_of(&[row("s", json!(3))], "s"), Kind::Int);
        // Text that is a number is one, as in the CSV; text that is not stays text.
        assert_eq!(
            kind_of(&[row("o", json!("64")), row("o", json!(8))], "o"),
            Kind::Int
        );
        assert_eq!(kind_of(&[row("o", json!("0.5"))], "o"), Kind::Double);
        for t in ["007", "1.6.21", " 8", "", "NaN", "auto"] {
            assert_eq!(kind_of(&[row("o", json!(t))], "o"), Kind::Text, "{t:?}");
        }
    }
}
