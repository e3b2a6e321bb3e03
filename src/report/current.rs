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

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

static CURRENT: Mutex<Option<PathBuf>> = Mutex::new(None);
/// The guard of the current directory (see the module's header).
static GUARD: Mutex<Option<Child>> = Mutex::new(None);
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
    let why = match crash {
        Some(c) => format!("{ABANDONED}: {c}; the phase in progress has its intervals in intervals.csv"),
        None => format!("{ABANDONED} (killed by SIGKILL, or it crashed); the phase in progress has its intervals in intervals.csv"),
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
    guard
}

/// Rewrites the `status` of `root`'s manifest.json and summary.json from `running` to
/// `status` (a finished run's files are left as they are); the manifest gets its end time, the
/// summary `why` as its error unless it has one.
fn rewrite_running(root: &Path, status: &str, why: &str) {
    release_reserve(root);
    let finished = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    for name in ["summary.json", "manifest.json"] {
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
        if name == "manifest.json" {
            v["finished_at"] = finished.clone().into();
        } else if v["error"].is_null() {
            v["error"] = why.into();
        }
        if let Ok(text) = serde_json::to_string_pretty(&v) {
            let _ = super::atomic::write_atomic(&path, (text + "\n").as_bytes());
        }
    }
}
