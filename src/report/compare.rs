//! `kvmeter compare A... --vs B...`: a baseline against a candidate, each one run or a set of
//! repeated runs, without running anything. First like with like: the manifests are compared
//! (store and version, options, workload, threads, machine, clock) and every difference is
//! named. Then per phase and metric: medians and B/A with an interval.
//!
//! Only the family the user asks about is tested (`--metric`, default the run phase's
//! throughput), as benchstat and critcmp do: testing every row and correcting for all of them
//! made a 65× difference invisible (the smallest exact p with 4 + 4 runs is 0.029; fourteen
//! rows multiply it past 0.05 at any run count people use). Family rows that cannot be tested
//! (0 on both sides, a constant, too few runs for the level) are left out of it and say why;
//! the others are tested at α / k (Bonferroni: unlike Holm it has matching simultaneous
//! intervals), and their verdict comes from the same procedure as their interval (stats::shift
//! on log values), so "better" or "worse" ⇔ the printed interval of B/A excludes 1 — or, for a
//! row with a 0 among its values (an error rate that was 0), which has no ratio, ⇔ the interval
//! of B − A excludes 0 (`by_difference`). Every other row is shown
//! with a 95 % interval and no verdict. A verdict also needs the estimate beyond `--noise`:
//! run-to-run drift on a shared machine is real, and a 1 % shift is rarely worth a verdict.

use super::chart::short;
use super::stats;
use super::Summary;
use crate::error::UsageError;
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The metrics compared, with whether higher is better.
pub const METRICS: [(&str, bool); 11] = [
    ("ops_per_s", true),
    ("p50_us", false),
    ("p99_us", false),
    ("p99_9_us", false),
    ("error_rate", false),
    ("ops_per_joule", true),
    ("cpu_s_per_op", false),
    // Costs per operation (`per_op`, issue 44).
    ("server_cpu_s_per_op", false),
    ("context_switches_per_op", false),
    ("storage_write_bytes_per_op", false),
    ("cycles_per_op", false),
];

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub phase: String,
    pub metric: String,
    pub higher_is_better: bool,
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    pub median_a: f64,
    pub median_b: f64,
    pub ratio_of_medians: f64,
    /// B/A: the Hodges–Lehmann estimate on log values (the median of the n·m ratios b/a);
    /// the ratio of medians where a value is zero.
    pub ratio: f64,
    /// The interval of B/A at `ci_level` (family rows: 1 − α/k; others: 95 %).
    pub ratio_ci: Option<(f64, f64)>,
    pub ci_level: Option<f64>,
    /// Whether the row is one the user asked about (`--metric`).
    pub in_family: bool,
    /// Whether it was tested (in the family and testable).
    pub tested: bool,
    pub test: String,
    /// Exact two-sided Mann–Whitney p (tested rows only).
    pub p: Option<f64>,
    /// p × k, Bonferroni over the family (tested rows only).
    pub p_adjusted: Option<f64>,
    /// better, worse, no difference found, below --noise, not tested: why, or descriptive.
    pub verdict: String,
    /// The figure comes, on one side at least, from the power model (ops_per_joule with
    /// energy.estimate): labelled ESTIMATE wherever it is shown.
    pub estimate: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub schema: &'static str,
    pub a_runs: Vec<String>,
    pub b_runs: Vec<String>,
    pub noise_band: f64,
    /// The family-wise error rate.
    pub alpha: f64,
    /// The rows asked about, as phase.metric.
    pub family: Vec<String>,
    /// How many of them were tested: each at alpha / family_tested.
    pub family_tested: usize,
    /// Runs a side a verdict needs at alpha / family_tested (equal sides).
    pub runs_needed: usize,
    /// Asked about but measured on neither or only one side (no row).
    pub not_measured: Vec<String>,
    /// Manifest fields that differ between the runs, as "field: values".
    pub mismatches: Vec<String>,
    /// Runs that did not complete, as "DIR (status)": what they measured is compared, but a
    /// gate (`--fail-on-regression`) does not pass on them.
    #[serde(default)]
    pub unfinished: Vec<String>,
    pub rows: Vec<Row>,
}

pub const ALPHA: f64 = 0.05;

