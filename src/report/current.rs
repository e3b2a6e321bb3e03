//! The run directory in progress, process-wide, so that the "exit at once" of a second
//! interruption (`driver::signals`) leaves its manifest.json and summary.json saying
//! `interrupted`, never `running` (issue 40 item 2). The same lock serialises every write of
//! those two files with that last rewrite, so a write in flight cannot put `running` back
//! after it. Taken once per interval and per phase, never per operation.
//!
//! What no code in the process can do — run after SIGKILL, or after a crash in a store's C
//! code — a guard process does: kvmeter's binary, started as `__seal-run-dir DIR` when the
//! directory is made, reads a pipe from kvmeter until end of file, which comes however
//! kvmeter ends, and then marks the directory `failed` if it still says `running`. A run that
//! ended normally or was interrupted has already said so, and the guard leaves it as it is.
//!
//! A command that holds runs or outlives them — an experiment, a sweep, a capacity search, a
//! durability check — has a directory of its own whose status file (experiment.json,
//! sweep.json, capacity.json, a durability manifest.json) says `running` while it works. Its
//! guard (`open_outer`) stays while the runs' own guards come and go inside it, and such
//! directories nest (an experiment's step is a sweep).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

static CURRENT: Mutex<Option<PathBuf>> = Mutex::new(None);
/// The guard of the current directory (see the module's header).
static GUARD: Mutex<Option<Child>> = Mutex::new(None);
/// The enclosing directories in progress (`open_outer`), outermost first, with their guards.
static OUTER: Mutex<Vec<(PathBuf, Option<Child>)>> = Mutex::new(Vec::new());
/// Set by the binary's `main`: only the kvmeter executable can be its own guard (a test
/// binary calling the library is not kvmeter).
static GUARDED: AtomicBool = AtomicBool::new(false);

/// Room kept in every run directory for its last words: a file of `RESERVE_BYTES` made with the
/// directory and removed when a status file cannot be written for want of space (then the write
/// is tried again), when the run directory is closed, and by the guard. A disk that fills
/// during a run (the store's data, the intervals) thus still takes the final `summary.json` and
/// `manifest.json` (each about 5–25 KB, written beside the old one, then renamed).
pub const RESERVE: &str = ".kvmeter-reserve";
pub const RESERVE_BYTES: usize = 64 << 10;

/// Frees the reserve of `root`; true when there was one.
pub fn release_reserve(root: &Path) -> bool {
    std::fs::remove_file(root.join(RESERVE)).is_ok()
}

/// How summary.json's `error` begins when kvmeter could not finish the directory itself: its
/// guard's rewrite, and an exit at once on a second interruption (a report calls such a run
/// partial).
pub const ABANDONED: &str = "kvmeter ended without closing its run directory";
pub const INTERRUPTED_AGAIN: &str = "interrupted again: kvmeter exited at once";

/// The guard's subcommand (args.rs).
pub const SEAL_COMMAND: &str = "__seal-run-dir";

/// Every run directory made from now on gets a guard process (the binary's `main` calls this).
pub fn guard_with_this_executable() {
    GUARDED.store(true, Ordering::Relaxed);
}

/// The files whose `status` says where a run stands.
pub(super) fn is_status_file(name: &str) -> bool {
    name == "manifest.json" || name == "summary.json"
}

/// Every file whose top-level `status` a guard or an exit at once rewrites from `running`: a
/// run's two, and the enclosing commands' (`open_outer`).
const STATUS_FILES: [&str; 5] = [
    "summary.json",
    "manifest.json",
    "experiment.json",
    "sweep.json",
    "capacity.json",
];

/// The lock (a poisoned one is still the lock: the value is a path).
pub(super) fn lock() -> MutexGuard<'static, Option<PathBuf>> {
    CURRENT.lock().unwrap_or_else(|p| p.into_inner())
}

/// The newest run directory this process created is the one in progress.
pub(super) fn set(root: &Path) {
    *lock() = Some(root.to_path_buf());
    if GUARDED.load(Ordering::Relaxed) {
        let mut g = GUARD.lock().unwrap_or_else(|p| p.into_inner());
        // The previous directory (a sweep makes many) is finished: its guard reads end of
        // file, finds it sealed and exits at once.
        if let Some(mut old) = g.take() {
            drop(old.stdin.take());
            let _ = old.wait();
        }
        *g = spawn_guard(root);
    }
}

/// `root` holds an experiment, a sweep, a capacity search or a durability check, whose
/// status file says `running` until it ends: a guard of its own marks it `failed` if kvmeter
/// ends without saying how it ended (SIGKILL, a crash, a default-action signal), and a second
/// interruption marks it `interrupted`. The runs made inside it get their own guards (`set`).
/// The directory is in progress as long as the returned value lives.
pub fn open_outer(root: &Path) -> Outer {
    let child = if GUARDED.load(Ordering::Relaxed) {
        spawn_guard(root)
    } else {
        None
    };
    outers().push((root.to_path_buf(), child));
    Outer(root.to_path_buf())
}

