//! The experiment directory's model (`kvmeter experiment FILE`), as manifest.rs is a run's:
//!
//! - experiment.json (`State`): the steps with their state and command lines, and what the
//!   file asked to draw and check (`figures`, `findings`, `about`, `cost`), resolved when the
//!   experiment started;
//! - results.json (`Results`): every figure of every step, with what each step recorded of the
//!   machine it ran on (`Facts`);
//! - findings.json (`Checked`): each finding's verdict.
//!
//! The runner writes them; the page and `kvmeter report` read them. An experiment directory
//! copied to another machine therefore gives the same page there: the experiment file is never
//! parsed again, no step is planned, no plug-in loaded, and a finding's `needs` is judged from
//! the steps' manifests, never from the machine making the report.

use crate::error::UsageError;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// experiment.json's schema. `/1` (before kvmeter recorded the figures and findings in it)
/// is upgraded by `kvmeter report` (experiment::file::run::refresh).
pub const SCHEMA: &str = "kvmeter-experiment/2";

/// Where a step is; the JSON keeps the words (`"completed"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    Pending,
    Running,
    Completed,
    Failed,
    Interrupted,
}

impl StepStatus {
    pub fn name(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Running => "running",
            StepStatus::Completed => "completed",
            StepStatus::Failed => "failed",
            StepStatus::Interrupted => "interrupted",
        }
    }
}

/// Where the whole experiment is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExperimentStatus {
    Running,
    Completed,
    Interrupted,
    Failed,
}

impl ExperimentStatus {
    pub fn name(self) -> &'static str {
        match self {
            ExperimentStatus::Running => "running",
            ExperimentStatus::Completed => "completed",
            ExperimentStatus::Interrupted => "interrupted",
            ExperimentStatus::Failed => "failed",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepState {
    pub name: String,
    pub label: String,
    pub command: String,
    pub args: Vec<String>,
    /// The same step typed by hand.
    pub command_line: String,
    pub dir: String,
    pub status: StepStatus,
    pub exit_code: Option<i32>,
    pub seconds: Option<f64>,
    pub estimate_s: f64,
    pub finished_at: Option<String>,
    /// The device directory a per-device copy ran on (its TMPDIR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<PathBuf>,
}

/// A `[[finding]]` as the file gave it: the expression and comparison as text, parsed again
/// (experiment::file::expr, no machine involved) whenever the verdicts are made.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FindingSpec {
    pub id: String,
    pub claim: String,
    pub source: String,
    pub paper: PaperValue,
    pub unit: String,
    /// The expression over the steps' results.
    pub value: String,
    /// The comparison that means "reproduced", e.g. "> 1".
    pub expect: String,
    pub needs: Vec<String>,
    pub note: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub schema: String,
    pub name: String,
    pub title: String,
    pub paper: String,
    pub file: String,
    pub scale: String,
    pub devices: Vec<PathBuf>,
    pub started_at: String,
    pub status: ExperimentStatus,
    pub kvmeter_version: String,
    pub steps: Vec<StepState>,
    #[serde(default)]
    pub scale_about: String,
    #[serde(default)]
    pub reproduces: Vec<String>,
    #[serde(default)]
    pub about: String,
    #[serde(default)]
    pub figures: Vec<Figure>,
    #[serde(default)]
    pub findings: Vec<FindingSpec>,
    /// The file's `[cost]` (`capacity_from` relative to the experiment directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<super::cost::CostFile>,
    /// What `$cpus` stood for in the steps' values (the online CPUs when the experiment
    /// started); `--resume` keeps it. Absent in directories older kvmeters made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<usize>,
}

impl State {
    /// experiment.json in `root`.
    pub fn load(root: &Path) -> Result<State, UsageError> {
        let path = root.join("experiment.json");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            UsageError::new(format!(
                "{}: no experiment here ({e}); give the directory a 'kvmeter experiment' run wrote",
                root.display()
            ))
        })?;
        serde_json::from_str(&text)
            .map_err(|e| UsageError::new(format!("{}: not readable: {e}", path.display())))
    }

    /// Whether the file's figures and findings are recorded here (schema 2 on).
    pub fn is_current(&self) -> bool {
        self.schema == SCHEMA
    }

    /// A step's label, or its name.
    pub fn label_of(&self, step: &str) -> String {
        self.steps
            .iter()
            .find(|s| s.name == step)
            .map(|s| s.label.clone())
            .unwrap_or_else(|| step.to_string())
    }
}

