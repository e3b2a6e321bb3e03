//! `kvmeter capacity`: the highest offered load whose latency meets an SLO (papers/003 defines
//! capacity as the highest load with mean latency under 1 ms and plots median latency against
//! offered load, Fig. 6(d)).
//!
//! Every point is an open-loop run at one rate (load, then the run phase), judged on the run
//! phase's latency from intended start over all store calls (`all_ops`). The search steps the
//! rate up by a factor until a point fails, then bisects between the highest passing and the
//! lowest failing rate until they are within the precision. A point whose figure lands within
//! 10 % of a bound is repeated and judged on the median, so one noisy run does not move the
//! answer. The result is the highest passing rate, with the lowest failing one as its upper
//! bound: the capacity lies between them. A search that ends (at --max-rate or --max-points)
//! with every rate passing has found only a lower bound, "≥ X ops/s", and one whose lowest
//! rate failed only an upper bound, "≤ X": capacity.json says which (`capacity_bound`), and
//! so does everything built on it (findings, the cost table).

mod curve;
mod point;
mod sustain;

use super::{run_point, write_atomic};
use crate::error::{UsageError, EXIT_INTERRUPTED, EXIT_OK};
use crate::plan::Request;
use curve::{csv_row, render, CSV_HEADER};
pub use point::{judge, Point, Verdict};
use point::{near_bound, point_of};
use serde::Serialize;
use std::path::Path;

/// Each point's run phase lasts this long unless --duration says otherwise (warm-up
/// included), with this warm-up unless --warmup does: long enough for a latency figure, short
/// enough for a search of up to 30 points.
pub const POINT_DURATION: &str = "10s";
pub const POINT_WARMUP: &str = "2s";

/// One term of the SLO: a statistic of the latency from intended start, under a bound.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Term {
    /// mean, p50, p90, p99 or p99.9.
    pub stat: String,
    pub bound_us: f64,
}

impl Term {
    pub fn parse(text: &str) -> Result<Self, UsageError> {
        let bad = || {
            UsageError::new(format!(
                "--slo '{text}': expected <stat><<bound> with stat mean, p50, p90, p99 or p99.9 and a bound with a unit, e.g. mean<1ms or p99<500us"
            ))
        };
        let (stat, bound) = text.split_once('<').ok_or_else(bad)?;
        let stat = stat.trim().to_ascii_lowercase();
        if !["mean", "p50", "p90", "p99", "p99.9"].contains(&stat.as_str()) {
            return Err(bad());
        }
        let b = bound.trim().replace('µ', "u");
        let d = humantime::parse_duration(&b).map_err(|_| bad())?;
        if d.is_zero() {
            return Err(bad());
        }
        Ok(Term {
            stat,
            bound_us: d.as_secs_f64() * 1e6,
        })
    }

    /// This statistic of a run (latency from intended start, µs).
    pub(super) fn of(&self, p: &Point) -> f64 {
        match self.stat.as_str() {
            "mean" => p.mean_us,
            "p50" => p.p50_us,
            "p90" => p.p90_us,
            "p99" => p.p99_us,
            _ => p.p99_9_us,
        }
    }

    pub fn label(&self) -> String {
        format!("{} < {} µs", self.stat, fmt_num(self.bound_us))
    }
}

fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        "-".to_string()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub slo: Vec<Term>,
    pub require_achieved: bool,
    pub start_rate: f64,
    pub max_rate: f64,
    pub factor: f64,
    pub precision: f64,
    pub repeat: usize,
    pub max_points: usize,
    /// `--sustainable`: a point must also show no write stall and no growing backlog.
    pub sustainable: bool,
}

impl Settings {
    /// `--slo` terms; none given means papers/003's mean < 1 ms.
    pub fn parse_slo(terms: &[String]) -> Result<Vec<Term>, UsageError> {
        if terms.is_empty() {
            return Ok(vec![Term::parse("mean<1ms")?]);
        }
        terms.iter().map(|t| Term::parse(t)).collect()
    }

