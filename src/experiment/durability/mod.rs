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

mod embedded;
mod server;

pub use embedded::writer_main;

use crate::error::UsageError;
use crate::store::{Record, Session, Status, StoreKind, StoreOptions};
use serde::Serialize;
use std::path::{Path, PathBuf};
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
    /// Reads that failed during the check (the verdict is then incomplete).
    pub unreadable: u64,
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
        for e in &o.lost_examples {
            if self.lost_examples.len() < 10 {
                self.lost_examples.push(e.clone());
            }
        }
    }
}

/// Reads every logged write back through `session` and classifies it.
pub fn check(session: &mut dyn Session, writes: &[Write]) -> Verdict {
    let mut v = Verdict::default();
    for w in writes {
        v.writes += 1;
        match w.outcome {
            Outcome::Ok => v.acknowledged += 1,
            Outcome::Failed => v.failed += 1,
            Outcome::Indeterminate => v.indeterminate += 1,
        }
        let k = key(w.writer, w.seq);
        let want = format!("{}:{}", w.writer, w.seq);
        let (st, view) = session.read("usertable", k.as_bytes(), crate::store::Fields::All);
        let found = match st {
            Status::Ok => Some(view.get(b"field0") == Some(want.as_bytes())),
            Status::NotFound => None,
            Status::Error { .. } => {
                v.unreadable += 1;
                continue;
            }
        };
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
    v
}

/// What `durability.json` holds.
#[derive(Debug, Serialize)]
pub struct Report {
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
}

/// Runs the command; exit 0 whatever the verdict (the figures are the result).
pub fn run(s: &Settings) -> anyhow::Result<i32> {
    let adapter = crate::store::find(&s.store).ok_or_else(|| {
        UsageError::new(format!(
            "--store '{}': unknown or not in this build; available: {}",
            s.store,
            crate::store::names().join(", ")
        ))
    })?;
    let opts = StoreOptions::parse(adapter.name, adapter.options, &s.store_opts)?;
    (adapter.check)(&opts)?;
    if s.writers == 0 || s.writers > 64 {
        return Err(UsageError::new(format!("--writers {}: expected 1 to 64", s.writers)).into());
    }
    let seed = s.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    match adapter.server {
        Some(_) => server::run(s, adapter, opts, seed),
        None => embedded::run(s, adapter, opts, seed),
    }
}

/// The output directory (new or empty), created only after the input is accepted.
fn out_dir(s: &Settings) -> anyhow::Result<PathBuf> {
    crate::experiment::experiment_dir_plain(s.out.as_deref(), "durability", &s.store)
}

fn write_report(dir: &Path, r: &Report) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(r)? + "\n";
    crate::experiment::write_atomic(&dir.join("durability.json"), text.as_bytes())?;
    let v = &r.verdict;
    println!(
        "durability  {} ({})\n  writes {}: acknowledged {}, failed {}, indeterminate {}\n  LOST acknowledged writes: {}{}\n  indeterminate found {}, missing {}; unexpected {}; unreadable during the check {}\n  {}\nresults: {}",
        r.store,
        r.mode,
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
    Ok(())
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