/// A `[[figure]]`: which steps it draws and how. The JSON has the kind's keys beside the
/// figure's own (`"kind": "sweep", "metrics": [...]`), as the file does.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Figure {
    pub id: String,
    pub title: String,
    pub caption: String,
    pub steps: Vec<String>,
    #[serde(flatten)]
    pub kind: FigureKind,
    /// The line of the file it came from (for complaints while the file is checked).
    #[serde(skip)]
    pub line: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum FigureKind {
    /// Sweep steps: x = the swept parameter, y = each `<phase>.<metric>` (mean, 95 % CI).
    Sweep {
        metrics: Vec<String>,
        log_x: bool,
        log_y: bool,
    },
    /// Run or suite steps: one bar per phase (and step) of `metric`; `phase` keeps the
    /// phases whose name starts with it.
    Phases {
        metric: String,
        phase: Option<String>,
    },
    /// A time series from a step's CSV (a sweep's `point`, first repetition).
    Series {
        file: String,
        columns: Vec<String>,
        point: Option<String>,
        phase: Option<String>,
    },
    /// Capacity steps: latency against offered load.
    Capacity,
    /// Pressure steps: normalized pressure of each step w1..w25, sorted (papers/004 Fig. 2).
    Pressure,
}

/// The paper's value: a number, or its words ("higher").
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum PaperValue {
    Number(f64),
    Text(String),
}

/// A finding's verdict; the JSON keeps the words ("not reproduced").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    #[serde(rename = "reproduced")]
    Reproduced,
    #[serde(rename = "not reproduced")]
    NotReproduced,
    #[serde(rename = "inconclusive")]
    Inconclusive,
    #[serde(rename = "cannot be tested here")]
    CannotBeTested,
    #[serde(rename = "not measured")]
    NotMeasured,
}

impl Verdict {
    pub const ALL: [Verdict; 5] = [
        Verdict::Reproduced,
        Verdict::NotReproduced,
        Verdict::Inconclusive,
        Verdict::CannotBeTested,
        Verdict::NotMeasured,
    ];

    pub fn text(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::NotReproduced => "not reproduced",
            Verdict::Inconclusive => "inconclusive",
            Verdict::CannotBeTested => "cannot be tested here",
            Verdict::NotMeasured => "not measured",
        }
    }

    /// Decided either way: the value says all there is to say.
    pub fn decided(self) -> bool {
        matches!(self, Verdict::Reproduced | Verdict::NotReproduced)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// A finding checked against this run (findings.json).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Checked {
    pub id: String,
    pub claim: String,
    pub source: String,
    pub paper: PaperValue,
    pub unit: String,
    pub value: Option<f64>,
    /// The interval the true value lies in, when it is not exact (null for an open side).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "open_interval"
    )]
    pub interval: Option<(f64, f64)>,
    pub estimate: bool,
    pub expression: String,
    pub expect: String,
    pub verdict: Verdict,
    pub why: String,
    pub note: String,
}

/// An interval read back: JSON has null for an infinite end (serde_json writes ±∞ so).
fn open_interval<'de, D: Deserializer<'de>>(d: D) -> Result<Option<(f64, f64)>, D::Error> {
    let v: Option<(Option<f64>, Option<f64>)> = Option::deserialize(d)?;
    Ok(v.map(|(lo, hi)| (lo.unwrap_or(f64::NEG_INFINITY), hi.unwrap_or(f64::INFINITY))))
}

fn low_end<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NEG_INFINITY))
}

fn high_end<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// (key, value, from an estimate) in the step's order; a null value (not finite) reads as NaN.
fn figures_de<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, f64, bool)>, D::Error> {
    let v: Vec<(String, Option<f64>, bool)> = Vec::deserialize(d)?;
    Ok(v.into_iter()
        .map(|(k, x, e)| (k, x.unwrap_or(f64::NAN), e))
        .collect())
}

/// The interval a figure's true value lies in (JSON: null for an open side) and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bound {
    pub key: String,
    #[serde(deserialize_with = "low_end")]
    pub low: f64,
    #[serde(deserialize_with = "high_end")]
    pub high: f64,
    pub why: String,
}

impl Bound {
    /// "≥ 8000", "≤ 500", "1000–1100": the interval as it is printed.
    pub fn text(&self) -> String {
        interval_text(self.low, self.high)
    }
}

/// What a step's runs recorded of where they ran (manifest.json, summary.json): what a
/// finding's `needs` is judged by, wherever the verdicts are made.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Facts {
    /// The fewest CPUs any of its runs could use (manifest.json `machine.logical_cpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<usize>,
    /// Whether every run's data directory was on an NVMe device (`data_dir.placement`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvme: Option<bool>,
    /// Why hardware counters were unavailable, where a run asked for them (`--counters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters_unavailable: Option<String>,
    /// "CPU model (N logical CPUs, virtualization)" of its first run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