    /// Checks every setting, naming the flag of the first bad one.
    pub fn check(&self) -> Result<(), UsageError> {
        for (flag, v) in [
            ("--start-rate", self.start_rate),
            ("--max-rate", self.max_rate),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(UsageError::new(format!(
                    "{flag} {v}: expected a positive number"
                )));
            }
        }
        if self.max_rate < self.start_rate {
            return Err(UsageError::new(format!(
                "--max-rate {}: below --start-rate {}",
                self.max_rate, self.start_rate
            )));
        }
        if !(self.factor > 1.0 && self.factor.is_finite()) {
            return Err(UsageError::new(format!(
                "--step-factor {}: expected a number above 1 (e.g. 2)",
                self.factor
            )));
        }
        if !(self.precision > 0.0 && self.precision < 1.0) {
            return Err(UsageError::new(format!(
                "--precision {}: expected a share between 0 and 1 (e.g. 0.05)",
                self.precision
            )));
        }
        for (flag, v) in [("--repeat", self.repeat), ("--max-points", self.max_points)] {
            if v == 0 {
                return Err(UsageError::new(format!("{flag} 0: expected at least 1")));
            }
        }
        Ok(())
    }
}

/// The latency-only capacity of a `--sustainable` search, from the same points: the search
/// followed the sustainable verdict, so above its capacity this is often a lower bound.
#[derive(Serialize)]
struct LatencyOnly {
    capacity_ops_per_s: Option<f64>,
    upper_bound_ops_per_s: Option<f64>,
    capacity_bound: Option<&'static str>,
    capacity_text: String,
}

impl LatencyOnly {
    fn of(verdicts: &[Verdict]) -> Self {
        let lo = verdicts
            .iter()
            .filter(|v| v.latency_pass)
            .map(|v| v.offered_ops_per_s)
            .reduce(f64::max);
        let hi = verdicts
            .iter()
            .filter(|v| !v.latency_pass)
            .map(|v| v.offered_ops_per_s)
            .reduce(f64::min);
        // A pass above a fail (noise) leaves no bracket: the lowest failure bounds nothing.
        let hi = hi.filter(|h| lo.is_none_or(|l| *h > l));
        let (capacity_bound, capacity_text) = bound_of(lo, hi);
        LatencyOnly {
            capacity_ops_per_s: lo,
            upper_bound_ops_per_s: hi,
            capacity_bound,
            capacity_text,
        }
    }
}

#[derive(Serialize)]
struct Result_ {
    schema: &'static str,
    status: String,
    store: String,
    slo: Vec<Term>,
    slo_text: String,
    require_achieved: bool,
    latency: &'static str,
    /// The highest rate that met the SLO; null if none did.
    capacity_ops_per_s: Option<f64>,
    /// The lowest rate that failed; null if none did (capacity ≥ max rate).
    upper_bound_ops_per_s: Option<f64>,
    /// Half the gap between the two: the capacity's uncertainty from the search.
    uncertainty_ops_per_s: Option<f64>,
    /// What the search established: "bracketed" (between the two rates above), "lower" (only
    /// capacity ≥ capacity_ops_per_s: every rate tried passed), "upper" (only capacity <
    /// upper_bound_ops_per_s: every rate tried failed), or null (no point completed).
    capacity_bound: Option<&'static str>,
    /// The capacity as it should be read: "110000–120000 ops/s", "≥ 8000 ops/s", "≤ 500 ops/s".
    capacity_text: String,
    note: String,
    /// `--sustainable`: the capacity above also required no write stall and a steady
    /// backlog; this is the latency SLO's alone, from the same points.
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_only: Option<LatencyOnly>,
    verdicts: Vec<Verdict>,
    points: Vec<Point>,
}