fn outers() -> MutexGuard<'static, Vec<(PathBuf, Option<Child>)>> {
    OUTER.lock().unwrap_or_else(|p| p.into_inner())
}

/// An enclosing directory in progress (`open_outer`). Dropped once its command has written
/// how it ended, it ends its guard; dropped while its status file still says `running` (an
/// error on its way to `main`), it leaves the guard to the end of the process, so that
/// `fail_outer` can still write the error and the guard finds it sealed.
#[must_use = "the directory is in progress only while this lives"]
pub struct Outer(PathBuf);

impl Drop for Outer {
    fn drop(&mut self) {
        if says_running(&self.0) {
            return;
        }
        let mut o = outers();
        if let Some(i) = o.iter().rposition(|(r, _)| *r == self.0) {
            if let (_, Some(mut guard)) = o.remove(i) {
                drop(guard.stdin.take());
                let _ = guard.wait();
            }
        }
    }
}

/// Whether any status file in `root` says `running`.
fn says_running(root: &Path) -> bool {
    STATUS_FILES.iter().any(|name| {
        std::fs::read_to_string(root.join(name))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v["status"] == "running")
    })
}

/// An error ended the command: each enclosing directory (`open_outer`) whose status file still
/// says `running` says `failed` and why.
pub fn fail_outer(why: &str) {
    for (root, _) in outers().iter() {
        rewrite_running(root, "failed", why);
    }
}

/// Starts `kvmeter __seal-run-dir ROOT` in its own process group (a Ctrl-C at the terminal
/// reaches kvmeter, not its guard) with a pipe on its stdin that only this process holds (the
/// standard library makes it close-on-exec, so servers kvmeter starts do not keep it open).
/// None when it cannot be started: the run goes on without it, as before guards existed.
fn spawn_guard(root: &Path) -> Option<Child> {
    use std::os::unix::process::CommandExt;
    Command::new("/proc/self/exe")
        .arg(SEAL_COMMAND)
        .arg(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()
}

/// The guard's work: waits for end of file on stdin (kvmeter has ended), then marks `root`
/// `failed` if it still says `running`, with the signal a store's crash left in crash.txt.
pub fn seal_when_abandoned(root: &Path) {
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    release_reserve(root);
    let crash = std::fs::read_to_string(root.join(crate::store::plugin::crash::FILE))
        .ok()
        .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "));
    let kept = match root.join("intervals.csv").exists() {
        true => "the phase in progress has its intervals in intervals.csv",
        false => "what finished before is kept",
    };
    let why = match crash {
        Some(c) => format!("{ABANDONED}: {c}; {kept}"),
        None => format!("{ABANDONED} (killed by a signal such as SIGKILL, or it crashed); {kept}"),
    };
    rewrite_running(root, "failed", &why);
}

/// Rewrites the `status` of the current run directory's manifest.json and summary.json from
/// `running` to `interrupted` (a finished run's files are left as they are) and returns the
/// lock, held, so that nothing writes them again: the caller exits the process with it.
pub fn mark_interrupted() -> MutexGuard<'static, Option<PathBuf>> {
    let guard = lock();
    if let Some(root) = guard.as_deref() {
        rewrite_running(root, "interrupted", &format!("{INTERRUPTED_AGAIN}; the phase in progress has its intervals in intervals.csv but no summary"));
    }
    for (root, _) in outers().iter() {
        rewrite_running(root, "interrupted", INTERRUPTED_AGAIN);
    }
    guard
}

/// Rewrites the `status` of `root`'s status files (`STATUS_FILES`) from `running` to `status`
/// (finished ones are left as they are). A run's manifest gets its end time and its summary
/// `why` as its error unless it has one; a file that is the only one (an experiment's, a
/// sweep's, a durability check's manifest) gets both, and an experiment's step that was
/// running gets `status` too.
fn rewrite_running(root: &Path, status: &str, why: &str) {
    release_reserve(root);
    let finished = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let run = root.join("summary.json").exists();
    for name in STATUS_FILES {
        let path = root.join(name);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if v["status"] != "running" {
            continue;
        }
        v["status"] = status.into();
        if name == "manifest.json" || !run {
            v["finished_at"] = finished.clone().into();
        }
        if (name != "manifest.json" || !run) && v["error"].is_null() {
            v["error"] = why.into();
        }
        if let Some(steps) = v.get_mut("steps").and_then(|s| s.as_array_mut()) {
            for s in steps.iter_mut().filter(|s| s["status"] == "running") {
                s["status"] = status.into();
                s["finished_at"] = finished.clone().into();
            }
        }
        if let Ok(text) = serde_json::to_string_pretty(&v) {
            let _ = super::atomic::write_atomic(&path, (text + "\n").as_bytes());
        }
    }
}
