//! The run directory in progress, process-wide, so that the "exit at once" of a second
//! interruption (`driver::signals`) leaves its manifest.json and summary.json saying
//! `interrupted`, never `running` (issue 40 item 2). The same lock serialises every write of
//! those two files with that last rewrite, so a write in flight cannot put `running` back
//! after it. Taken once per interval and per phase, never per operation.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

static CURRENT: Mutex<Option<PathBuf>> = Mutex::new(None);

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
}

/// Rewrites the `status` of the current run directory's manifest.json and summary.json from
/// `running` to `interrupted` (a finished run's files are left as they are) and returns the
/// lock, held, so that nothing writes them again: the caller exits the process with it.
pub fn mark_interrupted() -> MutexGuard<'static, Option<PathBuf>> {
    let guard = lock();
    if let Some(root) = guard.as_deref() {
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
            v["status"] = "interrupted".into();
            if name == "manifest.json" {
                v["finished_at"] = finished.clone().into();
            } else if v["error"].is_null() {
                v["error"] = "interrupted again: kvmeter exited at once; the phase in progress has its intervals in intervals.csv but no summary".into();
            }
            if let Ok(text) = serde_json::to_string_pretty(&v) {
                let _ = super::atomic::write_atomic(&path, (text + "\n").as_bytes());
            }
        }
    }
    guard
}
