//! The one CSV format of a run directory: intervals.csv, telemetry.csv, threads.csv,
//! timeline.csv, events.csv, pressure.csv, store_stats.csv. Reading is the `csv` crate's
//! (RFC 4180: quoted fields, doubled quotes, commas and line breaks inside quotes) within
//! kvmeter's bounds, because `kvmeter report` and `compare` read directories copied from
//! anywhere: each record's fields and bytes, named by file and line; a last record a crash cut
//! short (too few fields, or inside a quote it never closed) is left out rather than refused.
//!
//! Writing stays here, a few lines: it quotes a field only where it must (a comma, a quote or a
//! line break in it), so every file kvmeter wrote before reads the same byte for byte, and it
//! keeps one quirk of the old files the crate's writer has no switch for (a line break inside
//! a field is written as a space, so every record is one line for `grep` and `tail -f`).

use crate::error::UsageError;
use std::borrow::Cow;
use std::fmt::{Display, Write as _};
use std::path::Path;

/// A CSV file larger than this is refused (a day of 1 s telemetry is a few MB).
pub const MAX_FILE_BYTES: u64 = 1 << 30;
/// The most fields one record may have (timeline.csv has 19, telemetry.csv a few dozen).
pub const MAX_FIELDS: usize = 4096;
/// The longest record, in bytes (quoted line breaks included).
pub const MAX_RECORD_BYTES: usize = 1 << 20;

/// One field as written: quoted (quotes doubled, a line break made a space) when it holds a
/// comma, a quote or a line break; as is otherwise.
pub fn field(s: &str) -> Cow<'_, str> {
    if s.contains([',', '"', '\n']) {
        Cow::Owned(format!("\"{}\"", s.replace('"', "\"\"").replace('\n', " ")))
    } else {
        Cow::Borrowed(s)
    }
}

/// A row being written: `Row::default().text(phase).val(format_args!("{t:.3}"))…end(&mut out)`.
#[derive(Default)]
pub struct Row(String);

impl Row {
    fn sep(&mut self) {
        if !self.0.is_empty() {
            self.0.push(',');
        }
    }

    /// A text field, quoted where it must be.
    pub fn text(mut self, s: &str) -> Self {
        self.sep();
        self.0.push_str(&field(s));
        self
    }

    /// A value that needs no quoting (a number, a fixed name).
    pub fn val(mut self, v: impl Display) -> Self {
        self.sep();
        let _ = write!(self.0, "{v}");
        self
    }

    /// A value, or an empty field.
    pub fn opt(self, v: Option<impl Display>) -> Self {
        match v {
            Some(v) => self.val(v),
            None => self.val(""),
        }
    }

    /// Appends the row and its line break to `out`.
    pub fn end(self, out: &mut String) {
        out.push_str(&self.0);
        out.push('\n');
    }
}

/// A CSV as columns by header name. Rows with another number of fields than the header (a
/// row a crash cut short) are left out.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One row of a [`Table`], its fields by column name.
#[derive(Clone, Copy)]
pub struct TableRow<'a> {
    header: &'a [String],
    fields: &'a [String],
}

impl<'a> TableRow<'a> {
    /// The field of column `name`; `""` where there is no such column.
    pub fn get(&self, name: &str) -> &'a str {
        self.header
            .iter()
            .position(|h| h == name)
            .map(|i| self.fields[i].as_str())
            .unwrap_or("")
    }

    /// The field of column `name` as a number; None where empty, absent or not a number.
    pub fn num(&self, name: &str) -> Option<f64> {
        self.get(name).parse().ok()
    }
}

impl Table {
    /// Parses text whose origin has no name; on a bound crossed, says so on stderr and gives
    /// an empty table.
    pub fn parse(text: &str) -> Self {
        Self::parse_named(text, "CSV").unwrap_or_else(|e| {
            errln!("warning: {e}");
            Table::default()
        })
    }

