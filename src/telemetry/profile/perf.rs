//! The run's `perf record … -o - | perf script -i -` pipeline: started before the first
//! profiled phase's clock, confirmed attached through perf's control FIFO (`ping` → `ack`), and
//! read as it runs by a thread that folds each sample into the open phase window (so nothing but
//! folded stacks is kept: no perf.data on disk, whatever the run's length). One pipeline for the
//! whole run: perf script's start (reading the symbol tables of kvmeter, the server, libc and
//! the kernel: about 0.3 CPU-seconds) is paid once, not in every phase's window.
//! `--no-buffering` has perf record pass each sample on at once, so a phase's samples have all
//! arrived moments after its end; stopped with SIGINT when the run ends, under a deadline.

use super::fold::{Fold, Roles};
use super::script::{read_samples, Sample};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long perf has to attach and answer its first `ping`.
const ATTACH_DEADLINE: Duration = Duration::from_secs(10);
/// How long perf script has to unwind what is left once perf record stopped (the run's end).
const DRAIN_DEADLINE: Duration = Duration::from_secs(60);

/// Now on CLOCK_MONOTONIC, the clock perf's `-k monotonic` stamps samples with.
pub(super) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What to sample with.
#[derive(Clone, Debug)]
pub(super) struct Sampling {
    pub(super) event: &'static str,
    pub(super) frequency_hz: u32,
    pub(super) pids: Vec<u32>,
    /// Sample every CPU (`-a`) and keep the measured processes' samples, rather than attach to
    /// their threads (`-p`): per-thread events are switched in and out at every context
    /// switch of a measured thread, which on a loopback server run (a switch per request)
    /// cost 10 % of memcached's throughput at 100 connections; per-CPU events cost nothing
    /// there. Needs root or perf_event_paranoid ≤ 0.
    pub(super) system_wide: bool,
}

/// Time slices' samples by (group, innermost function), at most this many entries in all
/// (about 100 bytes each); later slices are not kept, and a note says so.
pub(super) const MAX_SLICE_ENTRIES: usize = 500_000;

/// Samples per (group, innermost function) in each time slice of the window, by slice index.
pub(super) type Slices = std::collections::BTreeMap<u64, HashMap<(&'static str, String), u64>>;

/// What the reader keeps, shared with the profiler: the open window and what was folded in it.
/// The reader takes the lock once a sample; the profiler at a phase's boundaries.
#[derive(Default)]
pub(super) struct State {
    /// The window in CLOCK_MONOTONIC ns; `start` 0: no window open (between phases).
    start: u64,
    end: u64,
    slice_ns: u64,
    pub(super) fold: Fold,
    pub(super) slices: Slices,
    slice_entries: usize,
    /// Samples not in `slices` once `MAX_SLICE_ENTRIES` was reached.
    pub(super) slices_dropped: u64,
    /// Measured processes' samples before the window's start and after its end.
    pub(super) before_window: u64,
    pub(super) after_window: u64,
    /// Samples of processes not measured (system-wide sampling sees every CPU), while a window
    /// was open.
    pub(super) other_processes: u64,
    /// The newest sample's time, and whether perf script's output ended.
    latest_ns: u64,
    ended: bool,
    pub(super) skipped_lines: u64,
}

impl State {
    fn add(&mut self, roles: &Roles, s: &Sample) {
        self.latest_ns = self.latest_ns.max(s.time_ns);
        if self.start == 0 {
            return;
        }
        if !roles.measured(s.pid) {
            // Another process, or an idle CPU (pid 0).
            self.other_processes += 1;
            return;
        }
        if s.time_ns < self.start {
            self.before_window += 1;
            return;
        }
        if self.end != 0 && s.time_ns > self.end {
            self.after_window += 1;
            return;
        }
        let key = self.fold.add(roles, s);
        let slice = self
            .slices
            .entry((s.time_ns - self.start) / self.slice_ns.max(1))
            .or_default();
        if let Some(n) = slice.get_mut(&key) {
            *n += 1;
        } else if self.slice_entries < MAX_SLICE_ENTRIES {
            slice.insert(key, 1);
            self.slice_entries += 1;
        } else {
            self.slices_dropped += 1;
        }
    }
}

pub(super) struct Pipeline {
    record: Child,
    script: Child,
    /// Our ends of the control and acknowledgement FIFOs (opened read-write: never blocks).
    ctl: File,
    ack: File,
    state: Arc<Mutex<State>>,
    reader: Option<std::thread::JoinHandle<()>>,
    dir: tempfile::TempDir,
    /// Both children were waited for; else dropping the pipeline stops them.
    reaped: bool,
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if !self.reaped {
            self.stop();
        }
    }
}

