//! The report of an experiment file's directory (`kvmeter experiment`): the paper's findings
//! against this run's values, the figures the file asks for, and each step with its command
//! line and a link to its own report.
//!
//! Everything comes from the directory's files: experiment.json (the steps and the figures,
//! findings and cost the file asked for, recorded when it ran), findings.json, results.json,
//! and the steps' own sweep.json, summary.json, capacity.json and CSV series. The experiment
//! file is never read again and nothing is judged here: the page is the same on any machine.

use super::{Cell, Page};
use crate::report::chart::{BarChart, LineChart, Scale, Series, Unit};
use crate::report::experiment::{
    counts, disagreement_text, paper_text, read, value_text, Checked, ExperimentStatus, Figure,
    FigureKind, Results, State, StepStatus,
};
use crate::report::names;
use crate::report::rundata::Table;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

pub fn page(dir: &Path) -> anyhow::Result<(Page, Option<Value>)> {
    let st = State::load(dir)?;
    let res = read::<Results>(dir, "results.json");
    let checked = read::<Vec<Checked>>(dir, "findings.json");
    let mut p = Page::new(&format!("{} — kvmeter experiment", st.title));
    header(&mut p, &st);
    match (&checked, &res) {
        (Ok(c), Ok(r)) => findings_table(&mut p, c, r),
        (Err(e), _) | (_, Err(e)) => {
            p.h2("Findings: the paper against this run");
            p.note(
                "partial",
                &format!("unavailable: {e:#} ('kvmeter report DIR' makes it from the steps)"),
            );
        }
    }
    p.h2("Figures");
    let ctx = Ctx {
        dir,
        steps: dir.join("steps"),
        st: &st,
        res: res.as_ref().ok(),
    };
    for f in &st.figures {
        match figure(&ctx, f) {
            Some(svg) => p.figure(&f.id, svg, caption(f)),
            None => p.note(
                "na",
                &format!(
                    "{}: unavailable: no completed step has the data it draws",
                    f.title
                ),
            ),
        }
    }
    if let Some(f) = &st.cost {
        match crate::report::cost::evaluate(f, dir) {
            Ok(r) => {
                crate::report::rundir::write_atomic(
                    &dir.join("cost.json"),
                    (serde_json::to_string_pretty(&r)? + "\n").as_bytes(),
                )?;
                super::cost_section(&mut p, f, &r);
            }
            Err(e) => {
                p.h2("Cost");
                p.note("na", &format!("unavailable: {}", e.0));
            }
        }
    }
    steps_table(&mut p, &st);
    let data = serde_json::json!({"experiment": st.name, "findings": checked.ok()});
    Ok((p, Some(data)))
}

fn header(p: &mut Page, st: &State) {
    p.note("", &format!("Paper: {}", st.paper));
    if !st.reproduces.is_empty() {
        p.note("", &format!("Reproduces: {}", st.reproduces.join("; ")));
    }
    p.note(
        "",
        &format!(
            "Scale: {}{} · status: {} · started {}",
            st.scale,
            if st.scale_about.is_empty() {
                String::new()
            } else {
                format!(" ({})", st.scale_about)
            },
            st.status.name(),
            st.started_at
        ),
    );
    if !st.is_current() {
        p.note(
            "partial",
            &format!("experiment.json ({}) predates the recorded figures and findings: 'kvmeter report DIR' records them.", st.schema),
        );
    }
    if st.status != ExperimentStatus::Completed {
        let open: Vec<&str> = st
            .steps
            .iter()
            .filter(|s| s.status != StepStatus::Completed)
            .map(|s| s.name.as_str())
            .collect();
        p.note(
            "partial",
            &format!(
                "Not every step completed ({}): figures and findings that need them are missing. 'kvmeter experiment FILE --resume DIR' finishes it.",
                open.join(", ")
            ),
        );
    }
    if !st.about.is_empty() {
        p.note("", &st.about);
    }
}

