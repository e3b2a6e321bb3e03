//! On-CPU profiles of the measured processes (`--profile`; issue 44, papers/000's question of
//! where each operation's cycles go): sampled call stacks per phase, folded per group
//! (`fold.rs`), written as `profile/<phase>.<group>.folded` with a flame graph beside each
//! (`.svg`, inferno's renderer) and the top functions of each group in the phase's summary.
//!
//! Why the `perf` tool and not a crate reading perf_event directly: the samples are only useful
//! with names, and naming them needs DWARF unwinding (kvmeter, RocksDB's C++, Debian's
//! servers and libc are built without frame pointers: frame-pointer stacks measured here walked
//! into key bytes after one frame) and symbol tables of every object, the kernel's included.
//! perf does both, is packaged everywhere (Debian's linux-perf), and is what the papers and
//! store engineers use, so its figures are the ones a reader can check by hand. The pipeline
//! streams (`perf record -o - | perf script`): nothing but folded stacks is kept, so a long
//! run's disk and memory stay bounded (`fold::MAX_STACKS`), at the price of perf script's
//! unwinding running during the phase — its CPU is recorded as the profile's own cost.
//!
//! The event is `cpu-clock` (on-CPU time, a software event that works where no PMU exists,
//! as in this VM) unless the machine has hardware cycles, which are then sampled instead.
//! Where perf cannot run — not installed, `perf_event_paranoid`, a container, a server owned
//! by another user — the first phase says why in one line and the run goes on without.

mod fold;
mod perf;
mod script;

pub use fold::Roles;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The default sampling frequency: perf's usual 99 Hz (off the 100 Hz timer tick, so samples
/// do not beat against periodic work); its cost is in BENCHMARKS.md.
pub const DEFAULT_FREQUENCY_HZ: u32 = 99;
/// A group with fewer samples than this gets no shares (one sample is 1 % at 100).
pub const MIN_SAMPLES: u64 = 50;
/// Functions listed per group.
const TOP: usize = 10;
/// How long a phase's end waits for perf to pass on the phase's last samples (with
/// `--no-buffering` they arrive within milliseconds; an idle machine sampled per thread may
/// send none after the end, and then this is the wait).
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(2);

/// What `--profile` asks for.
#[derive(Clone, Debug)]
pub struct Config {
    pub frequency_hz: u32,
    pub roles: Roles,
    /// The time slices samples are also kept by (the run's `--interval`), so that a report can
    /// show what ran in its worst intervals.
    pub slice: std::time::Duration,
}

/// A function's share of its group's samples (its own time, without callees).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FunctionShare {
    pub function: String,
    pub samples: u64,
    pub self_pct: f64,
}

/// One group's profile over the phase's measured window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct GroupProfile {
    pub samples: u64,
    /// Of all the phase's samples; null with `too_few` below `MIN_SAMPLES`.
    pub share_pct: Option<f64>,
    /// Of this group's samples, those that ran in the kernel.
    pub kernel_pct: Option<f64>,
    pub top: Vec<FunctionShare>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub too_few: Option<String>,
    /// Files in the run directory: the folded stacks and their flame graph.
    pub folded: String,
    pub flamegraph: Option<String>,
}

/// A phase's profile.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProfileFigures {
    pub tool: String,
    /// `system-wide` (every CPU sampled, the measured processes' samples kept) or `threads`
    /// (perf attached to the measured processes' threads: costlier on runs that switch often).
    pub scope: String,
    pub event: String,
    pub frequency_hz: u32,
    pub samples: u64,
    /// CPU seconds perf record and perf script used over the phase, and that as % of one CPU
    /// over the phase's wall time: the profile's own cost.
    pub cost_cpu_seconds: f64,
    pub cost_pct_of_one_cpu: f64,
    pub groups: BTreeMap<String, GroupProfile>,
    /// Samples outside the measured window (warm-up, after the end), not in any group.
    pub outside_window: u64,
    /// System-wide: samples of other processes and of idle CPUs, left out.
    pub other_processes: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The profiler of a run: one perf pipeline per phase.
pub struct Profiler {
    cfg: Config,
    dir: PathBuf,
    perf: String,
    event: &'static str,
    scope: &'static str,
    active: Option<perf::Pipeline>,
    /// The phase's clock's zero on CLOCK_MONOTONIC (intervals.csv's `start_s` counts from it).
    origin_ns: u64,
    /// The open window: its start (CLOCK_MONOTONIC ns), then, and perf's CPU seconds then.
    window: Option<(u64, std::time::Instant, f64)>,
    /// Why profiles are unavailable, once perf failed (never retried: one line, not one a phase).
    failed: Option<String>,
}

