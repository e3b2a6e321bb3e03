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

pub fn csv(rows: &[Row], columns: &[String]) -> String {
    let mut out = String::new();
    columns
        .iter()
        .fold(CsvRow::default(), |r, c| r.text(c))
        .end(&mut out);
    for row in rows {
        columns
            .iter()
            .fold(CsvRow::default(), |r, c| match row.get(c) {
                Some(Value::String(s)) => r.text(s),
                Some(v) => r.val(v),
                None => r.val(""),
            })
            .end(&mut out);
    }
    out
}

/// One JSON object a line, its keys in column order (every column, null where missing), so
/// `pandas.read_json(lines=True)` gets the columns in the same order as the CSV.
pub fn jsonl(rows: &[Row], columns: &[String]) -> String {
    let keys: Vec<String> = columns
        .iter()
        .map(|c| Value::from(c.as_str()).to_string())
        .collect();
    let mut out = String::new();
    for row in rows {
        out.push('{');
        for (i, (c, k)) in columns.iter().zip(&keys).enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push(':');
            out.push_str(&row.get(c).unwrap_or(&Value::Null).to_string());
        }
        out.push_str("}\n");
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
