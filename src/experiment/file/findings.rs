//! The paper's findings, checked against this run: each `[[finding]]` names the claim, where
//! the paper states it, the paper's value, an expression over the steps' results that gives
//! this run's value, and the comparison that counts as reproducing it. The verdict is computed,
//! never written by hand: reproduced, not reproduced, cannot be tested here (the machine lacks
//! what the finding needs — measured power, hardware counters, cores, devices, hosts — and
//! says which), or not measured (a step did not complete).

use super::expr;
use super::node::{Loc, Node, V};
use super::results::Results;
use super::{step_named, Experiment, Finding, PaperValue, Step};
use crate::error::UsageError;
use std::fmt::Write as _;

const NEEDS: &str = "measured-power, counters, nvme, cores>=N, devices>=N, hosts>=N";
const OPS: [&str; 4] = [">=", "<=", ">", "<"];

fn check_need(loc: &Loc, line: usize, need: &str) -> Result<(), UsageError> {
    let ok = match need {
        "measured-power" | "counters" | "nvme" => true,
        _ => ["cores>=", "devices>=", "hosts>="].iter().any(|p| {
            need.strip_prefix(p)
                .is_some_and(|n| n.parse::<usize>().is_ok_and(|n| n >= 1))
        }),
    };
    if ok {
        Ok(())
    } else {
        Err(loc.err(line, format!("needs: unknown '{need}' (known: {NEEDS})")))
    }
}

fn parse_expect(text: &str) -> Option<(String, f64)> {
    let t = text.trim();
    OPS.iter().find_map(|op| {
        let rest = t.strip_prefix(op)?;
        rest.trim().parse::<f64>().ok().map(|v| (op.to_string(), v))
    })
}

/// The `[[finding]]` tables, checked: every reference names an existing step (and, for a
/// sweep, one of its points or a wildcard).
pub fn parse(
    loc: &Loc,
    root: &Node,
    scale: &str,
    steps: &[Step],
) -> Result<Vec<Finding>, UsageError> {
    let mut out = vec![];
    for (id, f) in super::id_tables(
        loc,
        root,
        "finding",
        scale,
        &[
            "id", "claim", "source", "paper", "unit", "value", "expect", "needs", "note",
        ],
    )? {
        let s = |k: &str| -> Result<Option<String>, UsageError> {
            f.get(k).map(|n| super::str_of(loc, n, k)).transpose()
        };
        let what = format!("finding '{id}'");
        let paper = match f.get("paper") {
            Some(n) => match (&n.v, n.number()) {
                (_, Some(x)) => PaperValue::Number(x),
                (V::Str(t), _) => PaperValue::Text(t.clone()),
                _ => {
                    return Err(loc.err(
                        n.line,
                        format!("{what}: paper: expected a number or a string"),
                    ))
                }
            },
            None => {
                return Err(loc.err(
                    f.line,
                    format!("{what}: no paper value (the number or words the paper gives)"),
                ))
            }
        };
        let vnode = f.get("value").ok_or_else(|| {
            loc.err(
                f.line,
                format!("{what}: no value (an expression over the steps' results)"),
            )
        })?;
        let value_text = super::str_of(loc, vnode, "value")?;
        let value = expr::parse(&value_text)
            .map_err(|e| loc.err(vnode.line, format!("{what}: value: {e}")))?;
        for (step, key) in value.refs() {
            let st = step_named(loc, vnode.line, steps, &what, step)?;
            check_key(loc, vnode.line, &what, st, key)?;
        }
        let enode = f
            .get("expect")
            .ok_or_else(|| loc.err(f.line, format!("{what}: no expect (e.g. \"> 1\")")))?;
        let expect = parse_expect(&super::str_of(loc, enode, "expect")?).ok_or_else(|| {
            loc.err(
                enode.line,
                format!("{what}: expect: expected a comparison such as \"> 1\" or \"<= 0.5\""),
            )
        })?;
        let needs = f
            .get("needs")
            .map(|n| super::strs_of(loc, n, "needs"))
            .transpose()?
            .unwrap_or_default();
        for n in &needs {
            check_need(loc, f.get("needs").map(|x| x.line).unwrap_or(f.line), n)?;
        }
        out.push(Finding {
            claim: s("claim")?.ok_or_else(|| loc.err(f.line, format!("{what}: no claim")))?,
            source: s("source")?.unwrap_or_default(),
            unit: s("unit")?.unwrap_or_default(),
            note: s("note")?.unwrap_or_default(),
            id,
            paper,
            value,
            value_text,
            expect,
            needs,
            line: f.line,
        });
    }
    Ok(out)
}

