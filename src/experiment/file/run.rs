//! Runs an experiment's steps one after another into one directory, resumably:
//!
//! ```text
//! <dir>/experiment.toml   the file as it was run      experiment.json  steps, state, commands
//! <dir>/steps/<name>/     each step's own run / sweep / capacity directory
//! <dir>/results.json      every figure of every step  findings.md, findings.json
//! <dir>/report.html       the paper's figures         figures/*.svg
//! ```
//!
//! experiment.json is rewritten (atomically) when a step starts and ends, so a SIGKILL leaves
//! it naming the step that was running; `--resume DIR` keeps every completed step, moves a
//! half-written step directory aside to interrupted/ (nothing is deleted), and runs the rest.
//! Paper-scale experiments take hours: the ETA covers the whole experiment, from each step's
//! estimate rescaled by how long the finished steps really took.

use super::results::{self, Results};
use super::{findings, Experiment};
use crate::args::ExperimentArgs;
use crate::error::{UsageError, EXIT_INTERRUPTED, EXIT_OK};
use crate::report::rundir::write_atomic;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepState {
    pub name: String,
    pub label: String,
    pub command: String,
    pub args: Vec<String>,
    /// The same step typed by hand.
    pub command_line: String,
    pub dir: String,
    /// pending, running, completed, failed, interrupted
    pub status: String,
    pub exit_code: Option<i32>,
    pub seconds: Option<f64>,
    pub estimate_s: f64,
    pub finished_at: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub schema: String,
    pub name: String,
    pub title: String,
    pub paper: String,
    pub file: String,
    pub scale: String,
    pub devices: Vec<PathBuf>,
    pub started_at: String,
    /// running, completed, interrupted, failed
    pub status: String,
    pub kvmeter_version: String,
    pub steps: Vec<StepState>,
}

fn quote(a: &str) -> String {
    if !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=.,/:+@%".contains(c))
    {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

fn hms(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s / 60 % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

fn state_of(exp: &Experiment) -> State {
    State {
        schema: "kvmeter-experiment/1".into(),
        name: exp.name.clone(),
        title: exp.title.clone(),
        paper: exp.paper.clone(),
        file: exp.path.display().to_string(),
        scale: exp.scale.clone(),
        devices: exp.devices.clone(),
        started_at: now(),
        status: "running".into(),
        kvmeter_version: env!("CARGO_PKG_VERSION").into(),
        steps: exp
            .steps
            .iter()
            .map(|s| StepState {
                name: s.name.clone(),
                label: s.label.clone(),
                command: s.command.clone(),
                args: s.args.clone(),
                command_line: s
                    .device
                    .iter()
                    .map(|d| format!("TMPDIR={}", quote(&d.display().to_string())))
                    .chain([format!("kvmeter {}", s.command)])
                    .chain(s.args.iter().map(|a| quote(a)))
                    .chain([format!("--out {}", quote(&format!("steps/{}", s.name)))])
                    .collect::<Vec<_>>()
                    .join(" "),
                dir: format!("steps/{}", s.name),
                status: "pending".into(),
                exit_code: None,
                seconds: None,
                estimate_s: s.job.estimate_s(),
                finished_at: None,
            })
            .collect(),
    }
}

fn save(root: &Path, st: &State) -> anyhow::Result<()> {
    write_atomic(
        &root.join("experiment.json"),
        (serde_json::to_string_pretty(st)? + "\n").as_bytes(),
    )
}

pub fn load_state(root: &Path) -> Result<State, UsageError> {
    let path = root.join("experiment.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        UsageError::new(format!(
            "{}: no experiment here ({e}); give the directory a 'kvmeter experiment' run wrote",
            root.display()
        ))
    })?;
    serde_json::from_str(&text)
        .map_err(|e| UsageError::new(format!("{}: not readable: {e}", path.display())))
}

/// Moves a step directory left by an interrupted run aside (never deletes results).
fn set_aside(root: &Path, name: &str) -> anyhow::Result<()> {
    let dir = root.join("steps").join(name);
    if !dir.exists() {
        return Ok(());
    }
    let aside = root.join("interrupted");
    std::fs::create_dir_all(&aside)?;
    let mut k = 1;
    while aside.join(format!("{name}-{k}")).exists() {
        k += 1;
    }
    std::fs::rename(&dir, aside.join(format!("{name}-{k}")))?;
    eprintln!(
        "experiment: step '{name}' was cut short before; its directory is kept in interrupted/{name}-{k}"
    );
    Ok(())
}