    /// Parses `text`, read from `name` (for the errors: `name:line: …`).
    pub fn parse_named(text: &str, name: &str) -> Result<Self, UsageError> {
        let mut reader = ::csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(text.as_bytes());
        let mut rec = ::csv::StringRecord::new();
        let mut header: Option<Vec<String>> = None;
        let mut rows = vec![];
        // Where the last record began, and whether it became a row.
        let (mut last, mut last_kept) = (0usize, false);
        loop {
            let line = reader.position().line();
            let err = |what: String| {
                UsageError::new(format!(
                    "{name}:{line}: {what}; kvmeter's CSV files have no such rows (is it one kvmeter wrote?)"
                ))
            };
            match reader.read_record(&mut rec) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => return Err(err(e.to_string())),
            }
            if rec.len() > MAX_FIELDS {
                return Err(err(format!("a row of more than {MAX_FIELDS} fields")));
            }
            if rec.as_slice().len() > MAX_RECORD_BYTES {
                return Err(err(format!("a row longer than {MAX_RECORD_BYTES} bytes")));
            }
            last = rec.position().map_or(0, |p| p.byte() as usize);
            let fields: Vec<String> = rec.iter().map(str::to_string).collect();
            last_kept = match &header {
                None => {
                    header = Some(fields);
                    false
                }
                Some(h) if h.len() == fields.len() => {
                    rows.push(fields);
                    true
                }
                Some(_) => false,
            };
        }
        if last_kept && cut_in_a_quote(text.get(last..).unwrap_or("")) {
            rows.pop();
        }
        Ok(Table {
            header: header.unwrap_or_default(),
            rows,
        })
    }

    /// Reads a run directory's CSV file; `None` when there is none (or it cannot be read).
    /// Bytes that are not UTF-8 (a multi-byte name a crash cut) become U+FFFD.
    pub fn read(path: &Path) -> Result<Option<Self>, UsageError> {
        use std::io::Read;
        let Ok(f) = std::fs::File::open(path) else {
            return Ok(None);
        };
        let mut bytes = vec![];
        if f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).is_err() {
            return Ok(None);
        }
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(UsageError::new(format!(
                "{}: larger than {} MiB; kvmeter's CSV files are smaller (is it one kvmeter wrote?)",
                path.display(),
                MAX_FILE_BYTES >> 20
            )));
        }
        let text = String::from_utf8_lossy(&bytes);
        Self::parse_named(&text, &path.display().to_string()).map(Some)
    }

    /// The index of column `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    /// Every row, in order.
    pub fn rows(&self) -> impl Iterator<Item = TableRow<'_>> {
        self.rows.iter().map(|r| TableRow {
            header: &self.header,
            fields: r,
        })
    }

    /// The rows whose column `name` is `value` (none without such a column).
    pub fn rows_where<'a>(
        &'a self,
        name: &str,
        value: &'a str,
    ) -> impl Iterator<Item = TableRow<'a>> + 'a {
        let i = self.index(name);
        self.rows()
            .filter(move |r| i.is_some_and(|i| r.fields[i] == value))
    }

    /// A column's values (None where empty or not a number); None if there is no such column.
    pub fn column(&self, name: &str) -> Option<Vec<Option<f64>>> {
        let i = self.index(name)?;
        Some(self.rows.iter().map(|r| r[i].parse().ok()).collect())
    }

    /// A column's text.
    pub fn text(&self, name: &str) -> Option<Vec<&str>> {
        let i = self.index(name)?;
        Some(self.rows.iter().map(|r| r[i].as_str()).collect())
    }
}

/// Whether the last record, from its first byte, ends inside a quote it opened: written by a
/// crash mid-field (every record kvmeter writes ends with its line break, outside quotes).
fn cut_in_a_quote(last: &str) -> bool {
    !last.ends_with('\n') && last.bytes().filter(|&b| b == b'"').count() % 2 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_field_reads_back_as_written() {
        let odd = "leader m1, 2 \"up\"";
        let mut out = String::from("phase,cluster,n\n");
        Row::default().text("run").text(odd).val(3).end(&mut out);
        Row::default()
            .text("load")
            .text("plain")
            .opt(None::<u8>)
            .end(&mut out);
        // RFC 4180's own quoting, independently: quotes doubled, the field in quotes.
        assert_eq!(
            out,
            "phase,cluster,n\nrun,\"leader m1, 2 \"\"up\"\"\",3\nload,plain,\n"
        );
        let t = Table::parse_named(&out, "x.csv").unwrap();
        assert_eq!(t.header, ["phase", "cluster", "n"]);
        assert_eq!(t.rows.len(), 2);
        let run: Vec<_> = t.rows_where("phase", "run").collect();
        assert_eq!(run.len(), 1);
        assert_eq!(run[0].get("cluster"), odd);
        assert_eq!(run[0].num("n"), Some(3.0));
        assert_eq!(t.column("n").unwrap(), [Some(3.0), None]);
    }

    #[test]
    fn a_line_break_in_a_field_is_written_as_a_space_and_read_across_lines() {
        assert_eq!(field("a\nb"), "\"a b\"");
        assert_eq!(field("plain"), "plain");
        // A file from elsewhere may hold a quoted line break: one record, and the error line
        // numbers count it.
        let t = Table::parse_named("a,b\n\"x\ny\",1\r\nz,2\n", "f.csv").unwrap();
        assert_eq!(t.rows, [vec!["x\ny", "1"], vec!["z", "2"]]);
        let e = Table::parse_named(&format!("a\n\"x\ny\"\n{}\n", "b,".repeat(5000)), "f.csv")
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("f.csv:4: a row of more than 4096 fields"),
            "{e}"
        );
    }

    #[test]
    fn rows_cut_by_a_crash_are_left_out_and_hostile_ones_refused() {
        // A short last row, and a last row inside an open quote.
        let t = Table::parse_named("a,b\n1,2\n3", "f.csv").unwrap();
        assert_eq!(t.rows, [vec!["1", "2"]]);
        let t = Table::parse_named("a,b\n1,2\n3,\"x", "f.csv").unwrap();
        assert_eq!(t.rows.len(), 1);
        let long = format!("a\n{}\n", "x".repeat(MAX_RECORD_BYTES + 1));
        let e = Table::parse_named(&long, "t.csv").unwrap_err();
        assert!(
            e.to_string().starts_with("t.csv:2: a row longer than"),
            "{e}"
        );
        // An unnamed text warns and gives an empty table.
        assert!(Table::parse(&long).rows.is_empty());
    }
}
