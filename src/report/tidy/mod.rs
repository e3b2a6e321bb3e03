//! `kvmeter table DIR...`: every run below the DIRs as one tidy table — one row per run ×
//! phase × operation, with the run's variables (store, options, threads, connections,
//! workload properties, machine) as columns beside its figures — for pandas, R or a
//! spreadsheet. summary.json is nested and one per run; a study of hundreds of runs needs them
//! side by side (issue 31, docs/table.md).
//!
//! The table reads run directories only (manifest.json + summary.json), wherever they lie: a
//! run, a sweep's points, a capacity search's steps, an experiment's steps, runs a compare
//! named (compare.json's `a_runs`/`b_runs`, with a `compare.side` column). It recomputes
//! nothing: each cell is the value the run wrote (rows.rs).
//!
//! A summary or manifest that cannot be read (not JSON, too big, a key of the wrong shape) is
//! refused with its file and key in one line, exit 2, before any output is written: a table
//! that silently lacks a run would bias whatever is computed from it, and the user can move
//! the bad directory aside. A directory with a manifest but no summary.json (a run killed
//! before its first phase ended) is no run: it is passed over and counted in a note.

//!
//! Memory is bounded in bytes, not by rows × columns (issue 41 F7, stream.rs): a first pass
//! fixes the columns, a second re-reads each run and writes its rows as they are made. At most
//! one file's text (≤ 64 MiB), one run's parsed manifest.json and summary.json (≤ 1 GiB
//! together, estimated as they are parsed: json.rs), one row, the column names (≤ 10,000) and
//! for Parquet one row group (≤ 4,096 rows or 16 MiB of values) and its footer are held: about
//! 1.2 GB at most. Measured (BENCHMARKS.md, "kvmeter table memory"): 666 MB for a 60-MiB
//! summary.json of 320,000 operations (7.99 GB before), 20 MB for 20,000 ordinary runs.

mod find;
mod json;
pub mod rows;
mod stream;
mod to_parquet;
pub mod write;

use crate::error::{UsageError, EXIT_OK};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// summary.json and manifest.json larger than this are refused (a long run with faults and
/// per-second events writes a few MB).
pub const MAX_JSON_BYTES: u64 = 64 << 20;
/// The most rows and columns a table may have.
pub const MAX_ROWS: usize = 2_000_000;
pub const MAX_COLUMNS: usize = 10_000;

/// The output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Csv,
    Jsonl,
    Parquet,
}

impl Format {
    pub fn parse(s: &str) -> Result<Self, UsageError> {
        match s {
            "csv" => Ok(Format::Csv),
            "jsonl" => Ok(Format::Jsonl),
            "parquet" => Ok(Format::Parquet),
            _ => Err(UsageError::new(format!(
                "--format {s}: expected csv, jsonl or parquet"
            ))),
        }
    }
}

/// What `kvmeter table` was asked for.
pub struct Options {
    pub dirs: Vec<PathBuf>,
    pub format: String,
    /// None: stdout.
    pub output: Option<PathBuf>,
}

