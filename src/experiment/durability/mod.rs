//! `kvmeter durability`: do acknowledged writes survive a crash? (papers/002 §durability:
//! RAMCloud's promise is that an acknowledged write survives a server crash.)
//!
//! Every write carries a unique key (`dur-<writer>-<seq>`) and a value naming it; each is
//! logged as it completes — `ok` (acknowledged), `failed` (the store said no) or
//! `indeterminate` (timed out, connection lost, or fewer replicas than `wait_replicas`
//! confirmed: it may or may not have been applied). After the crashes, every logged key is
//! read back from the current primary or leader:
//!
//! - **lost**: acknowledged, not there (or with another value) — the figure that matters;
//! - indeterminate writes found or missing (either is allowed);
//! - **unexpected**: a failed write that is there, or a value no write produced.
//!
//! Servers (`server.rs`): writers run for `--duration` while the `--fault` schedule breaks the
//! cluster kvmeter started. Embedded stores (`embedded.rs`): a child kvmeter process writes
//! and acknowledges each write over a pipe, and is SIGKILLed at random points (`--kills`);
//! the store is reopened and checked after each. This is process-crash durability: a kill
//! leaves the operating system's page cache intact, so it cannot show what a power loss does.
//!
//! A read-back that cannot read is not a loss: before the check, a probe write is made and
//! read back through the same session; if that fails, or reads fail during the check, the
//! result is **unavailable** (with why), never "lost". `output.rs` writes manifest.json,
//! durability.json and report.html and decides the exit code (`--fail-on-loss`).
//!
//! Ctrl-C (SIGINT, SIGTERM) ends the writes early, and what was written is still read back:
//! the check is `interrupted` (exit 130) with the verdict on those writes. A second one exits
//! at once with the manifest marked `interrupted`.

mod embedded;
mod output;
mod server;

pub use embedded::writer_main;

use crate::error::UsageError;
use crate::store::{Record, Session, Status, StoreKind, StoreOptions};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// The command's input.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub store: String,
    pub store_opts: Vec<String>,
    pub duration: Option<String>,
    pub faults: Vec<String>,
    pub kills: u32,
    pub writers: usize,
    pub out: Option<PathBuf>,
    pub seed: Option<u64>,
    /// Exit 1 when an acknowledged write was lost (an unavailable check exits 1 always).
    pub fail_on_loss: bool,
}

/// How one write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Failed,
    Indeterminate,
}

impl Outcome {
    pub fn of(st: Status) -> Outcome {
        use crate::store::ErrorKind as K;
        match st {
            Status::Ok => Outcome::Ok,
            // The store answered with a refusal: not applied.
            Status::Error {
                kind: K::Busy | K::Other | K::NotImplemented,
                ..
            } => Outcome::Failed,
            // No answer, a lost connection, or too few replicas: may or may not be there.
            _ => Outcome::Indeterminate,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Indeterminate => "indeterminate",
        }
    }
}

/// One logged write.
#[derive(Clone, Copy, Debug)]
pub struct Write {
    pub writer: u32,
    pub seq: u64,
    pub outcome: Outcome,
}

pub fn key(writer: u32, seq: u64) -> String {
    format!("dur-{writer:03}-{seq:012}")
}

pub fn value(writer: u32, seq: u64) -> Record {
    let mut r = Record::new();
    r.push(b"field0", format!("{writer}:{seq}").as_bytes());
    r
}

/// The check's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verdict {
    pub writes: u64,
    pub acknowledged: u64,
    pub failed: u64,
    pub indeterminate: u64,
    /// Acknowledged and not read back (or read back with another value).
    pub lost: u64,
    pub indeterminate_found: u64,
    pub indeterminate_missing: u64,
    /// A failed write that is there, or a value that is not the one written.
    pub unexpected: u64,
    /// Writes not checked: their read failed, or the check stopped (the verdict is then
    /// incomplete, and `unavailable` says why).
    pub unreadable: u64,
    /// Why the check could not read (all or some writes back): the probe write failed, reads
    /// failed, the store could not be reopened or the cluster did not serve. None: it read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// A few lost keys, for the report.
    pub lost_examples: Vec<String>,
}

impl Verdict {
    pub fn add(&mut self, o: &Verdict) {
        self.writes += o.writes;
        self.acknowledged += o.acknowledged;
        self.failed += o.failed;
        self.indeterminate += o.indeterminate;
        self.lost += o.lost;
        self.indeterminate_found += o.indeterminate_found;
        self.indeterminate_missing += o.indeterminate_missing;
        self.unexpected += o.unexpected;
        self.unreadable += o.unreadable;
        if self.unavailable.is_none() {
            self.unavailable.clone_from(&o.unavailable);
        }
        for e in &o.lost_examples {
            if self.lost_examples.len() < 10 {
                self.lost_examples.push(e.clone());
            }
        }
    }
}