/// A FIFO at `path`, opened read-write so that opening never waits for perf.
fn fifo(path: &Path) -> Result<File, String> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| "a path with a NUL byte".to_string())?;
    // SAFETY: mkfifo reads the NUL-terminated path it is given.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(format!(
            "mkfifo {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Waits until `f` is readable, at most `d`.
fn readable(f: &File, d: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, owned here.
    unsafe { libc::poll(&mut p, 1, d.as_millis().min(i32::MAX as u128) as i32) > 0 }
}

/// The first lines of a file perf wrote its complaints to, bounded.
fn first_words(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(f) = File::open(path) {
        let _ = f.take(4096).read_to_string(&mut text);
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("[ perf record"))
        .take(2)
        .collect();
    if lines.is_empty() {
        "it said nothing".into()
    } else {
        lines.join(" ")
    }
}

/// A file in `dir` for a perf command's standard error (read back when it fails).
fn err_file(dir: &Path, name: &str) -> Result<File, String> {
    File::create(dir.join(name)).map_err(|e| format!("{name}: {e}"))
}

/// `perf record` of `s`'s targets, its samples on standard output, driven through the FIFOs
/// `ctl` and `ack` in `dir`.
fn spawn_record(perf: &str, s: &Sampling, dir: &Path) -> Result<Child, String> {
    let pids = s
        .pids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let control = format!(
        "fifo:{},{}",
        dir.join("ctl").display(),
        dir.join("ack").display()
    );
    let freq = s.frequency_hz.to_string();
    let record_err = err_file(dir, "record.err")?;
    let target = if s.system_wide {
        vec!["-a"]
    } else {
        vec!["-p", pids.as_str()]
    };
    Command::new(perf)
        .args(["record", "-e", s.event, "-F", freq.as_str(), "--call-graph", "dwarf,8192"])
        .args(["-k", "monotonic", "--control", control.as_str()])
        .args(["-o", "-", "--quiet", "--no-buffering"])
        .args(target)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(record_err)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!(
                "no `{perf}` program (KVMETER_PERF, else perf on PATH; Debian: apt-get install linux-perf)"
            ),
            _ => format!("{perf} record: {e}"),
        })
}

impl Pipeline {
    pub(super) fn start(
        perf: &str,
        s: &Sampling,
        roles: Roles,
        slice_ns: u64,
    ) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("kvmeter-perf-")
            .tempdir()
            .map_err(|e| format!("a private directory for perf's FIFOs: {e}"))?;
        let ctl = fifo(&dir.path().join("ctl"))?;
        let ack = fifo(&dir.path().join("ack"))?;
        let script_err = err_file(dir.path(), "script.err")?;
        let mut record = spawn_record(perf, s, dir.path())?;
        let Some(out) = record.stdout.take() else {
            let _ = record.kill();
            return Err("perf record's output".into());
        };
        let script = Command::new(perf)
            .args(["script", "-i", "-", "--no-inline"])
            .args(["-F", "comm,pid,tid,time,ip,sym,dso"])
            .process_group(0)
            .stdin(out)
            .stdout(Stdio::piped())
            .stderr(script_err)
            .spawn();
        let mut script = match script {
            Ok(c) => c,
            Err(e) => {
                let _ = record.kill();
                let _ = record.wait();
                return Err(format!("{perf} script: {e}"));
            }
        };
        let state = Arc::new(Mutex::new(State {
            slice_ns: slice_ns.max(1),
            ..Default::default()
        }));
        let Some(text) = script.stdout.take() else {
            for c in [&mut record, &mut script] {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Err("perf script's output".into());
        };
        let st = state.clone();
        let spawned = std::thread::Builder::new()
            .name("kvm-profile".into())
            .spawn(move || {
                let lock = || st.lock().unwrap_or_else(|p| p.into_inner());
                let skipped = read_samples(BufReader::new(text), |s| lock().add(&roles, &s));
                let mut st = lock();
                st.skipped_lines = skipped;
                st.ended = true;
            });
        let mut p = Pipeline {
            record,
            script,
            ctl,
            ack,
            state,
            reader: None,
            dir,
            reaped: false,
        };
        match spawned {
            Ok(h) => p.reader = Some(h),
            Err(e) => {
                p.kill();
                return Err(format!("the profile's reader thread: {e}"));
            }
        }
        p.attached()?;
        Ok(p)
    }

