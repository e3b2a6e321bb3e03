//! The `[[figure]]` tables of an experiment file: which steps each draws and how (a sweep's
//! curve with confidence whiskers, bars per phase, a time series, the capacity curve, the
//! sorted pressure scale). Drawn by report/html/paper.rs from the steps' own files.

use super::node::{Loc, Node, V};
use super::Step;
use crate::error::UsageError;

const FIGURE_KINDS: [&str; 5] = ["sweep", "phases", "series", "capacity", "pressure"];
const SERIES_FILES: [&str; 3] = ["intervals.csv", "telemetry.csv", "timeline.csv"];

#[derive(Clone, Debug)]
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

#[derive(Clone, Debug)]
pub struct Figure {
    pub id: String,
    pub title: String,
    pub caption: String,
    pub steps: Vec<String>,
    pub kind: FigureKind,
    pub line: usize,
}

pub fn parse(
    loc: &Loc,
    root: &Node,
    scale: &str,
    steps: &[Step],
) -> Result<Vec<Figure>, UsageError> {
    let mut out = vec![];
    for (id, f) in super::id_tables(
        loc,
        root,
        "figure",
        scale,
        &[
            "id", "title", "caption", "kind", "steps", "metrics", "metric", "file", "columns",
            "point", "phase", "log_x", "log_y",
        ],
    )? {
        let s = |k: &str| -> Result<Option<String>, UsageError> {
            f.get(k).map(|n| super::str_of(loc, n, k)).transpose()
        };
        let what = format!("figure '{id}'");
        let kind_name = s("kind")?.ok_or_else(|| {
            loc.err(
                f.line,
                format!("{what}: no kind (one of {})", FIGURE_KINDS.join(", ")),
            )
        })?;
        let steps_of: Vec<String> = f
            .get("steps")
            .map(|n| super::strs_of(loc, n, "steps"))
            .transpose()?
            .ok_or_else(|| loc.err(f.line, format!("{what}: no steps")))?;
        let mut commands = vec![];
        for st in &steps_of {
            let line = f.get("steps").map(|n| n.line).unwrap_or(f.line);
            commands.push(
                super::step_named(loc, line, steps, &what, st)?
                    .command
                    .clone(),
            );
        }
        let need = |cmds: &[&str]| -> Result<(), UsageError> {
            match steps_of
                .iter()
                .zip(&commands)
                .find(|(_, c)| !cmds.contains(&c.as_str()))
            {
                Some((st, c)) => Err(loc.err(
                    f.line,
                    format!(
                        "{what}: a {kind_name} figure draws {} steps; '{st}' is a {c} step",
                        cmds.join(" or ")
                    ),
                )),
                None => Ok(()),
            }
        };
        let flag = |k: &str| matches!(f.get(k).map(|n| &n.v), Some(V::Bool(true)));
        let kind = match kind_name.as_str() {
            "sweep" => {
                need(&["sweep"])?;
                let metrics = f
                    .get("metrics")
                    .or(f.get("metric"))
                    .map(|n| super::strs_of(loc, n, "metrics"))
                    .transpose()?
                    .ok_or_else(|| {
                        loc.err(
                            f.line,
                            format!("{what}: no metrics (e.g. \"run.throughput_ops_per_s\")"),
                        )
                    })?;
                FigureKind::Sweep {
                    metrics,
                    log_x: flag("log_x"),
                    log_y: flag("log_y"),
                }
            }
            "phases" => {
                need(&["run", "suite", "pressure"])?;
                FigureKind::Phases {
                    phase: s("phase")?,
                    metric: s("metric")?
                        .ok_or_else(|| loc.err(f.line, format!("{what}: no metric")))?,
                }
            }
            "series" => {
                let file = s("file")?.unwrap_or_else(|| "telemetry.csv".into());
                if !SERIES_FILES.contains(&file.as_str()) {
                    return Err(loc.err(
                        f.line,
                        format!(
                            "{what}: file '{file}': expected one of {}",
                            SERIES_FILES.join(", ")
                        ),
                    ));
                }
                let columns = f
                    .get("columns")
                    .map(|n| super::strs_of(loc, n, "columns"))
                    .transpose()?
                    .ok_or_else(|| loc.err(f.line, format!("{what}: no columns")))?;
                FigureKind::Series {
                    file,
                    columns,
                    point: s("point")?,
                    phase: s("phase")?,
                }
            }
            "capacity" => {
                need(&["capacity"])?;
                FigureKind::Capacity
            }
            "pressure" => {
                need(&["pressure"])?;
                FigureKind::Pressure
            }
            other => {
                return Err(loc.err(
                    f.line,
                    format!(
                        "{what}: unknown kind '{other}' (known: {})",
                        FIGURE_KINDS.join(", ")
                    ),
                ))
            }
        };
        out.push(Figure {
            title: s("title")?.unwrap_or_else(|| id.clone()),
            caption: s("caption")?.unwrap_or_default(),
            id,
            steps: steps_of,
            kind,
            line: f.line,
        });
    }
    Ok(out)
}
