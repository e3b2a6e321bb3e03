//! The store's own statistics on the phase's clock (issue 43): a companion that samples what
//! the store declares (`Store::stats`) when the phase starts, at every interval boundary
//! (a row of store_stats.csv) and when the workers have stopped, and puts the phase's figures
//! into its summary. With each sample, the events the store logged since the last
//! (`Store::poll_events`) go to store_events.csv on the phase's clock, and their counts into
//! the summary.
//!
//! The store is asked on a thread of its own (`kvm-store-stats`), never on the interval loop:
//! a server's `INFO` or `stats` may take up to its deadline, and an LSM's LOG may be long, and
//! neither may delay the loop that closes intervals and watches the workers. The loop asks
//! for a sample at each boundary and takes the answers that have come back; while one is
//! outstanding, a boundary's sample is skipped and counted (`samples` in `unavailable`), so
//! the rate is bounded by the store's own speed as well as the interval. Rows keep the time
//! they were asked for. At the phase's end the loop waits for the last sample at most
//! `FINAL_WAIT`; one that has not come back by then leaves the figures of the last that did.

use super::companion::Companion;
use crate::report::rundir::RunDir;
use crate::report::store_events::EventsCsv;
use crate::report::store_stats::{StatsCsv, StoreStats};
use crate::report::PhaseSummary;
use crate::store::stats::{StatKind, StatSpec, StoreEvent};
use crate::store::Store;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the phase's first and last samples are waited for: longer than any store's own
/// deadline for one statistics call (a server's reply: 1 s).
const FINAL_WAIT: Duration = Duration::from_secs(5);

/// The stores' statistics thread's answer to one request.
struct Answer {
    /// When it was asked for, on the phase's clock.
    at: Duration,
    /// The wall clock just before the store was asked (Unix µs).
    unix_us: u64,
    values: Result<Vec<Option<u64>>, String>,
    events: Vec<StoreEvent>,
    events_error: Option<String>,
}

