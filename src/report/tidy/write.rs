//! The tidy table as CSV (through the project's one CSV writer, report::csv) and as JSON
//! lines. Both show each value as summary.json or manifest.json has it: a number is the same
//! digits, text is the same text, true/false stay words; a missing value is an empty CSV field
//! and a JSON null.

use super::rows::Row;
use crate::report::csv::Row as CsvRow;
use serde_json::Value;

/// A value as text: a number's JSON digits, a string as it is, true/false, "" for null.
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The CSV header line, appended to `out`.
pub fn csv_header(columns: &[String], out: &mut String) {
    columns
        .iter()
        .fold(CsvRow::default(), |r, c| r.text(c))
        .end(out);
}

/// One row as a CSV line, appended to `out`; returns how many of the row's cells had a
/// column (fewer than the row has: a column the first pass did not see).
pub fn csv_row(row: &Row, columns: &[String], out: &mut String) -> usize {
    let mut found = 0;
    columns
        .iter()
        .fold(CsvRow::default(), |r, c| match row.get(c) {
            Some(v) => {
                found += 1;
                match v {
                    Value::String(s) => r.text(s),
                    v => r.val(v),
                }
            }
            None => r.val(""),
        })
        .end(out);
    found
}

pub fn csv(rows: &[Row], columns: &[String]) -> String {
    let mut out = String::new();
    csv_header(columns, &mut out);
    for row in rows {
        csv_row(row, columns, &mut out);
    }
    out
}

/// The columns' names as JSON strings, for `jsonl_row`.
pub fn jsonl_keys(columns: &[String]) -> Vec<String> {
    columns
        .iter()
        .map(|c| Value::from(c.as_str()).to_string())
        .collect()
}

/// One JSON object a line, its keys in column order (every column, null where missing), so
/// `pandas.read_json(lines=True)` gets the columns in the same order as the CSV. Returns how
/// many of the row's cells had a column, as `csv_row`.
pub fn jsonl_row(row: &Row, columns: &[String], keys: &[String], out: &mut String) -> usize {
    let mut found = 0;
    out.push('{');
    for (i, (c, k)) in columns.iter().zip(keys).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push(':');
        match row.get(c) {
            Some(v) => {
                found += 1;
                out.push_str(&v.to_string());
            }
            None => out.push_str("null"),
        }
    }
    out.push_str("}\n");
    found
}

pub fn jsonl(rows: &[Row], columns: &[String]) -> String {
    let keys = jsonl_keys(columns);
    let mut out = String::new();
    for row in rows {
        jsonl_row(row, columns, &keys, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn csv_and_json_lines_keep_values_as_written() {
        let cols: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let rows: Vec<Row> = vec![
            [
                ("a".to_string(), json!(0.1)),
                ("b".to_string(), json!("x,\"y\"")),
            ]
            .into_iter()
            .collect(),
            [
                ("c".to_string(), json!(true)),
                ("a".to_string(), json!(18446744073709551615u64)),
            ]
            .into_iter()
            .collect(),
        ];
        assert_eq!(
            csv(&rows, &cols),
            "a,b,c\n0.1,\"x,\"\"y\"\"\",\n18446744073709551615,,true\n"
        );
        assert_eq!(
            jsonl(&rows, &cols),
            "{\"a\":0.1,\"b\":\"x,\\\"y\\\"\",\"c\":null}\n{\"a\":18446744073709551615,\"b\":null,\"c\":true}\n"
        );
    }
}
