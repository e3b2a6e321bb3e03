//! The store's own statistics on the phase's clock (issue 43): a companion that samples what
//! the store declares (`Store::stats`) when the phase starts, at every interval boundary
//! (a row of store_stats.csv, written at once) and when the workers have stopped, and puts
//! the phase's figures into its summary. Sampling runs on the interval loop's thread, off the
//! measured path: one call into the store per interval, the cost measured in BENCHMARKS.md.
//! With each sample, the events the store logged since the last (`Store::poll_events`) go to
//! store_events.csv on the phase's clock, and their counts into the summary.

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
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(super) struct StoreSampler<'s> {
    store: &'s dyn Store,
    /// The live metrics endpoint's feed (`kvmeter_store_*`), if one serves.
    live: Option<&'s super::live::Live>,
    specs: &'static [StatSpec],
    first: Vec<Option<u64>>,
    now: Vec<Option<u64>>,
    /// Each gauge's highest sample so far.
    max: Vec<Option<u64>>,
    /// None when store_stats.csv could not be opened (the summary still gets the figures).
    csv: Option<StatsCsv>,
    /// Why rows are missing from store_stats.csv, once.
    lost: Option<String>,
    /// Samples taken, and those the store could not give, with the first reason.
    samples: u64,
    failed: u64,
    why: Option<String>,
    /// Whether the phase's first sample, and the latest, failed: the figures come from them.
    first_failed: bool,
    last_failed: bool,
    events: Events,
    /// The latest sample, for a companion that divides the phase by its own clock (the
    /// pressure scale's steps), when one asked (`share`).
    latest: Option<Latest>,
}

/// The store's latest sample, shared on the interval loop's thread: the sampler sets it at
/// each boundary before the companions after it see that boundary.
pub(super) type Latest = Rc<RefCell<Vec<Option<u64>>>>;

/// The store's events of the phase: store_events.csv (opened at the first event, so a store
/// that logs none has no file) and each kind's count.
struct Events {
    root: PathBuf,
    phase: String,
    buf: Vec<StoreEvent>,
    csv: Option<EventsCsv>,
    counts: BTreeMap<String, u64>,
    /// Why store_events.csv lacks events, once.
    lost: Option<String>,
    /// Why the store's log gave fewer than it holds (unreadable, or too many at once), once.
    short: Option<String>,
}

impl Events {
    /// Reads what the store logged since the last poll; `phase0_us` is the Unix time the
    /// phase's clock started.
    fn poll(&mut self, store: &dyn Store, phase0_us: u64) {
        self.buf.clear();
        if let Err(e) = store.poll_events(&mut self.buf) {
            self.short.get_or_insert(format!("the store's events: {e}"));
        }
        if self.buf.is_empty() {
            return;
        }
        for e in &self.buf {
            *self.counts.entry(e.event.to_string()).or_default() += 1;
        }
        if self.csv.is_none() && self.lost.is_none() {
            match EventsCsv::open(&self.root, &self.phase) {
                Ok(c) => self.csv = Some(c),
                Err(e) => self.lost = Some(format!("store_events.csv: {e}")),
            }
        }
        if let Some(c) = &mut self.csv {
            if let Err(e) = c.write(&self.buf, phase0_us) {
                self.lost.get_or_insert(format!("store_events.csv: {e}"));
                self.csv = None;
            }
        }
    }
}

impl<'s> StoreSampler<'s> {
    /// Takes the phase's first sample; `None` for a store that declares no statistics.
    pub(super) fn start(
        store: &'s dyn Store,
        rundir: &RunDir,
        phase: &str,
        live: Option<&'s super::live::Live>,
    ) -> Option<Self> {
        let specs = store.stats();
        if specs.is_empty() {
            return None;
        }
        let first = vec![None; specs.len()];
        let t = unix_us();
        let (csv, lost) = match StatsCsv::open(rundir.root(), phase, specs) {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(format!("store_stats.csv: {e}"))),
        };
        let mut s = StoreSampler {
            store,
            live,
            specs,
            max: first.clone(),
            now: first.clone(),
            first,
            csv,
            lost,
            samples: 0,
            failed: 0,
            why: None,
            first_failed: false,
            last_failed: false,
            events: Events {
                root: rundir.root().to_path_buf(),
                phase: phase.to_string(),
                buf: Vec::new(),
                csv: None,
                counts: BTreeMap::new(),
                lost: None,
                short: None,
            },
            latest: None,
        };
        s.sample();
        s.first_failed = s.last_failed;
        s.first = s.now.clone();
        s.max = s.now.clone();
        s.write(Duration::ZERO, t);
        Some(s)
    }

    /// Samples the store; returns the wall clock just before (Unix µs).
    fn sample(&mut self) -> u64 {
        let unix_us = unix_us();
        self.samples += 1;
        self.last_failed = false;
        if let Err(why) = self.store.sample_stats(&mut self.now) {
            self.now.fill(None);
            self.failed += 1;
            self.last_failed = true;
            self.why.get_or_insert(why);
        }
        for (i, s) in self.specs.iter().enumerate() {
            if s.kind == StatKind::Gauge {
                self.max[i] = self.max[i].max(self.now[i]);
            }
        }
        if let Some(l) = &self.latest {
            l.borrow_mut().clone_from(&self.now);
        }
        unix_us
    }

    /// What the store declares and its latest sample (the phase's first until the next
    /// boundary), kept current from now on.
    pub(super) fn share(&mut self) -> (&'static [StatSpec], Latest) {
        let l = self
            .latest
            .get_or_insert_with(|| Rc::new(RefCell::new(self.now.clone())));
        (self.specs, l.clone())
    }

    fn write(&mut self, at: Duration, unix_us: u64) {
        let phase0_us = unix_us.saturating_sub(at.as_micros() as u64);
        self.events.poll(self.store, phase0_us);
        if let Some(l) = self.live {
            l.store(
                &self.events.phase,
                self.specs,
                &self.now,
                &self.events.counts,
            );
        }
        if let Some(c) = &mut self.csv {
            if let Err(e) = c.row(at.as_secs_f64(), unix_us, &self.now) {
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
        let t = self.sample();
        self.write(at, t);
    }

    fn finish(
        mut self: Box<Self>,
        end: Duration,
        ps: &mut PhaseSummary,
        _rundir: &mut RunDir,
    ) -> anyhow::Result<()> {
        let t = self.sample();
        self.write(end, t);
        let mut figures = StoreStats::of(self.specs, &self.first, &self.now, &self.max);
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