/// `perf_event_paranoid`, where the kernel says.
fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
}

/// Whether every CPU may be sampled (root, or perf_event_paranoid ≤ 0): then the profile
/// samples system-wide and keeps the measured processes' samples (`perf::Sampling`).
fn system_wide_permitted() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    root || paranoid().is_some_and(|p| p <= 0)
}

/// The hint that goes with a refusal: what to change.
fn hint() -> String {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    match paranoid() {
        Some(p) if p > 1 && !root => format!(
            "; kernel.perf_event_paranoid is {p}: `sysctl -w kernel.perf_event_paranoid=1` (or run as root) permits it"
        ),
        _ => String::new(),
    }
}

impl Profiler {
    pub fn new(cfg: Config, run_dir: &Path, hardware_cycles: bool) -> Self {
        Profiler {
            cfg,
            dir: run_dir.join("profile"),
            // `KVMETER_PERF` names another perf binary (a newer build, or a path when perf is
            // not on PATH); it is the user's own environment, never a server's word.
            perf: std::env::var("KVMETER_PERF").unwrap_or_else(|_| "perf".into()),
            event: if hardware_cycles {
                "cycles"
            } else {
                "cpu-clock"
            },
            scope: if system_wide_permitted() {
                "system-wide"
            } else {
                "threads"
            },
            active: None,
            origin_ns: 0,
            window: None,
            failed: None,
        }
    }

    /// Starts sampling before the first profiled phase's clock starts (attaching takes perf a
    /// moment; later phases find it running). A refusal is said once, on standard error, and
    /// in every phase's telemetry.
    pub fn prepare(&mut self) {
        if self.failed.is_some() || self.active.is_some() {
            return;
        }
        let mut pids = vec![self.cfg.roles.own_pid];
        pids.extend(self.cfg.roles.server_pid);
        let sampling = perf::Sampling {
            event: self.event,
            frequency_hz: self.cfg.frequency_hz,
            pids,
            system_wide: self.scope == "system-wide",
        };
        let slice_ns = self.cfg.slice.as_nanos().min(u64::MAX as u128) as u64;
        match perf::Pipeline::start(&self.perf, &sampling, self.cfg.roles.clone(), slice_ns) {
            Ok(p) => self.active = Some(p),
            Err(why) => {
                let why = format!("{why}{}", hint());
                errln!("kvmeter: --profile: unavailable: {why}; the run goes on without profiles");
                self.failed = Some(why);
            }
        }
    }

    /// The phase's clock started at `origin` (before this call): its window starts now.
    pub fn begin(&mut self, origin: std::time::Instant) {
        self.origin_ns = perf::monotonic_ns().saturating_sub(origin.elapsed().as_nanos() as u64);
        self.window_start();
    }

    /// Starts (or restarts, at the end of warm-up) the window whose samples count.
    pub fn window_start(&mut self) {
        if self.active.is_none() {
            self.prepare();
        }
        if let Some(p) = &self.active {
            let now = perf::monotonic_ns();
            p.open_window(now);
            self.window = Some((now, std::time::Instant::now(), p.cpu_seconds()));
        }
    }

    /// Ends the phase's window: waits until perf has passed on its samples (at most
    /// `CATCH_UP`), writes the folded stacks and flame graphs of `phase`, and returns its
    /// figures, or `unavailable: <why>`. Sampling goes on for the next phase.
    pub fn finish(&mut self, phase: &str) -> Result<ProfileFigures, String> {
        let (Some(p), Some((window_start, wall0, cpu0))) = (&self.active, self.window.take())
        else {
            return Err(format!(
                "unavailable: {}",
                self.failed
                    .as_deref()
                    .unwrap_or("the phase was not profiled")
            ));
        };
        let (drained, caught_up) = p.close_window(perf::monotonic_ns(), CATCH_UP);
        let wall = wall0.elapsed().as_secs_f64();
        let cpu = (p.cpu_seconds() - cpu0).max(0.0);
        let mut f = ProfileFigures {
            tool: "perf record --call-graph dwarf | perf script".into(),
            scope: self.scope.into(),
            event: self.event.into(),
            frequency_hz: self.cfg.frequency_hz,
            cost_cpu_seconds: cpu,
            cost_pct_of_one_cpu: if wall > 0.0 { cpu / wall * 100.0 } else { 0.0 },
            outside_window: drained.before_window + drained.after_window,
            other_processes: drained.other_processes,
            ..Default::default()
        };
        if !caught_up {
            f.notes.push(format!(
                "perf had not passed on samples past the phase's end within {} s: its last moments may be missing",
                CATCH_UP.as_secs()
            ));
        }
        if let Some(c) = p.complaint() {
            f.notes.push(format!("perf script said: {c}"));
        }
        if drained.fold.overflow > 0 {
            f.notes.push(format!(
                "{} samples came after {} distinct stacks and are counted as [other stacks]",
                drained.fold.overflow,
                fold::MAX_STACKS
            ));
        }
        if drained.slices_dropped > 0 {
            f.notes.push(format!(
                "{} samples are in the phase's profile but not in its time slices (more than {} kept)",
                drained.slices_dropped,
                perf::MAX_SLICE_ENTRIES
            ));
        }
        let first_s = window_start.saturating_sub(self.origin_ns) as f64 / 1e9;
        self.write(phase, drained.fold, &mut f)
            .and_then(|()| self.write_slices(phase, &drained.slices, first_s))
            .map_err(|e| format!("unavailable: writing {}: {e}", self.dir.display()))?;
        Ok(f)
    }