impl Facts {
    pub fn is_empty(&self) -> bool {
        *self == Facts::default()
    }
}

/// Run directories looked at under one step (a sweep's points × repeats), at most.
const MAX_RUNS: usize = 10_000;

/// The run directories of a step: itself, or its points (capacity: points/*, sweep:
/// points/*/r*), two levels down at most.
fn run_dirs(step: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut todo = vec![(step.to_path_buf(), 0)];
    while let Some((d, depth)) = todo.pop() {
        if out.len() >= MAX_RUNS {
            break;
        }
        if d.join("manifest.json").is_file() {
            out.push(d.clone());
        }
        if depth >= 3 {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut subs: Vec<PathBuf> = rd
            .flatten()
            .take(MAX_RUNS)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        subs.sort();
        todo.extend(subs.into_iter().rev().map(|p| (p, depth + 1)));
    }
    out
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// What the runs under a step directory recorded of their machine.
pub fn facts_of(step: &Path) -> Facts {
    let mut f = Facts::default();
    for run in run_dirs(step) {
        let Some(m) = read_json(&run.join("manifest.json")) else {
            continue;
        };
        let machine = &m["machine"];
        if let Some(n) = machine["logical_cpus"].as_u64() {
            f.cpus = Some(f.cpus.map_or(n as usize, |c| c.min(n as usize)));
        }
        if f.machine.is_none() && machine.is_object() {
            f.machine = Some(format!(
                "{} ({} logical CPUs, {})",
                machine["cpu_model"].as_str().unwrap_or("unknown CPU"),
                machine["logical_cpus"],
                machine["virtualization"].as_str().unwrap_or("unknown")
            ));
        }
        let placement = &m["data_dir"]["placement"];
        if placement.is_object() {
            let on_nvme = ["block_device", "device"].iter().any(|k| {
                placement[*k]
                    .as_str()
                    .is_some_and(|d| d.rsplit('/').next().unwrap_or(d).starts_with("nvme"))
            });
            f.nvme = Some(f.nvme.unwrap_or(true) && on_nvme);
        }
        if f.counters_unavailable.is_none() {
            let s = read_json(&run.join("summary.json")).unwrap_or_default();
            f.counters_unavailable = s["phases"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|p| p["telemetry"]["unavailable"]["counters.instructions"].as_str())
                .map(str::to_string);
        }
    }
    f
}

/// One step's figures, in order.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StepResults {
    /// completed, or why not (from the experiment's record of the step).
    pub status: String,
    /// What the step's own file says of itself (a capacity search "stopped: --max-points
    /// reached" still found a capacity).
    pub detail: String,
    #[serde(deserialize_with = "figures_de")]
    pub figures: Vec<(String, f64, bool)>,
    /// The figures that are bounds or noisy, with their intervals (none: every figure exact).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bounds: Vec<Bound>,
    /// What its runs recorded of their machine.
    #[serde(default, skip_serializing_if = "Facts::is_empty")]
    pub facts: Facts,
}

impl StepResults {
    /// The interval of figure `key` with its reasons: the hull of its bounds and its value.
    pub fn interval(&self, key: &str, v: f64) -> (f64, f64, Vec<String>) {
        self.bounds
            .iter()
            .filter(|b| b.key == key)
            .fold((v, v, vec![]), |(lo, hi, mut why), b| {
                if !why.contains(&b.why) {
                    why.push(b.why.clone());
                }
                (lo.min(b.low), hi.max(b.high), why)
            })
    }
}

/// A group of identical steps and how far one headline figure of theirs disagrees.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Disagreement {
    pub steps: Vec<String>,
    /// The command they share, as the first of them typed it.
    pub command: String,
    pub key: String,
    pub values: Vec<f64>,
    /// (highest − lowest) / lowest, %.
    #[serde(deserialize_with = "nan_if_null")]
    pub spread_pct: f64,
}

/// All steps' figures by step name (results.json).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Results {
    pub steps: BTreeMap<String, StepResults>,
    /// Groups of steps that ran the same command, and how far their figures disagree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identical: Vec<Disagreement>,
}

/// results.json or findings.json of `root`, if it is there and readable.
pub fn read<T: serde::de::DeserializeOwned>(root: &Path, file: &str) -> anyhow::Result<T> {
    let path = root.join(file);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read it: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: not readable: {e}", path.display()))
}

/// Three significant digits, no exponent for everyday sizes.
pub fn sig(x: f64) -> String {
    let a = x.abs();
    if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else if a >= 0.001 || a == 0.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.2e}")
    }
}