/// The thread that asks the store, and the loop's end of its two channels.
struct Asker {
    ask: Option<SyncSender<Duration>>,
    answers: Receiver<Answer>,
    outstanding: bool,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Asker {
    fn spawn(store: Arc<Box<dyn Store>>, n: usize) -> std::io::Result<Self> {
        let (ask, asked) = mpsc::sync_channel::<Duration>(1);
        let (answer, answers) = mpsc::sync_channel::<Answer>(1);
        let thread = std::thread::Builder::new()
            .name("kvm-store-stats".into())
            .spawn(move || {
                let mut events = Vec::new();
                for at in asked {
                    let unix_us = unix_us();
                    let mut values = vec![None; n];
                    let values = store.sample_stats(&mut values).map(|()| values);
                    events.clear();
                    let events_error = store.poll_events(&mut events).err();
                    let a = Answer {
                        at,
                        unix_us,
                        values,
                        events: std::mem::take(&mut events),
                        events_error,
                    };
                    if answer.send(a).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Asker {
            ask: Some(ask),
            answers,
            outstanding: false,
            thread: Some(thread),
        })
    }

    /// Asks for a sample at `at` unless one is outstanding; false when skipped.
    fn ask(&mut self, at: Duration) -> bool {
        if self.outstanding {
            return false;
        }
        let sent = self.ask.as_ref().is_some_and(|a| a.send(at).is_ok());
        self.outstanding = sent;
        sent
    }

    /// The answer, if it has come (`wait` at most), and why none will when the thread ended.
    fn take(&mut self, wait: Duration) -> Result<Option<Answer>, String> {
        if !self.outstanding {
            return Ok(None);
        }
        let got = if wait.is_zero() {
            self.answers.try_recv().map_err(|e| match e {
                TryRecvError::Empty => None,
                TryRecvError::Disconnected => Some(()),
            })
        } else {
            self.answers.recv_timeout(wait).map_err(|e| match e {
                RecvTimeoutError::Timeout => None,
                RecvTimeoutError::Disconnected => Some(()),
            })
        };
        match got {
            Ok(a) => {
                self.outstanding = false;
                Ok(Some(a))
            }
            Err(None) => Ok(None),
            Err(Some(())) => {
                self.outstanding = false;
                Err("the statistics thread ended (a panic in the store's statistics call)".into())
            }
        }
    }

    /// Stops the thread: joined when it is idle, else left to end with its call (it holds
    /// the store until then, and `phase.rs` says so if the store cannot close).
    fn stop(&mut self) {
        self.ask = None;
        if !self.outstanding {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Asker {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(super) struct StoreSampler<'s> {
    asker: Asker,
    /// The live metrics endpoint's feed (`kvmeter_store_*`), if one serves.
    live: Option<&'s super::live::Live>,
    specs: &'static [StatSpec],
    first: Vec<Option<u64>>,
    now: Vec<Option<u64>>,
    /// Each gauge's highest sample so far.
    max: Vec<Option<u64>>,
    /// Each counter's latest value, and the first time it went back (from, to, seconds on
    /// the phase's clock): a server whose statistics were reset (`CONFIG RESETSTAT`) or
    /// that restarted. Its increase over the phase is then not the end less the start.
    latest: Vec<Option<u64>>,
    went_back: Vec<Option<(u64, u64, f64)>>,
    /// None when store_stats.csv could not be opened (the summary still gets the figures).
    csv: Option<StatsCsv>,
    /// Why rows are missing from store_stats.csv, once.
    lost: Option<String>,
    /// Samples asked for, those the store could not give (with the first reason), and the
    /// boundaries skipped while one was outstanding.
    samples: u64,
    failed: u64,
    skipped: u64,
    why: Option<String>,
    /// Whether the phase's first sample, and the latest, failed: the figures come from them.
    first_failed: bool,
    last_failed: bool,
    events: Events,
    /// Every sample taken, by the time it was asked for, for a companion that divides the
    /// phase by its own clock (the pressure scale's steps), when one asked (`share`).
    shared: Option<Samples>,
}

/// The samples of a phase by the time they were asked for (one per interval boundary at
/// most), shared on the interval loop's thread.
pub(super) type Samples = Rc<RefCell<BTreeMap<Duration, Vec<Option<u64>>>>>;

/// The store's events of the phase: store_events.csv (opened at the first event, so a store
/// that logs none has no file) and each kind's count.
struct Events {
    root: PathBuf,
    phase: String,
    csv: Option<EventsCsv>,
    counts: BTreeMap<String, u64>,
    /// Why store_events.csv lacks events, once.
    lost: Option<String>,
    /// Why the store's log gave fewer than it holds (unreadable, or too many at once), once.
    short: Option<String>,
}

impl Events {
    /// Records what the store logged since the last answer; `phase0_us` is the Unix time the
    /// phase's clock started.
    fn record(&mut self, got: &[StoreEvent], error: Option<String>, phase0_us: u64) {
        if let Some(e) = error {
            self.short.get_or_insert(format!("the store's events: {e}"));
        }
        if got.is_empty() {
            return;
        }
        for e in got {
            *self.counts.entry(e.event.to_string()).or_default() += 1;
        }
        if self.csv.is_none() && self.lost.is_none() {
            match EventsCsv::open(&self.root, &self.phase) {
                Ok(c) => self.csv = Some(c),
                Err(e) => self.lost = Some(format!("store_events.csv: {e}")),
            }
        }
        if let Some(c) = &mut self.csv {
            if let Err(e) = c.write(got, phase0_us) {
                self.lost.get_or_insert(format!("store_events.csv: {e}"));
                self.csv = None;
            }
        }
    }
}

impl<'s> StoreSampler<'s> {
    /// Takes the phase's first sample; `None` for a store that declares no statistics.
    pub(super) fn start(
        store: &Arc<Box<dyn Store>>,
        rundir: &RunDir,
        phase: &str,
        live: Option<&'s super::live::Live>,
    ) -> Option<Self> {
        let specs = store.stats();
        if specs.is_empty() {
            return None;
        }
        let (csv, lost) = match StatsCsv::open(rundir.root(), phase, specs) {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(format!("store_stats.csv: {e}"))),
        };
        // A thread that cannot start (no memory for its stack) leaves the phase without the
        // store's figures, as a store that declares none.
        let asker = Asker::spawn(store.clone(), specs.len()).ok()?;
        let none = vec![None; specs.len()];
        let mut s = StoreSampler {
            asker,
            live,
            specs,
            max: none.clone(),
            now: none.clone(),
            latest: none.clone(),
            went_back: vec![None; specs.len()],
            first: none,
            csv,
            lost,
            samples: 0,
            failed: 0,
            skipped: 0,
            why: None,
            first_failed: false,
            last_failed: false,
            events: Events {
                root: rundir.root().to_path_buf(),
                phase: phase.to_string(),
                csv: None,
                counts: BTreeMap::new(),
                lost: None,
                short: None,
            },
            shared: None,
        };
        s.sample_and_wait(Duration::ZERO);
        s.first_failed = s.last_failed;
        s.first = s.now.clone();
        s.max = s.now.clone();
        Some(s)
    }

    /// Every sample of the phase, by the time it was asked for: the first, and those that
    /// come from now on.
    pub(super) fn share(&mut self) -> (&'static [StatSpec], Samples) {
        let first = &self.first;
        let s = self.shared.get_or_insert_with(|| {
            // The phase's first sample (`start`), taken before anyone could ask.
            Rc::new(RefCell::new(BTreeMap::from([(
                Duration::ZERO,
                first.clone(),
            )])))
        });
        (self.specs, s.clone())
    }

    /// Asks for a sample at `at` and waits for it (the phase's first and last).
    fn sample_and_wait(&mut self, at: Duration) {
        // An answer still outstanding comes first, then this one: both within FINAL_WAIT.
        let deadline = std::time::Instant::now() + FINAL_WAIT;
        let left = || deadline.saturating_duration_since(std::time::Instant::now());
        self.take(left());
        self.samples += 1;
        if self.asker.ask(at) {
            // A zero wait only looks: the answer may need a moment even when the time is up.
            self.take(left().max(Duration::from_millis(1)));
        }
        if self.asker.outstanding {
            self.fail(format!(
                "the store did not answer within {} s",
                FINAL_WAIT.as_secs()
            ));
        }
    }

    /// Takes the answer that has come back (waiting at most `wait`) into the figures.
    fn take(&mut self, wait: Duration) {
        match self.asker.take(wait) {
            Ok(Some(a)) => self.answered(a),
            Ok(None) => {}
            Err(why) => self.fail(why),
        }
    }

    fn fail(&mut self, why: String) {
        self.now.fill(None);
        self.failed += 1;
        self.last_failed = true;
        self.why.get_or_insert(why);
    }

    fn answered(&mut self, a: Answer) {
        self.last_failed = false;
        match a.values {
            Ok(v) => self.now = v,
            Err(why) => self.fail(why),
        }
        for (i, s) in self.specs.iter().enumerate() {
            match s.kind {
                StatKind::Gauge => self.max[i] = self.max[i].max(self.now[i]),
                StatKind::Counter => {
                    let Some(v) = self.now[i] else { continue };
                    if let Some(was) = self.latest[i].replace(v).filter(|w| v < *w) {
                        let at = a.at.as_secs_f64();
                        self.went_back[i].get_or_insert((was, v, at));
                    }
                }
            }
        }
        if let Some(sh) = &self.shared {
            sh.borrow_mut().insert(a.at, self.now.clone());
        }
        let phase0_us = a.unix_us.saturating_sub(a.at.as_micros() as u64);
        self.events.record(&a.events, a.events_error, phase0_us);
        if let Some(l) = self.live {
            l.store(
                &self.events.phase,
                self.specs,
                &self.now,
                &self.events.counts,
            );
        }
        if let Some(c) = &mut self.csv {
            if let Err(e) = c.row(a.at.as_secs_f64(), a.unix_us, &self.now) {
                self.lost.get_or_insert(format!("store_stats.csv: {e}"));
                self.csv = None;
            }
        }
    }
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64
}

impl Companion for StoreSampler<'_> {
    fn boundary(&mut self, at: Duration) {
        self.take(Duration::ZERO);
        if self.asker.ask(at) {
            self.samples += 1;
        } else {
            self.skipped += 1;
        }
    }

    fn finish(
        mut self: Box<Self>,
        end: Duration,
        ps: &mut PhaseSummary,
        _rundir: &mut RunDir,
    ) -> anyhow::Result<()> {
        self.sample_and_wait(end);
        self.asker.stop();
        // A counter that went back has no increase to give (it may have grown past its start
        // again), and says why.
        let mut first = self.first.clone();
        for (f, w) in first.iter_mut().zip(&self.went_back) {
            if w.is_some() {
                *f = None;
            }
        }
        let mut figures = StoreStats::of(self.specs, &first, &self.now, &self.max);
        for (s, w) in self.specs.iter().zip(&self.went_back) {
            if let Some((from, to, at)) = w {
                figures.unavailable.insert(
                    s.name.to_string(),
                    format!(
                        "unavailable: it went back from {from} to {to} by the sample at {at:.1} s (the store's statistics were reset, or it restarted), so its increase over the phase is not known; store_stats.csv has every sample"
                    ),
                );
            }
        }
        if let Some(why) = &self.why {
            if self.first_failed || self.last_failed {
                // That is why the phase's figures are missing.
                for v in figures.unavailable.values_mut() {
                    *v = format!("unavailable: {why}");
                }
            }
            figures.unavailable.insert(
                "samples".into(),
                format!(
                    "unavailable: {} of {} samples (first: {why})",
                    self.failed, self.samples
                ),
            );
        }
        if self.skipped > 0 {
            let skipped = format!(
                "{} interval boundaries skipped while the store was still answering the sample before",
                self.skipped
            );
            figures
                .unavailable
                .entry("samples".into())
                .and_modify(|s| s.push_str(&format!("; and {skipped}")))
                .or_insert(format!("unavailable: {skipped}"));
        }
        if let Some(why) = self.lost.take() {
            figures
                .unavailable
                .insert("store_stats.csv".into(), format!("unavailable: {why}"));
        }
        figures.events = std::mem::take(&mut self.events.counts);
        if let Some(why) = self.events.lost.take().or(self.events.short.take()) {
            figures
                .unavailable
                .insert("store_events".into(), format!("unavailable: {why}"));
        }
        ps.store_stats = Some(figures);
        Ok(())
    }
}
