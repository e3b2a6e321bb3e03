//! The report of an experiment file's directory (`kvmeter experiment`): the paper's findings
//! against this run's values, the figures the file asks for (drawn from the steps' own
//! directories: sweep.json, summary.json, capacity.json and the CSV series), and each step
//! with its command line and a link to its own report.

use super::{Cell, Page};
use crate::experiment::file::findings::{self, Checked};
use crate::experiment::file::results;
use crate::experiment::file::{run, Experiment, Figure, FigureKind};
use crate::report::chart::{BarChart, LineChart, Scale, Series, Unit};
use crate::report::names;
use crate::report::rundata::Table;
use serde_json::Value;
use std::path::Path;

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

pub fn page(dir: &Path) -> anyhow::Result<(Page, Option<Value>)> {
    let (exp, st) = run::reload(dir)?;
    let res = run::collect(&exp, dir, &st);
    let checked = findings::check(&exp, &res);
    let mut p = Page::new(&format!("{} — kvmeter experiment", exp.title));
    p.note("", &format!("Paper: {}", exp.paper));
    if !exp.reproduces.is_empty() {
        p.note("", &format!("Reproduces: {}", exp.reproduces.join("; ")));
    }
    p.note(
        "",
        &format!(
            "Scale: {}{} · status: {} · started {}",
            exp.scale,
            if exp.scale_about.is_empty() {
                String::new()
            } else {
                format!(" ({})", exp.scale_about)
            },
            st.status,
            st.started_at
        ),
    );
    if st.status != "completed" {
        let open: Vec<&str> = st
            .steps
            .iter()
            .filter(|s| s.status != "completed")
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
    if !exp.about.is_empty() {
        p.note("", &exp.about);
    }
    findings_table(&mut p, &checked, &res);
    p.h2("Figures");
    for f in &exp.figures {
        match figure(dir, &exp, f) {
            Some((svg, caption)) => p.figure(&f.id, svg, &caption),
            None => p.note(
                "na",
                &format!(
                    "{}: unavailable: no completed step has the data it draws",
                    f.title
                ),
            ),
        }
    }
    if let Some(f) = &exp.cost {
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
    let data = serde_json::json!({"experiment": exp.name, "findings": checked});
    Ok((p, Some(data)))
}

fn findings_table(p: &mut Page, checked: &[Checked], res: &results::Results) {
    p.h2("Findings: the paper against this run");
    p.note("", &findings::counts(checked));
    for d in &res.identical {
        p.note(
            if d.spread_pct > 10.0 { "partial" } else { "" },
            &findings::disagreement_text(d),
        );
    }
    let rows: Vec<Vec<Cell>> = checked
        .iter()
        .map(|c| {
            vec![
                Cell::text(c.claim.clone()),
                Cell::text(c.source.clone()),
                Cell::text(findings::paper_text(&c.paper, &c.unit)),
                match c.value {
                    Some(v) => Cell::num(&format!("finding.{}", c.id), v, findings::value_text(c)),
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

fn steps_table(p: &mut Page, st: &run::State) {
    p.h2("Steps");
    let rows: Vec<Vec<Cell>> = st
        .steps
        .iter()
        .map(|s| {
            vec![
                Cell::text(s.name.clone()),
                Cell::text(s.status.clone()),
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

fn label_of(exp: &Experiment, step: &str) -> String {
    exp.steps
        .iter()
        .find(|s| s.name == step)
        .map(|s| s.label.clone())
        .unwrap_or_else(|| step.to_string())
}

/// Draws one figure; None when no step has its data.
fn figure(dir: &Path, exp: &Experiment, f: &Figure) -> Option<(String, String)> {
    let steps = dir.join("steps");
    let caption = if f.caption.is_empty() {
        f.title.clone()
    } else {
        f.caption.clone()
    };
    match &f.kind {
        FigureKind::Sweep {
            metrics,
            log_x,
            log_y,
        } => {
            let mut chart = LineChart::new(&f.id, &f.title, "", "");
            if *log_x {
                chart.x_scale = Scale::Log10;
            }
            let latency = metrics.iter().all(|m| m.ends_with("_us"));
            if *log_y {
                chart.y_scale = Scale::Log10;
                chart.y_from_zero = false;
                if latency {
                    chart.y_unit = Unit::Micros;
                }
            }
            for st in &f.steps {
                let Some(j) = read_json(&steps.join(st).join("sweep.json")) else {
                    continue;
                };
                let param = j["params"][0]["name"].as_str().unwrap_or("").to_string();
                chart.x_label = names::name(&param);
                for m in metrics {
                    let (phase, metric) = m.split_once('.').unwrap_or(("run", m));
                    let mut pts = vec![];
                    let mut whiskers = vec![];
                    let mut estimate = false;
                    for (i, pt) in j["points"].as_array().into_iter().flatten().enumerate() {
                        let x = pt["params"][&param]
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
                        if let Some(y) = s["mean"].as_f64() {
                            pts.push((x, y));
                            whiskers.push(s["ci95_low"].as_f64().zip(s["ci95_high"].as_f64()));
                        }
                    }
                    if pts.is_empty() {
                        continue;
                    }
                    // The legend names what differs between the lines.
                    let what = names::name(metric);
                    let mut name = match (f.steps.len() > 1, metrics.len() > 1) {
                        (true, true) => format!("{} {phase}: {what}", label_of(exp, st)),
                        (true, false) => label_of(exp, st),
                        (false, _) => format!("{phase}: {what}"),
                    };
                    if estimate {
                        name += " (ESTIMATE)";
                    }
                    let mut s = Series::new(&name, pts);
                    s.whiskers = whiskers;
                    s.markers = true;
                    chart.series.push(s);
                }
            }
            chart.y_label = match metrics.as_slice() {
                [one] => names::name(one),
                _ if latency => "latency (µs)".into(),
                _ => metrics
                    .iter()
                    .map(|m| names::name(m))
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            if *log_y {
                chart.y_label += " (log scale)";
            }
            (!chart.series.is_empty()).then(|| (chart.svg(), caption))
        }
        FigureKind::Phases { metric, phase } => {
            let mut bars = vec![];
            let mut estimate = false;
            for st in &f.steps {
                let Some(j) = read_json(&steps.join(st).join("summary.json")) else {
                    continue;
                };
                let Some(r) = results::of_step(&steps.join(st)) else {
                    continue;
                };
                for ph in j["phases"].as_array().into_iter().flatten() {
                    let name = ph["name"].as_str().unwrap_or("");
                    if phase
                        .as_ref()
                        .is_some_and(|want| !name.starts_with(want.as_str()))
                    {
                        continue;
                    }
                    let key = format!("{name}.{metric}");
                    if let Some((_, v, e)) = r.figures.iter().find(|(k, _, _)| *k == key) {
                        estimate |= *e;
                        let label = if f.steps.len() > 1 {
                            format!("{} · {name}", label_of(exp, st))
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
            (!b.bars.is_empty()).then(|| (b.svg(), caption))
        }
        FigureKind::Series {
            file,
            columns,
            point,
            phase,
        } => {
            let y_label: Vec<String> = columns.iter().map(|c| names::name(c)).collect();
            let mut chart = LineChart::new(&f.id, &f.title, "time (s)", &y_label.join(", "));
            for st in &f.steps {
                let mut d = steps.join(st);
                if let Some(pt) = point {
                    let j = read_json(&d.join("sweep.json"))?;
                    let run = results::sweep_points(&j)
                        .into_iter()
                        .find(|(label, _)| label == pt)
                        .and_then(|(_, p)| p["runs"][0].as_str().map(str::to_string))?;
                    d = std::path::PathBuf::from(run);
                    if d.is_relative() && !d.exists() {
                        d = dir.join(d);
                    }
                }
                let Ok(text) = std::fs::read_to_string(d.join(file)) else {
                    continue;
                };
                let t = Table::parse(&text);
                let x_col = ["time_s", "t_end_s", "end_s"]
                    .into_iter()
                    .find(|c| t.header.iter().any(|h| h == c))?;
                let xs = t.column(x_col)?;
                let phases = t.text("phase");
                let class = t.text("class");
                let metric_col = t.text("metric");
                let first_metric = metric_col.as_ref().and_then(|m| m.first().copied());
                // timeline.csv splits a Redis Cluster master's keys (affected) from the rest:
                // one line each.
                let mut classes: Vec<Option<&str>> = vec![];
                for k in class.iter().flatten() {
                    if !classes.contains(&Some(*k)) {
                        classes.push(Some(*k));
                    }
                }
                if classes.is_empty() {
                    classes.push(None);
                }
                for c in columns {
                    let Some(ys) = t.column(c) else { continue };
                    for cl in &classes {
                        let pts: Vec<(f64, f64)> = (0..xs.len())
                            .filter(|&i| {
                                phase.as_ref().is_none_or(|want| {
                                    phases.as_ref().is_some_and(|p| p[i] == want.as_str())
                                }) && class.as_ref().is_none_or(|k| Some(k[i]) == *cl)
                                    && metric_col
                                        .as_ref()
                                        .is_none_or(|m| Some(m[i]) == first_metric)
                            })
                            .filter_map(|i| Some((xs[i]?, ys[i]?)))
                            .collect();
                        if pts.is_empty() {
                            continue;
                        }
                        let mut name = if f.steps.len() > 1 {
                            format!("{} {}", label_of(exp, st), names::name(c))
                        } else {
                            names::name(c)
                        };
                        if let Some(k) = cl.filter(|_| classes.len() > 1) {
                            name += &format!(" ({k})");
                        }
                        chart
                            .series
                            .push(Series::new(&name, super::downsample(pts)));
                    }
                }
            }
            (!chart.series.is_empty()).then(|| (chart.svg(), caption))
        }
        FigureKind::Capacity => {
            let mut chart = LineChart::new(
                &f.id,
                &f.title,
                &names::name("offered_ops_per_s"),
                "latency from intended start (log scale)",
            )
            .latency_y();
            for st in &f.steps {
                let Some(j) = read_json(&steps.join(st).join("capacity.json")) else {
                    continue;
                };
                let mut pts: Vec<&Value> = j["points"].as_array().into_iter().flatten().collect();
                pts.sort_by(|a, b| {
                    a["offered_ops_per_s"]
                        .as_f64()
                        .partial_cmp(&b["offered_ops_per_s"].as_f64())
                        .unwrap_or(std::cmp::Ordering::Equal)
                });
                for (key, name) in [("p50_us", "median"), ("mean_us", "mean")] {
                    let xy: Vec<(f64, f64)> = pts
                        .iter()
                        .filter_map(|p| Some((p["offered_ops_per_s"].as_f64()?, p[key].as_f64()?)))
                        .collect();
                    let mut s = Series::new(&format!("{} {name}", label_of(exp, st)), xy);
                    s.markers = true;
                    s.dashed = key == "mean_us";
                    chart.series.push(s);
                }
                if let Some(cap) = j["capacity_ops_per_s"].as_f64() {
                    let ge = if j["capacity_bound"].as_str() == Some("lower") {
                        " ≥"
                    } else {
                        ""
                    };
                    chart
                        .vlines
                        .push((cap, format!("{} capacity{ge}", label_of(exp, st))));
                }
            }
            chart.hlines.push((1000.0, "1 ms".into()));
            (!chart.series.is_empty()).then(|| (chart.svg(), caption))
        }
        FigureKind::Pressure => {
            let mut chart = LineChart::new(
                &f.id,
                &f.title,
                "rank (w1..w25 sorted by pressure)",
                "normalized pressure",
            );
            for st in &f.steps {
                let Some(j) = read_json(&steps.join(st).join("summary.json")) else {
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
                    let mut s = Series::new(&format!("{} {bs} KiB", label_of(exp, st)), pts);
                    s.markers = true;
                    chart.series.push(s);
                }
            }
            (!chart.series.is_empty()).then(|| (chart.svg(), caption))
        }
    }
}
