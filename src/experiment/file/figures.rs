//! The `[[figure]]` tables of an experiment file: which steps each draws and how (a sweep's
//! curve with confidence whiskers, bars per phase, a time series, the capacity curve, the
//! sorted pressure scale). Checked here against the steps; recorded in experiment.json
//! (`Figure` is report::experiment's) and drawn by report/html/experiment.rs from the steps'
//! own files. A new kind: a `FigureKind` variant, a parser below, a drawing function there.

use super::node::{Loc, Node, V};
use super::Step;
use crate::error::UsageError;
pub use crate::report::experiment::{Figure, FigureKind};

const FIGURE_KINDS: [&str; 5] = ["sweep", "phases", "series", "capacity", "pressure"];
const SERIES_FILES: [&str; 4] = [
    "intervals.csv",
    "telemetry.csv",
    "timeline.csv",
    "store_stats.csv",
];
const KEYS: [&str; 13] = [
    "id", "title", "caption", "kind", "steps", "metrics", "metric", "file", "columns", "point",
    "phase", "log_x", "log_y",
];

/// One `[[figure]]` table being read: its keys, and what complaints call it.
struct Table<'a> {
    loc: &'a Loc,
    node: &'a Node,
    what: String,
}

impl Table<'_> {
    fn err(&self, msg: String) -> UsageError {
        self.loc
            .err(self.node.line, format!("{}: {msg}", self.what))
    }

    fn string(&self, k: &str) -> Result<Option<String>, UsageError> {
        self.node
            .get(k)
            .map(|n| super::str_of(self.loc, n, k))
            .transpose()
    }

    fn strings(&self, k: &str) -> Result<Option<Vec<String>>, UsageError> {
        self.node
            .get(k)
            .map(|n| super::strs_of(self.loc, n, k))
            .transpose()
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.node.get(k).map(|n| &n.v), Some(V::Bool(true)))
    }
}

pub fn parse(
    loc: &Loc,
    root: &Node,
    scale: &str,
    steps: &[Step],
) -> Result<Vec<Figure>, UsageError> {
    let mut out = vec![];
    for (id, node) in super::id_tables(loc, root, "figure", scale, &KEYS)? {
        let t = Table {
            loc,
            node: &node,
            what: format!("figure '{id}'"),
        };
        let kind_name = t
            .string("kind")?
            .ok_or_else(|| t.err(format!("no kind (one of {})", FIGURE_KINDS.join(", "))))?;
        let steps_of = t
            .strings("steps")?
            .ok_or_else(|| t.err("no steps".into()))?;
        let commands = commands_of(&t, steps, &steps_of)?;
        let need = |cmds: &[&str]| needs_commands(&t, &kind_name, &steps_of, &commands, cmds);
        let kind = match kind_name.as_str() {
            "sweep" => need(&["sweep"]).and_then(|()| sweep(&t))?,
            "phases" => need(&["run", "suite", "pressure"]).and_then(|()| phases(&t))?,
            "series" => series(&t)?,
            "capacity" => need(&["capacity"]).map(|()| FigureKind::Capacity)?,
            "pressure" => need(&["pressure"]).map(|()| FigureKind::Pressure)?,
            other => {
                return Err(t.err(format!(
                    "unknown kind '{other}' (known: {})",
                    FIGURE_KINDS.join(", ")
                )))
            }
        };
        out.push(Figure {
            title: t.string("title")?.unwrap_or_else(|| id.clone()),
            caption: t.string("caption")?.unwrap_or_default(),
            id,
            steps: steps_of,
            kind,
            line: node.line,
        });
    }
    Ok(out)
}

/// The command of each step a figure names (each must exist).
fn commands_of(t: &Table, steps: &[Step], names: &[String]) -> Result<Vec<String>, UsageError> {
    let line = t.node.get("steps").map(|n| n.line).unwrap_or(t.node.line);
    names
        .iter()
        .map(|st| {
            Ok(super::step_named(t.loc, line, steps, &t.what, st)?
                .command
                .clone())
        })
        .collect()
}

/// Every step a figure draws is one of `cmds`.
fn needs_commands(
    t: &Table,
    kind: &str,
    names: &[String],
    commands: &[String],
    cmds: &[&str],
) -> Result<(), UsageError> {
    match names
        .iter()
        .zip(commands)
        .find(|(_, c)| !cmds.contains(&c.as_str()))
    {
        Some((st, c)) => Err(t.err(format!(
            "a {kind} figure draws {} steps; '{st}' is a {c} step",
            cmds.join(" or ")
        ))),
        None => Ok(()),
    }
}

fn sweep(t: &Table) -> Result<FigureKind, UsageError> {
    let metrics = match t.node.get("metrics").or(t.node.get("metric")) {
        Some(n) => super::strs_of(t.loc, n, "metrics")?,
        None => return Err(t.err("no metrics (e.g. \"run.throughput_ops_per_s\")".into())),
    };
    Ok(FigureKind::Sweep {
        metrics,
        log_x: t.flag("log_x"),
        log_y: t.flag("log_y"),
    })
}

fn phases(t: &Table) -> Result<FigureKind, UsageError> {
    Ok(FigureKind::Phases {
        phase: t.string("phase")?,
        metric: t
            .string("metric")?
            .ok_or_else(|| t.err("no metric".into()))?,
    })
}

fn series(t: &Table) -> Result<FigureKind, UsageError> {
    let file = t.string("file")?.unwrap_or_else(|| "telemetry.csv".into());
    if !SERIES_FILES.contains(&file.as_str()) {
        return Err(t.err(format!(
            "file '{file}': expected one of {}",
            SERIES_FILES.join(", ")
        )));
    }
    Ok(FigureKind::Series {
        file,
        columns: t
            .strings("columns")?
            .ok_or_else(|| t.err("no columns".into()))?,
        point: t.string("point")?,
        phase: t.string("phase")?,
    })
}
