//! The one CSV format of a run directory, read and written here: intervals.csv, telemetry.csv,
//! threads.csv, timeline.csv, events.csv, pressure.csv. Writing quotes a field only where it
//! must (a comma, a quote or a line break in it), so every file kvmeter wrote before reads the
//! same byte for byte; reading follows RFC 4180 (quoted fields, doubled quotes, commas inside
//! quotes) and is bounded, because `kvmeter report` and `compare` read directories copied from
//! anywhere.
//!
//! Hand-written rather than the `csv` crate: the files need a few dozen lines of it, the bounds
//! must name the file and line, a record a crash cut short must be dropped rather than refused,
//! and the writer keeps one quirk of the old files (a line break inside a field is written as a
//! space, so every record is one line for `grep` and `tail -f`).

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
            eprintln!("warning: {e}");
            Table::default()
        })
    }

    /// Parses `text`, read from `name` (for the errors: `name:line: …`).
    pub fn parse_named(text: &str, name: &str) -> Result<Self, UsageError> {
        let mut records = Records {
            rest: text,
            line: 1,
            name,
        };
        let Some(header) = records.next_record()? else {
            return Ok(Table::default());
        };
        let mut rows = vec![];
        while let Some(r) = records.next_record()? {
            if r.len() == header.len() {
                rows.push(r);
            }
        }
        Ok(Table { header, rows })
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

/// The records of a CSV text, one at a time.
struct Records<'t> {
    rest: &'t str,
    /// The line the next record starts on (1-based).
    line: usize,
    name: &'t str,
}

impl Records<'_> {
    fn err(&self, what: String) -> UsageError {
        UsageError::new(format!(
            "{}:{}: {what}; kvmeter's CSV files have no such rows (is it one kvmeter wrote?)",
            self.name, self.line
        ))
    }

    /// The next record; `None` at the end. A last record inside an unclosed quote was cut by
    /// a crash and is left out.
    fn next_record(&mut self) -> Result<Option<Vec<String>>, UsageError> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let mut fields = vec![];
        let mut cur = String::new();
        let (mut quoted, mut lines, mut len) = (false, 1, 0usize);
        let mut chars = self.rest.char_indices().peekable();
        let mut end = self.rest.len();
        let mut done = false;
        while let Some((i, c)) = chars.next() {
            len += c.len_utf8();
            if len > MAX_RECORD_BYTES {
                return Err(self.err(format!("a row longer than {MAX_RECORD_BYTES} bytes")));
            }
            match (quoted, c) {
                (true, '"') if chars.peek().is_some_and(|&(_, n)| n == '"') => {
                    chars.next();
                    cur.push('"');
                }
                (true, '"') => quoted = false,
                (true, c) => {
                    lines += usize::from(c == '\n');
                    cur.push(c);
                }
                (false, '"') if cur.is_empty() => quoted = true,
                (false, ',') => {
                    fields.push(std::mem::take(&mut cur));
                    if fields.len() >= MAX_FIELDS {
                        return Err(self.err(format!("a row of more than {MAX_FIELDS} fields")));
                    }
                }
                (false, '\n') => {
                    end = i + 1;
                    done = true;
                    break;
                }
                (false, c) => cur.push(c),
            }
        }
        self.rest = &self.rest[end..];
        self.line += lines;
        if quoted {
            return Ok(None); // cut inside a quoted field
        }
        if !done && cur.is_empty() && fields.is_empty() {
            return Ok(None);
        }
        if cur.ends_with('\r') {
            cur.pop();
        }
        fields.push(cur);
        Ok(Some(fields))
    }
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
