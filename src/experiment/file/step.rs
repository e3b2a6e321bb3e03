//! An experiment file's `[[step]]` tables made into checked jobs. A step's keys are its
//! command's flags: `head` reads its name and command and refuses keys the command does not
//! have, `argv` turns the shared settings and the step's keys into the command line, and `job`
//! parses that with the one clap definition (`crate::args`) and checks the `Job` it makes —
//! exactly what the same command typed by hand would do.
//!
//! A `replay` step names its trace with the key `trace` (the command's one positional
//! argument), relative to the experiment file's directory, so a file and its traces move
//! together; the command line records the trace's absolute path.

use super::node::{Loc, Node, V};
use super::{at_scale, ident, str_of, Step, COMMANDS};
use crate::error::UsageError;
use crate::experiment::job::Job;
use std::path::{Path, PathBuf};

/// The keys of a step that are not flags.
const STEP_META: [&str; 5] = ["name", "command", "label", "about", "per_device"];

/// Every `[[step]]` at `scale`, a per-device step once per device; then the shared settings
/// no step's command takes are refused.
pub(super) fn steps(
    loc: &Loc,
    root: &Node,
    settings: &Node,
    scale: &str,
    devices: &[PathBuf],
    cpus: usize,
) -> Result<Vec<Step>, UsageError> {
    let cli = <crate::args::Cli as clap::CommandFactory>::command();
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
        let raw = at_scale(loc, raw, scale)?;
        let head = head(loc, &raw, &steps, &cli)?;
        let argv = argv(loc, &head, settings, &raw, cpus)?;
        if head.command == "replay" && argv.positional.is_empty() {
            return Err(loc.err(
                raw.line,
                format!("step '{}': no trace (a replay step names its trace file: trace = \"path\", relative to this file)", head.name),
            ));
        }
        let copies: Vec<Option<PathBuf>> = if head.per_device && !devices.is_empty() {
            devices.iter().cloned().map(Some).collect()
        } else {
            vec![None]
        };
        for (i, device) in copies.into_iter().enumerate() {
            let name = if i == 0 {
                head.name.clone()
            } else {
                format!("{}@{}", head.name, i + 1)
            };
            if head.per_device && argv.args.iter().any(|a| a == "--data-dir") {
                return Err(loc.err(raw.line, format!("step '{}': per_device and data_dir together: the experiment's --data-dir gives the devices", head.name)));
            }
            let job = job(loc, &name, &head.command, &argv, raw.line)?;
            let text = |k: &str| raw.get(k).map(|n| str_of(loc, n, k)).transpose();
            steps.push(Step {
                label: text("label")?.unwrap_or_else(|| name.clone()),
                about: text("about")?.unwrap_or_default(),
                name,
                command: head.command.clone(),
                args: argv.args.clone(),
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
    Ok(steps)
}

/// A step's name, its command's definition, and whether it runs once per device.
struct Head {
    name: String,
    command: String,
    sub: clap::Command,
    per_device: bool,
}

/// Reads a step's name and command, and refuses a key its command has no flag for.
fn head(loc: &Loc, raw: &Node, before: &[Step], cli: &clap::Command) -> Result<Head, UsageError> {
    let sname = raw
        .get("name")
        .ok_or_else(|| loc.err(raw.line, "[[step]] without a name"))
        .and_then(|n| str_of(loc, n, "name"))?;
    ident(loc, raw.line, "step name", &sname)?;
    if before.iter().any(|s| s.name == sname) {
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
    let command = str_of(loc, cmd_node, "command")?;
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
    Ok(Head {
        name: sname,
        command,
        sub,
        per_device,
    })
}

/// A step's command line (without `kvmeter COMMAND`), and which line gave each flag, to point
/// a complaint from the command at its key.
struct Argv {
    args: Vec<String>,
    flag_lines: Vec<(String, usize)>,
    /// Positional arguments (a replay's trace, made absolute), after the flags.
    positional: Vec<String>,
}

/// The shared settings and the step's own keys as its command's flags.
fn argv(
    loc: &Loc,
    head: &Head,
    settings: &Node,
    raw: &Node,
    cpus: usize,
) -> Result<Argv, UsageError> {
    let sname = &head.name;
    let mut args = vec![];
    let mut flag_lines: Vec<(String, usize)> = vec![];
    let mut positional = vec![];
    for (k, l, v) in merged(settings, raw, &head.sub) {
        let (flag, takes, repeat) = flag_of(&head.sub, &k)
            .or_else(|| flag_of(&head.sub, if k == "props" { "p" } else { &k }))
            .ok_or_else(|| loc.err(l, format!("step '{sname}': unknown key '{k}'")))?;
        if head.command == "replay"
            && k == "format"
            && v.word()
                .is_some_and(|w| crate::trace::Format::parse(&w).is_some())
        {
            return Err(loc.err(l, format!("step '{sname}': key 'format' is the report's format (table, ycsb, json); the trace's is trace_format")));
        }
        if flag.is_empty() {
            let w = match &v.v {
                V::Str(w) => expand(w.clone(), cpus),
                _ => return Err(loc.err(l, format!("step '{sname}': key '{k}': expected a string (a path, relative to this file)"))),
            };
            let path = relative_to_file(loc, &w);
            // A complaint about the trace starts with the key or with the path.
            flag_lines.push((k.clone(), l));
            flag_lines.push((path.clone(), l));
            positional.push(path);
            continue;
        }
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
        let ws = words(loc, &k, &v, cpus)?;
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
    args.extend(positional.iter().cloned());
    Ok(Argv {
        args,
        flag_lines,
        positional,
    })
}

/// A path from the experiment file, relative to the file's directory (made absolute, so the
/// recorded command line runs from anywhere).
fn relative_to_file(loc: &Loc, p: &str) -> String {
    let p = Path::new(p);
    if p.is_absolute() {
        return p.display().to_string();
    }
    let dir = Path::new(&loc.file)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    dir.join(p).display().to_string()
}

/// The command line parsed by the command's own definition, made a `Job` and checked; a
/// complaint points at the line of the flag it names, else at the step's.
fn job(
    loc: &Loc,
    name: &str,
    command: &str,
    argv: &Argv,
    step_line: usize,
) -> Result<Job, UsageError> {
    let words: Vec<String> = ["kvmeter".to_string(), command.to_string()]
        .into_iter()
        .chain(argv.args.iter().cloned())
        .collect();
    let line_for = |msg: &str| {
        argv.flag_lines
            .iter()
            .find(|(f, _)| msg.starts_with(f.as_str()) || msg.contains(&format!("'{f} ")))
            .map(|(_, l)| *l)
            .unwrap_or(step_line)
    };
    let parsed = <crate::args::Cli as clap::Parser>::try_parse_from(&words).map_err(|e| {
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
    let job = Job::from_command(parsed.command)
        .map_err(|e| loc.err(line_for(&e.0), format!("step '{name}': {}", e.0)))?
        .expect("step commands are measuring commands");
    job.check()
        .map_err(|e| loc.err(line_for(&e.0), format!("step '{name}': {}", e.0)))?;
    Ok(job)
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
        // A positional argument (a replay's trace) is the key of its id; its "flag" is empty.
        if a.is_positional() {
            return (a.get_id().as_str() == key).then(|| (String::new(), true, false));
        }
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

/// `$cpus` in a value stands for the online CPUs when the experiment started (papers/000 runs
/// as many YCSB threads as hardware threads); `--resume` passes the number it saved, so a
/// resumed experiment runs the steps it planned under any CPU set.
fn expand(w: String, cpus: usize) -> String {
    if w.contains("$cpus") {
        w.replace("$cpus", &cpus.to_string())
    } else {
        w
    }
}

/// One key's value as command-line words after its flag.
fn words(loc: &Loc, key: &str, n: &Node, cpus: usize) -> Result<Vec<String>, UsageError> {
    Ok(raw_words(loc, key, n)?
        .into_iter()
        .map(|w| expand(w, cpus))
        .collect())
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
    // A replay step takes only the shared settings that mean something to a replay (the
    // store, threads, telemetry, ...): not the workload's records or the engine's flags.
    let replay = command.get_name() == "replay";
    for (k, l, v) in settings.entries() {
        let not_for_replay = replay
            && flag_of(command, k)
                .is_some_and(|f| crate::plan::replay::NOT_REPLAY_FLAGS.contains(&f.0.as_str()));
        if flag_of(command, k).is_some() && !not_for_replay {
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