fn findings_table(p: &mut Page, checked: &[Checked], res: &Results) {
    p.h2("Findings: the paper against this run");
    p.note("", &counts(checked));
    for d in &res.identical {
        p.note(
            if d.spread_pct > 10.0 { "partial" } else { "" },
            &disagreement_text(d),
        );
    }
    let rows: Vec<Vec<Cell>> = checked
        .iter()
        .map(|c| {
            vec![
                Cell::text(c.claim.clone()),
                Cell::text(c.source.clone()),
                Cell::text(paper_text(&c.paper, &c.unit)),
                match c.value {
                    Some(v) => Cell::num(&format!("finding.{}", c.id), v, value_text(c)),
                    None => Cell::text("—"),
                },
                Cell::text(format!("{}: {}", c.verdict, c.why)),
            ]
        })
        .collect();
    p.table(
        "findings",
        &["finding", "source", "paper", "this run", "verdict"],
        &rows,
    );
}

fn steps_table(p: &mut Page, st: &State) {
    p.h2("Steps");
    let rows: Vec<Vec<Cell>> = st
        .steps
        .iter()
        .map(|s| {
            vec![
                Cell::text(s.name.clone()),
                Cell::text(s.status.name()),
                match s.seconds {
                    Some(x) => {
                        Cell::num(&format!("step.{}.seconds", s.name), x, format!("{x:.0} s"))
                    }
                    None => Cell::text("—"),
                },
                Cell::text(s.command_line.clone()),
                Cell::text(format!("{}/report.html", s.dir)),
            ]
        })
        .collect();
    p.table(
        "steps",
        &["step", "status", "time", "command", "its own report"],
        &rows,
    );
}

/// What every figure is drawn from.
struct Ctx<'a> {
    dir: &'a Path,
    steps: PathBuf,
    st: &'a State,
    res: Option<&'a Results>,
}

impl Ctx<'_> {
    fn json(&self, step: &str, file: &str) -> Option<Value> {
        read_json(&self.steps.join(step).join(file))
    }
}

fn caption(f: &Figure) -> &str {
    if f.caption.is_empty() {
        &f.title
    } else {
        &f.caption
    }
}

/// Draws one figure; None when no step has its data.
fn figure(ctx: &Ctx, f: &Figure) -> Option<String> {
    match &f.kind {
        FigureKind::Sweep {
            metrics,
            log_x,
            log_y,
        } => sweep(ctx, f, metrics, *log_x, *log_y),
        FigureKind::Phases { metric, phase } => phases(ctx, f, metric, phase.as_deref()),
        FigureKind::Series {
            file,
            columns,
            point,
            phase,
        } => series(ctx, f, file, columns, point.as_deref(), phase.as_deref()),
        FigureKind::Capacity => capacity(ctx, f),
        FigureKind::Pressure => pressure(ctx, f),
    }
}

/// Sweep steps: each `<phase>.<metric>` against the swept parameter, the geometric mean of the
/// repetitions with its 95 % whiskers (on logarithms).
fn sweep(ctx: &Ctx, f: &Figure, metrics: &[String], log_x: bool, log_y: bool) -> Option<String> {
    let mut chart = LineChart::new(&f.id, &f.title, "", "");
    if log_x {
        chart.x_scale = Scale::Log10;
    }
    let latency = metrics.iter().all(|m| m.ends_with("_us"));
    if log_y {
        chart.y_scale = Scale::Log10;
        chart.y_from_zero = false;
        if latency {
            chart.y_unit = Unit::Micros;
        }
    }
    for st in &f.steps {
        let Some(j) = ctx.json(st, "sweep.json") else {
            continue;
        };
        let param = j["params"][0]["name"].as_str().unwrap_or("").to_string();
        chart.x_label = names::name(&param);
        for m in metrics {
            let (phase, metric) = m.split_once('.').unwrap_or(("run", m));
            let Some((mut s, estimate)) = sweep_line(&j, &param, phase, metric) else {
                continue;
            };
            // The legend names what differs between the lines.
            let what = names::name(metric);
            s.name = match (f.steps.len() > 1, metrics.len() > 1) {
                (true, true) => format!("{} {phase}: {what}", ctx.st.label_of(st)),
                (true, false) => ctx.st.label_of(st),
                (false, _) => format!("{phase}: {what}"),
            };
            if estimate {
                s.name += " (ESTIMATE)";
            }
            chart.series.push(s);
        }
    }
    chart.y_label = match metrics {
        [one] => names::name(one),
        _ if latency => "latency (µs)".into(),
        _ => metrics
            .iter()
            .map(|m| names::name(m))
            .collect::<Vec<_>>()
            .join(", "),
    };
    if log_y {
        chart.y_label += " (log scale)";
    }
    (!chart.series.is_empty()).then(|| chart.svg())
}

