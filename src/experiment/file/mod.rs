//! `kvmeter experiment FILE`: a declarative experiment file (TOML) — the steps a paper ran
//! (suite, run, sweep, capacity, pressure, runs with faults, trace replays), settings they share, a scale
//! (smoke, quick, paper), the figures to draw and the paper's findings to check — made into
//! one command (design.md "Experiments the papers ran"; the presets in experiments/).
//!
//! Each step is exactly a kvmeter command: its keys are that command's flags, checked against
//! the command's own definition and then parsed by it, so a step behaves as the same command
//! typed by hand (experiment.json records that command line). Every step, figure and finding
//! is checked before anything runs; a complaint names the file, the line and the key.
//! docs/experiments.md describes the format.

pub mod expr;
pub mod figures;
pub mod findings;
pub mod node;
pub mod noise;
pub mod results;
pub mod run;
mod step;

use crate::error::UsageError;
use crate::experiment::job::Job;
pub use figures::{Figure, FigureKind};
use node::{Loc, Node, V};
use std::path::{Path, PathBuf};

pub const COMMANDS: [&str; 6] = ["run", "suite", "pressure", "sweep", "capacity", "replay"];
pub const SCALES: [&str; 3] = ["smoke", "quick", "paper"];

/// One step: a kvmeter command with its own output directory under steps/.
#[derive(Clone, Debug)]
pub struct Step {
    pub name: String,
    pub label: String,
    pub about: String,
    pub command: String,
    /// The command's arguments as typed (without --out, which the experiment sets).
    pub args: Vec<String>,
    pub job: Job,
    pub line: usize,
    /// The device directory this copy of a per-device step runs on: its runs' temporary data
    /// directories are made there (TMPDIR), each new and removed at its end, as without it.
    pub device: Option<PathBuf>,
}

/// The paper's value: the experiment directory's model (report::experiment).
pub use crate::report::experiment::PaperValue;

#[derive(Clone, Debug)]
pub struct Finding {
    pub id: String,
    pub claim: String,
    pub source: String,
    pub paper: PaperValue,
    pub unit: String,
    pub value: expr::Expr,
    pub value_text: String,
    /// The comparison that means "reproduced", e.g. (">", 1.0).
    pub expect: (String, f64),
    pub needs: Vec<String>,
    pub note: String,
    pub line: usize,
}

/// An experiment file, checked, at one scale.
#[derive(Clone, Debug)]
pub struct Experiment {
    pub path: PathBuf,
    pub text: String,
    pub name: String,
    pub title: String,
    pub paper: String,
    pub reproduces: Vec<String>,
    pub about: String,
    pub scale: String,
    pub scale_about: String,
    pub steps: Vec<Step>,
    pub figures: Vec<Figure>,
    pub findings: Vec<Finding>,
    /// What `$cpus` stood for.
    pub cpus: usize,
    pub devices: Vec<PathBuf>,
    /// A cost model (`[cost]`, as `kvmeter report --cost`; `capacity_from` is relative to the
    /// experiment directory, e.g. "steps/capacity-udp").
    pub cost: Option<crate::report::cost::CostFile>,
}

fn str_of(loc: &Loc, n: &Node, what: &str) -> Result<String, UsageError> {
    match &n.v {
        V::Str(s) => Ok(s.clone()),
        _ => Err(loc.err(
            n.line,
            format!("{what}: expected a string, found {}", n.kind()),
        )),
    }
}

fn strs_of(loc: &Loc, n: &Node, what: &str) -> Result<Vec<String>, UsageError> {
    match &n.v {
        V::Arr(a) => a.iter().map(|x| str_of(loc, x, what)).collect(),
        V::Str(s) => Ok(vec![s.clone()]),
        _ => Err(loc.err(
            n.line,
            format!(
                "{what}: expected a string or an array of strings, found {}",
                n.kind()
            ),
        )),
    }
}

/// A table of known keys: complains about any other, naming the known ones.
fn known_keys(loc: &Loc, n: &Node, what: &str, known: &[&str]) -> Result<(), UsageError> {
    if !matches!(n.v, V::Table(_)) {
        return Err(loc.err(
            n.line,
            format!("{what}: expected a table, found {}", n.kind()),
        ));
    }
    for (k, line, _) in n.entries() {
        if !known.contains(&k.as_str()) {
            return Err(loc.err(
                *line,
                format!("{what}: unknown key '{k}' (known: {})", known.join(", ")),
            ));
        }
    }
    Ok(())
}

