//! The paper's findings, checked against this run: each `[[finding]]` names the claim, where
//! the paper states it, the paper's value, an expression over the steps' results that gives
//! this run's value, and the comparison that counts as reproducing it. The verdict is computed,
//! never written by hand: reproduced, not reproduced, inconclusive (the value is a bound, or
//! noisy, on both sides of the comparison — see below), cannot be tested here (the machine
//! lacks what the finding needs — measured power, hardware counters, cores, devices, hosts —
//! and says which), or not measured (a step did not complete).
//!
//! A value carries the interval its true value lies in (expr.rs): a capacity that is only
//! "≥ X", a sweep point's repeats, identical steps that disagree (noise.rs). The comparison is
//! decided only when it holds for the whole interval (reproduced) or for none of it (not
//! reproduced); otherwise the verdict is inconclusive and says which bound or noise left it
//! open. An exact value within 0.5 % of the threshold is inconclusive too: a ratio of 1.00×
//! cannot reproduce a claim of a difference when nothing tells a single run's noise apart.

use super::expr::{self, Val};
use super::node::{Loc, Node, V};
use super::results::{interval_text, Results};
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
        let have = crate::machine::cpu_count();
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
    /// The interval the true value lies in, when it is not exact (null for an open side).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<(f64, f64)>,
    pub estimate: bool,
    pub expression: String,
    pub expect: String,
    /// reproduced, not reproduced, inconclusive, cannot be tested here, not measured
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

/// A value within this share of its threshold is the threshold, to what one run can show.
const TIE: f64 = 0.005;

/// The verdict on `v` against `op x`, with why.
pub fn decide(v: &Val, op: &str, x: f64) -> (&'static str, String) {
    let expect = format!("{op} {}", short(x));
    if v.is_exact() {
        if x != 0.0 && (v.v - x).abs() <= TIE * x.abs() {
            return (
                "inconclusive",
                format!(
                    "{} is the threshold {} itself to within {} %; with no noise measured, one run cannot show a difference this small",
                    sig(v.v),
                    sig(x),
                    TIE * 100.0
                ),
            );
        }
        return if holds(v.v, op, x) {
            ("reproduced", format!("{} {expect}", sig(v.v)))
        } else {
            ("not reproduced", format!("{} is not {expect}", sig(v.v)))
        };
    }
    // The comparisons are monotone: the interval's ends decide for all of it.
    let (all, none) = if op.starts_with('>') {
        (holds(v.lo, op, x), !holds(v.hi, op, x))
    } else {
        (holds(v.hi, op, x), !holds(v.lo, op, x))
    };
    let range = interval_text(v.lo, v.hi);
    let because = v.why.join("; ");
    if all {
        (
            "reproduced",
            format!("{} {expect} over all of {range} ({because})", sig(v.v)),
        )
    } else if none {
        (
            "not reproduced",
            format!(
                "{} is not {expect} anywhere in {range} ({because})",
                sig(v.v)
            ),
        )
    } else {
        (
            "inconclusive",
            format!("the value lies in {range}, on both sides of {expect}: {because}",),
        )
    }
}

pub const VERDICTS: [&str; 5] = [
    "reproduced",
    "not reproduced",
    "inconclusive",
    "cannot be tested here",
    "not measured",
];

/// "2 reproduced, 0 not reproduced, 3 inconclusive, 1 cannot be tested here, 0 not measured".
pub fn counts(checked: &[Checked]) -> String {
    let parts: Vec<String> = VERDICTS
        .iter()
        .map(|v| format!("{} {v}", checked.iter().filter(|c| c.verdict == *v).count()))
        .collect();
    format!("Verdicts: {}.", parts.join(", "))
}

/// One line on identical steps: what they gave and how far apart.
pub fn disagreement_text(d: &super::noise::Disagreement) -> String {
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

pub fn check(exp: &Experiment, results: &Results) -> Vec<Checked> {
    exp.findings
        .iter()
        .map(|f| {
            let got = f.value.eval(results);
            let (value, estimate) = match &got {
                Ok(v) => (Some(v.v), v.estimate),
                Err(_) => (None, false),
            };
            let interval = got
                .as_ref()
                .ok()
                .filter(|v| !v.is_exact())
                .map(|v| (v.lo, v.hi));
            let lacking: Vec<String> = f
                .needs
                .iter()
                .filter_map(|n| missing(n, exp, estimate))
                .collect();
            let expect = format!("{} {}", f.expect.0, f.expect.1);
            let (verdict, why) = if !lacking.is_empty() {
                ("cannot be tested here", lacking.join("; "))
            } else {
                match &got {
                    Err(e) => ("not measured", e.clone()),
                    Ok(v) => decide(v, &f.expect.0, f.expect.1),
                }
            };
            Checked {
                id: f.id.clone(),
                claim: f.claim.clone(),
                source: f.source.clone(),
                paper: f.paper.clone(),
                unit: f.unit.clone(),
                value,
                interval,
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

/// `sig` without trailing zeros: "400" rather than "400.0" where a bound is printed.
pub fn short(x: f64) -> String {
    let s = sig(x);
    if s.contains('.') && !s.contains('e') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
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

/// findings.md: one line per finding, then how each was computed.
pub fn markdown(exp: &Experiment, checked: &[Checked], res: &Results, when: &str) -> String {
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
    let _ = writeln!(out, "{}\n", counts(checked));
    if !res.identical.is_empty() {
        let _ = writeln!(
            out,
            "Identical steps (the same command, run more than once: their disagreement is noise, and comparisons on them must exceed it):\n"
        );
        for d in &res.identical {
            let _ = writeln!(out, "- {}", disagreement_text(d));
        }
        let _ = writeln!(out);
    }
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