/// One metric of one phase over a sweep.json's points (unnamed), and whether it is an estimate.
fn sweep_line(j: &Value, param: &str, phase: &str, metric: &str) -> Option<(Series, bool)> {
    let mut pts = vec![];
    let mut whiskers = vec![];
    let mut estimate = false;
    for (i, pt) in j["points"].as_array().into_iter().flatten().enumerate() {
        let x = pt["params"][param]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(i as f64 + 1.0);
        let ph = &pt["phases"][phase];
        let s = if ph[metric].is_object() {
            &ph[metric]
        } else {
            estimate = ph[format!("{metric}_estimate")].is_object() || estimate;
            &ph[format!("{metric}_estimate")]
        };
        // The geometric mean with its interval on logarithms (`stats::Spread`).
        if let Some(y) = s["geomean"].as_f64().or(s["mean"].as_f64()) {
            pts.push((x, y));
            whiskers.push(super::sweep::whisker(s));
        }
    }
    if pts.is_empty() {
        return None;
    }
    let mut s = Series::new("", pts);
    s.whiskers = whiskers;
    s.markers = true;
    Some((s, estimate))
}

/// Run, suite or pressure steps: one bar per phase (and step) of `metric`, from results.json.
fn phases(ctx: &Ctx, f: &Figure, metric: &str, phase: Option<&str>) -> Option<String> {
    let mut bars = vec![];
    let mut estimate = false;
    for st in &f.steps {
        let Some(j) = ctx.json(st, "summary.json") else {
            continue;
        };
        let Some(r) = ctx.res.and_then(|r| r.steps.get(st)) else {
            continue;
        };
        for ph in j["phases"].as_array().into_iter().flatten() {
            let name = ph["name"].as_str().unwrap_or("");
            if phase.is_some_and(|want| !name.starts_with(want)) {
                continue;
            }
            let key = format!("{name}.{metric}");
            if let Some((_, v, e)) = r.figures.iter().find(|(k, _, _)| *k == key) {
                estimate |= *e;
                let label = if f.steps.len() > 1 {
                    format!("{} · {name}", ctx.st.label_of(st))
                } else {
                    name.to_string()
                };
                bars.push((label, *v, format!("{key} = {v:.4}")));
            }
        }
    }
    let b = BarChart {
        id: f.id.clone(),
        title: f.title.clone(),
        y_label: format!(
            "{}{}",
            names::name(metric),
            if estimate { " (ESTIMATE)" } else { "" }
        ),
        bars,
        sorted: false,
    };
    (!b.bars.is_empty()).then(|| b.svg())
}

/// A time series from each step's CSV (a sweep's `point`: its first repetition).
fn series(
    ctx: &Ctx,
    f: &Figure,
    file: &str,
    columns: &[String],
    point: Option<&str>,
    phase: Option<&str>,
) -> Option<String> {
    let y_label: Vec<String> = columns.iter().map(|c| names::name(c)).collect();
    let mut chart = LineChart::new(&f.id, &f.title, "time (s)", &y_label.join(", "));
    for st in &f.steps {
        let d = match point {
            Some(pt) => point_run(ctx, st, pt)?,
            None => ctx.steps.join(st),
        };
        let Ok(text) = std::fs::read_to_string(d.join(file)) else {
            continue;
        };
        let t = Table::parse(&text);
        let prefix = (f.steps.len() > 1).then(|| ctx.st.label_of(st));
        chart
            .series
            .extend(csv_series(&t, columns, phase, prefix.as_deref())?);
    }
    (!chart.series.is_empty()).then(|| chart.svg())
}