    fn write(&self, phase: &str, fold: fold::Fold, f: &mut ProfileFigures) -> std::io::Result<()> {
        if !self.dir.exists() {
            std::fs::create_dir(&self.dir)?;
        }
        f.samples = fold.groups.values().map(|g| g.samples).sum();
        for (name, g) in fold.groups {
            let base = format!("{}.{}", file_safe(phase), name);
            let figures = group_figures(&g, f.samples, &base);
            write_folded(&self.dir.join(format!("{base}.folded")), &g.stacks)?;
            let svg = self.dir.join(format!("{base}.svg"));
            let title = format!(
                "{phase}: {name} ({} samples of {} at {} Hz)",
                g.samples, f.event, f.frequency_hz
            );
            let mut figures = figures;
            match flamegraph(&g.stacks, &title, &svg) {
                Ok(()) => figures.flamegraph = Some(format!("profile/{base}.svg")),
                Err(e) => f.notes.push(format!("{name}'s flame graph: {e}")),
            }
            f.groups.insert(name.to_string(), figures);
        }
        Ok(())
    }
}

/// `kvmeter doctor`'s line: perf's version and the event `--profile` would sample, or why
/// not (perf asked for its version under a 5 s deadline).
pub fn probe() -> Result<String, String> {
    use std::io::Read as _;
    let perf = std::env::var("KVMETER_PERF").unwrap_or_else(|_| "perf".into());
    let mut child = std::process::Command::new(&perf)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("unavailable: `{perf}`: {e} (Debian: apt-get install linux-perf)"))?;
    let t0 = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if t0.elapsed() < std::time::Duration::from_secs(5) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "unavailable: `{perf} --version` did not answer within 5 s"
                ));
            }
        }
    };
    let mut version = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = out.take(256).read_to_string(&mut version);
    }
    if !status.success() {
        return Err(format!("unavailable: `{perf} --version` exited ({status})"));
    }
    let event = if super::counters::hardware_cycles() {
        "cycles"
    } else {
        "cpu-clock (no hardware cycles here)"
    };
    Ok(format!("{}, sampling {event}{}", version.trim(), hint()))
}

/// Functions kept per group and time slice in `<phase>.slices.csv`.
const TOP_PER_SLICE: usize = 5;

impl Profiler {
    /// `profile/<phase>.slices.csv`: per time slice of the window (on the phase's clock, as
    /// intervals.csv) and group, its samples (`[all]`) and its top functions by own time.
    fn write_slices(
        &self,
        phase: &str,
        slices: &perf::Slices,
        first_s: f64,
    ) -> std::io::Result<()> {
        let path = self.dir.join(format!("{}.slices.csv", file_safe(phase)));
        let mut w = csv::Writer::from_writer(std::io::BufWriter::new(create_new(&path)?));
        w.write_record(["start_s", "end_s", "group", "function", "samples"])?;
        let slice_s = self.cfg.slice.as_secs_f64();
        for (k, counts) in slices {
            let start = first_s + *k as f64 * slice_s;
            let (a, b) = (format!("{start:.3}"), format!("{:.3}", start + slice_s));
            let mut by_group: BTreeMap<&str, Vec<(&str, u64)>> = BTreeMap::new();
            for ((g, f), n) in counts {
                by_group.entry(g).or_default().push((f.as_str(), *n));
            }
            for (g, mut fs) in by_group {
                let all: u64 = fs.iter().map(|f| f.1).sum();
                w.write_record([&a, &b, g, "[all]", &all.to_string()])?;
                fs.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(y.0)));
                for (f, n) in fs.into_iter().take(TOP_PER_SLICE) {
                    w.write_record([&a, &b, g, f, &n.to_string()])?;
                }
            }
        }
        w.flush()
    }
}

