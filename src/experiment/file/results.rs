//! Every figure a finished step produced, as flat keys a finding or a figure can name, read
//! back from the step's own files (summary.json, sweep.json, capacity.json) so that each value
//! in findings.md traces to a run directory. results.json in the experiment directory lists
//! them all: it is the vocabulary of `{step:key}` references (docs/experiments.md).
//!
//! Keys:
//! - run, suite, pressure: `<phase>.<figure>` — the sweep's figures (throughput_ops_per_s,
//!   latency_p99_us, ops_per_joule, cpu_busy_pct, ipc, ...) and every number in the phase's
//!   summary by its JSON path (`run.ops.READ.latency_us.p99`, `run.pressure.steps.w5.
//!   normalized_pressure`, `run.faults.0.unavailable_s`).
//! - sweep: `<param>=<value>[,...]/<phase>.<figure>`, the mean over the point's repetitions.
//! - capacity: capacity_ops_per_s, upper_bound_ops_per_s, and
//!   max_p50_us_up_to_capacity / max_mean_us_up_to_capacity (the curve below the capacity).
//!
//! A figure that is not an exact value has an entry in its step's `bounds`: the interval its
//! true value lies in and why. A capacity search that ended with every rate passing gives
//! "capacity ≥ X" ([X, ∞)); one whose lowest rate failed "≤ X"; one that found both ends the
//! bracket between them. A sweep point run more than once spans its repeats' lowest to highest
//! value, and identical steps (noise.rs) widen each other's figures by their disagreement.
//!
//! The model (`Results`, `StepResults`, `Bound`) is report::experiment's, beside the rest of
//! the experiment directory's; each step also records `facts_of` its runs, by which a
//! finding's `needs` is judged.

use super::expr::{matches, Lookup, Val};
use crate::report::experiment::{facts_of, short as sig, Bound, Results, StepResults};
use crate::report::html::sweep_points;
use serde_json::Value;
use std::path::Path;

/// (key, value, from an estimate) in the step's order.
type Figures = Vec<(String, f64, bool)>;

impl Lookup for Results {
    fn find(&self, step: &str, pattern: &str) -> Result<Vec<Val>, String> {
        let s = self
            .steps
            .get(step)
            .ok_or_else(|| format!("step '{step}' has no results"))?;
        if s.status != "completed" {
            return Err(format!("step '{step}' {}", s.status));
        }
        Ok(s.figures
            .iter()
            .filter(|(k, _, _)| matches(pattern, k))
            .map(|(k, v, e)| {
                let (lo, hi, why) = s.interval(k, *v);
                Val {
                    lo,
                    hi,
                    why,
                    ..Val::exact(*v, *e)
                }
            })
            .collect())
    }
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Numbers under `v`, by dotted path. Arrays of objects are keyed by their `step`, `name` or
/// `role` field where they have one, else by index.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, f64)>) {
    match v {
        Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                out.push((prefix.to_string(), x));
            }
        }
        Value::Bool(b) => out.push((prefix.to_string(), if *b { 1.0 } else { 0.0 })),
        Value::Object(m) => {
            for (k, x) in m {
                flatten(&format!("{prefix}.{k}"), x, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let id = ["step", "name", "role"]
                    .iter()
                    .find_map(|f| x.get(f).and_then(Value::as_str))
                    .map(str::to_string)
                    .unwrap_or_else(|| i.to_string());
                flatten(&format!("{prefix}.{id}"), x, out);
            }
        }
        _ => {}
    }
}

/// Is this figure from a power estimate rather than a meter?
fn energy_key(k: &str) -> bool {
    k.contains("ops_per_joule") || k.contains("joules_per_op") || k.contains(".energy.")
}

fn plan_figures(dir: &Path) -> Option<(String, Figures, Vec<Bound>)> {
    let text = std::fs::read_to_string(dir.join("summary.json")).ok()?;
    let s: crate::report::Summary = serde_json::from_str(&text).ok()?;
    let raw: Value = serde_json::from_str(&text).ok()?;
    let mut out = vec![];
    for (i, p) in s.phases.iter().enumerate() {
        if p.kind == crate::plan::PhaseKind::Clear {
            continue;
        }
        let estimate = p.energy.as_ref().is_some_and(|e| e.estimate);
        for (k, v) in crate::experiment::sweep::metrics_of(p) {
            let k = k.trim_end_matches("_estimate").to_string();
            out.push((format!("{}.{k}", p.name), v, estimate && energy_key(&k)));
        }
        let mut flat = vec![];
        if let Some(ph) = raw.get("phases").and_then(|a| a.get(i)) {
            flatten(&p.name, ph, &mut flat);
        }
        // The summary's own throughput_ops_per_s is the alias's twin: one key, one figure.
        let known: std::collections::HashSet<String> =
            out.iter().map(|(k, _, _)| k.clone()).collect();
        out.extend(
            flat.into_iter()
                .filter(|(k, _)| !known.contains(k))
                .map(|(k, v)| (k.clone(), v, estimate && energy_key(&k))),
        );
    }
    Some((s.status.name().to_string(), out, vec![]))
}

/// A figure of several runs spans its runs' lowest to highest value: what kvmeter can see of
/// the noise (a 95 % interval of two or three runs is wider than anything it could decide).
fn repeats_bound(key: &str, spread: &Value) -> Option<Bound> {
    let xs: Vec<f64> = spread["values"]
        .as_array()?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    if xs.len() < 2 {
        return None;
    }
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo < hi).then(|| Bound {
        key: key.to_string(),
        low: lo,
        high: hi,
        why: format!(
            "{key}: its {} repeats range {}–{}",
            xs.len(),
            crate::report::experiment::sig(lo),
            crate::report::experiment::sig(hi)
        ),
    })
}