/// The next rate to try, given the highest pass and lowest fail so far; `None`: done.
pub fn next_rate(lo: Option<f64>, hi: Option<f64>, last: f64, s: &Settings) -> Option<f64> {
    match (lo, hi) {
        (Some(l), Some(h)) => {
            if (h - l) / l <= s.precision {
                None
            } else {
                Some(((l + h) / 2.0).round().max(1.0))
            }
        }
        (Some(l), None) => {
            if l >= s.max_rate {
                None
            } else {
                Some((last * s.factor).min(s.max_rate))
            }
        }
        (None, Some(h)) => {
            let r = (h / s.factor).floor();
            (r >= 1.0).then_some(r)
        }
        (None, None) => Some(s.start_rate),
    }
}

/// What a search's ends establish: its `capacity_bound` and how the capacity reads.
pub fn bound_of(lo: Option<f64>, hi: Option<f64>) -> (Option<&'static str>, String) {
    match (lo, hi) {
        (Some(l), Some(h)) => (Some("bracketed"), format!("{l}–{h} ops/s")),
        (Some(l), None) => (Some("lower"), format!("≥ {l} ops/s")),
        (None, Some(h)) => (Some("upper"), format!("≤ {h} ops/s")),
        (None, None) => (None, "none found".into()),
    }
}

/// Checks a capacity search without running or creating anything.
pub fn check(base: &Request, s: &Settings) -> Result<(), UsageError> {
    if base.rate.is_some() {
        return Err(UsageError::new(
            "--rate: kvmeter capacity chooses the offered load; use --start-rate and --max-rate",
        ));
    }
    if base.target.is_some() {
        return Err(UsageError::new(
            "--target: kvmeter capacity runs an open loop; leave --target out",
        ));
    }
    s.check()?;
    // Checks the whole request once, at the first rate.
    let mut probe = base.clone();
    probe.rate = Some(s.start_rate);
    crate::plan::build(&probe)?;
    Ok(())
}

pub fn run(base: &Request, out: Option<&Path>, s: Settings) -> anyhow::Result<i32> {
    check(base, &s)?;
    let root = super::experiment_dir(out, "capacity", &base.store)?;
    let mut search = Search::new(base, &s, root);
    // capacity.json says `running` until the search ends; a guard marks it failed if kvmeter
    // does not get to say how it ended.
    search.save(RUNNING)?;
    let _outer = crate::report::current::open_outer(&search.root);
    errln!(
        "capacity: {} on {}{}; each point {} (+ load); results in {}",
        search.slo_text,
        base.store,
        if s.require_achieved {
            ", achieved ≥ 99 % of offered"
        } else {
            ""
        },
        base.duration.as_deref().unwrap_or(POINT_DURATION),
        search.root.display()
    );
    let mut rate = s.start_rate;
    while search.stopped.is_none() {
        let Some(v) = search.try_rate(rate)? else {
            break;
        };
        if v.pass {
            search.lo = Some(search.lo.map_or(rate, |l: f64| l.max(rate)));
        } else {
            search.hi = Some(search.hi.map_or(rate, |h: f64| h.min(rate)));
        }
        search.verdicts.push(v);
        search.save(RUNNING)?;
        match next_rate(search.lo, search.hi, rate, &s) {
            Some(r) => rate = r,
            None => break,
        }
    }
    search.finish()
}

/// capacity.json's `status` while the search goes on.
const RUNNING: &str = "running";

/// Why a capacity search stopped before its end.
#[derive(Clone, Debug, PartialEq)]
enum Stopped {
    /// `--max-points` runs were made (exit 0: the bounds so far are the answer).
    MaxPoints,
    /// Ctrl-C, or a run was interrupted.
    Interrupted,
    /// A run at `rate` failed.
    Failed { rate: f64, why: String },
}

/// A capacity search in progress.
struct Search<'a> {
    base: &'a Request,
    s: &'a Settings,
    root: std::path::PathBuf,
    slo_text: String,
    interrupted: std::sync::Arc<std::sync::atomic::AtomicBool>,
    points: Vec<Point>,
    verdicts: Vec<Verdict>,
    /// The highest passing and the lowest failing rate so far.
    lo: Option<f64>,
    hi: Option<f64>,
    /// Why the search stopped early; `None` while it may go on (and, at the end, when it
    /// ran to its end: capacity.json's "completed").
    stopped: Option<Stopped>,
    runs_done: usize,
    csv: String,
}