/// Run directories named by the arguments: a run directory itself, or each run directory
/// directly inside a directory (the points of a sweep, a folder of repetitions).
pub fn collect(args: &[PathBuf], side: &str) -> Result<Vec<PathBuf>, UsageError> {
    let mut out = vec![];
    for a in args {
        if a.join("summary.json").is_file() {
            out.push(a.clone());
            continue;
        }
        let entries = std::fs::read_dir(a).map_err(|e| {
            UsageError::new(format!("{side} {}: {e}; give run directories", a.display()))
        })?;
        let mut inner: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("summary.json").is_file())
            .collect();
        inner.sort();
        if inner.is_empty() {
            return Err(UsageError::new(format!(
                "{side} {}: not a run directory (no summary.json in it or in its subdirectories)",
                a.display()
            )));
        }
        out.extend(inner);
    }
    Ok(out)
}

fn load(dir: &Path) -> Result<(Summary, Value), UsageError> {
    let read = |f: &str| -> Result<String, UsageError> {
        std::fs::read_to_string(dir.join(f)).map_err(|e| {
            UsageError::new(format!(
                "{}: {e}; a finished run directory holds manifest.json and summary.json",
                dir.join(f).display()
            ))
        })
    };
    let s: Summary = serde_json::from_str(&read("summary.json")?)
        .map_err(|e| UsageError::new(format!("{}: {e}", dir.join("summary.json").display())))?;
    let m: Value = serde_json::from_str(&read("manifest.json")?)
        .map_err(|e| UsageError::new(format!("{}: {e}", dir.join("manifest.json").display())))?;
    Ok((s, m))
}

/// A metric of a phase, where the phase has it.
fn metric(p: &super::PhaseSummary, name: &str) -> Option<f64> {
    let all = p.all_ops.as_ref();
    match name {
        "ops_per_s" => Some(p.throughput_ops_per_s),
        "p50_us" => all.and_then(|a| a.latency_us.p50),
        "p99_us" => all.and_then(|a| a.latency_us.p99),
        "p99_9_us" => all.and_then(|a| a.latency_us.p99_9),
        "error_rate" => (p.operations > 0).then(|| p.errors as f64 / p.operations as f64),
        "ops_per_joule" => p.energy.as_ref().map(|e| e.ops_per_joule),
        "cpu_s_per_op" => {
            let t = p.telemetry.as_ref()?;
            // A window too short for CPU shares (telemetry's 50-tick rule) has no figure.
            if t.unavailable.contains_key("cpu") {
                return None;
            }
            let cpu = t.process.as_ref()?.cpu_pct;
            (p.operations > 0).then(|| cpu / 100.0 * p.measured_seconds / p.operations as f64)
        }
        "server_cpu_s_per_op" => p.per_op.as_ref()?.server_cpu_us.map(|us| us / 1e6),
        "context_switches_per_op" => p.per_op.as_ref()?.context_switches,
        "storage_write_bytes_per_op" => p.per_op.as_ref()?.storage_write_bytes,
        "cycles_per_op" => p.per_op.as_ref()?.cycles,
        _ => None,
    }
}

/// The phase a bare metric name means: "run", else the last run-kind phase, else the last.
fn main_phase(phases: &[(String, crate::plan::PhaseKind)]) -> Option<String> {
    use crate::plan::PhaseKind;
    phases
        .iter()
        .find(|(n, _)| n == "run")
        .or_else(|| phases.iter().rev().find(|(_, k)| *k == PhaseKind::Run))
        .or(phases.last())
        .map(|(n, _)| n.clone())
}

/// `--metric` names as (phase, metric): METRIC (the main phase) or PHASE.METRIC.
fn family(
    asked: &[String],
    phases: &[(String, crate::plan::PhaseKind)],
) -> Result<Vec<(String, String)>, UsageError> {
    let main = main_phase(phases).unwrap_or_else(|| "run".into());
    if asked.is_empty() {
        return Ok(vec![(main, "ops_per_s".into())]);
    }
    let names: Vec<&str> = phases.iter().map(|p| p.0.as_str()).collect();
    let mut out = vec![];
    for m in asked {
        let (phase, metric) = match m.rsplit_once('.') {
            Some((p, x)) if names.contains(&p) => (p.to_string(), x),
            _ => (main.clone(), m.as_str()),
        };
        if !METRICS.iter().any(|(n, _)| *n == metric) {
            return Err(UsageError::new(format!(
                "--metric {m}: unknown metric; expected one of {} (the {main} phase's), or PHASE.METRIC with PHASE one of {}",
                METRICS.map(|m| m.0).join(", "),
                names.join(", ")
            )));
        }
        if !out.contains(&(phase.clone(), metric.to_string())) {
            out.push((phase, metric.to_string()));
        }
    }
    Ok(out)
}