fn sweep_figures(dir: &Path) -> Option<(String, Figures, Vec<Bound>)> {
    let j = read_json(&dir.join("sweep.json"))?;
    let mut out = vec![];
    let mut bounds = vec![];
    for (label, p) in sweep_points(&j) {
        for (phase, metrics) in p["phases"].as_object().into_iter().flatten() {
            for (m, spread) in metrics.as_object().into_iter().flatten() {
                if let Some(v) = spread["mean"].as_f64() {
                    let estimate = m.ends_with("_estimate");
                    let m = m.trim_end_matches("_estimate");
                    let key = format!("{label}/{phase}.{m}");
                    bounds.extend(repeats_bound(&key, spread));
                    out.push((key, v, estimate));
                }
            }
        }
    }
    let status = j["status"].as_str().unwrap_or("unknown").to_string();
    Some((status, out, bounds))
}

/// What a capacity search found, as an interval: `[lo, hi]` when it bracketed the capacity,
/// `[lo, ∞)` when every rate it tried passed, `[0, hi]` when even its lowest rate failed.
pub fn capacity_interval(j: &Value) -> Option<Bound> {
    let lo = j["capacity_ops_per_s"].as_f64();
    let hi = j["upper_bound_ops_per_s"].as_f64();
    let stopped = j["status"].as_str().unwrap_or("");
    let (low, high, why) = match (lo, hi) {
        (Some(l), Some(h)) => (
            l,
            h,
            format!(
                "the search brackets the capacity between {} (met the SLO) and {} ops/s (missed it)",
                sig(l),
                sig(h)
            ),
        ),
        (Some(l), None) => (
            l,
            f64::INFINITY,
            format!(
                "the capacity is only a lower bound, ≥ {} ops/s: every rate the search tried met the SLO ({})",
                sig(l),
                if stopped.contains("max-points") {
                    "it stopped at its point limit"
                } else {
                    "it reached its highest rate"
                }
            ),
        ),
        (None, Some(h)) => (
            0.0,
            h,
            format!(
                "the capacity is only an upper bound, ≤ {} ops/s: even the lowest rate the search tried missed the SLO",
                sig(h)
            ),
        ),
        (None, None) => return None,
    };
    Some(Bound {
        key: "capacity_ops_per_s".into(),
        low,
        high,
        why,
    })
}

fn capacity_figures(dir: &Path) -> Option<(String, Figures, Vec<Bound>)> {
    let j = read_json(&dir.join("capacity.json"))?;
    let mut out = vec![];
    let mut bounds = vec![];
    let cap_b = capacity_interval(&j);
    if let Some(b) = &cap_b {
        // The figure is the end the search established: the highest pass, or the lowest fail.
        let v = if b.high.is_finite() && j["capacity_ops_per_s"].is_null() {
            b.high
        } else {
            b.low
        };
        out.push(("capacity_ops_per_s".to_string(), v, false));
        bounds.push(b.clone());
    }
    for k in ["upper_bound_ops_per_s", "uncertainty_ops_per_s"] {
        if let Some(v) = j[k].as_f64() {
            out.push((k.to_string(), v, false));
        }
    }
    if let Some(cap) = j["capacity_ops_per_s"].as_f64() {
        let below: Vec<&Value> = j["points"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["offered_ops_per_s"].as_f64().is_some_and(|o| o <= cap))
            .collect();
        for (stat, key) in [
            ("p50_us", "max_p50_us_up_to_capacity"),
            ("mean_us", "max_mean_us_up_to_capacity"),
        ] {
            let m = below
                .iter()
                .filter_map(|p| p[stat].as_f64())
                .fold(f64::NAN, f64::max);
            if m.is_finite() {
                out.push((key.to_string(), m, false));
                // Below an open-ended capacity lie loads the search never tried.
                if cap_b.as_ref().is_some_and(|b| !b.high.is_finite()) {
                    bounds.push(Bound {
                        key: key.to_string(),
                        low: m,
                        high: f64::INFINITY,
                        why: format!(
                            "{key} is a lower bound: the capacity is ≥ {} ops/s, and the loads above it were never tried",
                            sig(cap)
                        ),
                    });
                }
            }
        }
    }
    let status = j["status"].as_str().unwrap_or("unknown").to_string();
    Some((status, out, bounds))
}

/// The figures of the step whose output directory is `dir`; `None` if it has none (never ran,
/// or died before writing any).
pub fn of_step(dir: &Path) -> Option<StepResults> {
    let (status, figures, bounds) = if dir.join("capacity.json").is_file() {
        capacity_figures(dir)?
    } else if dir.join("sweep.json").is_file() {
        sweep_figures(dir)?
    } else {
        plan_figures(dir)?
    };
    Some(StepResults {
        status: String::new(),
        detail: status,
        figures,
        bounds,
        facts: facts_of(dir),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn json_is_flattened_by_path_with_arrays_keyed_by_name() {
        let v = serde_json::json!({
            "a": 1, "b": {"c": 2.5, "d": "text"},
            "steps": [{"step": "w0", "x": 3}, {"step": "w1", "x": 4}],
            "faults": [{"y": 5}],
            "ok": true
        });
        let mut out = vec![];
        flatten("run", &v, &mut out);
        let m: BTreeMap<_, _> = out.into_iter().collect();
        assert_eq!(m["run.a"], 1.0);
        assert_eq!(m["run.b.c"], 2.5);
        assert_eq!(m["run.steps.w1.x"], 4.0);
        assert_eq!(m["run.faults.0.y"], 5.0);
        assert_eq!(m["run.ok"], 1.0);
        assert!(!m.contains_key("run.b.d"));
    }
}