impl<'a> Search<'a> {
    fn new(base: &'a Request, s: &'a Settings, root: std::path::PathBuf) -> Self {
        Search {
            base,
            s,
            root,
            slo_text: s
                .slo
                .iter()
                .map(Term::label)
                .chain(
                    s.sustainable
                        .then(|| "no write stall or growing backlog (sustainable)".to_string()),
                )
                .collect::<Vec<_>>()
                .join(" and "),
            interrupted: crate::driver::install_signals(),
            points: Vec::new(),
            verdicts: Vec::new(),
            lo: None,
            hi: None,
            stopped: None,
            runs_done: 0,
            csv: String::from(CSV_HEADER) + "\n",
        }
    }

    /// Runs `rate` (repeated while its figures are near a bound) and judges it; `None` when
    /// the search had to stop (interrupted, a failed run, --max-points).
    fn try_rate(&mut self, rate: f64) -> anyhow::Result<Option<Verdict>> {
        let s = self.s;
        let mut runs: Vec<Point> = Vec::new();
        for k in 1..=s.repeat {
            if self.runs_done >= s.max_points {
                self.stopped = Some(Stopped::MaxPoints);
                return Ok(None);
            }
            let Some(p) = self.run_once(rate, k)? else {
                return Ok(None);
            };
            let near = near_bound(&p, s);
            runs.push(p.clone());
            self.points.push(p);
            if !near {
                break;
            }
        }
        let v = judge(rate, &runs, s);
        let empty = runs.iter().all(|p| !p.mean_us.is_finite());
        errln!(
            "capacity: {:>10} ops/s offered, {:>10.0} achieved: {} → {}{}",
            rate,
            v.achieved_ratio * rate,
            if empty {
                "no operation completed in the measured window".to_string()
            } else {
                v.figures
                    .iter()
                    .map(|(k, x)| format!("{k} {} µs", fmt_num(*x)))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            if v.latency_pass { "meets" } else { "misses" },
            if v.runs > 1 {
                format!(" (median of {} runs)", v.runs)
            } else {
                String::new()
            }
        );
        if let Some(ok) = v.sustainable {
            errln!(
                "capacity: {:>10} ops/s {}: {}",
                rate,
                if ok { "sustainable" } else { "NOT sustainable" },
                v.sustain_why
            );
        }
        Ok(Some(v))
    }

    /// One run at `rate`, its point added to capacity.csv at once; `None` if the search stops.
    fn run_once(&mut self, rate: f64, k: usize) -> anyhow::Result<Option<Point>> {
        let dir = self.root.join("points").join(format!(
            "{:02}-{}ops-r{k}",
            self.runs_done + 1,
            rate as u64
        ));
        let mut req = self.base.clone();
        req.rate = Some(rate);
        req.command = "capacity".into();
        let (code, summary) = run_point(&req, &dir)?;
        self.runs_done += 1;
        if code == EXIT_INTERRUPTED || self.interrupted.load(std::sync::atomic::Ordering::Relaxed) {
            self.stopped = Some(Stopped::Interrupted);
            return Ok(None);
        }
        if code != EXIT_OK {
            self.stopped = Some(Stopped::Failed {
                rate,
                why: summary
                    .error
                    .clone()
                    .unwrap_or_else(|| "the run failed".into()),
            });
            return Ok(None);
        }
        let p = point_of(&summary, rate, k, &dir, self.s.sustainable)?;
        self.csv.push_str(&csv_row(&p));
        self.csv.push('\n');
        write_atomic(&self.root.join("capacity.csv"), self.csv.as_bytes())?;
        Ok(Some(p))
    }

    /// Writes capacity.json and curve.svg, prints the curve; returns the exit code.
    fn finish(self) -> anyhow::Result<i32> {
        let status = self.status();
        let (note, result) = self.save(&status)?;
        write_atomic(
            &self.root.join("curve.svg"),
            crate::report::html::capacity_curve(&result).as_bytes(),
        )?;
        if let Err(e) = crate::report::html::write(&self.root) {
            errln!("warning: report.html was not written: {e:#}");
        }
        out!("{}", render(&self.points, &note, &status));
        errln!("results: {}", self.root.display());
        Ok(match self.stopped {
            None | Some(Stopped::MaxPoints) => EXIT_OK,
            Some(Stopped::Interrupted) => EXIT_INTERRUPTED,
            Some(Stopped::Failed { .. }) => crate::error::EXIT_FAILED,
        })
    }

    /// Writes capacity.json with `status` and what the search found so far; returns its note
    /// and the JSON written.
    fn save(&self, status: &str) -> anyhow::Result<(String, serde_json::Value)> {
        let slo_text = &self.slo_text;
        let note = match (self.lo, self.hi) {
            _ if status == RUNNING => format!(
                "the search is in progress: {} run{} so far; the figures are those found so far",
                self.runs_done,
                if self.runs_done == 1 { "" } else { "s" }
            ),
            (Some(l), Some(h)) => format!(
                "capacity {} ops/s: the highest offered load that met {slo_text}; {} ops/s missed it, so the capacity lies between them (± {} ops/s)",
                l, h, (h - l) / 2.0
            ),
            (Some(l), None) if self.stopped.is_none() => format!(
                "capacity ≥ {l} ops/s, a lower bound only: every rate up to --max-rate met {slo_text}; raise --max-rate to find the limit"
            ),
            (Some(l), None) => format!(
                "capacity ≥ {l} ops/s, a lower bound only: the search {} with every rate it tried meeting {slo_text}; raise --max-points to find the limit",
                status.trim_start_matches("stopped: ")
            ),
            (None, Some(h)) => format!("capacity ≤ {h} ops/s, an upper bound only: even the lowest rate tried missed {slo_text}"),
            (None, None) => "no point completed".into(),
        };
        let (bound, text) = bound_of(self.lo, self.hi);
        let latency_only = self.s.sustainable.then(|| LatencyOnly::of(&self.verdicts));
        let judged = self.verdicts.iter().any(|v| v.sustainable.is_some());
        let note = match &latency_only {
            Some(l) if judged => format!(
                "{note}; sustainable: no write stall and a steady backlog at each passing rate. Latency alone: {}",
                l.capacity_text
            ),
            Some(_) => format!(
                "{note}; the store reports no statistics of its own, so sustainability was not judged: this is the latency-only capacity"
            ),
            None => note,
        };
        let result = Result_ {
            schema: "kvmeter-capacity/1",
            status: status.to_string(),
            store: self.base.store.clone(),
            slo: self.s.slo.clone(),
            slo_text: slo_text.clone(),
            require_achieved: self.s.require_achieved,
            latency:
                "from intended start (coordinated omission corrected), all store calls together",
            capacity_ops_per_s: self.lo,
            upper_bound_ops_per_s: self.hi,
            uncertainty_ops_per_s: self.lo.zip(self.hi).map(|(l, h)| (h - l) / 2.0),
            capacity_bound: bound,
            capacity_text: text,
            note: note.clone(),
            latency_only,
            verdicts: self.verdicts.clone(),
            points: self.points.clone(),
        };
        let result = serde_json::to_value(&result)?;
        write_atomic(
            &self.root.join("capacity.json"),
            (serde_json::to_string_pretty(&result)? + "\n").as_bytes(),
        )?;
        Ok((note, result))
    }

    /// capacity.json's `status`: "completed" (the search ran to its end), or why it stopped.
    fn status(&self) -> String {
        match &self.stopped {
            None => "completed".into(),
            Some(Stopped::MaxPoints) => "stopped: --max-points reached".into(),
            Some(Stopped::Interrupted) => "interrupted".into(),
            Some(Stopped::Failed { rate, why }) => format!("failed at {rate} ops/s: {why}"),
        }
    }
}

#[cfg(test)]
mod tests;