/// Compares the runs; `asked` is the family (`--metric`; the main phase's ops_per_s when
/// empty).
pub fn compare(
    a: &[PathBuf],
    b: &[PathBuf],
    noise_band: f64,
    asked: &[String],
) -> Result<Comparison, UsageError> {
    let la = a.iter().map(|d| load(d)).collect::<Result<Vec<_>, _>>()?;
    let lb = b.iter().map(|d| load(d)).collect::<Result<Vec<_>, _>>()?;
    let phases: Vec<(String, crate::plan::PhaseKind)> = la[0]
        .0
        .phases
        .iter()
        .filter(|p| p.kind != crate::plan::PhaseKind::Clear)
        .map(|p| (p.name.clone(), p.kind))
        .collect();
    let fam = family(asked, &phases)?;
    let mut rows = vec![];
    for (phase, _) in &phases {
        for (name, higher) in METRICS {
            let values = |side: &[(Summary, Value)]| -> Vec<f64> {
                side.iter()
                    .filter_map(|(s, _)| s.phases.iter().find(|p| &p.name == phase))
                    .filter_map(|p| metric(p, name))
                    .filter(|v| v.is_finite())
                    .collect()
            };
            let (va, vb) = (values(&la), values(&lb));
            if va.is_empty() || vb.is_empty() {
                continue;
            }
            let asked = fam.iter().any(|(p, m)| p == phase && m == name);
            let mut row = describe(phase, name, higher, asked, va, vb);
            row.estimate =
                name == "ops_per_joule" && (estimated(&la, phase) || estimated(&lb, phase));
            rows.push(row);
        }
    }
    let (family_tested, runs_needed) = test_family(&mut rows, noise_band);
    let unfinished = a
        .iter()
        .zip(&la)
        .chain(b.iter().zip(&lb))
        .filter(|(_, (s, _))| s.status != crate::report::RunStatus::Completed)
        .map(|(d, (s, _))| format!("{} ({})", d.display(), s.status))
        .collect();
    let not_measured = fam
        .iter()
        .filter(|(p, m)| !rows.iter().any(|r| &r.phase == p && &r.metric == m))
        .map(|(p, m)| format!("{p}.{m}"))
        .collect();
    Ok(Comparison {
        schema: "kvmeter-compare/2",
        a_runs: a.iter().map(|p| p.display().to_string()).collect(),
        b_runs: b.iter().map(|p| p.display().to_string()).collect(),
        noise_band,
        alpha: ALPHA,
        family: fam.iter().map(|(p, m)| format!("{p}.{m}")).collect(),
        family_tested,
        runs_needed,
        not_measured,
        mismatches: super::compare_match::mismatches(
            &la.iter().map(|x| x.1.clone()).collect::<Vec<_>>(),
            &lb.iter().map(|x| x.1.clone()).collect::<Vec<_>>(),
        ),
        unfinished,
        rows,
    })
}

/// Whether any run of a side has `phase`'s energy from the power model (an estimate).
fn estimated(side: &[(Summary, Value)], phase: &str) -> bool {
    side.iter()
        .filter_map(|(s, _)| s.phases.iter().find(|p| p.name == phase))
        .any(|p| p.energy.as_ref().is_some_and(|e| e.estimate))
}

fn ln(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| x.ln()).collect()
}

/// A row with its estimate and 95 % interval, untested; `verdict` holds why it cannot be
/// tested, if it cannot.
fn describe(phase: &str, name: &str, higher: bool, asked: bool, a: Vec<f64>, b: Vec<f64>) -> Row {
    let (ma, mb) = (stats::median(&a), stats::median(&b));
    let ratio_of_medians = if ma != 0.0 { mb / ma } else { f64::NAN };
    let positive = a.iter().chain(&b).all(|x| *x > 0.0);
    let constant = a.iter().chain(&b).all(|x| *x == a[0]);
    // A count or rate that is 0 on one side (no errors before, some after) has no ratio, but
    // its runs can still be compared by difference (`test_family`).
    let non_negative = a.iter().chain(&b).all(|x| *x >= 0.0);
    let why = if a.iter().chain(&b).all(|x| *x == 0.0) {
        Some("0 on both sides".to_string())
    } else if !non_negative {
        Some("a value is negative: no ratio".to_string())
    } else if constant {
        Some("every value is the same".to_string())
    } else {
        None
    };
    let s = positive.then(|| stats::shift(&ln(&a), &ln(&b), ALPHA));
    let exp = |c: (f64, f64)| (c.0.exp(), c.1.exp());
    Row {
        phase: phase.to_string(),
        metric: name.to_string(),
        higher_is_better: higher,
        median_a: ma,
        median_b: mb,
        ratio_of_medians,
        ratio: s
            .as_ref()
            .map(|s| s.estimate.exp())
            .unwrap_or(ratio_of_medians),
        ratio_ci: s.as_ref().and_then(|s| s.ci.map(exp)),
        ci_level: s.as_ref().and_then(|s| s.ci).map(|_| 1.0 - ALPHA),
        a,
        b,
        in_family: asked,
        tested: false,
        test: "none".into(),
        p: None,
        p_adjusted: None,
        verdict: match (asked, why) {
            (false, _) => "descriptive".into(),
            (true, Some(w)) => format!("not tested: {w}"),
            (true, None) => String::new(),
        },
        estimate: false,
    }
}