/// Checks the options, reads every run below the DIRs (the first pass), then writes the table
/// (the second); nothing is created before every run was read once.
pub fn main(o: &Options) -> anyhow::Result<i32> {
    let format = Format::parse(&o.format)?;
    check_output(o.output.as_deref(), format)?;
    let found = find::run_dirs(&o.dirs)?;
    if found.runs.is_empty() {
        let names: Vec<String> = o.dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(UsageError::new(format!(
            "{}: no run directory (manifest.json with summary.json) found below",
            names.join(" ")
        ))
        .into());
    }
    let shape = stream::shape(&found.runs, format == Format::Parquet)?;
    match &o.output {
        Some(path) => {
            // create_new: a file that appeared since the check is still never overwritten.
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| UsageError::new(format!("--output {}: {e}", path.display())))?;
            // A table cut short (a write error, a run that changed) is not left behind.
            let written = stream::emit(&found.runs, &shape, format, f)
                .and_then(|f| f.sync_all().map_err(anyhow::Error::from));
            if let Err(e) = written {
                let _ = std::fs::remove_file(path);
                return Err(e.context(format!("--output {}", path.display())));
            }
        }
        None => {
            stream::emit(&found.runs, &shape, format, std::io::stdout())?.flush()?;
        }
    }
    let runs = found.runs.len();
    errln!(
        "table: {} rows × {} columns from {} run director{}{}",
        shape.rows,
        shape.columns.len(),
        runs,
        if runs == 1 { "y" } else { "ies" },
        o.output
            .as_ref()
            .map(|p| format!(" in {}", p.display()))
            .unwrap_or_default()
    );
    if let Some(first) = found.without_summary.first() {
        errln!(
            "note: {} director{} with manifest.json but no summary.json passed over (a run that ended before its first phase did), e.g. {}",
            found.without_summary.len(),
            if found.without_summary.len() == 1 { "y" } else { "ies" },
            first.display()
        );
    }
    Ok(EXIT_OK)
}

/// An --output that exists is refused (kvmeter never overwrites what the user owns), and so
/// is Parquet to a terminal.
fn check_output(output: Option<&Path>, format: Format) -> Result<(), UsageError> {
    use std::io::IsTerminal;
    match output {
        Some(p) if p.symlink_metadata().is_ok() => Err(UsageError::new(format!(
            "--output {}: already exists; kvmeter never overwrites a file, name a new one",
            p.display()
        ))),
        Some(p) => {
            let parent = p.parent().filter(|d| !d.as_os_str().is_empty());
            match parent {
                Some(d) if !d.is_dir() => Err(UsageError::new(format!(
                    "--output {}: no directory {}; create it first",
                    p.display(),
                    d.display()
                ))),
                _ => Ok(()),
            }
        }
        None if format == Format::Parquet && std::io::stdout().is_terminal() => {
            Err(UsageError::new(
                "--format parquet: Parquet is binary; give --output FILE or redirect stdout",
            ))
        }
        None => Ok(()),
    }
}

/// A kvmeter JSON file, bounded, with its schema checked.
pub(super) fn read_json(path: &Path, schema: &str) -> Result<Value, UsageError> {
    read_json_within(path, schema, json::MAX_PARSED_BYTES).map(|(v, _)| v)
}

/// `read_json` where the parsed value may take at most `budget` bytes (estimated; a run's
/// manifest.json and summary.json share `json::MAX_PARSED_BYTES`); returns what it took.
pub(super) fn read_json_within(
    path: &Path,
    schema: &str,
    budget: u64,
) -> Result<(Value, u64), UsageError> {
    let name = path.display();
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_JSON_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| UsageError::new(format!("{name}: cannot be read ({e})")))?;
    if text.len() as u64 > MAX_JSON_BYTES {
        return Err(UsageError::new(format!(
            "{name}: larger than {} MiB; kvmeter's files are smaller (is it one kvmeter wrote?)",
            MAX_JSON_BYTES >> 20
        )));
    }
    let (v, used) = json::parse(&text, budget).map_err(|e| match e {
        json::Refusal::Invalid(e) => UsageError::new(format!("{name}: not valid JSON ({e})")),
        json::Refusal::TooBig => UsageError::new(format!(
            "{name}: would take more than {} MiB of memory parsed{} (estimated: many small objects or lists); kvmeter's files take far less (is it one kvmeter wrote?)",
            json::MAX_PARSED_BYTES >> 20,
            if budget < json::MAX_PARSED_BYTES { " with the run's manifest.json" } else { "" }
        )),
    })?;
    match v.get("schema").and_then(Value::as_str) {
        Some(s) if s.starts_with(schema) => Ok((v, used)),
        other => Err(UsageError::new(format!(
            "{name}: schema: expected {schema}1, found {}",
            other.unwrap_or("none")
        ))),
    }
}