/// After this many reads in a row fail, the check stops: the store is not answering, and each
/// further read could wait out its whole deadline (a million writes × a timeout).
const MAX_FAILED_READS_IN_A_ROW: u64 = 100;

/// Whether reading back works at all: a probe write (a key no writer uses) made and read back
/// through `session`; `tag` makes its key unique (no writer's key has this form). Err: why
/// not — the check would otherwise report every write "lost".
pub fn probe(session: &mut dyn Session, tag: u64) -> Result<(), String> {
    let k = format!("dur-probe-{tag:016x}");
    let (w, s) = (u32::MAX, tag);
    // The write's own status is not required to be ok (with wait_replicas and no replica
    // left it is unconfirmed, yet applied): what matters is that it reads back.
    let wrote = session.insert("usertable", k.as_bytes(), &value(w, s));
    let wrote = match wrote {
        Status::Ok => String::new(),
        st => format!("; the write itself: {st:?}{}", last_error(session)),
    };
    let want = format!("{w}:{s}");
    let (st, view) = session.read("usertable", k.as_bytes(), crate::store::Fields::All);
    match st {
        Status::Ok if view.get(b"field0") == Some(want.as_bytes()) => Ok(()),
        Status::Ok => Err(format!(
            "a probe write made before the check reads back with another value{wrote}"
        )),
        Status::NotFound => Err(format!(
            "a probe write made before the check is not read back{wrote}"
        )),
        Status::Error { .. } => Err(format!(
            "reading back a probe write made before the check failed: {st:?}{}{wrote}",
            last_error(session)
        )),
    }
}

fn last_error(session: &mut dyn Session) -> String {
    session
        .last_error()
        .map(|e| format!(": {}", e.chars().take(200).collect::<String>()))
        .unwrap_or_default()
}

/// A verdict on `writes` without reading any back: the check could not be made.
pub fn unavailable(writes: &[Write], why: String) -> Verdict {
    let mut v = Verdict::default();
    for w in writes {
        count(&mut v, w.outcome);
    }
    v.unreadable = v.writes;
    v.unavailable = Some(why);
    v
}

fn count(v: &mut Verdict, o: Outcome) {
    v.writes += 1;
    match o {
        Outcome::Ok => v.acknowledged += 1,
        Outcome::Failed => v.failed += 1,
        Outcome::Indeterminate => v.indeterminate += 1,
    }
}

/// Probes (`probe`), then reads every logged write back through `session` and classifies it;
/// when the probe fails nothing is classified and the verdict is unavailable.
pub fn probe_and_check(session: &mut dyn Session, writes: &[Write], tag: u64) -> Verdict {
    match probe(session, tag) {
        Ok(()) => check(session, writes),
        Err(why) => unavailable(writes, why),
    }
}

/// Reads every logged write back through `session` and classifies it.
pub fn check(session: &mut dyn Session, writes: &[Write]) -> Verdict {
    let mut v = Verdict::default();
    let mut failed_in_a_row = 0u64;
    let mut latest = String::new();
    for w in writes {
        count(&mut v, w.outcome);
        if failed_in_a_row >= MAX_FAILED_READS_IN_A_ROW {
            v.unreadable += 1;
            continue;
        }
        let k = key(w.writer, w.seq);
        let want = format!("{}:{}", w.writer, w.seq);
        let (st, view) = session.read("usertable", k.as_bytes(), crate::store::Fields::All);
        let found = match st {
            Status::Ok => Some(view.get(b"field0") == Some(want.as_bytes())),
            Status::NotFound => None,
            Status::Error { .. } => {
                v.unreadable += 1;
                failed_in_a_row += 1;
                latest = format!("{st:?}{}", last_error(session));
                continue;
            }
        };
        failed_in_a_row = 0;
        match (w.outcome, found) {
            (Outcome::Ok, Some(true)) => {}
            (Outcome::Ok, _) => {
                v.lost += 1;
                if v.lost_examples.len() < 10 {
                    v.lost_examples.push(k);
                }
            }
            (Outcome::Indeterminate, Some(true)) => v.indeterminate_found += 1,
            (Outcome::Indeterminate, None) => v.indeterminate_missing += 1,
            (Outcome::Failed, None) => {}
            (_, Some(_)) => v.unexpected += 1,
        }
    }
    if v.unreadable > 0 {
        let stopped = failed_in_a_row >= MAX_FAILED_READS_IN_A_ROW;
        v.unavailable = Some(format!(
            "{} of {} writes could not be read back{}; the latest read: {latest}",
            v.unreadable,
            v.writes,
            if stopped {
                format!(
                    " ({MAX_FAILED_READS_IN_A_ROW} reads in a row failed: the check stopped there)"
                )
            } else {
                String::new()
            }
        ));
    }
    v
}

