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

mod find;
pub mod rows;
mod to_parquet;
pub mod write;

use crate::error::{UsageError, EXIT_OK};
use rows::Row;
use serde_json::Value;
use std::collections::BTreeSet;
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

/// A table: its rows and its columns in order.
pub struct TidyTable {
    pub rows: Vec<Row>,
    pub columns: Vec<String>,
    /// Run directories read.
    pub runs: usize,
    /// Directories with a manifest but no summary, passed over.
    pub without_summary: Vec<PathBuf>,
}

/// Checks the options, reads every run below the DIRs, writes the table; nothing is created
/// before everything was read.
pub fn main(o: &Options) -> anyhow::Result<i32> {
    let format = Format::parse(&o.format)?;
    check_output(o.output.as_deref(), format)?;
    let t = read(&o.dirs)?;
    let bytes = render(&t, format)?;
    match &o.output {
        Some(path) => {
            // create_new: a file that appeared since the check is still never overwritten.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| UsageError::new(format!("--output {}: {e}", path.display())))?;
            if let Err(e) = f.write_all(&bytes).and_then(|_| f.sync_all()) {
                let _ = std::fs::remove_file(path);
                return Err(anyhow::anyhow!("--output {}: {e}", path.display()));
            }
        }
        None => std::io::stdout().lock().write_all(&bytes)?,
    }
    eprintln!(
        "table: {} rows × {} columns from {} run director{}{}",
        t.rows.len(),
        t.columns.len(),
        t.runs,
        if t.runs == 1 { "y" } else { "ies" },
        o.output
            .as_ref()
            .map(|p| format!(" in {}", p.display()))
            .unwrap_or_default()
    );
    if let Some(first) = t.without_summary.first() {
        eprintln!(
            "note: {} director{} with manifest.json but no summary.json passed over (a run that ended before its first phase did), e.g. {}",
            t.without_summary.len(),
            if t.without_summary.len() == 1 { "y" } else { "ies" },
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

/// Reads every run below the DIRs into rows and orders the columns.
pub fn read(dirs: &[PathBuf]) -> Result<TidyTable, UsageError> {
    let found = find::run_dirs(dirs)?;
    if found.runs.is_empty() {
        let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(UsageError::new(format!(
            "{}: no run directory (manifest.json with summary.json) found below",
            names.join(" ")
        )));
    }
    let mut rows: Vec<Row> = vec![];
    for found_run in &found.runs {
        let dir = &found_run.dir;
        let mpath = dir.join("manifest.json");
        let spath = dir.join("summary.json");
        let manifest = read_json(&mpath, "kvmeter-manifest/")?;
        let summary = read_json(&spath, "kvmeter-summary/")?;
        let (run_dir, sname, mname) = (
            dir.display().to_string(),
            spath.display().to_string(),
            mpath.display().to_string(),
        );
        let mut run_rows = rows::rows(&rows::RunFiles {
            run_dir: &run_dir,
            manifest: &manifest,
            summary: &summary,
            summary_name: &sname,
            manifest_name: &mname,
        })?;
        if let Some((point, repetition)) = find::position(dir) {
            for r in &mut run_rows {
                r.insert("point".into(), point.into());
                r.insert("repetition".into(), repetition.into());
            }
        }
        if let Some(s) = &found_run.side {
            for r in &mut run_rows {
                r.insert("compare.side".into(), s.side.into());
                r.insert(
                    "compare.dir".into(),
                    s.compare_dir.display().to_string().into(),
                );
            }
        }
        rows.extend(run_rows);
        if rows.len() > MAX_ROWS {
            return Err(UsageError::new(format!(
                "{}: more than {MAX_ROWS} rows; name fewer directories",
                dir.display()
            )));
        }
    }
    let columns = columns(&rows)?;
    Ok(TidyTable {
        rows,
        columns,
        runs: found.runs.len(),
        without_summary: found.without_summary,
    })
}

/// A kvmeter JSON file, bounded, with its schema checked.
pub(super) fn read_json(path: &Path, schema: &str) -> Result<Value, UsageError> {
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
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| UsageError::new(format!("{name}: not valid JSON ({e})")))?;
    match v.get("schema").and_then(Value::as_str) {
        Some(s) if s.starts_with(schema) => Ok(v),
        other => Err(UsageError::new(format!(
            "{name}: schema: expected {schema}1, found {}",
            other.unwrap_or("none")
        ))),
    }
}

/// The fixed columns first, then every other column some row has, sorted by name.
fn columns(rows: &[Row]) -> Result<Vec<String>, UsageError> {
    let mut cols = rows::fixed_columns();
    let fixed: BTreeSet<String> = cols.iter().cloned().collect();
    let rest: BTreeSet<&String> = rows
        .iter()
        .flat_map(|r| r.keys())
        .filter(|k| !fixed.contains(*k))
        .collect();
    if rest.len() + cols.len() > MAX_COLUMNS {
        return Err(UsageError::new(format!(
            "the runs have more than {MAX_COLUMNS} distinct columns; name fewer directories"
        )));
    }
    cols.extend(rest.into_iter().cloned());
    Ok(cols)
}

fn render(t: &TidyTable, format: Format) -> anyhow::Result<Vec<u8>> {
    Ok(match format {
        Format::Csv => write::csv(&t.rows, &t.columns).into_bytes(),
        Format::Jsonl => write::jsonl(&t.rows, &t.columns).into_bytes(),
        Format::Parquet => {
            let mut buf = vec![];
            to_parquet::write(&t.rows, &t.columns, &mut buf)?;
            buf
        }
    })
}
