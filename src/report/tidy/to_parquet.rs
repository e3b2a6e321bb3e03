//! `kvmeter table --format parquet`: the tidy table as one Parquet file (one row group, every
//! column OPTIONAL so a missing value is a null), for pandas, R's arrow, DuckDB or Spark.
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

/// The type every value of the column fits.
pub fn kind_of(rows: &[Row], col: &str) -> Kind {
    let (mut bool_, mut int, mut uint, mut float, mut text) = (false, false, false, false, false);
    for v in rows.iter().filter_map(|r| r.get(col)) {
        match (v, as_number(v)) {
            (Value::Bool(_), _) => bool_ = true,
            (_, Some(n)) if n.is_i64() => int = true,
            (_, Some(n)) if n.is_u64() => uint = true,
            (_, Some(_)) => float = true,
            _ => text = true,
        }
    }
    let number = int || uint || float;
    if text || (bool_ && number) {
        Kind::Text
    } else if bool_ {
        Kind::Bool
    } else if float {
        Kind::Double
    } else if uint {
        Kind::UInt
    } else {
        Kind::Int
    }
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

/// The values of one column (nulls left out) and its definition levels (1 = a value).
struct Column<T> {
    values: Vec<T>,
    levels: Vec<i16>,
}

fn column<T>(rows: &[Row], col: &str, f: impl Fn(&Value) -> T) -> Column<T> {
    let mut c = Column {
        values: vec![],
        levels: Vec::with_capacity(rows.len()),
    };
    for r in rows {
        match r.get(col) {
            Some(v) => {
                c.values.push(f(v));
                c.levels.push(1);
            }
            None => c.levels.push(0),
        }
    }
    c
}

/// Writes the rows with these columns as a Parquet file to `out`.
pub fn write<W: Write + Send>(rows: &[Row], columns: &[String], out: W) -> anyhow::Result<()> {
    let kinds: Vec<Kind> = columns.iter().map(|c| kind_of(rows, c)).collect();
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
    let mut w = SerializedFileWriter::new(out, Arc::new(schema), Arc::new(props))?;
    let mut rg = w.next_row_group()?;
    let mut i = 0;
    while let Some(mut cw) = rg.next_column()? {
        let col = columns[i].as_str();
        match cw.untyped() {
            ColumnWriter::BoolColumnWriter(w) => {
                let c = column(rows, col, |v| v.as_bool().unwrap_or_default());
                w.write_batch(&c.values, Some(&c.levels), None)?;
            }
            ColumnWriter::Int64ColumnWriter(w) => {
                // An unsigned column keeps the u64's bits; its logical type says how to read them.
                let c = column(rows, col, |v| {
                    let n = as_number(v).unwrap_or_else(|| 0.into());
                    n.as_i64()
                        .unwrap_or_else(|| n.as_u64().unwrap_or_default() as i64)
                });
                w.write_batch(&c.values, Some(&c.levels), None)?;
            }
            ColumnWriter::DoubleColumnWriter(w) => {
                let c = column(rows, col, |v| {
                    as_number(v).and_then(|n| n.as_f64()).unwrap_or(f64::NAN)
                });
                w.write_batch(&c.values, Some(&c.levels), None)?;
            }
            ColumnWriter::ByteArrayColumnWriter(w) => {
                let c = column(rows, col, |v| {
                    ByteArray::from(super::write::text(v).into_bytes())
                });
                w.write_batch(&c.values, Some(&c.levels), None)?;
            }
            _ => unreachable!("only the four physical types above are in the schema"),
        }
        cw.close()?;
        i += 1;
    }
    rg.close()?;
    w.close()?;
    Ok(())
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
