//! A capacity search's points and verdicts: the figures of one run at one offered load (its
//! run phase's latency from intended start, achieved load and, under `--sustainable`, what the
//! store said about stalls and backlog: `sustain.rs`), and a rate's verdict over its
//! repetitions (medians), latency and sustainability apart.

use super::sustain::{self, Sustain};
use super::Settings;
use crate::report::stats::median;
use crate::report::Summary;
use serde::Serialize;
use std::path::Path;

/// One run of the curve.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub offered_ops_per_s: f64,
    pub repetition: usize,
    pub achieved_ops_per_s: f64,
    pub achieved_ratio: f64,
    pub kept_up: bool,
    /// Latency from intended start over all store calls (µs).
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p99_9_us: f64,
    /// Service time over all store calls (µs).
    pub service_mean_us: f64,
    pub service_p99_us: f64,
    pub run_dir: String,
    /// Under `--sustainable`: stalls and backlog in the run phase (`sustain.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sustain: Option<Sustain>,
}

/// A rate's verdict (over its repetitions: medians).
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub offered_ops_per_s: f64,
    pub runs: usize,
    /// Each SLO statistic's median over the runs (µs).
    pub figures: Vec<(String, f64)>,
    pub achieved_ratio: f64,
    /// The latency SLO (and `--require-achieved`) alone.
    pub latency_pass: bool,
    /// Under `--sustainable`: whether most runs were sustainable, and the first reason one
    /// was not; null without `--sustainable`.
    pub sustainable: Option<bool>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sustain_why: String,
    /// The verdict the search follows: the latency's, and with `--sustainable` also the
    /// sustainability's.
    pub pass: bool,
}

/// A run's point. A run in which no operation completed in the measured window (a rate so low
/// that no arrival fell in it, or a store that answered nothing) is a point without latency
/// figures: it misses the SLO, and the search goes on.
pub(super) fn point_of(
    s: &Summary,
    rate: f64,
    repetition: usize,
    dir: &Path,
    sustainable: bool,
) -> anyhow::Result<Point> {
    let run = s
        .phases
        .iter()
        .rev()
        .find(|p| p.kind == crate::plan::PhaseKind::Run)
        .ok_or_else(|| anyhow::anyhow!("{}: no run phase", dir.display()))?;
    let all = run.all_ops.as_ref();
    let intended = all.and_then(|a| a.intended_latency_us.as_ref());
    let none = f64::NAN;
    let ol = run.open_loop.as_ref();
    Ok(Point {
        offered_ops_per_s: rate,
        repetition,
        achieved_ops_per_s: ol.map(|o| o.achieved_ops_per_s).unwrap_or(0.0),
        achieved_ratio: ol.map(|o| o.achieved_ratio).unwrap_or(0.0),
        kept_up: ol.map(|o| o.kept_up).unwrap_or(false),
        mean_us: intended.and_then(|i| i.avg).unwrap_or(none),
        p50_us: intended.and_then(|i| i.p50).unwrap_or(none),
        p90_us: intended.and_then(|i| i.p90).unwrap_or(none),
        p99_us: intended.and_then(|i| i.p99).unwrap_or(none),
        p99_9_us: intended.and_then(|i| i.p99_9).unwrap_or(none),
        service_mean_us: all.and_then(|a| a.latency_us.avg).unwrap_or(none),
        service_p99_us: all.and_then(|a| a.latency_us.p99).unwrap_or(none),
        run_dir: dir.display().to_string(),
        sustain: sustainable.then(|| sustain::judge(run.store_stats.as_ref(), dir, &run.name)),
    })
}

/// Judges a rate on its runs: medians of each SLO statistic; achieved (if required) on the
/// majority of runs keeping the schedule.
pub fn judge(rate: f64, runs: &[Point], s: &Settings) -> Verdict {
    let figures: Vec<(String, f64)> = s
        .slo
        .iter()
        .map(|t| {
            let v: Vec<f64> = runs.iter().map(|p| t.of(p)).collect();
            (t.stat.clone(), median(&v))
        })
        .collect();
    let meets = s
        .slo
        .iter()
        .zip(&figures)
        .all(|(t, (_, v))| *v < t.bound_us);
    let kept = runs.iter().filter(|p| p.kept_up).count() * 2 > runs.len();
    let ratio = median(&runs.iter().map(|p| p.achieved_ratio).collect::<Vec<_>>());
    let latency_pass = meets && (!s.require_achieved || kept);
    // A store that reports nothing to judge by (`None`) is judged on latency alone.
    let judged: Vec<&Sustain> = runs.iter().filter_map(|p| p.sustain.as_ref()).collect();
    let decided: Vec<bool> = judged.iter().filter_map(|j| j.sustainable).collect();
    let sustainable = (s.sustainable && !decided.is_empty())
        .then(|| decided.iter().filter(|y| **y).count() * 2 > decided.len());
    let sustain_why = judged
        .iter()
        .find(|j| j.sustainable == Some(false))
        .or(judged.first())
        .map(|j| j.why.clone())
        .unwrap_or_default();
    Verdict {
        offered_ops_per_s: rate,
        runs: runs.len(),
        figures,
        achieved_ratio: ratio,
        latency_pass,
        sustainable,
        sustain_why,
        pass: latency_pass && sustainable != Some(false),
    }
}

/// Whether a run's figures are close enough to a bound (within 10 %) to be worth repeating.
pub(super) fn near_bound(p: &Point, s: &Settings) -> bool {
    s.slo.iter().any(|t| {
        let v = t.of(p);
        (v - t.bound_us).abs() <= 0.1 * t.bound_us
    })
}
