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
//!
//! experiment.json also records what the file asks to draw and check (figures, findings,
//! cost, about): `kvmeter report DIR` makes results.json and the findings again from it and
//! the steps' files alone (`refresh`), so a directory copied off the machine that ran it gives
//! the same verdicts and page anywhere, without its stores, plug-ins or CPUs.

use super::{findings, noise, results, Experiment};
use crate::args::ExperimentArgs;
use crate::error::{UsageError, EXIT_INTERRUPTED, EXIT_OK};
use crate::report::experiment::{
    counts, disagreement_text, paper_text, value_text, Checked, ExperimentStatus, Results, State,
    StepState, StepStatus, SCHEMA,
};
use crate::report::rundir::write_atomic;
use std::path::{Path, PathBuf};
use std::time::Instant;

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
        schema: SCHEMA.into(),
        name: exp.name.clone(),
        title: exp.title.clone(),
        paper: exp.paper.clone(),
        file: exp.path.display().to_string(),
        scale: exp.scale.clone(),
        devices: exp.devices.clone(),
        started_at: now(),
        status: ExperimentStatus::Running,
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
                status: StepStatus::Pending,
                exit_code: None,
                seconds: None,
                estimate_s: s.job.estimate_s(),
                finished_at: None,
                device: s.device.clone(),
            })
            .collect(),
        scale_about: String::new(),
        reproduces: vec![],
        about: String::new(),
        figures: vec![],
        findings: vec![],
        cost: None,
        cpus: None,
    }
    .with_model_of(exp)
}

/// What the file asks to draw and check, resolved at its scale: recorded in experiment.json
/// so that nothing after the run needs the file again.
trait WithModel {
    fn with_model_of(self, exp: &Experiment) -> Self;
}

impl WithModel for State {
    fn with_model_of(mut self, exp: &Experiment) -> State {
        self.schema = SCHEMA.into();
        self.scale_about = exp.scale_about.clone();
        self.reproduces = exp.reproduces.clone();
        self.about = exp.about.clone();
        self.figures = exp.figures.clone();
        self.findings = exp.findings.iter().map(findings::spec_of).collect();
        self.cost = exp.cost.clone();
        self.cpus = Some(exp.cpus);
        for (s, step) in self.steps.iter_mut().zip(&exp.steps) {
            s.device = step.device.clone();
        }
        self
    }
}

fn save(root: &Path, st: &State) -> anyhow::Result<()> {
    write_atomic(
        &root.join("experiment.json"),
        (serde_json::to_string_pretty(st)? + "\n").as_bytes(),
    )
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
    errln!(
        "experiment: step '{name}' was cut short before; its directory is kept in interrupted/{name}-{k}"
    );
    Ok(())
}