/// What `durability.json` holds.
#[derive(Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    /// "none lost", "lost" or "unavailable" (the check could not read the writes back).
    pub result: &'static str,
    /// The result in a line, with why when unavailable.
    pub result_text: String,
    pub fail_on_loss: bool,
    pub store: String,
    pub options: std::collections::BTreeMap<String, String>,
    /// "process-crash (writer SIGKILLed)" or "faults on a managed cluster".
    pub mode: String,
    pub note: String,
    pub verdict: Verdict,
    /// Embedded: one entry per kill; servers: the fault events.
    pub rounds: Vec<serde_json::Value>,
    pub seed: u64,
    /// The members kvmeter started (servers), all stopped when the command ends.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<crate::store::cluster::MemberManifest>,
    /// Ctrl-C (or SIGTERM) cut the writes short: the verdict covers the writes made until
    /// then, each read back.
    pub interrupted: bool,
}

impl Report {
    /// A report with its result fields filled from `verdict`.
    #[allow(clippy::too_many_arguments)]
    fn new(
        s: &Settings,
        adapter: &StoreKind,
        opts: &StoreOptions,
        mode: String,
        note: String,
        verdict: Verdict,
        rounds: Vec<serde_json::Value>,
        seed: u64,
    ) -> Report {
        let (result, result_text) = output::result(&verdict);
        Report {
            schema: output::SCHEMA,
            result,
            result_text,
            fail_on_loss: s.fail_on_loss,
            store: adapter.name.into(),
            options: crate::report::manifest::shown_options(&opts.applied()),
            mode,
            note,
            verdict,
            rounds,
            seed,
            members: vec![],
            interrupted: false,
        }
    }
}

/// Runs the command; the exit code: 1 when the check is unavailable, or with `--fail-on-loss`
/// when an acknowledged write was lost; else 0 (the figures are the result).
pub fn run(s: &Settings) -> anyhow::Result<i32> {
    let adapter = crate::store::find(&s.store).ok_or_else(|| {
        UsageError::new(format!(
            "--store '{}': unknown or not in this build; available: {}",
            s.store,
            crate::store::names().join(", ")
        ))
    })?;
    let opts = crate::store::checked_options(adapter, &s.store_opts)?;
    if s.writers == 0 || s.writers > 64 {
        return Err(UsageError::new(format!("--writers {}: expected 1 to 64", s.writers)).into());
    }
    let seed = s.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let slot = output::Slot::default();
    let r = match adapter.server {
        Some(_) => server::run(s, adapter, opts, seed, &slot),
        None => embedded::run(s, adapter, opts, seed, &slot),
    };
    if let (Err(e), Some(started)) = (&r, slot.borrow().as_ref()) {
        started.failed(e);
    }
    r
}

/// `--duration` for the server mode (default 10 s).
fn duration(s: &Settings) -> Result<Duration, UsageError> {
    crate::plan::parse_duration("--duration", s.duration.as_deref().unwrap_or("10s"))
}