/// The run directory of a sweep point's first repetition.
fn point_run(ctx: &Ctx, step: &str, point: &str) -> Option<PathBuf> {
    let j = ctx.json(step, "sweep.json")?;
    let run = super::sweep_points(&j)
        .into_iter()
        .find(|(label, _)| label == point)
        .and_then(|(_, p)| p["runs"][0].as_str().map(str::to_string))?;
    let mut d = PathBuf::from(run);
    if d.is_relative() && !d.exists() {
        d = ctx.dir.join(d);
    }
    Some(d)
}

/// The lines of one CSV: each column over time, in `phase` only where given; timeline.csv
/// splits a Redis Cluster master's keys (affected) from the rest, one line each. None when
/// the file has no time column.
fn csv_series(
    t: &Table,
    columns: &[String],
    phase: Option<&str>,
    prefix: Option<&str>,
) -> Option<Vec<Series>> {
    let x_col = ["time_s", "t_end_s", "end_s", "t_s"]
        .into_iter()
        .find(|c| t.header.iter().any(|h| h == c))?;
    let xs = t.column(x_col)?;
    let phases = t.text("phase");
    let class = t.text("class");
    let metric_col = t.text("metric");
    let first_metric = metric_col.as_ref().and_then(|m| m.first().copied());
    let mut classes: Vec<Option<&str>> = vec![];
    for k in class.iter().flatten() {
        if !classes.contains(&Some(*k)) {
            classes.push(Some(*k));
        }
    }
    if classes.is_empty() {
        classes.push(None);
    }
    let keep = |i: usize, cl: Option<&str>| {
        phase.is_none_or(|want| phases.as_ref().is_some_and(|p| p[i] == want))
            && class.as_ref().is_none_or(|k| Some(k[i]) == cl)
            && metric_col
                .as_ref()
                .is_none_or(|m| Some(m[i]) == first_metric)
    };
    let mut out = vec![];
    for c in columns {
        let Some(ys) = t.column(c) else { continue };
        for cl in &classes {
            let pts: Vec<(f64, f64)> = (0..xs.len())
                .filter(|&i| keep(i, *cl))
                .filter_map(|i| Some((xs[i]?, ys[i]?)))
                .collect();
            if pts.is_empty() {
                continue;
            }
            let mut name = match prefix {
                Some(l) => format!("{l} {}", names::name(c)),
                None => names::name(c),
            };
            if let Some(k) = cl.filter(|_| classes.len() > 1) {
                name += &format!(" ({k})");
            }
            out.push(Series::new(&name, super::downsample(pts)));
        }
    }
    Some(out)
}

/// Capacity steps: each search drawn as the capacity page draws it (capacity::add_search),
/// with the SLO it searched under.
fn capacity(ctx: &Ctx, f: &Figure) -> Option<String> {
    let mut chart = super::capacity::chart(&f.id, &f.title);
    for st in &f.steps {
        if let Some(j) = ctx.json(st, "capacity.json") {
            super::capacity::add_search(&mut chart, Some(&ctx.st.label_of(st)), &j);
        }
    }
    (!chart.series.is_empty()).then(|| chart.svg())
}

/// Pressure steps: the normalized pressure of w1..w25, sorted, one line per block size.
fn pressure(ctx: &Ctx, f: &Figure) -> Option<String> {
    let mut chart = LineChart::new(
        &f.id,
        &f.title,
        "rank (w1..w25 sorted by pressure)",
        "normalized pressure",
    );
    for st in &f.steps {
        let Some(j) = ctx.json(st, "summary.json") else {
            continue;
        };
        for ph in j["phases"].as_array().into_iter().flatten() {
            let pr = &ph["pressure"];
            let Some(bs) = pr["block_size_kib"].as_u64() else {
                continue;
            };
            let mut ps: Vec<f64> = pr["steps"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["step"].as_str() != Some("w0"))
                .filter_map(|s| s["normalized_pressure"].as_f64())
                .collect();
            ps.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
            let pts = ps
                .into_iter()
                .enumerate()
                .map(|(i, v)| (i as f64 + 1.0, v))
                .collect();
            let mut s = Series::new(&format!("{} {bs} KiB", ctx.st.label_of(st)), pts);
            s.markers = true;
            chart.series.push(s);
        }
    }
    (!chart.series.is_empty()).then(|| chart.svg())
}
