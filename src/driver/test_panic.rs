//! `KVMETER_TEST_PANIC`: deliberate failures for kvmeter's own tests of "a panic anywhere ends
//! the run cleanly" (tests/cli/panics.rs). Test-only, and documented as such (docs/security.md):
//! nothing a user types by accident sets it, and all it can do is make kvmeter fail.
//!
//! The tests run the release binary, so this cannot hide behind `cfg(debug_assertions)`. It
//! costs nothing when unset: the variable is read once per phase, and only then is worker 0's
//! session wrapped (the wrapper is the only thing that checks the clock per operation).
//!
//! Values (`MS`: milliseconds after the phase's store was opened):
//! - `worker:MS`    worker 0 panics inside a store call
//! - `stuck:MS`     worker 0's store call never returns and ignores the stop flag
//! - `companion:MS` a thread beside the workers (like an antagonist's) panics
//! - `main:MS`      the interval loop on the main thread panics at its next boundary
//! - `finish`       `Run::finish` (the main thread, after the phases) panics

use crate::store::{Fields, Queued, Record, RecordView, ScanOut, Session, Status};
use std::time::{Duration, Instant};

pub const VAR: &str = "KVMETER_TEST_PANIC";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Where {
    Worker,
    Stuck,
    Companion,
    Main,
    Finish,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct TestPanic {
    pub at: Where,
    pub after: Duration,
}

/// The variable, read now; an unknown value is ignored (it is not a user's input).
pub(super) fn from_env() -> Option<TestPanic> {
    let v = std::env::var(VAR).ok()?;
    let (what, ms) = v.split_once(':').unwrap_or((v.as_str(), "0"));
    let at = match what {
        "worker" => Where::Worker,
        "stuck" => Where::Stuck,
        "companion" => Where::Companion,
        "main" => Where::Main,
        "finish" => Where::Finish,
        _ => return None,
    };
    let after = Duration::from_millis(ms.parse().ok()?);
    Some(TestPanic { at, after })
}

/// Panics here when the variable asks for it at `at` (checked once per call site).
pub(super) fn here(at: Where) {
    if from_env().is_some_and(|t| t.at == at) {
        panic!("{VAR}: a deliberate panic in {at:?}");
    }
}

/// Worker 0's session, wrapped when the variable names a worker.
/// The first worker's session, sabotaged as `t` asks (nothing without sessions).
pub(super) fn sabotage_first<R>(t: Option<TestPanic>, sessions: &mut Vec<(Box<dyn Session>, R)>) {
    if t.is_some() && !sessions.is_empty() {
        let (s, rec) = sessions.remove(0);
        sessions.insert(0, (sabotage(t, s), rec));
    }
}

fn sabotage(t: Option<TestPanic>, session: Box<dyn Session>) -> Box<dyn Session> {
    match t {
        Some(t) if matches!(t.at, Where::Worker | Where::Stuck) => Box::new(Sabotaged {
            inner: session,
            at: t.at,
            due: Instant::now() + t.after,
        }),
        _ => session,
    }
}

/// A thread beside the workers that panics `after` into the phase (as an antagonist's or the
/// telemetry sampler's would); it is never joined, like a thread that died.
pub(super) fn companion(t: Option<TestPanic>) {
    let Some(t) = t.filter(|t| t.at == Where::Companion) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("kvm-test-companion".into())
        .spawn(move || {
            std::thread::sleep(t.after);
            panic!("{VAR}: a deliberate panic in a companion thread");
        });
}

struct Sabotaged {
    inner: Box<dyn Session>,
    at: Where,
    due: Instant,
}

impl Sabotaged {
    fn maybe(&self) {
        if Instant::now() < self.due {
            return;
        }
        if self.at == Where::Stuck {
            // A store call that never returns (a server that stopped answering, with no
            // deadline): only the process's exit ends it.
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        panic!("{VAR}: a deliberate panic in worker 0's store call");
    }
}

impl Session for Sabotaged {
    fn read(&mut self, table: &str, key: &[u8], fields: Fields) -> (Status, RecordView<'_>) {
        self.maybe();
        self.inner.read(table, key, fields)
    }
    fn scan(
        &mut self,
        table: &str,
        start: &[u8],
        count: usize,
        fields: Fields,
        out: &mut ScanOut,
    ) -> Status {
        self.maybe();
        self.inner.scan(table, start, count, fields, out)
    }
    fn update(&mut self, table: &str, key: &[u8], values: &Record) -> Status {
        self.maybe();
        self.inner.update(table, key, values)
    }
    fn insert(&mut self, table: &str, key: &[u8], values: &Record) -> Status {
        self.maybe();
        self.inner.insert(table, key, values)
    }
    fn delete(&mut self, table: &str, key: &[u8]) -> Status {
        self.maybe();
        self.inner.delete(table, key)
    }
    fn last_error(&mut self) -> Option<String> {
        self.inner.last_error()
    }
    fn pipeline_depth(&self) -> usize {
        self.inner.pipeline_depth()
    }
    fn queue(&mut self, op: Queued<'_>) -> bool {
        self.maybe();
        self.inner.queue(op)
    }
    fn flush(&mut self, done: &mut dyn FnMut(Status, u64)) {
        self.inner.flush(done)
    }
    fn shard(&self) -> Option<u16> {
        self.inner.shard()
    }
    fn sent_to(&self) -> Vec<(std::net::SocketAddr, u64)> {
        self.inner.sent_to()
    }
    fn close(self: Box<Self>) -> Status {
        self.inner.close()
    }
}
