//! What the store did, on the phase's clock (issue 43, events on the timeline):
//! `store_events.csv` (each flush's and compaction's start and end and each write slowdown or
//! stop the store logged, written as the run goes, every phase appending), and the bands the
//! report draws from it under the per-interval throughput and latency figures, so a reader can
//! point at a p99.9 spike and see the compaction or stall beneath it. A stall's band comes from
//! store_stats.csv instead: the intervals in which the store's stall counter grew (RocksDB logs
//! when a stall starts, not when it ends). Redis's latency spikes and background saves carry
//! its clock's whole seconds: each is the second it happened in; an AOF rewrite, of which
//! Redis keeps no time, is the second from the sample that saw it.
//!
//! A separate file from events.csv, whose columns are a fault's (which `--fault`, its target
//! member and pid): a store's event has a job, bytes and the store's own words instead.

use super::csv::{Row, Table};
use super::rundir::append;
use crate::store::stats::StoreEvent;
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// The file's name in a run directory.
pub const STORE_EVENTS_CSV: &str = "store_events.csv";

const HEADER: &str = "phase,t_s,unix_us,event,job,bytes,duration_s,detail";

/// store_events.csv, open for one phase's events.
pub struct EventsCsv {
    file: File,
    phase: String,
}

impl EventsCsv {
    pub fn open(root: &Path, phase: &str) -> std::io::Result<EventsCsv> {
        let (mut file, new) = append(&root.join(STORE_EVENTS_CSV))?;
        if new {
            writeln!(file, "{HEADER}")?;
        }
        Ok(EventsCsv {
            file,
            phase: phase.to_string(),
        })
    }

    /// The events, at once; `t_s` is the event's time on the phase's clock (negative: before
    /// the phase's clock started, while the store opened).
    pub fn write(
        &mut self,
        events: &[StoreEvent],
        phase_start_unix_us: u64,
    ) -> std::io::Result<()> {
        let mut text = String::new();
        for e in events {
            let t_s = (e.unix_us as f64 - phase_start_unix_us as f64) / 1e6;
            Row::default()
                .text(&self.phase)
                .val(format_args!("{t_s:.6}"))
                .val(e.unix_us)
                .text(e.event)
                .opt(e.job)
                .opt(e.bytes)
                .opt(e.duration_us.map(|d| format!("{:.3}", d as f64 / 1e6)))
                .text(&e.detail)
                .end(&mut text);
        }
        self.file.write_all(text.as_bytes())
    }
}

/// A span of a phase to shade under its figures: from, to (seconds on the phase's clock),
/// what (`flush`, `compaction`, `stall`) and its tooltip.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    pub from_s: f64,
    pub to_s: f64,
    pub what: &'static str,
    pub title: String,
}