pub fn main(a: ExperimentArgs) -> anyhow::Result<i32> {
    let metrics = metrics_endpoint(&a)?;
    let (exp, root, mut state) = match &a.resume {
        Some(dir) => resume(&a, dir)?,
        None => {
            let exp = super::load(&a.file, &a.scale, &a.data_dir)?;
            check_devices(&a.data_dir)?;
            if a.dry_run {
                dry_run(&exp);
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
    // experiment.json says `running` (saved above, or by `run_steps` on a resume) until the
    // experiment ends; a guard marks it failed if kvmeter does not get to say how it ended.
    let _outer = crate::report::current::open_outer(&root);
    let code = run_steps(&exp, &root, &mut state)?;
    finish(&root, &state)?;
    if let Some((e, m)) = &metrics {
        e.finish(m.linger, &crate::driver::install_signals());
    }
    errln!("results: {}", root.display());
    if code == EXIT_INTERRUPTED {
        errln!(
            "experiment: interrupted; finish it with: kvmeter experiment {} --resume {}",
            a.file.display(),
            root.display()
        );
    }
    Ok(code)
}

/// `--metrics-addr`: one endpoint for every step, bound before anything is created (its
/// steps' runs find it installed and feed it).
fn metrics_endpoint(
    a: &ExperimentArgs,
) -> Result<
    Option<(
        std::sync::Arc<crate::metrics::Exporter>,
        crate::plan::MetricsPlan,
    )>,
    UsageError,
> {
    let req = crate::plan::Request {
        metrics_addr: a.metrics_addr.clone(),
        metrics_linger: a.metrics_linger.clone(),
        ..Default::default()
    };
    let Some(m) = crate::plan::MetricsPlan::from_request(&req)? else {
        return Ok(None);
    };
    if a.dry_run {
        return Ok(None);
    }
    let e = crate::metrics::Exporter::bind(&m.addr)?;
    crate::metrics::install(e.clone());
    Ok(Some((e, m)))
}

fn check_devices(devices: &[PathBuf]) -> Result<(), UsageError> {
    match devices.iter().find(|d| !d.is_dir()) {
        Some(d) => Err(UsageError::new(format!(
            "--data-dir {}: not a directory; give a directory on each device to measure",
            d.display()
        ))),
        None => Ok(()),
    }
}

/// `--dry-run`: each step's command line and estimate, nothing run.
fn dry_run(exp: &Experiment) {
    let st = state_of(exp);
    let total: f64 = st.steps.iter().map(|s| s.estimate_s).sum();
    outln!(
        "{}: {} steps at scale {}, roughly {} (estimate):",
        exp.path.display(),
        st.steps.len(),
        exp.scale,
        hms(total)
    );
    for s in &st.steps {
        outln!(
            "  {:<18} ~{:>7}  {}",
            s.name,
            hms(s.estimate_s),
            s.command_line
        );
    }
    outln!(
        "{} figures, {} findings",
        exp.figures.len(),
        exp.findings.len()
    );
}

/// `--resume DIR`: the saved state, checked against the file as it reads now (the same steps
/// with the same arguments, the same scale and devices).
fn resume(a: &ExperimentArgs, dir: &Path) -> anyhow::Result<(Experiment, PathBuf, State)> {
    let saved = State::load(dir)?;
    // `$cpus` as the experiment started, whatever CPU set the resume runs under.
    let cpus = saved.cpus.unwrap_or_else(crate::machine::cpu_count);
    let exp = super::load_with_cpus(&a.file, &saved.scale, &saved.devices, cpus)?;
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
    let same = fresh.steps.len() == saved.steps.len()
        && fresh
            .steps
            .iter()
            .zip(&saved.steps)
            .all(|(x, y)| x.name == y.name && x.command == y.command && x.args == y.args);
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
    // The same steps: the figures and findings are recorded as the file gives them now (a
    // directory an older kvmeter started gets them here).
    let mut st = saved.with_model_of(&exp);
    st.status = ExperimentStatus::Running;
    Ok((exp, dir.to_path_buf(), st))
}

fn run_steps(exp: &Experiment, root: &Path, st: &mut State) -> anyhow::Result<i32> {
    let interrupted = crate::driver::install_signals();
    let started = Instant::now();
    let (mut done_est, mut done_real) = (0.0, 0.0);
    let n = exp.steps.len();
    let mut failed = false;
    for (i, step) in exp.steps.iter().enumerate() {
        if st.steps[i].status == StepStatus::Completed {
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
            .filter(|s| s.status != StepStatus::Completed)
            .map(|s| s.estimate_s)
            .sum::<f64>()
            * factor;
        errln!(
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
        st.steps[i].status = StepStatus::Running;
        save(root, st)?;
        let t0 = Instant::now();
        let code = run_step(root, step);
        let secs = t0.elapsed().as_secs_f64();
        let s = &mut st.steps[i];
        s.exit_code = Some(code);
        s.seconds = Some(secs);
        s.finished_at = Some(now());
        s.status = match code {
            EXIT_OK => StepStatus::Completed,
            EXIT_INTERRUPTED => StepStatus::Interrupted,
            _ => StepStatus::Failed,
        };
        if code == EXIT_OK {
            done_est += s.estimate_s;
            done_real += secs;
        } else {
            failed = true;
        }
        if code == EXIT_INTERRUPTED || interrupted.load(std::sync::atomic::Ordering::Relaxed) {
            s.status = StepStatus::Interrupted;
            st.status = ExperimentStatus::Interrupted;
            save(root, st)?;
            return Ok(EXIT_INTERRUPTED);
        }
        save(root, st)?;
    }
    st.status = if failed {
        ExperimentStatus::Failed
    } else {
        ExperimentStatus::Completed
    };
    save(root, st)?;
    Ok(if failed {
        crate::error::EXIT_FAILED
    } else {
        EXIT_OK
    })
}

/// One step into steps/<name>; its exit code (a failure is reported and counted, not raised).
fn run_step(root: &Path, step: &super::Step) -> i32 {
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
    match result {
        Ok(c) => c,
        Err(e) => {
            errln!("experiment: step '{}' failed: {e:#}", step.name);
            crate::error::exit_code(&e)
        }
    }
}

/// The figures of every step that wrote any, read from the steps' own files.
pub fn collect(root: &Path, st: &State) -> Results {
    let mut r = Results::default();
    for s in &st.steps {
        let mut got = results::of_step(&root.join("steps").join(&s.name)).unwrap_or_default();
        for b in &mut got.bounds {
            b.why = format!("{}: {}", s.name, b.why);
        }
        got.status = if s.status == StepStatus::Completed {
            "completed".into()
        } else {
            format!("did not complete ({})", s.status.name())
        };
        r.steps.insert(s.name.clone(), got);
    }
    noise::apply(&st.steps, &mut r);
    r
}

/// results.json, findings.json and findings.md from the steps' files and what experiment.json
/// records: nothing here reads the experiment file or the machine making them.
fn judge(root: &Path, st: &State) -> anyhow::Result<(Results, Vec<Checked>)> {
    let res = collect(root, st);
    write_atomic(
        &root.join("results.json"),
        (serde_json::to_string_pretty(&res)? + "\n").as_bytes(),
    )?;
    let defs = st
        .findings
        .iter()
        .map(findings::from_spec)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| UsageError::new(format!("{}: {e}", root.join("experiment.json").display())))?;
    let checked = findings::check(&defs, st.devices.len(), &res);
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
    let md = findings::markdown(st, &checked, &res, &when);
    write_atomic(&root.join("findings.md"), md.as_bytes())?;
    Ok((res, checked))
}

/// The verdicts on stdout, one line each, then their counts and the identical steps.
fn print_findings(res: &Results, checked: &[Checked]) {
    for c in checked {
        outln!(
            "{:<24} {:<22} paper {:<16} this run {:<22} {}",
            c.id,
            c.verdict.text(),
            paper_text(&c.paper, &c.unit),
            value_text(c),
            if c.verdict.decided() {
                String::new()
            } else {
                c.why.clone()
            }
        );
    }
    outln!("{}", counts(checked));
    for d in &res.identical {
        outln!("{}", disagreement_text(d));
    }
}

/// results.json, findings.md/json and report.html from whatever steps completed.
pub fn finish(root: &Path, st: &State) -> anyhow::Result<()> {
    let (res, checked) = judge(root, st)?;
    match crate::report::html::write(root) {
        Ok(w) => errln!("report: {} ({} figures)", w.path.display(), w.figures),
        Err(e) => errln!("warning: report.html was not written: {e:#}"),
    }
    print_findings(&res, &checked);
    Ok(())
}

/// Before `kvmeter report DIR` draws an experiment directory (it does nothing to any other
/// directory): results.json, findings.json and findings.md made again from the steps' files
/// and experiment.json (after a crash, after editing a step's files, or with a newer kvmeter).
/// The same files give the same verdicts on any machine.
///
/// A directory an older kvmeter wrote (experiment.json schema 1) has no figures or findings
/// in experiment.json: they are taken once from its saved experiment.toml, which plans its
/// steps as `kvmeter experiment` does (so this needs the steps' stores and plug-ins, once),
/// and recorded, and the directory is never read that way again.
pub fn refresh(root: &Path) -> anyhow::Result<()> {
    if !root.join("experiment.json").is_file() {
        return Ok(());
    }
    let mut st = State::load(root)?;
    if !st.is_current() {
        st = upgrade(root, st)?;
    }
    let (res, checked) = judge(root, &st)?;
    print_findings(&res, &checked);
    Ok(())
}

/// experiment.json of schema 1 with the figures and findings of its experiment.toml.
fn upgrade(root: &Path, st: State) -> anyhow::Result<State> {
    let exp = super::load(&root.join("experiment.toml"), &st.scale, &st.devices).map_err(|e| {
        UsageError::new(format!(
            "{}: experiment.json ({}) predates the recorded figures and findings; reading them from experiment.toml failed: {}; run `kvmeter report` on it once where its stores and plug-ins are (it then records them)",
            root.display(),
            st.schema,
            e.0
        ))
    })?;
    // What `$cpus` stood for when it ran is unknown: it stays unrecorded (the load above
    // took this machine's count).
    let cpus = st.cpus;
    let mut st = st.with_model_of(&exp);
    st.cpus = cpus;
    save(root, &st)?;
    errln!(
        "experiment: {} now records its figures and findings (schema {SCHEMA})",
        root.join("experiment.json").display()
    );
    Ok(st)
}