/// Tests the family rows that can be tested, each at ALPHA / k, and gives their verdicts;
/// returns k and the runs a side a verdict needs at that level. A row whose run counts can
/// never reach the level is left out (and k recounted, so it never dilutes the others).
fn test_family(rows: &mut [Row], band: f64) -> (usize, usize) {
    let candidates: Vec<usize> = (0..rows.len())
        .filter(|i| rows[*i].in_family && rows[*i].verdict.is_empty())
        .collect();
    let mut family = candidates.clone();
    let mut k = family.len().max(1);
    // The level each left-out row could not reach: its own message, not the final family's.
    let mut left_out: Vec<(usize, f64)> = vec![];
    loop {
        let level = ALPHA / k as f64;
        let (reach, miss): (Vec<usize>, Vec<usize>) = family
            .iter()
            .partition(|i| stats::min_p(rows[**i].a.len(), rows[**i].b.len()) <= level);
        left_out.extend(miss.iter().map(|i| (*i, level)));
        if miss.is_empty() {
            break;
        }
        family = reach;
        k = family.len().max(1);
    }
    let alpha = ALPHA / k as f64;
    let needed = stats::runs_needed(alpha);
    for i in candidates {
        let r = &mut rows[i];
        if let Some(&(_, level)) = left_out.iter().find(|(j, _)| *j == i) {
            let metrics = (ALPHA / level).round() as usize;
            let family_note = match metrics {
                1 => String::new(),
                m => format!(", the level of a family of {m} metrics"),
            };
            r.verdict = format!(
                "not tested: needs >= {} runs a side ({} + {} cannot reach p = {}{family_note})",
                stats::runs_needed(level),
                r.a.len(),
                r.b.len(),
                pct(level)
            );
            continue;
        }
        r.tested = true;
        if r.a.iter().chain(&r.b).any(|x| *x == 0.0) {
            by_difference(r, alpha, k);
            continue;
        }
        let s = stats::shift(&ln(&r.a), &ln(&r.b), alpha);
        r.test = "exact Mann-Whitney, Hodges-Lehmann interval (log values)".into();
        r.ratio = s.estimate.exp();
        r.ratio_ci = s.ci.map(|c| (c.0.exp(), c.1.exp()));
        r.ci_level = Some(1.0 - alpha);
        r.p = Some(s.p);
        r.p_adjusted = Some((s.p * k as f64).min(1.0));
        let change = r.ratio - 1.0;
        r.verdict = if !s.different {
            "no difference found".into()
        } else if change.abs() <= band {
            format!("below --noise ±{} %", pct(band * 100.0))
        } else if (change > 0.0) == r.higher_is_better {
            "better".into()
        } else {
            "worse".into()
        };
    }
    (family.len(), needed)
}

/// A row some of whose values are 0 (an error rate that was 0): no ratio to test, so the runs
/// are compared by difference, B − A, at the same level; the relative noise band does not apply.
fn by_difference(r: &mut Row, alpha: f64, k: usize) {
    let s = stats::shift(&r.a, &r.b, alpha);
    let signed = |x: f64| format!("{}{}", if x >= 0.0 { "+" } else { "" }, short(x));
    let interval = s.ci.map_or(String::new(), |(lo, hi)| {
        let level = pct((1.0 - alpha) * 100.0);
        format!(", {level} % interval {} to {}", signed(lo), signed(hi))
    });
    r.test = format!(
        "exact Mann-Whitney, Hodges-Lehmann difference (a value is 0: no ratio): B - A {}{interval}",
        signed(s.estimate)
    );
    (r.ratio, r.ratio_ci, r.ci_level) = (r.ratio_of_medians, None, None);
    (r.p, r.p_adjusted) = (Some(s.p), Some((s.p * k as f64).min(1.0)));
    r.verdict = match (s.different, (s.estimate > 0.0) == r.higher_is_better) {
        (false, _) => "no difference found",
        (true, true) => "better",
        (true, false) => "worse",
    }
    .into();
}