/// A phase name as a file name: letters, digits, `.`, `-` and `_` kept, the rest `_`.
pub fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect()
}

fn group_figures(g: &fold::GroupFold, all: u64, base: &str) -> GroupProfile {
    let mut figures = GroupProfile {
        samples: g.samples,
        folded: format!("profile/{base}.folded"),
        ..Default::default()
    };
    if g.samples < MIN_SAMPLES {
        figures.too_few = Some(format!(
            "{} samples: shares need at least {MIN_SAMPLES}",
            g.samples
        ));
        return figures;
    }
    let pct = |n: u64, of: u64| n as f64 / of as f64 * 100.0;
    figures.share_pct = Some(pct(g.samples, all));
    figures.kernel_pct = Some(pct(g.kernel_samples, g.samples));
    let mut leaves: Vec<(&String, &u64)> = g.leaves.iter().collect();
    leaves.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    figures.top = leaves
        .into_iter()
        .take(TOP)
        .map(|(name, &n)| FunctionShare {
            function: name.clone(),
            samples: n,
            self_pct: pct(n, g.samples),
        })
        .collect();
    figures
}

/// New files only, never through a link planted in their place (the run directory's rule).
fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

fn sorted(stacks: &std::collections::HashMap<String, u64>) -> Vec<(&String, &u64)> {
    let mut v: Vec<_> = stacks.iter().collect();
    v.sort();
    v
}

fn write_folded(
    path: &Path,
    stacks: &std::collections::HashMap<String, u64>,
) -> std::io::Result<()> {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(create_new(path)?);
    for (stack, n) in sorted(stacks) {
        writeln!(w, "{stack} {n}")?;
    }
    w.flush()
}

fn flamegraph(
    stacks: &std::collections::HashMap<String, u64>,
    title: &str,
    path: &Path,
) -> std::io::Result<()> {
    let lines: Vec<String> = sorted(stacks)
        .into_iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = title.to_string();
    opt.count_name = "samples".into();
    let w = std::io::BufWriter::new(create_new(path)?);
    inferno::flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), w)
        .map_err(std::io::Error::other)
}

/// A differential flame graph of B against A, both folded stacks (`kvmeter compare`): red where
/// B spent more of its samples, blue where fewer, the totals scaled alike. A graph has one
/// side's stacks: with `shapes_of_a`, A's (code B no longer runs shows, in blue), else B's
/// (code B runs anew shows, in red) — FlameGraph's `difffolded.pl` and `--negate`.
pub fn differential(
    a: &[u8],
    b: &[u8],
    shapes_of_a: bool,
    title: &str,
    out: &Path,
) -> std::io::Result<()> {
    let mut folded = Vec::new();
    let opt = inferno::differential::Options {
        normalize: true,
        strip_hex: false,
    };
    let (before, after) = if shapes_of_a { (b, a) } else { (a, b) };
    inferno::differential::from_readers(opt, before, after, &mut folded)?;
    let mut fo = inferno::flamegraph::Options::default();
    fo.title = title.to_string();
    fo.count_name = "samples".into();
    fo.negate_differentials = shapes_of_a;
    let w = std::io::BufWriter::new(create_new(out)?);
    inferno::flamegraph::from_reader(&mut fo, folded.as_slice(), w).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_withheld_below_the_minimum_and_ranked_above_it() {
        let mut g = fold::GroupFold {
            samples: 49,
            ..Default::default()
        };
        let few = group_figures(&g, 100, "run.harness");
        assert_eq!(few.share_pct, None);
        assert_eq!(
            few.too_few.as_deref(),
            Some("49 samples: shares need at least 50")
        );
        g.samples = 80;
        g.kernel_samples = 20;
        g.leaves.insert("a".into(), 60);
        g.leaves.insert("b".into(), 20);
        let ok = group_figures(&g, 160, "run.harness");
        assert_eq!(ok.share_pct, Some(50.0));
        assert_eq!(ok.kernel_pct, Some(25.0));
        assert_eq!(ok.top[0].function, "a");
        assert_eq!(ok.top[0].self_pct, 75.0);
        assert_eq!(ok.folded, "profile/run.harness.folded");
    }

    #[test]
    fn file_names_keep_only_safe_characters() {
        assert_eq!(file_safe("load a/../x"), "load_a_.._x");
    }
}