pub fn main(a: ExperimentArgs) -> anyhow::Result<i32> {
    let (exp, root, mut state) = match &a.resume {
        Some(dir) => {
            let saved = load_state(dir)?;
            let exp = super::load(&a.file, &saved.scale, &saved.devices)?;
            if !a.data_dir.is_empty() && a.data_dir != saved.devices {
                return Err(UsageError::new(format!(
                    "--data-dir: {} was started with {:?}; --resume keeps its devices (leave --data-dir out)",
                    dir.display(),
                    saved.devices
                ))
                .into());
            }
            if a.scale != "quick" && a.scale != saved.scale {
                return Err(UsageError::new(format!(
                    "--scale {}: {} runs at scale {}; --resume keeps it",
                    a.scale,
                    dir.display(),
                    saved.scale
                ))
                .into());
            }
            let fresh = state_of(&exp);
            let same =
                fresh.steps.len() == saved.steps.len()
                    && fresh.steps.iter().zip(&saved.steps).all(|(x, y)| {
                        x.name == y.name && x.command == y.command && x.args == y.args
                    });
            if !same {
                let diff = fresh
                    .steps
                    .iter()
                    .zip(&saved.steps)
                    .find(|(x, y)| x.name != y.name || x.args != y.args)
                    .map(|(x, _)| format!("step '{}' differs", x.name))
                    .unwrap_or_else(|| "the steps differ in number".into());
                return Err(UsageError::new(format!(
                    "--resume {}: {} no longer describes that experiment ({diff}); restore the file or start a new experiment",
                    dir.display(),
                    a.file.display()
                ))
                .into());
            }
            let mut st = saved;
            st.status = "running".into();
            (exp, dir.clone(), st)
        }
        None => {
            let exp = super::load(&a.file, &a.scale, &a.data_dir)?;
            for d in &a.data_dir {
                if !d.is_dir() {
                    return Err(UsageError::new(format!(
                        "--data-dir {}: not a directory; give a directory on each device to measure",
                        d.display()
                    ))
                    .into());
                }
            }
            if a.dry_run {
                let st = state_of(&exp);
                let total: f64 = st.steps.iter().map(|s| s.estimate_s).sum();
                println!(
                    "{}: {} steps at scale {}, roughly {} (estimate):",
                    exp.path.display(),
                    st.steps.len(),
                    exp.scale,
                    hms(total)
                );
                for s in &st.steps {
                    println!(
                        "  {:<18} ~{:>7}  {}",
                        s.name,
                        hms(s.estimate_s),
                        s.command_line
                    );
                }
                println!(
                    "{} figures, {} findings",
                    exp.figures.len(),
                    exp.findings.len()
                );
                return Ok(EXIT_OK);
            }
            let root =
                crate::experiment::experiment_dir_plain(a.out.as_deref(), "experiment", &exp.name)?;
            // A new file, never through a link (report::rundir's rule for results).
            std::io::Write::write_all(
                &mut crate::report::rundir::create_new(&root.join("experiment.toml"))?,
                exp.text.as_bytes(),
            )?;
            let st = state_of(&exp);
            save(&root, &st)?;
            (exp, root, st)
        }
    };
    let code = run_steps(&exp, &root, &mut state)?;
    finish(&exp, &root, &state)?;
    eprintln!("results: {}", root.display());
    if code == EXIT_INTERRUPTED {
        eprintln!(
            "experiment: interrupted; finish it with: kvmeter experiment {} --resume {}",
            a.file.display(),
            root.display()
        );
    }
    Ok(code)
}