/// A sweep reference names one of the sweep's points (`param=value/...`) or uses `*`.
fn check_key(loc: &Loc, line: usize, what: &str, st: &Step, key: &str) -> Result<(), UsageError> {
    let crate::experiment::job::Job::Sweep { params, .. } = &st.job else {
        return Ok(());
    };
    let Some((label, _)) = key.split_once('/') else {
        return Err(loc.err(line, format!("{what}: {{{}:{key}}}: a sweep's figures are <point>/<phase>.<figure>, e.g. {}=…/run.throughput_ops_per_s or */run.throughput_ops_per_s", st.name, params[0].name)));
    };
    if label.contains('*') {
        return Ok(());
    }
    let points: Vec<String> = crate::experiment::sweep::points(params)
        .iter()
        .map(|p| {
            p.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    if !points.iter().any(|p| p == label) {
        return Err(loc.err(
            line,
            format!(
                "{what}: step '{}' has no point '{label}' (points: {})",
                st.name,
                points.join(" ")
            ),
        ));
    }
    Ok(())
}

/// What the machine lacks for a need, if anything.
fn missing(need: &str, exp: &Experiment, estimate: bool) -> Option<String> {
    let at_least = |p: &str| need.strip_prefix(p).and_then(|n| n.parse::<usize>().ok());
    if need == "measured-power" {
        return estimate.then(|| "power here is an estimate from a model (no RAPL, no meter on this machine: kvmeter doctor), so ops/J is not measured".into());
    }
    if need == "counters" {
        let c = crate::telemetry::counters::Counters::open();
        return c
            .unavailable
            .get("instructions")
            .map(|why| format!("no hardware counters here ({why})"));
    }
    if need == "nvme" {
        let any = std::fs::read_dir("/sys/block")
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with("nvme"))
            })
            .unwrap_or(false);
        return (!any).then(|| "no NVMe device on this machine".into());
    }
    if let Some(n) = at_least("cores>=") {
        let have = crate::experiment::sweep::cpus() as usize;
        return (have < n)
            .then(|| format!("needs {n} or more cores to show; this machine has {have}"));
    }
    if let Some(n) = at_least("devices>=") {
        let have = exp.devices.len();
        return (have < n).then(|| {
            format!("needs {n} devices (give one --data-dir per device); this run had {have}")
        });
    }
    if let Some(n) = at_least("hosts>=") {
        return (n > 1).then(|| format!("needs {n} hosts; kvmeter ran everything on this one"));
    }
    None
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Checked {
    pub id: String,
    pub claim: String,
    pub source: String,
    pub paper: PaperValue,
    pub unit: String,
    pub value: Option<f64>,
    pub estimate: bool,
    pub expression: String,
    pub expect: String,
    /// reproduced, not reproduced, cannot be tested here, not measured
    pub verdict: String,
    pub why: String,
    pub note: String,
}

fn holds(v: f64, op: &str, x: f64) -> bool {
    match op {
        ">" => v > x,
        ">=" => v >= x,
        "<" => v < x,
        _ => v <= x,
    }
}