/// Replaces every `{ smoke = .., quick = .., paper = .. }` table by its value at `scale`.
fn at_scale(loc: &Loc, n: &Node, scale: &str) -> Result<Node, UsageError> {
    Ok(match &n.v {
        V::Table(t) if !t.is_empty() && t.iter().all(|(k, _, _)| SCALES.contains(&k.as_str())) => {
            let v = n.get(scale).ok_or_else(|| {
                loc.err(
                    n.line,
                    format!(
                        "no value for scale '{scale}' (this value is given for {})",
                        t.iter()
                            .map(|(k, _, _)| k.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
            at_scale(loc, v, scale)?
        }
        V::Table(t) => Node {
            line: n.line,
            v: V::Table(
                t.iter()
                    .map(|(k, l, x)| Ok((k.clone(), *l, at_scale(loc, x, scale)?)))
                    .collect::<Result<_, UsageError>>()?,
            ),
        },
        V::Arr(a) => Node {
            line: n.line,
            v: V::Arr(
                a.iter()
                    .map(|x| at_scale(loc, x, scale))
                    .collect::<Result<_, _>>()?,
            ),
        },
        _ => n.clone(),
    })
}

/// The `[[name]]` tables at `scale`, each with only `known` keys and a unique `id`: (id, table).
fn id_tables(
    loc: &Loc,
    root: &Node,
    name: &str,
    scale: &str,
    known: &[&str],
) -> Result<Vec<(String, Node)>, UsageError> {
    let raw = match root.get(name).map(|f| &f.v) {
        Some(V::Arr(a)) => a.clone(),
        Some(_) => return Err(loc.err(1, format!("{name}: expected [[{name}]] tables"))),
        None => vec![],
    };
    let mut out: Vec<(String, Node)> = vec![];
    for t in raw {
        let t = at_scale(loc, &t, scale)?;
        known_keys(loc, &t, &format!("[[{name}]]"), known)?;
        let id = match t.get("id") {
            Some(n) => str_of(loc, n, "id")?,
            None => return Err(loc.err(t.line, format!("[[{name}]] without an id"))),
        };
        ident(loc, t.line, &format!("{name} id"), &id)?;
        if out.iter().any(|(o, _)| *o == id) {
            return Err(loc.err(t.line, format!("{name} '{id}' is named twice")));
        }
        out.push((id, t));
    }
    Ok(out)
}

fn ident(loc: &Loc, line: usize, what: &str, s: &str) -> Result<(), UsageError> {
    if s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(loc.err(
            line,
            format!("{what} '{s}': use letters, digits, '-' and '_' only"),
        ));
    }
    Ok(())
}

/// Reads and checks `path` at `scale`; `devices` are the experiment's --data-dir values;
/// `$cpus` is this machine's online CPUs.
pub fn load(path: &Path, scale: &str, devices: &[PathBuf]) -> Result<Experiment, UsageError> {
    load_with_cpus(path, scale, devices, crate::machine::cpu_count())
}

/// `load`, with `$cpus` standing for `cpus` (what a resumed experiment saved).
pub fn load_with_cpus(
    path: &Path,
    scale: &str,
    devices: &[PathBuf],
    cpus: usize,
) -> Result<Experiment, UsageError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError::new(format!(
            "{}: cannot read the experiment file: {e}",
            path.display()
        ))
    })?;
    parse(path, &text, scale, devices, cpus)
}

/// Parses and checks an experiment file's text at `scale`: its header, the shared settings,
/// every step (a command made a checked `Job`), the cost model, figures and findings.
pub fn from_text(
    path: &Path,
    text: &str,
    scale: &str,
    devices: &[PathBuf],
) -> Result<Experiment, UsageError> {
    parse(path, text, scale, devices, crate::machine::cpu_count())
}

fn parse(
    path: &Path,
    text: &str,
    scale: &str,
    devices: &[PathBuf],
    cpus: usize,
) -> Result<Experiment, UsageError> {
    let loc = Loc {
        file: path.display().to_string(),
    };
    let root = node::parse(path, text)?;
    known_keys(
        &loc,
        &root,
        "top level",
        &[
            "experiment",
            "scale",
            "settings",
            "step",
            "figure",
            "finding",
            "cost",
        ],
    )?;
    let header = Header::read(&loc, &root, scale)?;
    let settings = settings(&loc, &root, scale)?;
    let steps = step::steps(&loc, &root, &settings, scale, devices, cpus)?;
    let cost = cost(&loc, &root, path, text)?;
    let figures = figures::parse(&loc, &root, scale, &steps)?;
    let findings = findings::parse(&loc, &root, scale, &steps)?;
    Ok(Experiment {
        path: path.to_path_buf(),
        text: text.to_string(),
        name: header.name,
        title: header.title,
        paper: header.paper,
        reproduces: header.reproduces,
        about: header.about,
        scale: scale.to_string(),
        scale_about: header.scale_about,
        steps,
        figures,
        findings,
        devices: devices.to_vec(),
        cpus,
        cost,
    })
}

/// `[experiment]` and the chosen scale's `[scale.<name>] about`.
struct Header {
    name: String,
    title: String,
    paper: String,
    reproduces: Vec<String>,
    about: String,
    scale_about: String,
}

impl Header {
    fn read(loc: &Loc, root: &Node, scale: &str) -> Result<Header, UsageError> {
        let meta = root
            .get("experiment")
            .ok_or_else(|| loc.err(1, "no [experiment] table (name, title, paper)"))?;
        known_keys(
            loc,
            meta,
            "[experiment]",
            &["name", "title", "paper", "reproduces", "about"],
        )?;
        let get_str = |n: &Node, k: &str| -> Result<String, UsageError> {
            n.get(k)
                .map(|x| str_of(loc, x, k))
                .transpose()
                .map(Option::unwrap_or_default)
        };
        let name = get_str(meta, "name")?;
        ident(loc, meta.line, "[experiment] name", &name)?;
        let mut scale_about = String::new();
        if let Some(sc) = root.get("scale") {
            known_keys(loc, sc, "[scale]", &SCALES)?;
            for (k, _, t) in sc.entries() {
                known_keys(loc, t, &format!("[scale.{k}]"), &["about"])?;
                if k == scale {
                    scale_about = get_str(t, "about")?;
                }
            }
        }
        Ok(Header {
            name,
            title: get_str(meta, "title")?,
            paper: get_str(meta, "paper")?,
            reproduces: meta
                .get("reproduces")
                .map(|n| strs_of(loc, n, "reproduces"))
                .transpose()?
                .unwrap_or_default(),
            about: get_str(meta, "about")?,
            scale_about,
        })
    }
}

/// `[settings]` at `scale`: flags every step shares (each step's own keys win). `out` and
/// `resume` are the experiment's to decide.
fn settings(loc: &Loc, root: &Node, scale: &str) -> Result<Node, UsageError> {
    let settings = match root.get("settings") {
        Some(s) => at_scale(loc, s, scale)?,
        None => Node {
            line: 1,
            v: V::Table(vec![]),
        },
    };
    if !matches!(settings.v, V::Table(_)) {
        return Err(loc.err(settings.line, "[settings]: expected a table"));
    }
    if let Some((k, l, _)) = settings
        .entries()
        .iter()
        .find(|(k, _, _)| matches!(k.as_str(), "out" | "resume"))
    {
        return Err(loc.err(
            *l,
            format!("[settings] {k}: the experiment decides where each step's results go"),
        ));
    }
    Ok(settings)
}

/// `[cost]`: a cost model as `kvmeter report --cost` reads it, checked now.
fn cost(
    loc: &Loc,
    root: &Node,
    path: &Path,
    text: &str,
) -> Result<Option<crate::report::cost::CostFile>, UsageError> {
    let Some(n) = root.get("cost") else {
        return Ok(None);
    };
    let table: toml::Table =
        toml::from_str(text).map_err(|e| loc.err(n.line, format!("[cost]: {}", e.message())))?;
    let f: crate::report::cost::CostFile = table["cost"]
        .clone()
        .try_into()
        .map_err(|e: toml::de::Error| loc.err(n.line, format!("[cost]: {}", e.message())))?;
    f.check(path)
        .map_err(|e| loc.err(n.line, format!("[cost]: {}", e.0)))?;
    Ok(Some(f))
}

/// The step a reference names, or the complaint.
pub fn step_named<'a>(
    loc: &Loc,
    line: usize,
    steps: &'a [Step],
    what: &str,
    name: &str,
) -> Result<&'a Step, UsageError> {
    // A per-device step's copies (`name@2`, ...) exist only with several --data-dir; a
    // finding that needs them says `needs = ["devices>=2"]`.
    let base = match name.split_once('@') {
        Some((b, k)) if k.parse::<usize>().is_ok_and(|k| k >= 2) => b,
        _ => name,
    };
    steps
        .iter()
        .find(|s| s.name == name || (base != name && s.name == base))
        .ok_or_else(|| {
            loc.err(
                line,
                format!(
                    "{what}: refers to step '{name}', which does not exist (steps: {})",
                    steps
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod verdict_tests;