/// The bands of `phase`: each flush and compaction from its start to its end (or to the
/// phase's end, `end_s`, when it ended later), and each interval of store_stats.csv in which
/// the stall counter (`stall_column`) grew. At most `MAX_BANDS`, the longest kept.
pub fn bands(
    events: Option<&Table>,
    stats: Option<&Table>,
    stall_column: Option<&str>,
    phase: &str,
    end_s: f64,
) -> Vec<Band> {
    let mut out: Vec<Band> = vec![];
    if let Some(t) = events {
        let mut open: Vec<(&'static str, String, f64)> = vec![];
        for r in t.rows().filter(|r| r.get("phase") == phase) {
            let Some(at) = r.num("t_s") else { continue };
            let job = r.get("job").to_string();
            let kind = match r.get("event") {
                "flush_started" | "flush_finished" => "flush",
                "compaction_started" | "compaction_finished" => "compaction",
                // Redis's books keep whole seconds: the second it happened in.
                instant @ ("latency_spike" | "save_finished" | "aof_rewrite_finished") => {
                    let what = match instant {
                        "save_finished" => "save",
                        "aof_rewrite_finished" => "rewrite",
                        _ => "spike",
                    };
                    // Two in one of Redis's seconds (saves it counted between two samples) are
                    // one band; each sample maps Redis's clock to the phase's afresh, so their
                    // t_s differ by the mapping's error, well below the second.
                    let detail = r.get("detail");
                    let same_second = |b: &&mut Band| b.what == what && (b.from_s - at).abs() < 0.5;
                    // A spike's row is at the earliest it can have begun, with its length
                    // (`duration_s`; files from before that column have none): it lies within
                    // that length and one second more.
                    let (to_s, title) = match r.num("duration_s") {
                        Some(d) => (
                            at + d + 1.0,
                            format!("{instant} within this span: {detail}"),
                        ),
                        None => (at + 1.0, format!("{instant} in this second: {detail}")),
                    };
                    match out.iter_mut().find(same_second) {
                        Some(b) => b.title.push_str(&format!("; and another: {detail}")),
                        None => out.push(Band {
                            from_s: at,
                            to_s,
                            what,
                            title,
                        }),
                    }
                    continue;
                }
                _ => continue,
            };
            if r.get("event").ends_with("_started") {
                open.push((kind, job, at));
            } else if let Some(i) = open.iter().position(|(k, j, _)| *k == kind && *j == job) {
                let (_, _, from) = open.swap_remove(i);
                out.push(band(from, at, kind, &job, r.get("detail")));
            }
        }
        for (kind, job, from) in open {
            out.push(band(
                from,
                end_s,
                kind,
                &job,
                "still running at the phase's end",
            ));
        }
    }
    if let (Some(t), Some(col)) = (stats, stall_column) {
        let mut prev: Option<(f64, f64)> = None;
        for r in t.rows().filter(|r| r.get("phase") == phase) {
            let (Some(at), Some(v)) = (r.num("t_s"), r.num(col)) else {
                prev = None;
                continue;
            };
            if let Some((p_at, p_v)) = prev {
                if v > p_v {
                    out.push(Band {
                        from_s: p_at,
                        to_s: at,
                        what: "stall",
                        title: format!("writes stalled {:.3} s in this interval", (v - p_v) / 1e6),
                    });
                }
            }
            prev = Some((at, v));
        }
    }
    // Within the phase's figures: what began while the store opened (or in the Redis second
    // the phase began in) is drawn from the phase's start, what ended after its last interval
    // to that interval's end.
    for b in &mut out {
        b.from_s = b.from_s.clamp(0.0, end_s.max(0.0));
        b.to_s = b.to_s.clamp(b.from_s, end_s.max(b.from_s));
    }
    if out.len() > MAX_BANDS {
        out.sort_by(|a, b| (b.to_s - b.from_s).total_cmp(&(a.to_s - a.from_s)));
        out.truncate(MAX_BANDS);
    }
    out
}

/// The most bands one figure carries (an SVG of thousands of rectangles helps no reader).
pub const MAX_BANDS: usize = 500;

fn band(from: f64, to: f64, what: &'static str, job: &str, detail: &str) -> Band {
    Band {
        from_s: from,
        to_s: to.max(from),
        what,
        title: format!("{what} job {job}, {:.3} s: {detail}", to - from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_meet_their_ends_by_job_and_stalls_come_from_the_counter() {
        let events = Table::parse(
            "phase,t_s,unix_us,event,job,bytes,detail\n\
             run,1.0,0,flush_started,2,10,\n\
             run,1.5,0,compaction_started,3,10,LevelL0FilesNum\n\
             run,1.2,0,flush_finished,2,,\n\
             load,0.1,0,flush_started,9,,\n\
             run,2.0,0,write_stop,,,we have 4 level-0 files\n\
             run,3.0,0,latency_spike,,,command: 300 ms\n",
        );
        let stats = Table::parse(
            "phase,t_s,unix_us,stall_us\nrun,0,0,0\nrun,1,0,0\nrun,2,0,250000\nrun,3,0,250000\n",
        );
        let b = bands(Some(&events), Some(&stats), Some("stall_us"), "run", 4.0);
        let spans: Vec<(f64, f64, &str)> = b.iter().map(|b| (b.from_s, b.to_s, b.what)).collect();
        assert_eq!(
            spans,
            [
                (1.0, 1.2, "flush"),
                (3.0, 4.0, "spike"),
                (1.5, 4.0, "compaction"),
                (1.0, 2.0, "stall")
            ]
        );
        assert!(b[1].title.contains("command: 300 ms"), "{}", b[1].title);
        assert!(b[2].title.contains("still running"), "{}", b[2].title);
        assert!(b[3].title.contains("0.250 s"), "{}", b[3].title);
    }

    /// A Redis spike of 1,724 ms stamped in the second from 3.487 s (where kvmeter put it
    /// before): its row is at 1.763 s, and its band runs to 4.487 s, so the interval it
    /// emptied (2–3 s) is under it. A flush begun while the store opened and a compaction
    /// still running stay within the phase's figures.
    #[test]
    fn a_spike_is_shaded_over_its_length_and_bands_stay_in_the_phase() {
        let events = Table::parse(
            "phase,t_s,unix_us,event,job,bytes,duration_s,detail\n\
             run,1.763035,0,latency_spike,,,1.724,command: 1724 ms\n\
             run,-0.2,0,flush_started,1,,,\n\
             run,0.3,0,flush_finished,1,,,\n\
             run,4.8,0,compaction_started,2,,,\n",
        );
        let b = bands(Some(&events), None, None, "run", 5.0);
        let spans: Vec<(f64, f64, &str)> = b.iter().map(|b| (b.from_s, b.to_s, b.what)).collect();
        assert_eq!(spans.len(), 3, "{spans:?}");
        assert_eq!(spans[0].2, "spike");
        assert!((spans[0].0 - 1.763035).abs() < 1e-9 && (spans[0].1 - 4.487035).abs() < 1e-9);
        assert!(b[0].title.contains("within this span"), "{}", b[0].title);
        assert_eq!(spans[1], (0.0, 0.3, "flush"));
        assert_eq!(spans[2], (4.8, 5.0, "compaction"));
    }
}
