//! `kvmeter experiment FILE`: a declarative experiment file (TOML) — the steps a paper ran
//! (suite, run, sweep, capacity, pressure, runs with faults), settings they share, a scale
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

use crate::error::UsageError;
use crate::experiment::job::Job;
pub use figures::{Figure, FigureKind};
use node::{Loc, Node, V};
use std::path::{Path, PathBuf};

pub const COMMANDS: [&str; 5] = ["run", "suite", "pressure", "sweep", "capacity"];
pub const SCALES: [&str; 3] = ["smoke", "quick", "paper"];
const STEP_META: [&str; 5] = ["name", "command", "label", "about", "per_device"];

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

/// The flag a step key stands for in `command`: ("-P" | "--long", takes a value, repeatable).
fn flag_of(command: &clap::Command, key: &str) -> Option<(String, bool, bool)> {
    let long = key.replace('_', "-");
    let (short, long) = match long.as_str() {
        "workload" => (Some('P'), None),
        "props" | "p" => (Some('p'), None),
        "params" => (None, Some("param".to_string())),
        _ => (None, Some(long)),
    };
    command.get_arguments().find_map(|a| {
        let hit = match (&short, &long) {
            (Some(c), _) => a.get_short() == Some(*c),
            (None, Some(l)) => a.get_long() == Some(l.as_str()),
            _ => false,
        };
        hit.then(|| {
            let name = match short {
                Some(c) => format!("-{c}"),
                None => format!("--{}", a.get_long().unwrap_or_default()),
            };
            let takes = a.get_action().takes_values();
            let repeat = matches!(a.get_action(), clap::ArgAction::Append);
            (name, takes, repeat)
        })
    })
}

/// `$cpus` in a value stands for this machine's online CPUs (papers/000 runs as many YCSB
/// threads as hardware threads).
fn expand(w: String) -> String {
    if w.contains("$cpus") {
        w.replace("$cpus", &crate::experiment::sweep::cpus().to_string())
    } else {
        w
    }
}

/// One key's value as command-line words after its flag.
fn words(loc: &Loc, key: &str, n: &Node) -> Result<Vec<String>, UsageError> {
    Ok(raw_words(loc, key, n)?.into_iter().map(expand).collect())
}

fn raw_words(loc: &Loc, key: &str, n: &Node) -> Result<Vec<String>, UsageError> {
    let bad = |what: &str| loc.err(n.line, format!("key '{key}': {what}"));
    match (&n.v, key) {
        // Tables of name = value: -p, --store-opt; --param name = [values].
        (V::Table(t), "props" | "p" | "store_opt" | "params") => t
            .iter()
            .map(|(k, _, x)| {
                let v = match &x.v {
                    V::Arr(a) => a
                        .iter()
                        .map(|y| y.word().ok_or_else(|| bad("expected plain values")))
                        .collect::<Result<Vec<_>, _>>()?
                        .join(","),
                    _ => x.word().ok_or_else(|| bad("expected plain values"))?,
                };
                Ok(format!("{k}={v}"))
            })
            .collect(),
        (V::Arr(a), _) => a
            .iter()
            .map(|x| {
                x.word()
                    .ok_or_else(|| bad("expected an array of plain values"))
            })
            .collect(),
        (V::Table(_), _) => Err(bad(
            "a table is only for props, store_opt, params, or { quick = .., paper = .. }",
        )),
        _ => Ok(vec![n.word().expect("scalar")]),
    }
}

/// Merges the shared settings under a step's own keys: the step's value wins (its workload
/// file too), except that repeatable flags (store options, properties, antagonists, faults)
/// add up, settings first.
fn merged(settings: &Node, step: &Node, command: &clap::Command) -> Vec<(String, usize, Node)> {
    let mut out: Vec<(String, usize, Node)> = vec![];
    for (k, l, v) in settings.entries() {
        if flag_of(command, k).is_some() {
            out.push((k.clone(), *l, v.clone()));
        }
    }
    for (k, l, v) in step.entries() {
        if STEP_META.contains(&k.as_str()) {
            continue;
        }
        // A step's own workload file replaces the shared one; other repeatable flags add up.
        let repeat = (flag_of(command, k).is_some_and(|f| f.2)
            || matches!(k.as_str(), "props" | "p" | "store_opt"))
            && k != "workload";
        match out.iter_mut().find(|(ok, _, _)| ok == k) {
            Some(slot) if repeat => {
                let mut joined = match (&slot.2.v, &v.v) {
                    (V::Table(a), V::Table(b)) => V::Table([a.clone(), b.clone()].concat()),
                    (V::Arr(a), V::Arr(b)) => V::Arr([a.clone(), b.clone()].concat()),
                    (V::Arr(a), _) => V::Arr([a.clone(), vec![v.clone()]].concat()),
                    (_, V::Arr(b)) => V::Arr([vec![slot.2.clone()], b.clone()].concat()),
                    _ => V::Arr(vec![slot.2.clone(), v.clone()]),
                };
                std::mem::swap(&mut slot.2.v, &mut joined);
                slot.1 = *l;
            }
            Some(slot) => *slot = (k.clone(), *l, v.clone()),
            None => out.push((k.clone(), *l, v.clone())),
        }
    }
    out
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

/// Reads and checks `path` at `scale`; `devices` are the experiment's --data-dir values.
pub fn load(path: &Path, scale: &str, devices: &[PathBuf]) -> Result<Experiment, UsageError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError::new(format!(
            "{}: cannot read the experiment file: {e}",
            path.display()
        ))
    })?;
    from_text(path, &text, scale, devices)
}