/// `sig` without trailing zeros: "400" rather than "400.0" where a bound is printed.
pub fn short(x: f64) -> String {
    let s = sig(x);
    if s.contains('.') && !s.contains('e') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// An interval as people write it: "≥ lo" or "≤ hi" for an open side, "lo–hi" otherwise.
pub fn interval_text(lo: f64, hi: f64) -> String {
    match (lo.is_finite(), hi.is_finite()) {
        (true, false) => format!("≥ {}", short(lo)),
        (false, true) => format!("≤ {}", short(hi)),
        (true, true) if lo == hi => short(lo),
        (true, true) => format!("{}–{}", short(lo), short(hi)),
        _ => "unbounded".into(),
    }
}

pub fn paper_text(p: &PaperValue, unit: &str) -> String {
    match p {
        PaperValue::Number(x) => format!("{} {unit}", sig(*x)).trim().to_string(),
        PaperValue::Text(t) => t.clone(),
    }
}

/// This run's value as printed: "319.7 µs", "≥ 8000 ops/s" for a one-sided bound, "1.09 ×
/// (0.95–1.2)" for a value with an interval around it.
pub fn value_text(c: &Checked) -> String {
    let Some(v) = c.value else {
        return "—".into();
    };
    let shown = match c.interval {
        None => sig(v),
        Some((lo, hi)) if lo == v && hi == f64::INFINITY => format!("≥ {}", short(v)),
        Some((lo, hi)) if hi == v && (lo <= 0.0 && v > 0.0 || lo == f64::NEG_INFINITY) => {
            format!("≤ {}", short(v))
        }
        Some((lo, hi)) => format!("{} ({})", sig(v), interval_text(lo, hi)),
    };
    format!(
        "{}{}",
        format!("{shown} {}", c.unit).trim(),
        if c.estimate { " (ESTIMATE)" } else { "" }
    )
}

/// "2 reproduced, 0 not reproduced, 3 inconclusive, 1 cannot be tested here, 0 not measured".
pub fn counts(checked: &[Checked]) -> String {
    let parts: Vec<String> = Verdict::ALL
        .iter()
        .map(|v| format!("{} {v}", checked.iter().filter(|c| c.verdict == *v).count()))
        .collect();
    format!("Verdicts: {}.", parts.join(", "))
}

/// One line on identical steps: what they gave and how far apart.
pub fn disagreement_text(d: &Disagreement) -> String {
    let quoted: Vec<String> = d.steps.iter().map(|s| format!("'{s}'")).collect();
    format!(
        "identical steps {} (`kvmeter {}`): {} {} — {} apart{}",
        quoted.join(" and "),
        d.command.trim(),
        d.key,
        d.values
            .iter()
            .map(|v| sig(*v))
            .collect::<Vec<_>>()
            .join(" against "),
        if d.spread_pct.is_finite() {
            format!("{:.1} %", d.spread_pct)
        } else {
            "—".into()
        },
        if d.spread_pct > 10.0 {
            "; NOISY: comparisons on these steps are decided only beyond this difference"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_read_back_as_written_open_ends_included() {
        let c = Checked {
            id: "x".into(),
            claim: "c".into(),
            source: String::new(),
            paper: PaperValue::Number(2.0),
            unit: String::new(),
            value: Some(400.0),
            interval: Some((400.0, f64::INFINITY)),
            estimate: false,
            expression: "{a:b}".into(),
            expect: "> 1".into(),
            verdict: Verdict::CannotBeTested,
            why: String::new(),
            note: String::new(),
        };
        let j = serde_json::to_string(&c).unwrap();
        assert!(j.contains(r#""verdict":"cannot be tested here""#), "{j}");
        assert!(j.contains(r#""interval":[400.0,null]"#), "{j}");
        let back: Checked = serde_json::from_str(&j).unwrap();
        assert_eq!(back.interval, Some((400.0, f64::INFINITY)));
        assert_eq!(value_text(&back), "≥ 400");
        let f = Figure {
            id: "f".into(),
            title: "t".into(),
            caption: String::new(),
            steps: vec!["s".into()],
            kind: FigureKind::Sweep {
                metrics: vec!["run.x".into()],
                log_x: true,
                log_y: false,
            },
            line: 3,
        };
        let j = serde_json::to_value(&f).unwrap();
        assert_eq!(j["kind"], "sweep");
        assert_eq!(j["log_x"], true);
        let back: Figure = serde_json::from_value(j).unwrap();
        assert!(matches!(back.kind, FigureKind::Sweep { log_x: true, .. }));
        let b: Bound =
            serde_json::from_str(r#"{"key":"k","low":null,"high":5.0,"why":""}"#).unwrap();
        assert_eq!((b.low, b.high), (f64::NEG_INFINITY, 5.0));
    }
}
