//! The fault files of a run directory, written as the faults happen: `events.csv` (each event
//! of the fault schedule the moment it happens, so a crash of kvmeter keeps the ones so far)
//! and `timeline.csv` (the recovery timeline's buckets at every interval boundary). Both are
//! appended to by every phase, through `rundir::append` (created new, never through a link),
//! and written with `report::csv`'s quoting.

use super::csv::Row;
use super::rundir::append;
use crate::fault::schedule::{Event, EventSink};
use crate::measure::timeline::{Bucket, ClassBucket, AFFECTED, REST};
use crate::store::ErrorKind;
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// The first line of events.csv (`append_event`).
pub const EVENTS_HEADER: &str = "phase,t_s,fault,event,target,member,pid,cluster";
/// The recovery timeline's file (`TimelineCsv`).
pub const TIMELINE_CSV: &str = "timeline.csv";

/// Appends one fault event to `path` (events.csv, created with its header), at once: a crash
/// of kvmeter keeps every event so far.
pub fn append_event(path: &Path, phase: &str, e: &Event) -> std::io::Result<()> {
    let (mut f, new) = append(path)?;
    let mut text = String::new();
    if new {
        text.push_str(EVENTS_HEADER);
        text.push('\n');
    }
    Row::default()
        .text(phase)
        .val(format_args!("{:.3}", e.t_s))
        .val(e.fault)
        .text(&e.event)
        .text(&e.target)
        .text(&e.member)
        .opt(e.pid)
        .text(&e.cluster)
        .end(&mut text);
    f.write_all(text.as_bytes())
}

/// A fault schedule's sink: each event appended to `root`/events.csv as it happens.
pub fn events_csv(root: &Path, phase: &str) -> EventSink {
    let (path, phase) = (root.join("events.csv"), phase.to_string());
    Box::new(move |e| {
        let _ = append_event(&path, &phase, e);
    })
}

/// timeline.csv's first line: one `errors` column per error kind.
pub fn timeline_header() -> String {
    let kinds: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
    format!(
        "phase,t_start_s,t_end_s,class,ok,ok_per_s,errors,{},p50_us,p99_us,max_us",
        kinds.join(",")
    )
}

/// timeline.csv, open for a phase's buckets (every phase appends to the one file).
pub struct TimelineCsv {
    file: File,
    phase: String,
    /// Whether rows are per class (`affected`, `rest`) or one (`all`).
    split: bool,
}

impl TimelineCsv {
    pub fn open(root: &Path, phase: &str, split: bool) -> std::io::Result<Self> {
        let (mut file, new) = append(&root.join(TIMELINE_CSV))?;
        if new {
            writeln!(file, "{}", timeline_header())?;
        }
        Ok(TimelineCsv {
            file,
            phase: phase.to_string(),
            split,
        })
    }

    /// Appends the rows of `buckets`, each `width_s` long.
    pub fn write(&mut self, buckets: &[Bucket], width_s: f64) -> std::io::Result<()> {
        let mut text = String::new();
        for b in buckets {
            let rows: Vec<(&str, ClassBucket)> = if self.split {
                vec![
                    ("affected", b.class[AFFECTED].clone()),
                    ("rest", b.class[REST].clone()),
                ]
            } else {
                vec![("all", b.all())]
            };
            let s = b.index as f64 * width_s;
            let us = |v: Option<u64>| v.map(|n| format!("{:.1}", n as f64 / 1000.0));
            for (class, c) in rows {
                let mut row = Row::default()
                    .text(&self.phase)
                    .val(format_args!("{s:.3}"))
                    .val(format_args!("{:.3}", s + width_s))
                    .val(class)
                    .val(c.ok)
                    .val(format_args!("{:.1}", c.ok as f64 / width_s))
                    .val(c.error_total());
                for n in &c.errors {
                    row = row.val(n);
                }
                row.opt(us(c.percentile(50.0)))
                    .opt(us(c.percentile(99.0)))
                    .opt(us((c.ok > 0).then_some(c.max_ns)))
                    .end(&mut text);
            }
        }
        self.file.write_all(text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::rundir::INTERVALS_HEADER;
    use std::fs;

    /// The files' first lines as docs/run-directory.md gives them: tools read these files.
    #[test]
    fn the_csv_headers_are_unchanged() {
        assert_eq!(
            INTERVALS_HEADER,
            "phase,interval,start_s,end_s,warmup,metric,count,errors,ops_per_s,mb_per_s,avg_us,p50_us,p90_us,p99_us,p99_9_us,max_us,intended_p50_us,intended_p99_us,intended_max_us,offered_ops_per_s,send_lag_p99_us,send_lag_max_us,behind_ms"
        );
        assert_eq!(
            EVENTS_HEADER,
            "phase,t_s,fault,event,target,member,pid,cluster"
        );
        assert_eq!(
            timeline_header(),
            "phase,t_start_s,t_end_s,class,ok,ok_per_s,errors,io,timeout,busy,corruption,not_implemented,unexpected_state,error,unconfirmed,protocol,p50_us,p99_us,max_us"
        );
    }

    #[test]
    fn events_and_timeline_rows_are_written_as_before_and_read_back() {
        let t = tempfile::tempdir().unwrap();
        let e = Event {
            t_s: 1.25,
            fault: 0,
            event: "kill".into(),
            target: "leader".into(),
            member: "member:1".into(),
            pid: Some(42),
            cluster: "leader member:2, term 3 \"x\"".into(),
        };
        let path = t.path().join("events.csv");
        append_event(&path, "run", &e).unwrap();
        append_event(
            &path,
            "run",
            &Event {
                pid: None,
                ..e.clone()
            },
        )
        .unwrap();
        let text = fs::read_to_string(&path).unwrap();
        let row = "run,1.250,0,kill,leader,member:1,42,\"leader member:2, term 3 \"\"x\"\"\"\n";
        let row2 = row.replace(",42,", ",,");
        assert_eq!(text, format!("{EVENTS_HEADER}\n{row}{row2}"));
        let table = super::super::csv::Table::read(&path).unwrap().unwrap();
        let back: Vec<_> = table.rows_where("phase", "run").collect();
        assert_eq!(back[0].get("cluster"), e.cluster);
        assert_eq!(back[1].get("pid"), "");

        let mut b = Bucket {
            index: 3,
            ..Default::default()
        };
        b.class[AFFECTED].ok = 4;
        b.class[AFFECTED].max_ns = 2500;
        b.class[REST].errors[1] = 2; // timeout, the second kind
        let mut csv = TimelineCsv::open(t.path(), "run", false).unwrap();
        csv.write(&[b.clone()], 0.5).unwrap();
        let mut csv = TimelineCsv::open(t.path(), "run", true).unwrap();
        csv.write(&[b], 0.5).unwrap();
        let text = fs::read_to_string(t.path().join(TIMELINE_CSV)).unwrap();
        // No bins: no percentiles; max only where something succeeded.
        assert_eq!(
            text,
            format!(
                "{}\n{}{}{}",
                timeline_header(),
                "run,1.500,2.000,all,4,8.0,2,0,2,0,0,0,0,0,0,0,,,2.5\n",
                "run,1.500,2.000,affected,4,8.0,0,0,0,0,0,0,0,0,0,0,,,2.5\n",
                "run,1.500,2.000,rest,0,0.0,2,0,2,0,0,0,0,0,0,0,,,\n"
            )
        );
    }
}
