//! A durability directory's per-writer logs, `writes-<w>.csv` (`kvmeter durability`, issue 42
//! item 6): one row per write as it completed, `seq,outcome,t_s`. Written by
//! experiment::durability as the writes happen and read back by report.html's figure, both
//! through this module, so the file has one definition like every other run-directory file.
//!
//! Reading is bounded: at most `MAX_WRITERS` logs and `max_rows` rows in all, a line at most
//! `MAX_LINE` bytes, streamed (a 10 s run on a fast store writes about a million rows).

use std::io::{BufRead, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

pub const WRITES_HEADER: &str = "seq,outcome,t_s";
/// Logs read back, at most (`--writers` is far below this).
pub const MAX_WRITERS: u32 = 64;
const MAX_LINE: u64 = 256;

pub fn writes_path(dir: &Path, writer: u32) -> PathBuf {
    dir.join(format!("writes-{writer}.csv"))
}

/// One writer's log, being written: a new file (never through a planted link), its header
/// first, each write appended as it completes. Flushing is the caller's (writers flush every
/// few ms, not per write).
pub struct WritesLog {
    out: BufWriter<std::fs::File>,
}

impl WritesLog {
    pub fn create(dir: &Path, writer: u32) -> std::io::Result<Self> {
        let mut out = BufWriter::new(super::rundir::create_new(&writes_path(dir, writer))?);
        writeln!(out, "{WRITES_HEADER}")?;
        Ok(WritesLog { out })
    }

    /// A write's sequence number, its outcome's name (`ok`, `failed`, `indeterminate`) and its
    /// completion time in seconds since the writes started.
    pub fn write(&mut self, seq: u64, outcome: &str, t_s: f64) -> std::io::Result<()> {
        writeln!(self.out, "{seq},{outcome},{t_s:.4}")
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// One row of a writer's log as read back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriteRow<'a> {
    pub seq: u64,
    pub outcome: &'a str,
    pub t_s: f64,
}

impl<'a> WriteRow<'a> {
    /// A data line; None for one that is not `seq,outcome,t_s` (a line a kill cut short).
    pub fn parse(line: &'a str) -> Option<Self> {
        let mut f = line.trim_end().split(',');
        let (seq, outcome, t) = (f.next()?, f.next()?, f.next()?);
        if f.next().is_some() {
            return None;
        }
        Some(WriteRow {
            seq: seq.parse().ok()?,
            outcome,
            t_s: t.parse().ok().filter(|t: &f64| t.is_finite())?,
        })
    }
}

/// What `read_writes` read.
#[derive(Debug, Default, PartialEq)]
pub struct WritesRead {
    pub rows: usize,
    /// The bound on rows stopped the reading.
    pub cut: bool,
}

/// Every writer's log in writer order (writes-0.csv, writes-1.csv, … until one is missing),
/// each row handed to `each` with its writer; at most `max_rows` rows in all.
pub fn read_writes(dir: &Path, max_rows: usize, mut each: impl FnMut(u32, WriteRow)) -> WritesRead {
    let mut r = WritesRead::default();
    let mut line = Vec::with_capacity(64);
    for w in 0..MAX_WRITERS {
        let Ok(f) = std::fs::File::open(writes_path(dir, w)) else {
            break;
        };
        let mut input = std::io::BufReader::new(f);
        let mut first = true;
        loop {
            line.clear();
            match input.by_ref().take(MAX_LINE).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if !line.ends_with(b"\n") && line.len() as u64 == MAX_LINE {
                let _ = input.skip_until(b'\n');
                continue;
            }
            if std::mem::take(&mut first) {
                continue; // the header
            }
            if r.rows >= max_rows {
                r.cut = true;
                return r;
            }
            r.rows += 1;
            if let Some(row) = std::str::from_utf8(&line).ok().and_then(WriteRow::parse) {
                each(w, row);
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_writer_writes_the_reader_reads_within_its_bounds() {
        let t = tempfile::tempdir().unwrap();
        for w in 0..2 {
            let mut log = WritesLog::create(t.path(), w).unwrap();
            log.write(1, "ok", 0.5).unwrap();
            log.write(2, "indeterminate", 1.25).unwrap();
            log.flush().unwrap();
        }
        // A third writer's log cut by a kill mid-line, and a line past the bound.
        std::fs::write(
            writes_path(t.path(), 2),
            format!("{WRITES_HEADER}\n3,ok,0.1\n{}\n4,ok", "9".repeat(1000)),
        )
        .unwrap();
        let mut got = vec![];
        let r = read_writes(t.path(), 100, |w, row| {
            got.push((w, row.seq, row.outcome.to_string(), row.t_s))
        });
        assert_eq!(
            r,
            WritesRead {
                rows: 6,
                cut: false
            }
        );
        assert_eq!(got[0], (0, 1, "ok".to_string(), 0.5));
        assert_eq!(got[3], (1, 2, "indeterminate".to_string(), 1.25));
        assert_eq!(got[4], (2, 3, "ok".to_string(), 0.1));
        assert_eq!(got.len(), 5, "the cut line is counted, not parsed: {got:?}");
        let r = read_writes(t.path(), 3, |_, _| {});
        assert_eq!(r, WritesRead { rows: 3, cut: true });
        assert_eq!(WriteRow::parse("1,ok,NaN"), None);
        assert_eq!(WriteRow::parse("1,ok,2,3"), None);
    }
}
