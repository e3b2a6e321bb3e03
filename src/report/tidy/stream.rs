//! The table in two passes over the runs, so that its memory is bounded in bytes rather than
//! growing with rows × columns (issue 41 F7: one 58 MB summary.json of 320,000 operations
//! took 7.95 GB as rows kept in memory, 20,000 ordinary runs 2.48 GB).
//!
//! The first pass (`shape`) reads every run and makes each of its rows, but keeps only what
//! the output's head needs: the column names (≤ `MAX_COLUMNS`), each column's Parquet type
//! (the kinds of value seen) and the number of rows; every bad file is refused here, before
//! anything is written. The second pass (`emit`) reads each run again and writes each row as
//! it is made: CSV and JSON lines line by line through a buffered writer, Parquet a row group
//! at a time (to_parquet.rs). At any moment the table holds one run's parsed summary.json and
//! manifest.json, one row, the column names and, for Parquet, one row group's values.
//!
//! A run that changed between the passes (a value or column the first pass did not see, a
//! different number of rows) is refused by its directory, exit 2; the file being written is
//! removed (mod.rs).

use super::find::FoundRun;
use super::rows::{self, Row};
use super::to_parquet::{self, Kind, Seen};
use super::{json::MAX_PARSED_BYTES, read_json_within, write, Format, MAX_COLUMNS, MAX_ROWS};
use crate::error::UsageError;
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;

/// What the first pass found: the columns in order, their Parquet types (empty unless asked
/// for) and the number of rows.
pub struct Shape {
    pub columns: Vec<String>,
    pub kinds: Vec<Kind>,
    pub rows: usize,
}

/// Hands every row of every run to `each`, in order, with its run directory; each run's files
/// are read when its turn comes and dropped after its last row.
fn each_row<E: From<UsageError>>(
    found: &[FoundRun],
    each: &mut dyn FnMut(&Path, Row) -> Result<(), E>,
) -> Result<(), E> {
    for found_run in found {
        let dir = &found_run.dir;
        let mpath = dir.join("manifest.json");
        let spath = dir.join("summary.json");
        // The two files share one budget: a run holds ≤ MAX_PARSED_BYTES parsed.
        let (manifest, used) = read_json_within(&mpath, "kvmeter-manifest/", MAX_PARSED_BYTES)?;
        let left = MAX_PARSED_BYTES - used;
        let (summary, _) = read_json_within(&spath, "kvmeter-summary/", left)?;
        let (run_dir, sname, mname) = (
            dir.display().to_string(),
            spath.display().to_string(),
            mpath.display().to_string(),
        );
        let position = super::find::position(dir);
        let files = rows::RunFiles {
            run_dir: &run_dir,
            manifest: &manifest,
            summary: &summary,
            summary_name: &sname,
            manifest_name: &mname,
        };
        rows::for_each_row(&files, &mut |mut r: Row| {
            if let Some((point, repetition)) = position {
                r.insert("point".into(), point.into());
                r.insert("repetition".into(), repetition.into());
            }
            if let Some(s) = &found_run.side {
                r.insert("compare.side".into(), s.side.into());
                let cdir = s.compare_dir.display().to_string();
                r.insert("compare.dir".into(), cdir.into());
            }
            each(dir, r)
        })?;
    }
    Ok(())
}

/// The first pass: the fixed columns first, then every other column some row has, sorted by
/// name; with `kinds`, each column's Parquet type.
pub fn shape(found: &[FoundRun], kinds: bool) -> Result<Shape, UsageError> {
    let mut columns = rows::fixed_columns();
    let fixed: BTreeSet<String> = columns.iter().cloned().collect();
    let mut rest: BTreeSet<String> = BTreeSet::new();
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut n = 0usize;
    each_row::<UsageError>(found, &mut |dir, row| {
        n += 1;
        if n > MAX_ROWS {
            return Err(UsageError::new(format!(
                "{}: more than {MAX_ROWS} rows; name fewer directories",
                dir.display()
            )));
        }
        for (k, v) in &row {
            if !fixed.contains(k) && !rest.contains(k) {
                if fixed.len() + rest.len() >= MAX_COLUMNS {
                    return Err(UsageError::new(format!(
                        "the runs have more than {MAX_COLUMNS} distinct columns; name fewer directories"
                    )));
                }
                rest.insert(k.clone());
            }
            if kinds {
                match seen.get_mut(k) {
                    Some(s) => s.see(v),
                    None => seen.entry(k.clone()).or_default().see(v),
                }
            }
        }
        Ok(())
    })?;
    columns.extend(rest);
    let kinds = match kinds {
        true => columns
            .iter()
            .map(|c| seen.get(c).copied().unwrap_or_default().kind())
            .collect(),
        false => vec![],
    };
    Ok(Shape {
        columns,
        kinds,
        rows: n,
    })
}

