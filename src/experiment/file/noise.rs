//! Identical steps as a measure of noise. Two steps of one experiment that run the same
//! command (the same flags in any order, on the same device) measure the same thing: how far
//! their figures disagree is noise kvmeter can see without repeats. papers/002's presets run
//! update-heavy twice (its mix and replication factor 1); at smoke scale the two gave 3,664
//! and 128,943 ops/s, and findings comparing either against other steps were still decided.
//!
//! Each figure of such a step is widened by the group's disagreement on that figure
//! (value ± (highest − lowest)): a comparison on them is decided only when it is larger than
//! what the same command gave twice. The disagreement on throughput and capacity is listed in
//! results.json and findings.md.

use super::Step;
use crate::report::experiment::{short, Bound, Disagreement, Results, StepState};
use std::collections::BTreeMap;
use std::path::Path;

/// What identical steps are told apart by: a step of the file, or its record in
/// experiment.json (what `kvmeter report` has).
pub trait StepCommand {
    fn name(&self) -> &str;
    fn command(&self) -> &str;
    fn args(&self) -> &[String];
    fn device(&self) -> Option<&Path>;
}

impl StepCommand for Step {
    fn name(&self) -> &str {
        &self.name
    }
    fn command(&self) -> &str {
        &self.command
    }
    fn args(&self) -> &[String] {
        &self.args
    }
    fn device(&self) -> Option<&Path> {
        self.device.as_deref()
    }
}

impl StepCommand for StepState {
    fn name(&self) -> &str {
        &self.name
    }
    fn command(&self) -> &str {
        &self.command
    }
    fn args(&self) -> &[String] {
        &self.args
    }
    fn device(&self) -> Option<&Path> {
        self.device.as_deref()
    }
}

/// The command a step runs, independent of the order of its flags: each flag with its values,
/// sorted, after the command and the device.
pub fn normalized(step: &impl StepCommand) -> String {
    let mut groups: Vec<String> = vec![];
    // A flag is "--name" or a one-letter "-P"; anything else is the value of the flag before.
    let flag = |a: &str| {
        a.starts_with("--")
            || (a.len() == 2 && a.starts_with('-') && a.as_bytes()[1].is_ascii_alphabetic())
    };
    for a in step.args() {
        match groups.last_mut() {
            Some(g) if !flag(a) => {
                g.push(' ');
                g.push_str(a);
            }
            _ => groups.push(a.clone()),
        }
    }
    groups.sort();
    format!(
        "{} [{}] {}",
        step.command(),
        step.device()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        groups.join(" ")
    )
}

/// The indices of steps that run the same command, in groups of two or more.
pub fn groups<S: StepCommand>(steps: &[S]) -> Vec<Vec<usize>> {
    let mut by: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, s) in steps.iter().enumerate() {
        by.entry(normalized(s)).or_default().push(i);
    }
    let mut out: Vec<Vec<usize>> = by.into_values().filter(|g| g.len() > 1).collect();
    out.sort();
    out
}

/// Whether a figure is a headline worth listing: throughput or capacity.
fn headline(key: &str) -> bool {
    key.ends_with("throughput_ops_per_s") || key == "capacity_ops_per_s"
}

/// Widens the figures of identical completed steps by their disagreement and records it.
pub fn apply<S: StepCommand>(steps: &[S], r: &mut Results) {
    for g in groups(steps) {
        let names: Vec<String> = g
            .iter()
            .map(|&i| steps[i].name().to_string())
            .filter(|n| r.steps.get(n).is_some_and(|s| s.status == "completed"))
            .collect();
        if names.len() < 2 {
            continue;
        }
        let first = &r.steps[&names[0]];
        let mut bounds: Vec<(String, Bound)> = vec![];
        let mut found = vec![];
        for (key, _, _) in &first.figures {
            let values: Vec<f64> = names
                .iter()
                .filter_map(|n| {
                    r.steps[n]
                        .figures
                        .iter()
                        .find(|(k, _, _)| k == key)
                        .map(|f| f.1)
                })
                .collect();
            if values.len() != names.len() {
                continue;
            }
            let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let d = hi - lo;
            if headline(key) {
                found.push(Disagreement {
                    steps: names.clone(),
                    command: String::new(),
                    key: key.clone(),
                    values: values.clone(),
                    spread_pct: if lo > 0.0 { 100.0 * d / lo } else { f64::NAN },
                });
            }
            if d <= 0.0 || !d.is_finite() {
                continue;
            }
            let why = format!(
                "steps {} ran the same command and their {key} disagree ({}): differences up to ±{} are noise",
                names
                    .iter()
                    .map(|n| format!("'{n}'"))
                    .collect::<Vec<_>>()
                    .join(" and "),
                values
                    .iter()
                    .map(|v| short(*v))
                    .collect::<Vec<_>>()
                    .join(" against "),
                short(d)
            );
            for (n, v) in names.iter().zip(&values) {
                bounds.push((
                    n.clone(),
                    Bound {
                        key: key.clone(),
                        low: v - d,
                        high: v + d,
                        why: why.clone(),
                    },
                ));
            }
        }
        for (n, b) in bounds {
            if let Some(s) = r.steps.get_mut(&n) {
                s.bounds.push(b);
            }
        }
        let command = steps[g[0]].command().to_string() + " " + &steps[g[0]].args().join(" ");
        r.identical.extend(found.into_iter().map(|d| Disagreement {
            command: command.clone(),
            ..d
        }));
    }
}