fn refuse_for(adapter: &StoreKind, what: &str) -> UsageError {
    UsageError::new(format!("{what} (store '{}')", adapter.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Fields, RecordView, ScanOut};

    /// A map-backed session: the check's logic, against values set by hand.
    struct Map(
        std::collections::HashMap<Vec<u8>, Vec<u8>>,
        Vec<record_span::Span>,
    );
    mod record_span {
        pub use crate::store::record::Span;
    }

    impl Session for Map {
        fn read(&mut self, _t: &str, key: &[u8], _f: Fields) -> (Status, RecordView<'_>) {
            match self.0.get(key) {
                Some(v) => {
                    self.1 = vec![record_span::Span::new(0..6, 6..v.len())];
                    (Status::Ok, RecordView::new(v, &self.1))
                }
                None => (Status::NotFound, RecordView::EMPTY),
            }
        }
        fn scan(&mut self, _: &str, _: &[u8], _: usize, _: Fields, _: &mut ScanOut) -> Status {
            Status::Ok
        }
        fn update(&mut self, _: &str, _: &[u8], _: &Record) -> Status {
            Status::Ok
        }
        fn insert(&mut self, _: &str, _: &[u8], _: &Record) -> Status {
            Status::Ok
        }
        fn delete(&mut self, _: &str, _: &[u8]) -> Status {
            Status::Ok
        }
    }

    #[test]
    fn classifies_lost_indeterminate_and_unexpected() {
        let mut m = std::collections::HashMap::new();
        let put = |m: &mut std::collections::HashMap<Vec<u8>, Vec<u8>>, w: u32, s: u64, v: &str| {
            m.insert(key(w, s).into_bytes(), format!("field0{v}").into_bytes());
        };
        put(&mut m, 0, 1, "0:1"); // ok, present
        put(&mut m, 0, 3, "0:3"); // indeterminate, found
        put(&mut m, 0, 5, "0:5"); // failed but present: unexpected
        put(&mut m, 0, 6, "9:9"); // ok with another value: lost
        let writes = [
            (1, Outcome::Ok),
            (2, Outcome::Ok), // missing: lost
            (3, Outcome::Indeterminate),
            (4, Outcome::Indeterminate), // missing
            (5, Outcome::Failed),
            (6, Outcome::Ok),
            (7, Outcome::Failed), // missing, as it should be
        ]
        .map(|(seq, outcome)| Write {
            writer: 0,
            seq,
            outcome,
        });
        let v = check(&mut Map(m, vec![]), &writes);
        assert_eq!(v.writes, 7);
        assert_eq!(v.acknowledged, 3);
        assert_eq!(v.lost, 2);
        assert_eq!(v.lost_examples, [key(0, 2), key(0, 6)]);
        assert_eq!(v.indeterminate_found, 1);
        assert_eq!(v.indeterminate_missing, 1);
        assert_eq!(v.unexpected, 1);
        assert_eq!(v.failed, 2);
    }

    /// A store that answers nothing: every call fails as a lost connection would.
    struct Dead(u64);

    impl Session for Dead {
        fn read(&mut self, _t: &str, _k: &[u8], _f: Fields) -> (Status, RecordView<'_>) {
            self.0 += 1;
            (
                Status::Error {
                    kind: crate::store::ErrorKind::Io,
                    fatal: true,
                },
                RecordView::EMPTY,
            )
        }
        fn scan(&mut self, _: &str, _: &[u8], _: usize, _: Fields, _: &mut ScanOut) -> Status {
            Status::Ok
        }
        fn update(&mut self, _: &str, _: &[u8], _: &Record) -> Status {
            Status::error(crate::store::ErrorKind::Io)
        }
        fn insert(&mut self, _: &str, _: &[u8], _: &Record) -> Status {
            Status::error(crate::store::ErrorKind::Io)
        }
        fn delete(&mut self, _: &str, _: &[u8]) -> Status {
            Status::Ok
        }
        fn last_error(&mut self) -> Option<String> {
            Some("connection refused".into())
        }
    }

    #[test]
    fn a_store_that_cannot_be_read_is_unavailable_not_lost() {
        let writes: Vec<Write> = (1..=1000)
            .map(|seq| Write {
                writer: 1,
                seq,
                outcome: Outcome::Ok,
            })
            .collect();
        // The probe fails: nothing is read, nothing is "lost".
        let mut dead = Dead(0);
        let v = probe_and_check(&mut dead, &writes, 7);
        assert_eq!((v.acknowledged, v.lost, v.unreadable), (1000, 0, 1000));
        assert!(v.unavailable.as_deref().unwrap().contains("probe write"));
        assert!(v
            .unavailable
            .as_deref()
            .unwrap()
            .contains("connection refused"));
        assert_eq!(dead.0, 1, "one read: the probe's");
        // Reads that fail during the check: it stops after 100 in a row.
        let mut dead = Dead(0);
        let v = check(&mut dead, &writes);
        assert_eq!((v.writes, v.lost, v.unreadable), (1000, 0, 1000));
        assert_eq!(dead.0, MAX_FAILED_READS_IN_A_ROW);
        assert!(v
            .unavailable
            .as_deref()
            .unwrap()
            .contains("the check stopped"));
        assert_eq!(output::exit_code(&v, false), crate::error::EXIT_FAILED);
        assert_eq!(output::result(&v).0, "unavailable");
    }

    #[test]
    fn exit_codes_follow_the_verdict_and_the_flag() {
        let lost = Verdict {
            acknowledged: 10,
            lost: 3,
            ..Default::default()
        };
        assert_eq!(output::exit_code(&lost, false), crate::error::EXIT_OK);
        assert_eq!(output::exit_code(&lost, true), crate::error::EXIT_FAILED);
        assert_eq!(output::result(&lost).1, "LOST 3 of 10 acknowledged writes");
        let none = Verdict {
            acknowledged: 10,
            ..Default::default()
        };
        assert_eq!(output::exit_code(&none, true), crate::error::EXIT_OK);
        assert_eq!(output::result(&none).0, "none lost");
    }

    #[test]
    fn outcomes_of_statuses() {
        use crate::store::ErrorKind as K;
        assert_eq!(Outcome::of(Status::Ok), Outcome::Ok);
        assert_eq!(
            Outcome::of(Status::error(K::Timeout)),
            Outcome::Indeterminate
        );
        assert_eq!(
            Outcome::of(Status::error(K::Unconfirmed)),
            Outcome::Indeterminate
        );
        assert_eq!(Outcome::of(Status::error(K::Io)), Outcome::Indeterminate);
        assert_eq!(Outcome::of(Status::error(K::Busy)), Outcome::Failed);
    }
}