pub fn check(exp: &Experiment, results: &Results) -> Vec<Checked> {
    exp.findings
        .iter()
        .map(|f| {
            let got = f.value.eval(results);
            let (value, estimate) = match &got {
                Ok(v) => (Some(v.v), v.estimate),
                Err(_) => (None, false),
            };
            let lacking: Vec<String> = f
                .needs
                .iter()
                .filter_map(|n| missing(n, exp, estimate))
                .collect();
            let expect = format!("{} {}", f.expect.0, f.expect.1);
            let (verdict, why) = if !lacking.is_empty() {
                ("cannot be tested here", lacking.join("; "))
            } else {
                match (&got, value) {
                    (Err(e), _) => ("not measured", e.clone()),
                    (Ok(_), Some(v)) if holds(v, &f.expect.0, f.expect.1) => {
                        ("reproduced", format!("{} {expect}", sig(v)))
                    }
                    (Ok(_), Some(v)) => ("not reproduced", format!("{} is not {expect}", sig(v))),
                    _ => unreachable!(),
                }
            };
            Checked {
                id: f.id.clone(),
                claim: f.claim.clone(),
                source: f.source.clone(),
                paper: f.paper.clone(),
                unit: f.unit.clone(),
                value,
                estimate,
                expression: f.value_text.clone(),
                expect,
                verdict: verdict.to_string(),
                why,
                note: f.note.clone(),
            }
        })
        .collect()
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

pub fn paper_text(p: &PaperValue, unit: &str) -> String {
    match p {
        PaperValue::Number(x) => format!("{} {unit}", sig(*x)).trim().to_string(),
        PaperValue::Text(t) => t.clone(),
    }
}

pub fn value_text(c: &Checked) -> String {
    match c.value {
        Some(v) => format!(
            "{}{}",
            format!("{} {}", sig(v), c.unit).trim(),
            if c.estimate { " (ESTIMATE)" } else { "" }
        ),
        None => "—".into(),
    }
}

/// findings.md: one line per finding, then how each was computed.
pub fn markdown(exp: &Experiment, checked: &[Checked], when: &str) -> String {
    let mut out = String::new();
    let m = crate::machine::machine();
    let _ = writeln!(out, "# Findings: {}\n", exp.title);
    let _ = writeln!(out, "Paper: {}  ", exp.paper);
    let _ = writeln!(
        out,
        "Scale: {}{}  ",
        exp.scale,
        if exp.scale_about.is_empty() {
            String::new()
        } else {
            format!(" ({})", exp.scale_about)
        }
    );
    let _ = writeln!(
        out,
        "Machine: {} ({} logical CPUs, {}), {}  ",
        m.cpu_model, m.logical_cpus, m.virtualization, when
    );
    let count = |v: &str| checked.iter().filter(|c| c.verdict == v).count();
    let _ = writeln!(
        out,
        "Verdicts: {} reproduced, {} not reproduced, {} cannot be tested here, {} not measured.\n",
        count("reproduced"),
        count("not reproduced"),
        count("cannot be tested here"),
        count("not measured")
    );
    let _ = writeln!(out, "| # | finding | source | paper | this run | verdict |");
    let _ = writeln!(out, "|---|---|---|---:|---:|---|");
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    for (i, c) in checked.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | **{}**: {} |",
            i + 1,
            cell(&c.claim),
            cell(&c.source),
            cell(&paper_text(&c.paper, &c.unit)),
            cell(&value_text(c)),
            c.verdict,
            cell(&c.why)
        );
    }
    let _ = writeln!(out, "\n## How each value was computed\n");
    for (i, c) in checked.iter().enumerate() {
        let _ = writeln!(
            out,
            "{}. `{}` — this run's value is `{}` (results.json names every figure); reproduced when it is {}.{}",
            i + 1,
            c.id,
            c.expression,
            c.expect,
            if c.note.is_empty() {
                String::new()
            } else {
                format!(" {}", c.note)
            }
        );
    }
    out
}