fn changed(dir: &Path) -> UsageError {
    UsageError::new(format!(
        "{}: changed while kvmeter table read it (a row, column or value the first pass did not see); run the table again",
        dir.display()
    ))
}

/// The second pass: every row written to `out` as it is made; returns `out` once all is
/// written (flushed, the Parquet footer included).
pub fn emit<W: Write + Send>(
    found: &[FoundRun],
    shape: &Shape,
    format: Format,
    out: W,
) -> anyhow::Result<W> {
    let cols = &shape.columns[..];
    let mut n = 0usize;
    let mut count = |dir: &Path| {
        n += 1;
        match n > shape.rows {
            true => Err(changed(dir)),
            false => Ok(()),
        }
    };
    let out = match format {
        Format::Csv | Format::Jsonl => {
            let mut w = std::io::BufWriter::with_capacity(1 << 16, out);
            let mut line = String::new();
            let keys = write::jsonl_keys(cols);
            if format == Format::Csv {
                write::csv_header(cols, &mut line);
            }
            each_row::<anyhow::Error>(found, &mut |dir, row| {
                count(dir)?;
                let found = match format {
                    Format::Csv => write::csv_row(&row, cols, &mut line),
                    _ => write::jsonl_row(&row, cols, &keys, &mut line),
                };
                if found != row.len() {
                    return Err(changed(dir).into());
                }
                w.write_all(line.as_bytes())?;
                line.clear();
                Ok(())
            })?;
            w.write_all(line.as_bytes())?;
            w.into_inner().map_err(|e| e.into_error())?
        }
        Format::Parquet => {
            let mut w = to_parquet::Writer::new(cols, shape.kinds.clone(), out)?;
            each_row::<anyhow::Error>(found, &mut |dir, row| {
                count(dir)?;
                match w.push(&row)? {
                    true => Ok(()),
                    false => Err(changed(dir).into()),
                }
            })?;
            w.finish()?
        }
    };
    if n != shape.rows {
        return Err(UsageError::new(format!(
            "the runs changed while kvmeter table read them ({} rows, then {n}); run the table again",
            shape.rows
        ))
        .into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write_run(dir: &Path, ops: serde_json::Value) {
        std::fs::create_dir_all(dir).unwrap();
        let m = json!({"schema": "kvmeter-manifest/1"});
        let s = json!({"schema": "kvmeter-summary/1", "phases": [{"name": "run", "ops": ops}]});
        std::fs::write(dir.join("manifest.json"), m.to_string()).unwrap();
        std::fs::write(dir.join("summary.json"), s.to_string()).unwrap();
    }

    #[test]
    fn a_run_that_changed_between_the_passes_is_refused_by_its_directory() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("r1");
        let found = [FoundRun {
            dir: dir.clone(),
            side: None,
        }];
        let cases = [
            (
                Format::Csv,
                json!({"READ": {"count": 1}, "SCAN": {"count": 1}}),
            ),
            (
                Format::Jsonl,
                json!({"READ": {"count": 1, "errors": {"io": 1}}}),
            ),
            (Format::Parquet, json!({"READ": {"count": "many"}})),
        ];
        for (format, changed_ops) in cases {
            write_run(&dir, json!({"READ": {"count": 1}}));
            let shape = shape(&found, format == Format::Parquet).unwrap();
            assert_eq!(shape.rows, 2, "READ and ALL");
            let out = emit(&found, &shape, format, vec![]).unwrap();
            assert!(!out.is_empty());
            write_run(&dir, changed_ops);
            let e = emit(&found, &shape, format, vec![])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("r1: changed while kvmeter table read it"),
                "{format:?}: {e}"
            );
        }
    }
}