pub fn from_text(
    path: &Path,
    text: &str,
    scale: &str,
    devices: &[PathBuf],
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
    let meta = root
        .get("experiment")
        .ok_or_else(|| loc.err(1, "no [experiment] table (name, title, paper)"))?;
    known_keys(
        &loc,
        meta,
        "[experiment]",
        &["name", "title", "paper", "reproduces", "about"],
    )?;
    let get_str = |n: &Node, k: &str| -> Result<String, UsageError> {
        n.get(k)
            .map(|x| str_of(&loc, x, k))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let name = get_str(meta, "name")?;
    ident(&loc, meta.line, "[experiment] name", &name)?;
    let mut scale_about = String::new();
    if let Some(sc) = root.get("scale") {
        known_keys(&loc, sc, "[scale]", &SCALES)?;
        for (k, _, t) in sc.entries() {
            known_keys(&loc, t, &format!("[scale.{k}]"), &["about"])?;
            if k == scale {
                scale_about = get_str(t, "about")?;
            }
        }
    }
    let settings = match root.get("settings") {
        Some(s) => at_scale(&loc, s, scale)?,
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
    let cli = <crate::cli::Cli as clap::CommandFactory>::command();
    let empty = Vec::new();
    let raw_steps = match root.get("step").map(|s| &s.v) {
        Some(V::Arr(a)) => a,
        Some(_) => return Err(loc.err(1, "step: expected [[step]] tables")),
        None => &empty,
    };
    if raw_steps.is_empty() {
        return Err(loc.err(1, "no [[step]]: an experiment runs at least one"));
    }
    let mut steps: Vec<Step> = vec![];
    for raw in raw_steps {
        let raw = at_scale(&loc, raw, scale)?;
        let sname = raw
            .get("name")
            .ok_or_else(|| loc.err(raw.line, "[[step]] without a name"))
            .and_then(|n| str_of(&loc, n, "name"))?;
        ident(&loc, raw.line, "step name", &sname)?;
        if steps.iter().any(|s| s.name == sname) {
            return Err(loc.err(raw.line, format!("step '{sname}' is named twice")));
        }
        let cmd_node = raw.get("command").ok_or_else(|| {
            loc.err(
                raw.line,
                format!(
                    "step '{sname}': no command (one of {})",
                    COMMANDS.join(", ")
                ),
            )
        })?;
        let command = str_of(&loc, cmd_node, "command")?;
        if !COMMANDS.contains(&command.as_str()) {
            return Err(loc.err(
                cmd_node.line,
                format!(
                    "step '{sname}': unknown step '{command}' (known: {})",
                    COMMANDS.join(", ")
                ),
            ));
        }
        let sub = cli
            .find_subcommand(&command)
            .expect("every step command is a subcommand")
            .clone();
        for (k, l, _) in raw.entries() {
            if STEP_META.contains(&k.as_str()) {
                continue;
            }
            if matches!(k.as_str(), "out" | "resume") {
                return Err(loc.err(*l, format!("step '{sname}': key '{k}': the experiment decides where each step's results go")));
            }
            if flag_of(&sub, k).is_none() && !(k == "store_opt" || k == "props" || k == "p") {
                return Err(loc.err(
                    *l,
                    format!("step '{sname}': unknown key '{k}' (kvmeter {command} has no such flag; 'kvmeter {command} --help' lists them)"),
                ));
            }
        }
        let per_device = match raw.get("per_device").map(|n| &n.v) {
            None => false,
            Some(V::Bool(b)) => *b,
            Some(_) => {
                return Err(loc.err(
                    raw.line,
                    format!("step '{sname}': per_device: expected true or false"),
                ))
            }
        };
        let mut args = vec![];
        // Which line gave each flag, to point a complaint from the command at its key.
        let mut flag_lines: Vec<(String, usize)> = vec![];
        for (k, l, v) in merged(&settings, &raw, &sub) {
            let (flag, takes, repeat) = flag_of(&sub, &k)
                .or_else(|| flag_of(&sub, if k == "props" { "p" } else { &k }))
                .ok_or_else(|| loc.err(l, format!("step '{sname}': unknown key '{k}'")))?;
            if !takes {
                match v.v {
                    V::Bool(true) => args.push(flag),
                    V::Bool(false) => {}
                    _ => {
                        return Err(loc.err(
                            l,
                            format!("step '{sname}': key '{k}': expected true or false"),
                        ))
                    }
                }
                continue;
            }
            flag_lines.push((flag.clone(), l));
            let ws = words(&loc, &k, &v)?;
            if repeat {
                for w in ws {
                    args.push(flag.clone());
                    args.push(w);
                }
            } else if !ws.is_empty() {
                args.push(flag);
                args.push(ws.join(","));
            }
        }
        let copies: Vec<Option<PathBuf>> = if per_device && !devices.is_empty() {
            devices.iter().cloned().map(Some).collect()
        } else {
            vec![None]
        };
        for (i, device) in copies.into_iter().enumerate() {
            let name = if i == 0 {
                sname.clone()
            } else {
                format!("{sname}@{}", i + 1)
            };
            let args = args.clone();
            if per_device && args.iter().any(|a| a == "--data-dir") {
                return Err(loc.err(raw.line, format!("step '{sname}': per_device and data_dir together: the experiment's --data-dir gives the devices")));
            }
            let argv: Vec<String> = ["kvmeter".to_string(), command.clone()]
                .into_iter()
                .chain(args.iter().cloned())
                .collect();
            // The line of the flag a message starts with (or names), else the step's.
            let line_for = |msg: &str| {
                flag_lines
                    .iter()
                    .find(|(f, _)| msg.starts_with(f.as_str()) || msg.contains(&format!("'{f} ")))
                    .map(|(_, l)| *l)
                    .unwrap_or(raw.line)
            };
            let parsed = <crate::cli::Cli as clap::Parser>::try_parse_from(&argv).map_err(|e| {
                let first = e
                    .render()
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("error: ")
                    .to_string();
                loc.err(line_for(&first), format!("step '{name}': {first}"))
            })?;
            let job = crate::cli::job_of(parsed.command)
                .map_err(|e| loc.err(line_for(&e.0), format!("step '{name}': {}", e.0)))?
                .expect("step commands are measuring commands");
            job.check()
                .map_err(|e| loc.err(line_for(&e.0), format!("step '{name}': {}", e.0)))?;
            let label = raw
                .get("label")
                .map(|n| str_of(&loc, n, "label"))
                .transpose()?
                .unwrap_or_else(|| name.clone());
            let about = raw
                .get("about")
                .map(|n| str_of(&loc, n, "about"))
                .transpose()?
                .unwrap_or_default();
            steps.push(Step {
                name,
                label,
                about,
                command: command.clone(),
                args,
                job,
                line: raw.line,
                device,
            });
        }
    }
    // Settings nobody takes are a mistake in the file, not a silent no-op.
    for (k, l, _) in settings.entries() {
        if !steps.iter().any(|s| {
            flag_of(cli.find_subcommand(&s.command).expect("subcommand"), k).is_some()
                || matches!(k.as_str(), "store_opt" | "props" | "p")
        }) {
            return Err(loc.err(
                *l,
                format!("[settings]: unknown key '{k}' (no step's command has such a flag)"),
            ));
        }
    }
    let cost = match root.get("cost") {
        None => None,
        Some(n) => {
            let table: toml::Table = toml::from_str(text)
                .map_err(|e| loc.err(n.line, format!("[cost]: {}", e.message())))?;
            let f: crate::report::cost::CostFile =
                table["cost"]
                    .clone()
                    .try_into()
                    .map_err(|e: toml::de::Error| {
                        loc.err(n.line, format!("[cost]: {}", e.message()))
                    })?;
            f.check(path)
                .map_err(|e| loc.err(n.line, format!("[cost]: {}", e.0)))?;
            Some(f)
        }
    };
    let figures = figures::parse(&loc, &root, scale, &steps)?;
    let findings = findings::parse(&loc, &root, scale, &steps)?;
    Ok(Experiment {
        path: path.to_path_buf(),
        text: text.to_string(),
        name,
        title: get_str(meta, "title")?,
        paper: get_str(meta, "paper")?,
        reproduces: meta
            .get("reproduces")
            .map(|n| strs_of(&loc, n, "reproduces"))
            .transpose()?
            .unwrap_or_default(),
        about: get_str(meta, "about")?,
        scale: scale.to_string(),
        scale_about,
        steps,
        figures,
        findings,
        devices: devices.to_vec(),
        cost,
    })
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
