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
use super::{step_named, Finding, Step};
use crate::error::UsageError;
use crate::report::experiment::{
    counts, disagreement_text, interval_text, paper_text, short, sig, value_text, Checked, Facts,
    FindingSpec, PaperValue, Results, State, Verdict,
};
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

/// What the runs a finding reads lacked for a need, if anything: judged from what they recorded
/// (`facts`, one per step the value reads), so the verdict is the same wherever it is made.
fn missing(need: &str, facts: &[&Facts], devices: usize, estimate: bool) -> Option<String> {
    let at_least = |p: &str| need.strip_prefix(p).and_then(|n| n.parse::<usize>().ok());
    if need == "measured-power" {
        return estimate.then(|| "power here is an estimate from a model (no RAPL, no meter on the machine that ran it: kvmeter doctor), so ops/J is not measured".into());
    }
    if need == "counters" {
        return facts
            .iter()
            .find_map(|f| f.counters_unavailable.as_ref())
            .map(|why| format!("no hardware counters where it ran ({why})"));
    }
    if need == "nvme" {
        return facts
            .iter()
            .any(|f| f.nvme == Some(false))
            .then(|| "its data was not on an NVMe device".into());
    }
    if let Some(n) = at_least("cores>=") {
        let have = facts.iter().filter_map(|f| f.cpus).min()?;
        return (have < n).then(|| {
            format!("needs {n} or more cores to show; the machine that ran it had {have}")
        });
    }
    if let Some(n) = at_least("devices>=") {
        return (devices < n).then(|| {
            format!("needs {n} devices (give one --data-dir per device); this run had {devices}")
        });
    }
    if let Some(n) = at_least("hosts>=") {
        return (n > 1).then(|| format!("needs {n} hosts; kvmeter ran everything on this one"));
    }
    None
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
pub fn decide(v: &Val, op: &str, x: f64) -> (Verdict, String) {
    let expect = format!("{op} {}", short(x));
    if v.is_exact() {
        if x != 0.0 && (v.v - x).abs() <= TIE * x.abs() {
            return (
                Verdict::Inconclusive,
                format!(
                    "{} is the threshold {} itself to within {} %; with no noise measured, one run cannot show a difference this small",
                    sig(v.v),
                    sig(x),
                    TIE * 100.0
                ),
            );
        }
        return if holds(v.v, op, x) {
            (Verdict::Reproduced, format!("{} {expect}", sig(v.v)))
        } else {
            (
                Verdict::NotReproduced,
                format!("{} is not {expect}", sig(v.v)),
            )
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
            Verdict::Reproduced,
            format!("{} {expect} over all of {range} ({because})", sig(v.v)),
        )
    } else if none {
        (
            Verdict::NotReproduced,
            format!(
                "{} is not {expect} anywhere in {range} ({because})",
                sig(v.v)
            ),
        )
    } else {
        (
            Verdict::Inconclusive,
            format!("the value lies in {range}, on both sides of {expect}: {because}",),
        )
    }
}

/// Each finding's verdict on `results`; `devices` is how many data directories the
/// experiment was given.
pub fn check(findings: &[Finding], devices: usize, results: &Results) -> Vec<Checked> {
    findings
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
            let mut read: Vec<&str> = f.value.refs().into_iter().map(|(s, _)| s).collect();
            read.dedup();
            let facts: Vec<&Facts> = read
                .iter()
                .filter_map(|s| results.steps.get(*s))
                .map(|s| &s.facts)
                .collect();
            let lacking: Vec<String> = f
                .needs
                .iter()
                .filter_map(|n| missing(n, &facts, devices, estimate))
                .collect();
            let (verdict, why) = if !lacking.is_empty() {
                (Verdict::CannotBeTested, lacking.join("; "))
            } else {
                match &got {
                    Err(e) => (Verdict::NotMeasured, e.clone()),
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
                expect: expect_text(f),
                verdict,
                why,
                note: f.note.clone(),
            }
        })
        .collect()
}

/// The comparison as findings.json and experiment.json write it ("> 1").
fn expect_text(f: &Finding) -> String {
    format!("{} {}", f.expect.0, f.expect.1)
}

/// A finding as experiment.json records it.
pub fn spec_of(f: &Finding) -> FindingSpec {
    FindingSpec {
        id: f.id.clone(),
        claim: f.claim.clone(),
        source: f.source.clone(),
        paper: f.paper.clone(),
        unit: f.unit.clone(),
        value: f.value_text.clone(),
        expect: expect_text(f),
        needs: f.needs.clone(),
        note: f.note.clone(),
    }
}

/// A finding back from experiment.json: its expression and comparison parsed again (text
/// only; the steps it names were checked when the experiment started).
pub fn from_spec(s: &FindingSpec) -> Result<Finding, String> {
    let value = expr::parse(&s.value).map_err(|e| format!("finding '{}': value: {e}", s.id))?;
    let expect = parse_expect(&s.expect).ok_or_else(|| {
        format!(
            "finding '{}': expect: '{}' is no comparison",
            s.id, s.expect
        )
    })?;
    Ok(Finding {
        id: s.id.clone(),
        claim: s.claim.clone(),
        source: s.source.clone(),
        paper: s.paper.clone(),
        unit: s.unit.clone(),
        value,
        value_text: s.value.clone(),
        expect,
        needs: s.needs.clone(),
        note: s.note.clone(),
        line: 0,
    })
}

/// Text from the experiment file as Markdown shows it: no HTML tag can open (a Markdown
/// viewer passes raw HTML through; report.html escapes it too): `<` becomes `&lt;`, which a
/// viewer shows as `<`, while `>` in a verdict ("5.00 is not > 10") stays as it reads; line
/// breaks become spaces.
fn md(s: &str) -> String {
    s.replace('<', "&lt;").replace('\n', " ")
}

/// Text inside a Markdown code span: a backtick would end the span early, so it becomes '.
fn code(s: &str) -> String {
    s.replace('`', "'").replace('\n', " ")
}

/// findings.md: one line per finding, then how each was computed.
pub fn markdown(st: &State, checked: &[Checked], res: &Results, when: &str) -> String {
    let mut out = String::new();
    // The machine the steps recorded (their manifests), not the one writing this file.
    let machine = st
        .steps
        .iter()
        .filter_map(|s| res.steps.get(&s.name))
        .find_map(|s| s.facts.machine.clone())
        .unwrap_or_else(|| "not recorded (no step wrote a manifest)".into());
    let _ = writeln!(out, "# Findings: {}\n", md(&st.title));
    let _ = writeln!(out, "Paper: {}  ", md(&st.paper));
    let _ = writeln!(
        out,
        "Scale: {}{}  ",
        md(&st.scale),
        if st.scale_about.is_empty() {
            String::new()
        } else {
            format!(" ({})", md(&st.scale_about))
        }
    );
    let _ = writeln!(out, "Machine: {}, {when}  ", md(&machine));
    let _ = writeln!(out, "{}\n", counts(checked));
    if !res.identical.is_empty() {
        let _ = writeln!(
            out,
            "Identical steps (the same command, run more than once: their disagreement is noise, and comparisons on them must exceed it):\n"
        );
        for d in &res.identical {
            let _ = writeln!(out, "- {}", md(&disagreement_text(d)));
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "| # | finding | source | paper | this run | verdict |");
    let _ = writeln!(out, "|---|---|---|---:|---:|---|");
    let cell = |s: &str| md(s).replace('|', "\\|");
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
            code(&c.id),
            code(&c.expression),
            md(&c.expect),
            if c.note.is_empty() {
                String::new()
            } else {
                format!(" {}", md(&c.note))
            }
        );
    }
    out
}