/// A number without trailing zeros: 0.05, 2.5, 0.0167.
fn pct(x: f64) -> String {
    let s = format!("{x:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl Row {
    /// The metric as shown: `ops_per_joule ESTIMATE` where the power model gave it.
    pub fn metric_label(&self) -> String {
        if self.estimate {
            format!("{} ESTIMATE", self.metric)
        } else {
            self.metric.clone()
        }
    }
}

impl Comparison {
    /// One line saying which rows are estimates and why, where any is.
    pub fn estimate_note(&self) -> Option<String> {
        let rows: Vec<String> = self
            .rows
            .iter()
            .filter(|r| r.estimate)
            .map(|r| format!("{}.{}", r.phase, r.metric))
            .collect();
        (!rows.is_empty()).then(|| {
            format!(
                "ESTIMATE: {} — energy from the utilisation power model on one side at least (no meter), not a measurement.",
                rows.join(", ")
            )
        })
    }

    pub fn regressed(&self) -> bool {
        self.rows.iter().any(|r| r.verdict == "worse")
    }

    /// Why a gate (`--fail-on-regression`) does not pass: a tested metric worse, a metric it
    /// decides on not measured on both sides, or a run that did not complete (killed runs
    /// measure nothing, and a gate must not pass for lack of data). Empty: it passes.
    pub fn gate_failures(&self) -> Vec<String> {
        let mut why: Vec<String> = self
            .rows
            .iter()
            .filter(|r| r.verdict == "worse")
            .map(|r| match r.ratio.is_finite() {
                true => format!("{}.{} is worse (B/A {:.3})", r.phase, r.metric, r.ratio),
                false => format!("{}.{} is worse: {}", r.phase, r.metric, r.test),
            })
            .collect();
        if !self.not_measured.is_empty() {
            why.push(format!(
                "not measured on both sides: {}",
                self.not_measured.join(", ")
            ));
        }
        if !self.unfinished.is_empty() {
            why.push(format!(
                "runs that did not complete: {}",
                self.unfinished.join(", ")
            ));
        }
        why
    }

    /// The terminal table.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let k = self.family_tested.max(1);
        let _ = writeln!(
            out,
            "A: {} run(s), B: {} run(s). Decided on: {} ({} tested, each at α = {} = {} / {}, Bonferroni); a verdict needs >= {} runs a side.",
            self.a_runs.len(),
            self.b_runs.len(),
            self.family.join(", "),
            self.family_tested,
            pct(self.alpha / k as f64),
            pct(self.alpha),
            k,
            self.runs_needed
        );
        let _ = writeln!(
            out,
            "better/worse: the interval of B/A excludes 1 (exact Mann-Whitney) and B/A is beyond ±{} % (--noise); other rows are descriptive.",
            pct(self.noise_band * 100.0)
        );
        if !self.not_measured.is_empty() {
            let _ = writeln!(
                out,
                "Not measured on both sides (no row, not tested): {}.",
                self.not_measured.join(", ")
            );
        }
        if !self.unfinished.is_empty() {
            let _ = writeln!(
                out,
                "Runs that did not complete (what they measured is compared): {}.",
                self.unfinished.join(", ")
            );
        }
        if let Some(line) = self.estimate_note() {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(
            out,
            "  {:<10} {:<22} {:>10} {:>10} {:>8} {:>24} {:>7}  verdict",
            "phase", "metric", "median A", "median B", "B/A", "interval", "p"
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "  {:<10} {:<22} {:>10} {:>10} {:>8} {:>24} {:>7}  {}",
                r.phase,
                r.metric_label(),
                short(r.median_a),
                short(r.median_b),
                ratio_text(r.ratio),
                interval_text(r),
                r.p.map(|p| format!("{p:.4}")).unwrap_or_else(|| "-".into()),
                r.verdict
            );
        }
        out
    }
}

/// B/A with the digits that matter: 0.9873, 1.103, 64.9.
pub fn ratio_text(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

/// "0.981–1.02 (95 %)", or "-" when there is none.
pub fn interval_text(r: &Row) -> String {
    match (r.ratio_ci, r.ci_level) {
        (Some((l, h)), Some(level)) => format!(
            "{}–{} ({} %)",
            ratio_text(l),
            ratio_text(h),
            pct(level * 100.0)
        ),
        _ => "-".into(),
    }
}