    /// Asks perf record for an `ack` once its events are open; its own words if it exited.
    fn attached(&mut self) -> Result<(), String> {
        let fail = |p: &mut Self, why: String| {
            p.kill();
            Err(why)
        };
        if self.ctl.write_all(b"ping\n").is_err() {
            return fail(self, "perf record's control FIFO".into());
        }
        let t0 = Instant::now();
        while t0.elapsed() < ATTACH_DEADLINE {
            if readable(&self.ack, Duration::from_millis(50)) {
                let mut buf = [0u8; 64];
                let n = self.ack.read(&mut buf).unwrap_or(0);
                if buf[..n].starts_with(b"ack") {
                    return Ok(());
                }
            }
            if let Ok(Some(status)) = self.record.try_wait() {
                let said = first_words(&self.dir.path().join("record.err"));
                return fail(self, format!("perf record exited ({status}): {said}"));
            }
        }
        fail(
            self,
            format!(
                "perf record did not attach within {}s",
                ATTACH_DEADLINE.as_secs()
            ),
        )
    }

    fn kill(&mut self) {
        let _ = self.record.kill();
        let _ = self.script.kill();
        let _ = self.record.wait();
        let _ = self.script.wait();
        self.reaped = true;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a window at `now_ns` (a phase's start, or the end of its warm-up): what was folded
    /// before is dropped.
    pub(super) fn open_window(&self, now_ns: u64) {
        let mut st = self.lock();
        let slice_ns = st.slice_ns;
        let (latest, ended, skipped) = (st.latest_ns, st.ended, st.skipped_lines);
        *st = State {
            start: now_ns,
            slice_ns,
            latest_ns: latest,
            ended,
            skipped_lines: skipped,
            ..Default::default()
        };
    }

    /// Closes the window at `end_ns` and hands back what it holds, once perf has passed on
    /// every sample up to then (a sample after it has arrived), at most `wait`; false with it
    /// when the wait ran out (the last moments may be missing).
    pub(super) fn close_window(&self, end_ns: u64, wait: Duration) -> (State, bool) {
        self.lock().end = end_ns;
        let t0 = Instant::now();
        let caught_up = loop {
            {
                let st = self.lock();
                if st.latest_ns > end_ns || st.ended {
                    break st.latest_ns > end_ns;
                }
            }
            if t0.elapsed() >= wait {
                break false;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut st = self.lock();
        let slice_ns = st.slice_ns;
        let (latest, ended, skipped) = (st.latest_ns, st.ended, st.skipped_lines);
        let taken = std::mem::replace(
            &mut *st,
            State {
                slice_ns,
                latest_ns: latest,
                ended,
                skipped_lines: skipped,
                ..Default::default()
            },
        );
        (taken, caught_up)
    }

    /// CPU seconds perf record and perf script have used so far (their /proc stat).
    pub(super) fn cpu_seconds(&self) -> f64 {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        [self.record.id(), self.script.id()]
            .iter()
            .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
            .filter_map(|t| crate::telemetry::procfs::parse_pid_stat(&t))
            .map(|(_, ticks, _)| ticks as f64 / hz)
            .sum()
    }

    /// What perf script complained of, if anything.
    pub(super) fn complaint(&self) -> Option<String> {
        let c = first_words(&self.dir.path().join("script.err"));
        (c != "it said nothing").then_some(c)
    }

    /// Stops sampling (SIGINT: perf record flushes and exits, perf script ends with its input),
    /// waits for both and the reader under a deadline, and kills what is left.
    fn stop(&mut self) {
        // SAFETY: kill sends a signal to our own child, which has not been waited for.
        unsafe { libc::kill(self.record.id() as libc::pid_t, libc::SIGINT) };
        let t0 = Instant::now();
        while t0.elapsed() < DRAIN_DEADLINE && !self.lock().ended {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        if let Some(h) = self.reader.take() {
            if self.lock().ended {
                let _ = h.join();
            }
        }
    }
}
