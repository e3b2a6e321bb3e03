//! What `kvmeter durability` leaves behind, like every command: manifest.json (written when the
//! directory is made, so that a check cut short still says what it was, and again at the
//! end), durability.json (the figures), report.html (read back from those files), the
//! summary it prints, and its exit code: 1 when the check could not read the writes back
//! (unavailable), 1 with `--fail-on-loss` when an acknowledged write was lost, else 0.

use super::{Report, Settings, Verdict};
use crate::error::{EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};
use crate::report::manifest::{shown_options, StoreManifest};
use crate::report::RunStatus;
use crate::store::{StoreKind, StoreOptions};
use serde::Serialize;
use std::cell::RefCell;
use std::path::{Path, PathBuf};

pub const MANIFEST_SCHEMA: &str = "kvmeter-durability-manifest/1";
pub const SCHEMA: &str = "kvmeter-durability/1";

/// The command's settings as the manifest shows them.
#[derive(Serialize)]
struct Shown<'a> {
    duration: Option<&'a str>,
    faults: &'a [String],
    kills: u32,
    writers: usize,
    fail_on_loss: bool,
}

#[derive(Serialize)]
struct Manifest<'a> {
    schema: &'static str,
    command: &'static str,
    kvmeter_version: &'static str,
    git_revision: &'static str,
    command_line: Vec<String>,
    started_at: String,
    finished_at: Option<String>,
    status: RunStatus,
    seed: u64,
    store: StoreManifest,
    settings: Shown<'a>,
    machine: crate::machine::Machine,
}

/// An output directory made and its manifest written.
pub struct Started {
    pub dir: PathBuf,
    manifest: serde_json::Value,
    /// Its guard, while the check goes on.
    _outer: crate::report::current::Outer,
}

/// Where `start` leaves what it made, so that `run` can mark the manifest failed when an
/// error ends the command after the directory exists.
pub type Slot = RefCell<Option<Started>>;

fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Makes the output directory (new or empty) and writes manifest.json ("running"). Called
/// only once the input is accepted.
pub fn start(
    s: &Settings,
    adapter: &StoreKind,
    opts: &StoreOptions,
    seed: u64,
    slot: &Slot,
) -> anyhow::Result<PathBuf> {
    let dir = crate::experiment::experiment_dir_plain(s.out.as_deref(), "durability", &s.store)?;
    let m = Manifest {
        schema: MANIFEST_SCHEMA,
        command: "durability",
        kvmeter_version: env!("CARGO_PKG_VERSION"),
        git_revision: env!("KVMETER_GIT_REV"),
        command_line: std::env::args().collect(),
        started_at: now(),
        finished_at: None,
        status: RunStatus::Running,
        seed,
        store: StoreManifest {
            name: adapter.name.into(),
            version: crate::store::version_of(adapter),
            options: shown_options(&opts.applied()),
            capabilities: adapter.capabilities,
            server: None,
        },
        settings: Shown {
            duration: s.duration.as_deref(),
            faults: &s.faults,
            kills: s.kills,
            writers: s.writers,
            fail_on_loss: s.fail_on_loss,
        },
        machine: crate::machine::machine(),
    };
    let manifest = serde_json::to_value(&m)?;
    write_json(&dir.join("manifest.json"), &manifest)?;
    // A guard marks it failed if kvmeter ends without closing it (SIGKILL, a crash).
    let outer = crate::report::current::open_outer(&dir);
    *slot.borrow_mut() = Some(Started {
        dir: dir.clone(),
        manifest,
        _outer: outer,
    });
    Ok(dir)
}

fn write_json(path: &Path, v: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(v)? + "\n";
    crate::experiment::write_atomic(path, text.as_bytes())
}

impl Started {
    /// The final manifest: its status, when it ended, and why it failed (if it did).
    fn close(&self, status: RunStatus, error: Option<String>) {
        let mut m = self.manifest.clone();
        m["status"] = serde_json::to_value(status).unwrap_or_default();
        m["finished_at"] = serde_json::Value::String(now());
        if let Some(e) = error {
            m["error"] = serde_json::Value::String(e);
        }
        if let Err(e) = write_json(&self.dir.join("manifest.json"), &m) {
            errln!("warning: manifest.json was not updated: {e:#}");
        }
    }

    /// An error ended the command: the manifest says so, and report.html shows what exists.
    pub fn failed(&self, e: &anyhow::Error) {
        self.close(RunStatus::Failed, Some(format!("{e:#}")));
        write_html(&self.dir);
    }
}

fn write_html(dir: &Path) {
    if let Err(e) = crate::report::html::write(dir) {
        errln!("warning: report.html was not written: {e:#}");
    }
}

/// The result in one word, and in a line.
pub fn result(v: &Verdict) -> (&'static str, String) {
    match &v.unavailable {
        Some(why) => (
            "unavailable",
            format!(
                "unavailable: {why}{}",
                if v.lost > 0 {
                    format!(
                        "; {} acknowledged writes lost among those read back",
                        v.lost
                    )
                } else {
                    String::new()
                }
            ),
        ),
        None if v.lost > 0 => (
            "lost",
            format!("LOST {} of {} acknowledged writes", v.lost, v.acknowledged),
        ),
        None => (
            "none lost",
            format!("no acknowledged write lost ({} read back)", v.acknowledged),
        ),
    }
}

/// The exit code for a verdict (docs/faults.md).
pub fn exit_code(v: &Verdict, fail_on_loss: bool) -> i32 {
    if v.unavailable.is_some() || (fail_on_loss && v.lost > 0) {
        EXIT_FAILED
    } else {
        EXIT_OK
    }
}

/// Writes durability.json, the final manifest and report.html; prints the summary; returns
/// the exit code.
pub fn finish(slot: &Slot, r: &Report, fail_on_loss: bool) -> anyhow::Result<i32> {
    let started = slot.borrow();
    let st = started
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("durability: no output directory was made"))?;
    let dir = &st.dir;
    write_json(&dir.join("durability.json"), r)?;
    let v = &r.verdict;
    let mut code = exit_code(v, fail_on_loss);
    st.close(
        if v.unavailable.is_some() {
            RunStatus::Failed
        } else if r.interrupted {
            code = EXIT_INTERRUPTED;
            RunStatus::Interrupted
        } else {
            RunStatus::Completed
        },
        None,
    );
    write_html(dir);
    outln!(
        "durability  {} ({})\n  {}\n  writes {}: acknowledged {}, failed {}, indeterminate {}\n  lost {}{}\n  indeterminate found {}, missing {}; unexpected {}; not read back {}\n  {}\nresults: {}",
        r.store,
        r.mode,
        r.result_text,
        v.writes,
        v.acknowledged,
        v.failed,
        v.indeterminate,
        v.lost,
        if v.lost_examples.is_empty() {
            String::new()
        } else {
            format!(" (e.g. {})", v.lost_examples[..v.lost_examples.len().min(3)].join(", "))
        },
        v.indeterminate_found,
        v.indeterminate_missing,
        v.unexpected,
        v.unreadable,
        r.note,
        dir.display()
    );
    if code != EXIT_OK {
        errln!(
            "durability: exit {code}: {}",
            if v.unavailable.is_some() {
                "the check could not read the writes back"
            } else if code == EXIT_INTERRUPTED {
                "interrupted: the writes made until then were read back"
            } else {
                "acknowledged writes were lost (--fail-on-loss)"
            }
        );
    }
    Ok(code)
}
