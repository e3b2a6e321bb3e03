//! One phase's `perf record … -o - | perf script -i -` pipeline: started before the phase's
//! clock, confirmed attached through perf's control FIFO (`ping` → `ack`), read as it runs by a
//! thread that folds each sample (so nothing but the folded stacks is kept: no perf.data on
//! disk, whatever the phase's length), and stopped with SIGINT at the phase's end under a
//! deadline.

use super::fold::{Fold, Roles};
use super::script::read_samples;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long perf has to attach and answer its first `ping`.
const ATTACH_DEADLINE: Duration = Duration::from_secs(10);
/// How long perf script has to unwind what is left once perf record stopped.
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
}

/// Time slices' samples by (group, innermost function), at most this many entries in all
/// (about 100 bytes each); later slices are not kept, and a note says so.
pub(super) const MAX_SLICE_ENTRIES: usize = 500_000;

/// Samples per (group, innermost function) in each time slice of the window, by slice index.
pub(super) type Slices = std::collections::BTreeMap<u64, HashMap<(&'static str, String), u64>>;

/// What the reader hands back when perf script's output ends.
pub(super) struct Drained {
    pub(super) fold: Fold,
    pub(super) slices: Slices,
    /// Samples not in `slices` once `MAX_SLICE_ENTRIES` was reached.
    pub(super) slices_dropped: u64,
    pub(super) before_window: u64,
    pub(super) after_window: u64,
    pub(super) skipped_lines: u64,
}

/// The window the reader keeps samples of: [start, end] in CLOCK_MONOTONIC ns (end 0: open),
/// cut into slices of `slice_ns` from its start (the phase's intervals).
#[derive(Default)]
pub(super) struct Window {
    pub(super) start: AtomicU64,
    pub(super) end: AtomicU64,
    pub(super) slice_ns: u64,
}

pub(super) struct Pipeline {
    record: Child,
    script: Child,
    /// Our ends of the control and acknowledgement FIFOs (opened read-write: never blocks).
    ctl: File,
    ack: File,
    drained: mpsc::Receiver<Drained>,
    pub(super) window: Arc<Window>,
    dir: tempfile::TempDir,
    pub(super) started: Instant,
    /// Both children were waited for (`stop`); else dropping the pipeline kills them.
    reaped: bool,
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill();
        }
    }
}

/// A FIFO at `path`, opened read-write so that opening never waits for perf.
fn fifo(path: &std::path::Path) -> Result<File, String> {
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
fn first_words(path: &std::path::Path) -> String {
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
        let err_file =
            |name: &str| File::create(dir.path().join(name)).map_err(|e| format!("{name}: {e}"));
        let pids = s
            .pids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let control = format!(
            "fifo:{},{}",
            dir.path().join("ctl").display(),
            dir.path().join("ack").display()
        );
        let freq = s.frequency_hz.to_string();
        let (record_err, script_err) = (err_file("record.err")?, err_file("script.err")?);
        let mut record = Command::new(perf)
            .args(["record", "-e", s.event, "-F", freq.as_str(), "--call-graph", "dwarf,8192"])
            .args(["-k", "monotonic", "--control", control.as_str(), "-p", pids.as_str()])
            .args(["-o", "-", "--quiet"])
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
            })?;
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
        let window = Arc::new(Window {
            slice_ns: slice_ns.max(1),
            ..Default::default()
        });
        let (tx, drained) = mpsc::channel();
        let Some(text) = script.stdout.take() else {
            for c in [&mut record, &mut script] {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Err("perf script's output".into());
        };
        let w = window.clone();
        let spawned = std::thread::Builder::new()
            .name("kvm-profile".into())
            .spawn(move || {
                let _ = tx.send(drain(BufReader::new(text), &roles, &w));
            });
        let mut p = Pipeline {
            record,
            script,
            ctl,
            ack,
            drained,
            window,
            dir,
            started: Instant::now(),
            reaped: false,
        };
        if let Err(e) = spawned {
            p.kill();
            return Err(format!("the profile's reader thread: {e}"));
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

    /// Stops sampling and waits for the reader. Returns the fold, the CPU seconds perf record
    /// and perf script used (the profile's own cost), and what perf script complained of.
    pub(super) fn stop(mut self) -> Result<(Drained, f64, Option<String>), String> {
        // SAFETY: kill sends a signal to our own child, which has not been waited for.
        unsafe { libc::kill(self.record.id() as libc::pid_t, libc::SIGINT) };
        let drained = self.drained.recv_timeout(DRAIN_DEADLINE);
        let cpu = match &drained {
            Ok(_) => {
                self.reaped = true;
                cpu_of(&mut self.record) + cpu_of(&mut self.script)
            }
            Err(_) => {
                self.kill();
                0.0
            }
        };
        let drained = drained.map_err(|_| {
            format!(
                "perf script did not finish within {}s of the phase's end",
                DRAIN_DEADLINE.as_secs()
            )
        })?;
        let complaint = first_words(&self.dir.path().join("script.err"));
        let complaint = (complaint != "it said nothing").then_some(complaint);
        Ok((drained, cpu, complaint))
    }
}

/// Waits for a child and returns the CPU seconds it used (wait4's resource usage).
fn cpu_of(c: &mut Child) -> f64 {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, which nothing else waits for.
    let r = unsafe { libc::wait4(c.id() as libc::pid_t, &mut status, 0, &mut ru) };
    if r <= 0 {
        let _ = c.wait();
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// The reader: folds each sample inside the window. A sample before the window's start is
/// dropped; when the start moves (the end of warm-up), everything folded so far came before
/// it (samples arrive after they were taken), so the fold starts again.
fn drain(text: impl std::io::BufRead, roles: &Roles, w: &Window) -> Drained {
    let mut d = Drained {
        fold: Fold::default(),
        slices: Slices::new(),
        slices_dropped: 0,
        before_window: 0,
        after_window: 0,
        skipped_lines: 0,
    };
    let (mut start_seen, mut entries) = (0, 0);
    d.skipped_lines = read_samples(text, |s| {
        let start = w.start.load(Ordering::Acquire);
        if start != start_seen {
            start_seen = start;
            d.before_window += d.fold.groups.values().map(|g| g.samples).sum::<u64>();
            d.fold = Fold::default();
            d.slices.clear();
            d.slices_dropped = 0;
            entries = 0;
        }
        let end = w.end.load(Ordering::Acquire);
        if start == 0 || s.time_ns < start {
            d.before_window += 1;
        } else if end != 0 && s.time_ns > end {
            d.after_window += 1;
        } else {
            let key = d.fold.add(roles, &s);
            let slice = d
                .slices
                .entry((s.time_ns - start) / w.slice_ns)
                .or_default();
            if let Some(n) = slice.get_mut(&key) {
                *n += 1;
            } else if entries < MAX_SLICE_ENTRIES {
                slice.insert(key, 1);
                entries += 1;
            } else {
                d.slices_dropped += 1;
            }
        }
    });
    d
}