fn run_steps(exp: &Experiment, root: &Path, st: &mut State) -> anyhow::Result<i32> {
    let interrupted = crate::driver::install_signals();
    let started = Instant::now();
    let (mut done_est, mut done_real) = (0.0, 0.0);
    let n = exp.steps.len();
    let mut failed = false;
    for (i, step) in exp.steps.iter().enumerate() {
        if st.steps[i].status == "completed" {
            continue;
        }
        set_aside(root, &step.name)?;
        let factor = if done_est > 0.0 {
            done_real / done_est
        } else {
            1.0
        };
        let left: f64 = st.steps[i..]
            .iter()
            .filter(|s| s.status != "completed")
            .map(|s| s.estimate_s)
            .sum::<f64>()
            * factor;
        eprintln!(
            "experiment {} [{}]: step {}/{n} '{}' ({}), ~{}; elapsed {}, ETA ~{}",
            exp.name,
            exp.scale,
            i + 1,
            step.name,
            st.steps[i].command_line,
            hms(st.steps[i].estimate_s * factor),
            hms(started.elapsed().as_secs_f64()),
            hms(left)
        );
        st.steps[i].status = "running".into();
        save(root, st)?;
        let t0 = Instant::now();
        let mut job = step.job.clone();
        job.request_mut().out = Some(root.join("steps").join(&step.name));
        // A per-device step makes its temporary data directories on its device. Set between
        // steps, when no other thread of kvmeter's reads the environment.
        let tmpdir = std::env::var_os("TMPDIR");
        if let Some(d) = &step.device {
            std::env::set_var("TMPDIR", d);
        }
        let result = job.execute();
        if step.device.is_some() {
            match &tmpdir {
                Some(t) => std::env::set_var("TMPDIR", t),
                None => std::env::remove_var("TMPDIR"),
            }
        }
        let code = match result {
            Ok(c) => c,
            Err(e) => {
                eprintln!("experiment: step '{}' failed: {e:#}", step.name);
                crate::error::exit_code(&e)
            }
        };
        let secs = t0.elapsed().as_secs_f64();
        let s = &mut st.steps[i];
        s.exit_code = Some(code);
        s.seconds = Some(secs);
        s.finished_at = Some(now());
        s.status = match code {
            EXIT_OK => "completed",
            EXIT_INTERRUPTED => "interrupted",
            _ => "failed",
        }
        .into();
        if code == EXIT_OK {
            done_est += s.estimate_s;
            done_real += secs;
        } else {
            failed = true;
        }
        if code == EXIT_INTERRUPTED || interrupted.load(std::sync::atomic::Ordering::Relaxed) {
            s.status = "interrupted".into();
            st.status = "interrupted".into();
            save(root, st)?;
            return Ok(EXIT_INTERRUPTED);
        }
        save(root, st)?;
    }
    st.status = if failed { "failed" } else { "completed" }.into();
    save(root, st)?;
    Ok(if failed {
        crate::error::EXIT_FAILED
    } else {
        EXIT_OK
    })
}

/// The figures of every step that wrote any.
pub fn collect(exp: &Experiment, root: &Path, st: &State) -> Results {
    let mut r = Results::default();
    for (step, s) in exp.steps.iter().zip(&st.steps) {
        let mut got = results::of_step(&root.join("steps").join(&step.name)).unwrap_or_default();
        for b in &mut got.bounds {
            b.why = format!("{}: {}", step.name, b.why);
        }
        got.status = if s.status == "completed" {
            "completed".into()
        } else {
            format!("did not complete ({})", s.status)
        };
        r.steps.insert(step.name.clone(), got);
    }
    super::noise::apply(&exp.steps, &mut r);
    r
}

/// results.json, findings.md/json and report.html from whatever steps completed.
pub fn finish(exp: &Experiment, root: &Path, st: &State) -> anyhow::Result<()> {
    let res = collect(exp, root, st);
    write_atomic(
        &root.join("results.json"),
        (serde_json::to_string_pretty(&res)? + "\n").as_bytes(),
    )?;
    let checked = findings::check(exp, &res);
    write_atomic(
        &root.join("findings.json"),
        (serde_json::to_string_pretty(&checked)? + "\n").as_bytes(),
    )?;
    let when = st
        .steps
        .iter()
        .filter_map(|s| s.finished_at.clone())
        .max()
        .unwrap_or_else(now);
    let md = findings::markdown(exp, &checked, &res, &when);
    write_atomic(&root.join("findings.md"), md.as_bytes())?;
    match crate::report::html::write(root) {
        Ok(w) => eprintln!("report: {} ({} figures)", w.path.display(), w.figures),
        Err(e) => eprintln!("warning: report.html was not written: {e:#}"),
    }
    for c in &checked {
        println!(
            "{:<24} {:<22} paper {:<16} this run {:<22} {}",
            c.id,
            c.verdict,
            findings::paper_text(&c.paper, &c.unit),
            findings::value_text(c),
            if c.verdict == "reproduced" || c.verdict == "not reproduced" {
                String::new()
            } else {
                c.why.clone()
            }
        );
    }
    println!("{}", findings::counts(&checked));
    for d in &res.identical {
        println!("{}", findings::disagreement_text(d));
    }
    Ok(())
}

/// The experiment in `root` again, from its saved copy of the file (for `kvmeter report`).
pub fn reload(root: &Path) -> Result<(Experiment, State), UsageError> {
    let st = load_state(root)?;
    let exp = super::load(&root.join("experiment.toml"), &st.scale, &st.devices)?;
    Ok((exp, st))
}

/// `kvmeter report DIR` on an experiment: results.json, findings.md/json and report.html made
/// again from the steps' directories (after a crash, or with a newer kvmeter).
pub fn report(root: &Path) -> anyhow::Result<()> {
    let (exp, st) = reload(root)?;
    finish(&exp, root, &st)?;
    eprintln!("results: {}", root.display());
    Ok(())
}
